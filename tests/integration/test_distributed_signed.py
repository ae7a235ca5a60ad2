"""Three exporter processes signing their usage reports with a shared secret, over a real
broker: forged reports (unsigned, signed with a foreign key, tampered) are refused by every
peer and move no quota; the secret is rotated one member at a time without a single
report refused. Timeouts are generous, measured times printed, not asserted."""

from __future__ import annotations

import time

import pulsar
import pytest

from exporter.config.settings import USAGE_TOPIC, MonitoringClass
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.signing import seal
from tests.harness.fleet import RG, Fleet

# A fleet of exporter processes (Spark), each on a pulsar-lite broker of its own.
pytestmark = [pytest.mark.timeout(900), pytest.mark.lite, pytest.mark.spark]

QUOTA = 100.0
DEMANDS = {"s-a": 10.0, "s-b": 50.0, "s-c": 30.0}
SECRET = "fleet-secret-0123456789abcdef"
NEXT = "rotated-secret-0123456789abcdef"
FORGED = ("unsigned", "unknown_key", "bad_signature")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("signed"), DEMANDS, quota=QUOTA, allocator="pulsar",
              interval=5.0, stale_after=40.0, secret=SECRET)
    try:
        yield f.start()
    finally:
        f.close()


def converged(fleet: Fleet) -> bool:
    q = fleet.quotas()
    return len(q) == 3 and None not in q.values() and abs(sum(q.values()) - QUOTA) <= 10


def rejected(fleet: Fleet) -> dict[str, dict[str, float]]:
    return {name: {r: m.sample("pulsar_quota_exporter_usage_reports_rejected_total",
                               reason=r) or 0 for r in FORGED}
            for name, m in fleet.members.items()}


def test_forged_reports_are_refused_by_every_peer_and_move_no_quota(fleet):
    took = fleet.wait_for("signed peers converge", lambda: converged(fleet) and all(
        fleet.peers_known(n) == 3 for n in fleet.members), timeout=240)
    print(f"\nsigned fleet converged in {took:.1f}s: {fleet.quotas()}")
    before = rejected(fleet)

    def report(t: float, participant: str, rate: float) -> bytes:
        return encode(WireReport(participant, 2**50 + int(t * 1000), t, (
            Entry(RG, MonitoringClass.PUBLISH, Rates(rate, rate * 64), None),)))

    forgeries = {  # built at each send: a report must not turn too old while retried
        # s-b's usage raised a thousandfold, as anyone who may produce on the topic can
        "unsigned": lambda t: report(t, "s-b", 1e6),
        "unknown_key": lambda t: seal(b"guessed-secret-0123456789abcdef", USAGE_TOPIC,
                                      report(t, "s-zz", 1e6)),
        # a genuine signature over s-b's modest report, then the usage raised
        "bad_signature": lambda t: seal(SECRET.encode(), USAGE_TOPIC,
                                        report(t, "s-b", 50))[:42] + report(t, "s-b", 1e6),
    }
    client = pulsar.Client(fleet.brokers[0].service_url,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(USAGE_TOPIC)
        for reason, payload in forgeries.items():
            for _ in range(6):  # at most once per reader on a non-persistent topic
                producer.send(payload(time.time()))
                try:
                    fleet.wait_for(f"{reason} counted by every peer", lambda r=reason: all(
                        counts[r] > before[n][r] for n, counts in rejected(fleet).items()),
                        timeout=15)
                    break
                except AssertionError:
                    continue
    finally:
        client.close()
    after = rejected(fleet)
    assert all(after[n][r] > before[n][r] for n in after for r in FORGED), (before, after)
    for m in fleet.members.values():
        assert m.scrape().find("pulsar_resource_group_usage_messages_per_second",
                               participant="s-zz") == []
        seen_b = m.sample("pulsar_resource_group_usage_messages_per_second",
                          participant="s-b", monitoring_class="publish")
        assert seen_b is not None and seen_b < 1000, (m.name, seen_b)
    assert converged(fleet), fleet.quotas()


def test_a_rolling_rotation_refuses_nothing(fleet):
    fleet.wait_for("converged", lambda: converged(fleet), timeout=120)
    before = rejected(fleet)
    order = list(fleet.members)
    # 1. every member accepts the next secret, still signing with the current one;
    # 2. every member signs with the next one; 3. the old one goes.
    for step, text in enumerate((f"{SECRET}\n{NEXT}\n", f"{NEXT}\n{SECRET}\n", f"{NEXT}\n"), 1):
        for name in order:
            fleet.write_secret(name, text)
            time.sleep(fleet.interval)  # one member a round apart, as a rollout is
        fleet.wait_for(f"step {step}: every peer still known", lambda: all(
            fleet.peers_known(n) == 3 for n in fleet.members), timeout=60)
    time.sleep(2 * fleet.interval)  # reports signed with the next secret only, heard
    fleet.wait_for("converged after the rotation", lambda: converged(fleet), timeout=120)
    assert rejected(fleet) == before
    for m in fleet.members.values():  # reports are still flowing, signed with NEXT
        assert (m.sample("pulsar_quota_exporter_usage_reports_received_total") or 0) > 0
