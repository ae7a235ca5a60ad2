"""The e2e scenario's parts as the tests see them: what is running (`Scenario`) and the
workload's names and numbers (`Workload`); conftest.py starts it. The processes come from
tests/harness: the exporter (exporter_process.py), Prometheus and Alertmanager with the
webhook receiver (prometheus.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.fakes.metrics_server import FakeMetricsServer
from tests.harness.exporter_process import ExporterProcess
from tests.harness.prometheus import Alertmanager, Prometheus, WebhookReceiver
from tests.harness.pulsar import PulsarLite

REPO = Path(__file__).resolve().parents[2]


def rule_files() -> list[Path]:
    """The generated alert rule files Prometheus loads."""
    files = sorted((REPO / "alerts").glob("*.rules.yaml"))
    if not files:
        raise FileNotFoundError("no alerts/*.rules.yaml: run `pulsar-quota-exporter generate`")
    return files


@dataclass(frozen=True)
class Workload:
    """Names and numbers of the e2e workload (conftest.py sets it up)."""

    cluster: str
    job: str
    tenant: str
    resource_group: str
    stalled_topic: str
    stalled_subscription: str
    stalled_messages: int
    stalled_at: float  # wall clock just before its subscription and messages were created
    time_limit_seconds: float
    held_topic: str
    sized_topic: str


@dataclass(frozen=True)
class Scenario:
    """Every running component of the e2e setup, and its workload."""

    broker: PulsarLite
    replay: FakeMetricsServer
    exporter: ExporterProcess
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: WebhookReceiver
    started_at: float  # wall clock just before Prometheus started
    workload: Workload

    def diagnostics(self) -> str:
        """What to look at when a wait fails: the processes' log tails."""
        return "\n".join(p.log_tail() for p in (
            self.exporter.process, self.prometheus.process, self.alertmanager.process))
