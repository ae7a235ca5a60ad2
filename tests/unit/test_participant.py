"""Participant: report suppression, peers' entries, goodbye/expiry and the local share."""

from __future__ import annotations

import pytest

from exporter.config.settings import Allocator, MonitoringClass, ResourceGroupEngine
from exporter.engine.groups.participant import Participant
from exporter.engine.groups.usage import Usage, UsageReport

PUB = MonitoringClass.PUBLISH
KEY = ("rg", PUB)


def settings(**kw) -> ResourceGroupEngine:
    base = dict(participant="a", report_interval=10.0, stale_after=60.0,
                max_suppressed_rounds=5, suppression_tolerance_percent=5.0)
    base.update(kw)
    return ResourceGroupEngine(**base)


def u(messages: float, bytes_: float | None = None) -> Usage:
    return Usage(bytes=messages * 100 if bytes_ is None else bytes_, messages=messages)


def peer(name: str, messages: float, limit: float | None = None, key=KEY) -> UsageReport:
    return UsageReport(key[0], key[1], name, u(messages),
                       None if limit is None else u(limit))


def test_first_round_reports_and_unchanged_usage_is_suppressed_until_forced():
    p = Participant("a", settings(max_suppressed_rounds=3))
    sent = []
    for t in range(6):
        r = p.report({KEY: u(50)}, {}, now=10.0 * t)
        sent.append(len(r.reports))
    # round 0 reports, rounds 1-2 suppressed, round 3 forced, 4-5 suppressed
    assert sent == [1, 0, 0, 1, 0, 0]


def test_drift_beyond_tolerance_reports_and_within_it_does_not():
    p = Participant("a", settings())
    p.report({KEY: u(100)}, {}, 0.0)
    assert p.report({KEY: u(104)}, {}, 10.0).suppressed == 1
    assert len(p.report({KEY: u(110)}, {}, 20.0).reports) == 1


def test_drop_to_zero_is_reported_at_once_unlike_pulsar():
    p = Participant("a", settings())
    p.report({KEY: u(100)}, {}, 0.0)
    r = p.report({KEY: u(0)}, {}, 10.0)
    assert [x.usage for x in r.reports] == [u(0)]


def test_reported_usage_carries_the_limit_and_counts_in_totals():
    p = Participant("a", settings())
    r = p.report({KEY: u(30)}, {KEY: u(40)}, 0.0)
    assert r.reports[0].limit == u(40)
    assert p.usages(KEY, 1.0) == {"a": u(30)}


def test_before_own_usage_is_known_the_whole_quota_applies():
    p = Participant("a", settings())
    p.accept(peer("b", 80), 0.0)
    assert p.local_quota(KEY, u(100), 1.0) == u(100)


def test_pulsar_allocator_splits_in_proportion_to_reported_usage():
    p = Participant("a", settings(allocator=Allocator.PULSAR))
    p.report({KEY: u(20)}, {}, 0.0)
    p.accept(peer("b", 60), 0.0)
    p.accept(peer("c", 20), 0.0)
    share = p.local_quota(KEY, u(200), 1.0)
    assert share.messages == pytest.approx(40.0)
    assert share.bytes == pytest.approx(4000.0)


def test_unlimited_quota_stays_unlimited():
    p = Participant("a", settings())
    p.report({KEY: u(20)}, {}, 0.0)
    assert p.local_quota(KEY, Usage(bytes=-1, messages=50), 1.0) == Usage(-1.0, 50.0)


def test_goodbye_drops_a_peer_from_every_group_at_once():
    p = Participant("a", settings())
    other = ("rg2", MonitoringClass.DISPATCH)
    p.report({KEY: u(50)}, {}, 0.0)
    p.accept(peer("b", 50), 0.0)
    p.accept(peer("b", 10, key=other), 0.0)
    assert p.known() == 2
    assert p.local_quota(KEY, u(100), 1.0).messages == pytest.approx(50.0)
    assert p.forget("b") is True
    assert p.forget("b") is False
    assert p.known() == 1
    assert p.usages(other, 1.0) == {}
    assert p.local_quota(KEY, u(100), 1.0).messages == pytest.approx(100.0)


def test_a_silent_peer_is_dropped_after_stale_after_and_its_share_returns():
    p = Participant("a", settings(stale_after=30.0, max_suppressed_rounds=1))
    p.accept(peer("b", 50), 0.0)
    for t in (0.0, 10.0, 20.0, 30.0):
        p.report({KEY: u(50)}, {}, t)  # forced every round: we stay fresh
    assert p.peers(20.0) == {"b": 20.0}
    assert p.expire(29.0) == ()
    assert p.expire(30.0) == ("b",)
    assert p.peers(30.0) == {}
    assert p.local_quota(KEY, u(100), 30.0).messages == pytest.approx(100.0)


def test_a_group_removed_from_the_config_is_forgotten_and_reported_afresh_later():
    p = Participant("a", settings())
    p.report({KEY: u(50)}, {}, 0.0)
    p.report({}, {}, 10.0)
    assert len(p.report({KEY: u(50)}, {}, 20.0).reports) == 1


def _rounds(allocator: Allocator, demands: dict[str, float], quota: float, n: int,
            limits: dict[str, float] | None = None) -> dict[str, float]:
    """Participants exchanging every report, each using min(demand, limit)."""
    ps = {name: Participant(name, settings(participant=name, allocator=allocator,
                                            max_suppressed_rounds=0)) for name in demands}
    limits = limits or {name: quota for name in demands}
    for r in range(n):
        now = 10.0 * r
        sent = []
        for name, p in ps.items():
            used = min(demands[name], limits[name])
            sent += p.report({KEY: u(used)}, {KEY: u(limits[name])}, now).reports
        for p in ps.values():
            for rep in sent:
                if rep.participant != p.name:
                    p.accept(rep, now)
        limits = {name: p.local_quota(KEY, u(quota), now).messages for name, p in ps.items()}
    return limits


def test_fair_resolves_the_starved_80_20_case_where_pulsar_stays_stuck():
    # PIP-82: quota 100 split 80/20, both want more than an equal share.
    demands = {"a": 200.0, "b": 200.0}
    stuck = _rounds(Allocator.PULSAR, demands, 100.0, 10, {"a": 80.0, "b": 20.0})
    fair = _rounds(Allocator.FAIR, demands, 100.0, 10, {"a": 80.0, "b": 20.0})
    assert stuck["b"] == pytest.approx(20.0, rel=0.01)
    assert fair["a"] == pytest.approx(fair["b"], rel=0.1)
    assert 100.0 <= sum(fair.values()) <= 110.0


@pytest.mark.parametrize("allocator", list(Allocator))
def test_three_participants_that_fit_keep_their_demand_and_share_the_quota(allocator):
    limits = _rounds(allocator, {"a": 10.0, "b": 50.0, "c": 30.0}, 100.0, 6)
    assert all(limits[n] >= d for n, d in {"a": 10.0, "b": 50.0, "c": 30.0}.items())
    assert 100.0 * 0.9 <= sum(limits.values()) <= 100.0 * 1.1
