"""One end-to-end scenario shared by the e2e tests (package scope: it is started once).

pulsar-lite and a fake serving a real Apache Pulsar broker's recorded /metrics are the two
sources; the exporter runs as a subprocess (`pulsar-quota-exporter run --config.file …`);
Prometheus scrapes it every second and evaluates the generated rule files every second;
Alertmanager runs the shipped example config with its receivers pointed at a webhook inside
the test. The workload, in tenant `workload` (bound to resource group `rg-workload`):

- `workload/app/stalled`: a subscription that never consumes, under a 10 s time quota with
  policy producer_request_hold, so PulsarBacklogAgeOverQuota (critical) fires for it; the
  alert test catches it up afterwards to see the alert resolve;
- `workload/held/orders`: the same, never caught up, so "over a quota now" stays non-empty
  for the dashboard test whatever order the tests run in;
- `workload/sized/evicted`: 100 KB of backlog over a 20 KiB size quota with policy
  consumer_backlog_eviction and enforcement on, so evictions are performed and counted;
- `workload/busy`: three topics in one bundle against `load_manager.bundle_max_topics: 2`,
  so that bundle is a split candidate. The replayed Apache Pulsar broker reports 85.5%
  memory (`pulsar_lb_memory_usage`), over the default 85% threshold: it is overloaded.

Every component missing (binaries, pulsar-lite, the fixtures) raises: the tests fail.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from exporter.config.settings import BROKER_USAGE_TOPIC, USAGE_TOPIC, MonitoringClass
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.gate import initial_sequence
from tests.e2e.scenario import REPO, Scenario, Workload, rule_files
from tests.fakes.metrics_server import FakeMetricsServer
from tests.harness import resource_usage_info
from tests.harness.exporter_process import ExporterProcess
from tests.harness.process import require_binary
from tests.harness.prometheus import (
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    alertmanager_config,
)
from tests.harness.pulsar import PulsarLite

CLUSTER = "e2e"
JOB = "pulsar-quota-exporter"  # the job name the generated exporter alerts select
TENANT = "workload"
RESOURCE_GROUP = "rg-workload"
REPORTING_BROKER = "pulsar://broker-0.e2e:6650"  # the broker the replayed PIP-82 reports name
STALLED_TOPIC, STALLED_SUB = "persistent://workload/app/stalled", "stalled-sub"
HELD_TOPIC, HELD_SUB = "persistent://workload/held/orders", "held-sub"
SIZED_TOPIC, SIZED_SUB = "persistent://workload/sized/evicted", "slow-sub"
BUSY_TOPICS = tuple(f"persistent://workload/busy/t-{i}" for i in range(3))
TIME_LIMIT_SECONDS = 10
SIZE_LIMIT = "20KiB"
STALLED_MESSAGES = 50


def exporter_config(broker: PulsarLite, replay: FakeMetricsServer) -> dict[str, Any]:
    return {
        "cluster": CLUSTER,
        "check_interval": "3s",
        "sources": {
            "brokers": [{"url": broker.metrics_url, "timeout": "2s"},
                        {"url": replay.url, "timeout": "2s"}],
            "service_url": broker.service_url,
        },
        "backlog_quotas": {
            "default": {"limit_size": "1GiB", "limit_time": "1h"},
            "namespaces": {
                "workload/app": {"limit_time": f"{TIME_LIMIT_SECONDS}s",
                                 "policy": "producer_request_hold"},
                "workload/held": {"limit_size": "1MiB", "limit_time": f"{TIME_LIMIT_SECONDS}s",
                                  "policy": "producer_request_hold"},
            },
            "topics": {
                SIZED_TOPIC: {"limit_size": SIZE_LIMIT, "limit_time": "1h",
                              "policy": "consumer_backlog_eviction"},
            },
            "enforce": True,
        },
        "resource_groups": {
            RESOURCE_GROUP: {
                "publish": {"messages_per_second": 1000, "bytes_per_second": "1MiB"},
                "dispatch": {"messages_per_second": 1000, "bytes_per_second": "1MiB"},
                "tenants": [TENANT],
            },
        },
        "resource_group_engine": {"participant": "e2e-exporter", "report_interval": "3s"},
        "load_manager": {"bundle_max_topics": len(BUSY_TOPICS) - 1},
        "spark": {"master": "local[2]"},
        "exposition": {"subscription_backlog_age": True},  # its dashboard panels need it
    }


class PeerReporter:
    """A second participant of the usage exchange: publishes a real, encoded usage report
    for the workload's group every second on the broker's usage topic, as another
    exporter instance would (one more Spark JVM would cost a minute here)."""

    def __init__(self, broker: PulsarLite, participant: str = "e2e-peer") -> None:
        self.participant = participant
        self._client = pulsar.Client(broker.service_url,
                                     logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self._producer = self._client.create_producer(USAGE_TOPIC)
        # A broker's own PIP-82 report too, on the brokers' topic: pulsar-lite sends none.
        self._broker_reports = self._client.create_producer(BROKER_USAGE_TOPIC)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PeerReporter:
        self._thread.start()
        return self

    def _run(self) -> None:
        sequence = initial_sequence(time.time())
        while not self._stop.wait(1.0):
            sequence += 1
            entries = tuple(Entry(RESOURCE_GROUP, cls, Rates(messages=5.0, bytes=500.0),
                                  Rates(messages=500.0, bytes=512 * 1024.0))
                            for cls in MonitoringClass)
            self._producer.send(encode(WireReport(self.participant, sequence, time.time(),
                                                  entries)))
            self._broker_reports.send(resource_usage_info.report(
                REPORTING_BROKER, {RESOURCE_GROUP: ((1350, 10), (2700, 20))}))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.close()


def _workload(broker: PulsarLite) -> None:
    for topic, subscription in ((STALLED_TOPIC, STALLED_SUB), (HELD_TOPIC, HELD_SUB),
                                (SIZED_TOPIC, SIZED_SUB)):
        broker.create_subscription(topic, subscription)
    broker.produce(STALLED_TOPIC, STALLED_MESSAGES, 100)
    broker.produce(HELD_TOPIC, 20, 100)
    broker.produce(SIZED_TOPIC, 100, 1000)  # 100 KB against a 20 KiB size quota
    for topic in BUSY_TOPICS:
        broker.produce(topic, 5, 100)


@pytest.fixture(scope="package")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    for binary in ("prometheus", "prometheus-alertmanager", "amtool"):
        require_binary(binary)  # fail before anything slow has started
    root = tmp_path_factory.mktemp("e2e")
    with contextlib.ExitStack() as stack:
        webhook = WebhookReceiver().start()
        stack.callback(webhook.stop)
        broker = PulsarLite(root / "pulsar-lite").start()
        stack.callback(broker.stop)
        replay = FakeMetricsServer().start()
        stack.callback(replay.stop)
        # Spark's start dominates: launch the exporter first, do the rest meanwhile.
        exporter = ExporterProcess(root / "exporter", exporter_config(broker, replay),
                                   extra_args=("--record.dir", str(root / "record"))).start()
        stack.callback(exporter.stop)
        stalled_at = time.time()
        _workload(broker)
        am_config = alertmanager_config(REPO / "alerts" / "alertmanager.example.yaml", webhook)
        alertmanager = Alertmanager(root / "alertmanager", am_config).start()
        stack.callback(alertmanager.stop)
        started_at = time.time()
        prometheus = Prometheus(root / "prometheus", targets={JOB: [exporter.address]},
                                rule_files=rule_files(),
                                alertmanager=f"127.0.0.1:{alertmanager.port}").start()
        stack.callback(prometheus.stop)
        peer = PeerReporter(broker).start()
        stack.callback(peer.stop)
        exporter.wait_ready(timeout=300)  # Spark's first cycle: 20-90 s here
        workload = Workload(
            cluster=CLUSTER, job=JOB, tenant=TENANT, resource_group=RESOURCE_GROUP,
            stalled_topic=STALLED_TOPIC, stalled_subscription=STALLED_SUB,
            stalled_messages=STALLED_MESSAGES, stalled_at=stalled_at,
            time_limit_seconds=TIME_LIMIT_SECONDS, held_topic=HELD_TOPIC,
            sized_topic=SIZED_TOPIC)
        yield Scenario(broker, replay, exporter, prometheus, alertmanager, webhook,
                       started_at, workload)
