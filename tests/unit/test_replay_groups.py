"""A replay of a three-participant record gives the resource-group split Pulsar's rule gives.

Rounds run every report_interval between the recorded cycles, as the live exchange's
timer runs them: with one round per cycle (10 s here, reports suppressed for up to 5
rounds), our own unchanged entry went stale after 30 s and the replay showed the whole
quota in cycles where the live split was 10.

The record is built in memory as `read_cycles` hands it over (`RecordedCycle`s, with the
bodies already parsed by the product's own parser): this exporter ("p-a") publishes 10
msg/s into a group of 100 msg/s, its peers report 50 and 40 msg/s in every cycle, then
p-c falls silent. The expected shares are worked out here from `computeLocalQuota`
(Pulsar 4.0's ResourceQuotaCalculatorImpl): local = max(my + (configured − total) ×
my / total, 1), truncated to a long, on the usages counted over one report interval.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config.load import parse
from exporter.config.settings import MonitoringClass
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import source_tables
from exporter.record.replay import replay_cycles
from exporter.record.store import RecordedCycle
from exporter.sources.brokers import HealthLedger
from exporter.sources.results import Snapshot, SourceKind
from exporter.transport.codec import Entry, Rates, WireReport

URL = "http://broker-1:8080/metrics"
T0, STEP = 1_800_000_000.0, 10.0  # a cycle every 10 s
QUOTA, OURS, PEERS = 100, 10, {"p-b": 50, "p-c": 40}
STALE_AFTER = 30.0
C_SILENT_FROM = 5  # p-c's last report is in cycle 4


def config(allocator: str):
    return parse({
        "cluster": "c", "check_interval": f"{STEP:g}s",
        "sources": {"brokers": [{"url": URL}]},
        "resource_groups": {"rg": {"publish": {"messages_per_second": QUOTA},
                                   "namespaces": ["public/a"]}},
        "resource_group_engine": {"participant": "p-a", "report_interval": "1s",
                                  "stale_after": f"{STALE_AFTER:g}s", "allocator": allocator},
    }, "replay-groups.yaml")


def body(i: int) -> bytes:
    """OURS msg/s of 1000 bytes published into public/a since cycle 0."""
    labels = 'cluster="c",namespace="public/a",topic="persistent://public/a/t"'
    published = round(OURS * STEP * i)
    return (f"pulsar_in_messages_total{{{labels}}} {published}\n"
            f"pulsar_in_bytes_total{{{labels}}} {published * 1000}\n").encode()


def record(cycles: int) -> tuple[list[RecordedCycle], dict]:
    recorded, tables = [], {}
    for i in range(cycles):
        now = T0 + STEP * i
        ledger = HealthLedger(URL, SourceKind.BROKER)
        ledger.record(up=True, at=now)
        reports = tuple(
            WireReport(peer, i + 1, now - 1.0, (Entry(
                "rg", MonitoringClass.PUBLISH, Rates(messages=rate, bytes=rate * 1000.0),
                None),))
            for peer, rate in PEERS.items() if not (peer == "p-c" and i >= C_SILENT_FROM))
        recorded.append(RecordedCycle(Path("/nonexistent"), now, "hash",
                                      Snapshot(taken_at=now, admin=None, health=()),
                                      (ledger.health(),), {URL: "body"}, reports))
        tables[(i, URL)] = source_tables([parse_text(body(i))])
    return recorded, tables


def local_messages(report) -> float | None:
    (group,) = [g for g in report.decisions.groups if g.monitoring_class is MonitoringClass.PUBLISH]
    return None if group.local_quota is None else group.local_quota.messages


def pulsar_rule(configured: int, mine: int, usages: list[int]) -> float:
    total = sum(usages)
    return float(int(max(mine + (configured - total) * mine / total, 1)))


def test_the_pulsar_split_of_a_recorded_fleet_and_a_peer_going_stale():
    cycles, tables = record(12)
    shares = [local_messages(r) for r in replay_cycles(config("pulsar"), cycles, tables)]
    three = pulsar_rule(QUOTA, OURS, [OURS, *PEERS.values()])  # 10 of 100
    two = pulsar_rule(QUOTA, OURS, [OURS, PEERS["p-b"]])  # 16 of 100 (16.67, truncated)
    assert (three, two) == (10.0, 16.0)
    # The first cycle only sets the counters' baseline (no rate, no share); until our own
    # usage is in the map we run at the whole quota, as a broker starts at its configured
    # rate.
    assert shares[:2] == [None, QUOTA]
    settled = [i for i, s in enumerate(shares) if s == three]
    assert settled and settled[0] <= 3, shares
    assert all(s == three for s in shares[settled[0]:C_SILENT_FROM]), shares
    # p-c's last report is at cycle 4 (T0 + 39 s); it counts until stale_after has passed.
    last_c = T0 + STEP * (C_SILENT_FROM - 1) - 1.0
    for i, share in enumerate(shares[C_SILENT_FROM:], start=C_SILENT_FROM):
        now = T0 + STEP * i
        expected = three if now - last_c <= STALE_AFTER else two
        assert share == expected, (i, now - last_c, shares)
    assert shares[-1] == two


def test_the_fair_split_of_the_same_record_keeps_its_laws():
    """`fair` keeps every participant at or above its usage while the total fits (its
    documented floor) and gives p-a more once p-c's share is free."""
    cycles, tables = record(12)
    shares = [local_messages(r) for r in replay_cycles(config("fair"), cycles, tables)]
    busy = shares[3:C_SILENT_FROM]
    assert busy and all(OURS <= s < QUOTA for s in busy), shares
    assert shares[-1] > max(busy), shares
    assert shares[-1] <= QUOTA


@pytest.mark.parametrize("allocator", ["pulsar", "fair"])
def test_a_replay_without_peer_reports_runs_alone_at_the_whole_quota(allocator: str):
    cycles, tables = record(6)
    alone = [RecordedCycle(c.path, c.now, c.config_hash, c.snapshot, c.broker_health,
                           c.bodies, ()) for c in cycles]
    shares = [local_messages(r) for r in replay_cycles(config(allocator), alone, tables)]
    assert shares[-1] == pytest.approx(QUOTA, rel=0.01), shares
