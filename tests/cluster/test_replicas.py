"""The chart's `replicas: 2` on the real cluster (issue 57): two exporter processes of one
Deployment, configured by the chart's own ConfigMap (one participant name for both), beside
a second participant. One replica reports the deployment's usage, the holder of its reporter
lease; the other reads the reports and publishes the same shares. The shares everyone
publishes with both replicas running are those of one replica alone (same fleet, same
load), and when the reporter stops (SIGTERM) or dies (SIGKILL) a replica takes over within
`TAKEOVER` seconds.

The deployment scrapes broker 1, the other participant broker 2, each producing at its own
rate: Pulsar's allocator splits the group in proportion (a double-counted deployment would
move both shares by a quarter of the limit, far outside `BAND`).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.chart.test_helm_chart import render
from tests.cluster.helpers import one_topic_per_broker, produce_at
from tests.harness.apache_cluster import CLUSTER, ApacheCluster
from tests.harness.exporter_process import ExporterProcess
from tests.harness.wait import poll

# Exporter processes (Spark) configured by the chart as Helm renders it.
pytestmark = [pytest.mark.spark, pytest.mark.tools]

LIMIT = 1000  # the group's messages per second
RATES = (30.0, 10.0)  # produced on broker 1's topic (the deployment's), broker 2's (other's)
PERIOD = 2  # seconds: check_interval and report_interval
BAND = 0.03 * LIMIT  # two readings of one split: rates measured over different windows
# The reporter stops (SIGTERM: goodbye, lease released) or dies (SIGKILL: the broker frees
# the lease with the connection); a replica takes the lease at its next round (≤ PERIOD) and
# /metrics shows it at its next cycle (≤ PERIOD more), a Spark cycle on 2 busy cores aside.
TAKEOVER = 15.0
DEPLOYMENT = "rel-pulsar-quota-exporter"  # the chart's full name for release "rel"
SENT = "pulsar_quota_exporter_usage_reports_sent_total"
SUPPRESSED = "pulsar_quota_exporter_usage_reports_suppressed_total"
REJECTED = "pulsar_quota_exporter_usage_reports_rejected_total"
REPORTER = "pulsar_quota_exporter_usage_reporter"


def _chart_config(service_url: str, metrics_url: str, group: str, ns: str) -> dict:
    """The config.yaml the chart renders for `replicas: 2` (its ConfigMap)."""
    docs = render({
        "replicas": 2,
        "config": {
            "cluster": CLUSTER, "check_interval": f"{PERIOD}s",
            "sources": {"brokers": [{"url": metrics_url}], "service_url": service_url},
            "resource_groups": {group: {"publish": {"messages_per_second": LIMIT},
                                        "namespaces": [ns]}},
            "resource_group_engine": {"report_interval": f"{PERIOD}s", "stale_after": "30s",
                                      "allocator": "pulsar"},
            "spark": {"master": "local[1]"},
        }})
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"
                     and "config.yaml" in d.get("data", {})]
    return yaml.safe_load(config_map["data"]["config.yaml"])


def _share(exporter: ExporterProcess, group: str) -> float | None:
    for g in exporter.status().get("resource_groups", []):
        if g["resource_group"] == group and g["monitoring_class"] == "publish":
            quota = (g.get("local_quota") or {}).get("messages_per_second")
            return float(quota) if quota is not None else None
    return None


def _sent(exporter: ExporterProcess) -> float:
    return exporter.scrape().value(SENT) or 0.0


def _decided(exporter: ExporterProcess) -> float:
    """Rounds sent and entries suppressed: the reporter decides one or the other every round
    (steady usage is suppressed for up to N rounds, as Pulsar's `need_to_report`), a replica
    standing by neither."""
    metrics = exporter.scrape()
    return (metrics.value(SENT) or 0.0) + (metrics.value(SUPPRESSED) or 0.0)


def _spoofed(exporter: ExporterProcess) -> float:
    return exporter.scrape().value(REJECTED, reason="spoofed") or 0.0


def _steady(exporters: list[ExporterProcess], group: str, what: str,
            near: list[float] | None = None) -> list[float]:
    """Every exporter's share (the last is the other participant's), read until the
    deployment's and the other's add up to the limit (and, given `near`, each is within
    BAND of it) on two readings in a row: members recompute on their own cycles, one
    reading could fall between them."""
    held: list[list[float]] = []
    seen: list[list[float | None]] = []

    def read() -> list[float] | None:
        got = [_share(e, group) for e in exporters]
        seen[:] = [got]
        shares = [s for s in got if s is not None]
        ok = len(shares) == len(got) and abs(shares[-2] + shares[-1] - LIMIT) <= 2 and (
            near is None or all(abs(s - n) <= BAND for s, n in zip(shares, near, strict=True)))
        held[:] = [*held[-1:], shares] if ok else []
        return shares if len(held) == 2 else None

    return poll(read, what, timeout=120, interval=PERIOD,
                show=lambda: {"shares": seen, "near": near})


def test_one_replica_reports_and_the_other_publishes_the_same_shares(
        apache_cluster: ApacheCluster, tmp_path: Path) -> None:
    first, second = apache_cluster.brokers
    group = f"rg-{uuid.uuid4().hex[:8]}"
    ns, owned = one_topic_per_broker(apache_cluster, "replicas")
    deployment = _chart_config(first.service_url, first.metrics_url, group, ns)
    assert deployment["resource_group_engine"]["participant"] == DEPLOYMENT
    other = {**deployment, "sources": {**deployment["sources"],
                                       "brokers": [{"url": second.metrics_url}]},
             "resource_group_engine": {**deployment["resource_group_engine"],
                                       "participant": "other"}}
    a = ExporterProcess(tmp_path, deployment, name="replica-a")
    b = ExporterProcess(tmp_path, deployment, name="replica-b")
    c = ExporterProcess(tmp_path, deployment, name="replica-c")
    o = ExporterProcess(tmp_path, other, name="other")
    stop = threading.Event()
    producers = [threading.Thread(target=produce_at, args=(broker, owned[broker.broker_id],
                                                           rate, stop))
                 for broker, rate in zip(apache_cluster.brokers, RATES, strict=True)]
    try:
        for thread in producers:
            thread.start()
        for exporter in (a, o):
            exporter.start()
        for exporter in (a, o):
            exporter.wait_ready(240)
        # One replica alone: the split Pulsar's allocator makes of 30 : 10.
        alone = _steady([a, o], group, "one replica and the other participant splitting")
        print(f"one replica alone: deployment {alone[0]:.1f}, other {alone[1]:.1f}")
        expected = [LIMIT * r / sum(RATES) for r in RATES]
        for got, want in zip(alone, expected, strict=True):
            assert abs(got - want) <= 0.1 * LIMIT, (alone, expected)

        b.start().wait_ready(240)
        # Both replicas: each publishes the split one replica alone did, and so does other.
        both = _steady([a, b, o], group, "both replicas publishing one replica's split",
                       near=[alone[0], alone[0], alone[1]])
        print(f"two replicas: a {both[0]:.1f}, b {both[1]:.1f}, other {both[2]:.1f}")
        for got, want in zip(both, (alone[0], alone[0], alone[1]), strict=True):
            assert abs(got - want) <= BAND, (both, alone)

        # One reports: a, which took the lease first; b decides nothing and refuses nothing.
        # (Not "a sends": with steady usage its reports are suppressed for rounds on end.)
        before = [_decided(a), _decided(b)]
        time.sleep(3 * PERIOD)
        after = [_decided(a), _decided(b)]
        assert _sent(a) > 0 and after[0] > before[0], (before, after)
        assert _sent(b) == after[1] == before[1] == 0, (before, after)
        assert _spoofed(a) == _spoofed(b) == 0
        states = [e.status()["usage_exchange"] for e in (a, b)]
        assert states == [{"participant": DEPLOYMENT, "reporter_lease": "holding"},
                          {"participant": DEPLOYMENT, "reporter_lease": "standing_by"}]
        for exporter, state in ((a, "holding"), (b, "standing_by")):
            assert exporter.scrape().value(REPORTER, participant=DEPLOYMENT, state=state) == 1

        a.signal(signal.SIGTERM)  # a clean stop: its goodbye, then its lease released
        stopped = time.monotonic()
        poll(lambda: _sent(b) > 0, "the other replica reporting", timeout=TAKEOVER + 30,
             interval=0.2)
        took = time.monotonic() - stopped
        print(f"the replica took over reporting {took:.1f} s after the reporter's SIGTERM")
        assert took <= TAKEOVER
        assert a.wait_exit(60) == 0
        assert b.status()["usage_exchange"]["reporter_lease"] == "holding"
        after = _steady([b, o], group, "the remaining replica's split",
                        near=[alone[0], alone[1]])
        print(f"after the takeover: b {after[0]:.1f}, other {after[1]:.1f}")
        # b's reports continue above a's sequence: the other participant refused none
        assert _spoofed(b) == _spoofed(o) == 0
        assert (o.scrape().value(REJECTED, reason="replayed") or 0) == 0

        # A replica back (a new pod) stands by; the reporter killed (no goodbye): the
        # broker frees the lease with its connection and the new replica takes over.
        c.start().wait_ready(240)
        poll(lambda: c.status()["usage_exchange"]["reporter_lease"] == "standing_by",
             "the new replica standing by", timeout=30, interval=0.5)
        b.signal(signal.SIGKILL, group=True)
        killed = time.monotonic()
        poll(lambda: _sent(c) > 0, "the new replica reporting", timeout=TAKEOVER + 30,
             interval=0.2)
        took = time.monotonic() - killed
        print(f"the new replica took over reporting {took:.1f} s after the reporter's SIGKILL")
        assert took <= TAKEOVER
        after = _steady([c, o], group, "the new replica's split", near=[alone[0], alone[1]])
        print(f"after the kill: c {after[0]:.1f}, other {after[1]:.1f}")
        assert _spoofed(c) == _spoofed(o) == 0
        assert (o.scrape().value(REJECTED, reason="replayed") or 0) == 0
    finally:
        stop.set()
        for thread in producers:
            thread.join(30)
        for exporter in (a, b, c, o):
            exporter.stop()
