"""Replicas of one participant name (issue 57): the one holding the reporter lease reports;
a replica standing by adopts the reporter's entries as its own, sends nothing (no goodbye
either), and on taking the lease continues above the reporter's sequence.

The engine's side is pure; the exchange's runs on a list for a channel and a lease whose
holder the test decides (what the lease does on a real broker: tests/cluster/test_replicas.py).
"""

from __future__ import annotations

from exporter.actions.orders import LeaseState
from exporter.config.load import parse
from exporter.config.settings import MonitoringClass, ResourceGroupEngine
from exporter.engine.groups.participant import Participant
from exporter.engine.groups.usage import Usage, UsageReport
from exporter.runtime.exchange import UsageExchange, reporter_topic, to_wire
from exporter.transport.codec import WireReport, encode
from exporter.transport.decoder import decode
from exporter.transport.signing import unwrap

KEY = ("rg", MonitoringClass.PUBLISH)
NOW = 1_700_000_000.0
QUOTA = Usage(bytes=-1, messages=1000)
SETTINGS = ResourceGroupEngine(participant="deploy", report_interval=2.0, stale_after=30.0)


def _share(p: Participant, now: float) -> float:
    return p.local_quota(KEY, QUOTA, now).messages


def _report(name: str, messages: float) -> UsageReport:
    return UsageReport(*KEY, name, Usage(bytes=messages * 100, messages=messages))


def test_a_standby_publishes_the_reporters_shares_and_sends_nothing():
    reporter, standby = Participant("deploy", SETTINGS), Participant("deploy", SETTINGS)
    standby.reporting = False
    for p in (reporter, standby):
        p.accept(_report("other", 10), NOW)
    sent = reporter.report({KEY: Usage(3000, 30)}, {}, NOW)
    assert [r.usage.messages for r in sent.reports] == [30]
    # the standby measured 33 over its own window: no report, its measurement stands in
    assert standby.report({KEY: Usage(3300, 33)}, {}, NOW).reports == ()
    assert _share(standby, NOW) != _share(reporter, NOW)
    # the reporter's entry arrives under our name: adopted as ours, not a peer
    for r in sent.reports:
        standby.accept(r, NOW + 0.1)
    assert standby.report({KEY: Usage(3300, 33)}, {}, NOW + 2).reports == ()
    assert _share(standby, NOW + 2) == _share(reporter, NOW + 2) == 750
    assert standby.peers(NOW + 2) == {"other": 2.0} and standby.known() == 2


def test_a_standby_taking_over_reports_every_entry_at_once():
    standby = Participant("deploy", SETTINGS)
    standby.reporting = False
    standby.accept(_report("deploy", 30), NOW)
    standby.report({KEY: Usage(3000, 30)}, {}, NOW)
    standby.reporting = True
    # usage within the suppression tolerance of the reporter's: sent all the same
    taken = standby.report({KEY: Usage(3010, 30.1)}, {}, NOW + 2)
    assert [r.usage.messages for r in taken.reports] == [30.1]


class _Channel:
    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.sent: list[bytes] = []

    def drain(self, limit: int = 10_000) -> list[bytes]:
        out, self.pending = self.pending, []
        return out

    def send(self, payload: bytes) -> object:
        self.sent.append(payload)
        return object()

    def close(self) -> None:
        pass


class _Lease:
    """Held when the test says so; `refresh` as the real one answers."""

    def __init__(self) -> None:
        self.free, self.state, self.closed = False, LeaseState.STANDING_BY, False

    @property
    def evicts(self) -> bool:
        return self.state is not LeaseState.STANDING_BY

    def refresh(self) -> bool:
        if self.free:
            self.state = LeaseState.HOLDING
        return self.evicts

    def close(self) -> None:
        self.closed = True


def _exchange() -> tuple[UsageExchange, _Channel, _Lease]:
    config = parse({"cluster": "c", "sources": {"brokers": [{"url": "http://127.0.0.1:1/m"}]},
                    "resource_group_engine": {"participant": "deploy",
                                              "report_interval": "2s"}}, "replica.yaml")
    channel, lease = _Channel(), _Lease()
    return UsageExchange(config, channel, lambda: NOW, lease=lease), channel, lease  # type: ignore[arg-type]


def test_a_standby_admits_the_reporters_reports_refuses_replays_and_says_no_goodbye():
    exchange, channel, lease = _exchange()
    assert not exchange.elect(NOW) and exchange.reporter_state() is LeaseState.STANDING_BY
    far_ahead = 2**50  # the reporter started long after us
    report = encode(to_wire("deploy", far_ahead, NOW, [_report("deploy", 30)]))
    channel.pending += [report, report, encode(WireReport("deploy", far_ahead + 1, NOW - 60, ()))]
    inbound = exchange.receive(NOW)
    assert [r.sequence for r in inbound.admitted] == [far_ahead]
    assert dict(inbound.rejected) == {"replayed": 1, "too_old": 1} and not inbound.spoofed
    assert not exchange.goodbye(NOW) and channel.sent == []
    # the reporter goes: we take the lease and continue above its sequence
    lease.free = True
    assert exchange.elect(NOW + 2) and exchange.publish([_report("deploy", 30)], NOW + 2)
    (sent,) = channel.sent
    assert decode(unwrap(sent)).sequence > far_ahead  # type: ignore[union-attr]
    # reporting now, a report under our name that is not ours is a spoof again
    channel.pending.append(encode(WireReport("deploy", far_ahead + 5, NOW + 2, ())))
    assert exchange.receive(NOW + 2).spoofed
    exchange.close()
    assert lease.closed


def test_each_name_has_its_own_lock_and_an_awkward_name_is_spelled_safely():
    def topic(name: str) -> str:
        return reporter_topic(parse({"cluster": "c", "sources": {"brokers": [
            {"url": "http://127.0.0.1:1/m"}]}, "resource_group_engine": {
            "participant": name}}, "replica.yaml"))

    assert topic("deploy").endswith("pulsar-quota-exporter-usage-reporter-deploy")
    odd = {topic(n) for n in ("a/b", "a:b", "a_b")}
    assert len(odd) == 3 and all("/" not in t.rsplit("/", 1)[1] for t in odd)
