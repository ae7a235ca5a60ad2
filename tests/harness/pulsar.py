"""A real pulsar-lite broker for tests: `exporter.demo.embedded.EmbeddedBroker` (binary, TOML, free
loopback ports, start / stop / restart) plus test conveniences: a workload over the official
client, a small /metrics parser and polling helpers. Behaviour measured on pulsar-lite 0.2
that they account for:
- gauges on /metrics (backlog, consumer counts) refresh about every 5 s: use `wait_for_metric`;
- the `cluster` label is always "pulsar-lite"; `topic` is the short name plus `namespace`;
- after a restart, topics and their subscriptions are loaded lazily: a subscription reappears
  on /metrics only once a consumer attaches to it again (`touch_subscription`).
A missing binary raises `PulsarLiteMissing`; tests never skip for it.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from exporter.demo.embedded import (
    BinaryMissing,
    BrokerFailed,
    EmbeddedBroker,
    find_binary,
    free_port,
)
from tests.harness.wait import poll
from tests.harness.workload import Workload

T = TypeVar("T")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

PulsarLiteMissing = BinaryMissing  # the names tests know
PulsarLiteFailed = BrokerFailed
__all__ = ["Metrics", "PulsarLite", "PulsarLiteFailed", "PulsarLiteMissing", "Sample",
           "find_binary", "free_port", "pulsar_lite_fixture", "split_topic"]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Metrics:
    """One /metrics body, parsed just enough for assertions."""

    def __init__(self, text: str):
        self.text = text
        self.samples: list[Sample] = []
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match and not line.startswith("#"):
                labels = dict(_LABEL.findall(match.group(2) or ""))
                self.samples.append(Sample(match.group(1), labels, float(match.group(3))))

    def find(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float | None:
        found = self.find(name, **labels)
        return found[0].value if len(found) == 1 else None

    def subscription(self, name: str, topic: str, subscription: str) -> float | None:
        """A per-subscription gauge, `topic` given as full persistent:// name."""
        namespace, short = split_topic(topic)
        return self.value(name, namespace=namespace, topic=short, subscription=subscription)


def split_topic(topic: str) -> tuple[str, str]:
    """persistent://t/ns/x → ("t/ns", "x"): the label pair pulsar-lite uses."""
    tenant, ns, short = topic.split("://", 1)[1].split("/", 2)
    return f"{tenant}/{ns}", short


class PulsarLite(Workload, EmbeddedBroker):
    """One broker process in `workdir`, not started until `start()` (or `with`); ports are
    picked at the first start and kept across restarts; `stop()` leaves `workdir` alone."""

    def __init__(self, workdir: Path, *, cluster: str = "harness", log_level: str = "info",
                 binary: Path | None = None):
        super().__init__(workdir, cluster=cluster, log_level=log_level, binary=binary)

    @property
    def broker_port(self) -> int:
        return self.port

    # --- /metrics -------------------------------------------------------------------------

    def metrics(self) -> Metrics:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            return Metrics(resp.read().decode("utf-8"))

    def wait_for_metric(self, predicate: Callable[[Metrics], T], timeout: float = 15.0,
                        interval: float = 0.25) -> T:
        """Poll /metrics until `predicate` returns something truthy, and return it; failing,
        show the per-topic series of the last scrape."""
        scraped: list[Metrics] = []

        def probe() -> T:
            scraped[:] = [self.metrics()]
            return predicate(scraped[0])

        def per_topic_series() -> str:
            relevant = "\n".join(line for line in scraped[0].text.splitlines()
                                 if "topic=" in line and not line.startswith("#"))
            return f"per-topic series were:\n{relevant[:4000]}"

        return poll(probe, "metric condition", timeout, interval, show=per_topic_series)

    def wait_for_backlog(self, topic: str, subscription: str, expected: float,
                         timeout: float = 15.0) -> float:
        def check(m: Metrics) -> bool:
            return m.subscription("pulsar_subscription_back_log", topic, subscription) == expected

        self.wait_for_metric(check, timeout)
        return expected


def pulsar_lite_fixture(scope: str = "module", **options: object):
    """A pytest fixture starting one broker per `scope`; `pulsar_lite = pulsar_lite_fixture()`."""

    @pytest.fixture(scope=scope)
    def _fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLite]:
        broker = PulsarLite(tmp_path_factory.mktemp("pulsar-lite"), **options)  # type: ignore[arg-type]
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()

    return _fixture
