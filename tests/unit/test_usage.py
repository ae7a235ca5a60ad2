"""The usage map (goodbye, stale expiry by passed-in time) and counter diffs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import MonitoringClass
from exporter.engine.groups.allocators import Observed, allocate
from exporter.engine.groups.usage import (
    UNKNOWN,
    Accepted,
    Baseline,
    CounterReset,
    Dimension,
    Dropped,
    EntryRejected,
    Expired,
    Fresh,
    Ignored,
    Increment,
    RejectReason,
    Stale,
    Usage,
    UsageCounter,
    UsageMap,
    UsageReport,
)

PUB = MonitoringClass.PUBLISH
DIS = MonitoringClass.DISPATCH


def report(participant="b1", messages=10.0, nbytes=1000.0, *, rg="rg", cls=PUB, **kw):
    return UsageReport(rg, cls, participant, Usage(nbytes, messages), **kw)


# --- the usage map -----------------------------------------------------------------------------


def test_accept_then_update():
    usage = UsageMap(stale_after=600)
    assert usage.accept(report(messages=10), now=0) == Accepted("b1", joined=True)
    assert usage.accept(report(messages=20), now=60) == Accepted("b1", joined=False)
    looked = usage.lookup("rg", PUB, "b1", now=90)
    assert looked == Fresh(report(messages=20), age=30)


def test_unknown_participant_group_or_class():
    usage = UsageMap(stale_after=600)
    usage.accept(report(), now=0)
    assert usage.lookup("rg", PUB, "nobody", now=0) is UNKNOWN
    assert usage.lookup("other", PUB, "b1", now=0) is UNKNOWN
    assert usage.lookup("rg", DIS, "b1", now=0) is UNKNOWN


def test_goodbye_drops_at_once():
    usage = UsageMap(stale_after=600)
    usage.accept(report("b1"), now=0)
    usage.accept(report("b2"), now=0)
    bye = report("b1", messages=0, nbytes=0, goodbye=True)
    assert usage.accept(bye, now=1) == Dropped("b1", was_known=True)
    assert usage.lookup("rg", PUB, "b1", now=1) is UNKNOWN
    assert set(usage.observed("rg", PUB, Dimension.MESSAGES, now=1)) == {"b2"}
    assert usage.accept(bye, now=2) == Dropped("b1", was_known=False)


def test_goodbye_must_carry_zero_usage():
    usage = UsageMap(stale_after=600)
    usage.accept(report("b1"), now=0)
    outcome = usage.accept(report("b1", messages=5, goodbye=True), now=1)
    assert outcome == EntryRejected(RejectReason.GOODBYE_WITH_USAGE)
    assert isinstance(usage.lookup("rg", PUB, "b1", now=1), Fresh)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (report(messages=-1), RejectReason.NEGATIVE_USAGE),
        (report(nbytes=math.nan), RejectReason.NOT_FINITE),
        (report(limit=Usage(math.inf, 5)), RejectReason.NOT_FINITE),
        (report(participant=""), RejectReason.MISSING_NAME),
        (report(rg=""), RejectReason.MISSING_NAME),
    ],
)
def test_malformed_reports_are_rejected_by_reason(bad, reason):
    usage = UsageMap(stale_after=600)
    assert usage.accept(bad, now=0) == EntryRejected(reason)
    assert len(usage) == 0


def test_stale_at_stale_after_and_out_of_the_totals_at_once():
    usage = UsageMap(stale_after=600)
    usage.accept(report("quiet"), now=0)
    usage.accept(report("chatty"), now=500)
    assert isinstance(usage.lookup("rg", PUB, "quiet", now=599.9), Fresh)
    assert usage.lookup("rg", PUB, "quiet", now=600) == Stale(report("quiet"), age=600)
    assert set(usage.observed("rg", PUB, Dimension.BYTES, now=600)) == {"chatty"}


def test_expire_removes_stale_peers_and_names_them():
    usage = UsageMap(stale_after=600)
    usage.accept(report("quiet"), now=0)
    usage.accept(report("quiet", cls=DIS), now=0)
    usage.accept(report("chatty"), now=500)
    gone = usage.expire(now=700)
    assert gone == (  # sorted by group, then participant: deterministic metrics
        Expired("rg", DIS, "quiet", age=700),
        Expired("rg", PUB, "quiet", age=700),
    )
    assert len(usage) == 1
    assert usage.lookup("rg", PUB, "quiet", now=700) is UNKNOWN
    assert usage.expire(now=700) == ()


def test_a_peer_back_after_expiry_rejoins():
    usage = UsageMap(stale_after=600)
    usage.accept(report(), now=0)
    assert usage.accept(report(), now=600) == Accepted("b1", joined=True)


def test_observed_per_dimension_with_limits():
    usage = UsageMap(stale_after=600)
    usage.accept(report("b1", messages=10, nbytes=1000, limit=Usage(2000, 10)), now=0)
    usage.accept(report("b2", messages=30, nbytes=500, limit=Usage(-1, -1)), now=0)
    usage.accept(report("b3", messages=5, nbytes=50), now=0)
    assert usage.observed("rg", PUB, Dimension.MESSAGES, now=1) == {
        "b1": Observed(10, 10),
        "b2": Observed(30, None),  # -1: unlimited
        "b3": Observed(5, None),
    }
    assert usage.observed("rg", PUB, Dimension.BYTES, now=1)["b1"] == Observed(1000, 2000)


def test_stale_after_must_be_positive():
    with pytest.raises(ValueError, match="stale_after"):
        UsageMap(stale_after=0)


def test_map_feeds_allocate_with_own_report_in_the_total():
    # Each participant's share is computed from the whole map, itself included, as in
    # Pulsar's calculateQuotaForAllResourceGroups.
    usage = UsageMap(stale_after=600)
    for name, used in (("me", 10), ("b2", 50), ("b3", 30)):
        usage.accept(report(name, messages=used), now=0)
    shares = allocate("pulsar", 100, usage.observed("rg", PUB, Dimension.MESSAGES, now=1))
    assert shares["me"] == 11.0  # 100 × 10 / 90 = 11.1, truncated as a broker does


# --- usage from cumulative counters --------------------------------------------------------------


def test_first_sighting_is_a_baseline_not_usage():
    counter = UsageCounter()
    assert counter.observe("t", Usage(5000, 50)) == Baseline(Usage(5000, 50))
    assert counter.observe("t", Usage(6000, 60)) == Increment(Usage(1000, 10))


def test_zero_diff_is_ignored_and_carried_as_in_pulsar():
    counter = UsageCounter()
    counter.observe("t", Usage(100, 10))
    # Bytes grew, messages did not: Pulsar skips both and keeps its old baseline …
    assert counter.observe("t", Usage(150, 10)) == Ignored(Usage(50, 0))
    # … so the next growth of both is counted from the old baseline.
    assert counter.observe("t", Usage(200, 12)) == Increment(Usage(100, 2))


def test_reset_gives_no_usage_and_rebases():
    counter = UsageCounter()
    counter.observe("t", Usage(10_000, 100))
    assert counter.observe("t", Usage(300, 3)) == CounterReset(Usage(300, 3))
    assert counter.observe("t", Usage(500, 5)) == Increment(Usage(200, 2))


def test_keys_are_independent_and_vanished_ones_forgotten():
    counter = UsageCounter()
    counter.observe("a", Usage(1, 1))
    counter.observe("b", Usage(1, 1))
    assert counter.observe("a", Usage(2, 2)) == Increment(Usage(1, 1))
    assert counter.retain(["a"]) == 1
    assert len(counter) == 1
    assert isinstance(counter.observe("b", Usage(9, 9)), Baseline)


def test_counters_must_be_finite_and_non_negative():
    with pytest.raises(ValueError):
        UsageCounter().observe("t", Usage(-1, 0))
    with pytest.raises(ValueError):
        UsageCounter().observe("t", Usage(math.nan, 0))


steps = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 1000)), min_size=1, max_size=30)


@given(start=st.tuples(st.integers(0, 10**9), st.integers(0, 10**6)), steps=steps)
def test_monotone_counters_conserve_usage(start, steps):
    # Without resets nothing is lost: increments plus what is still pending add up to
    # the counters' growth.
    counter = UsageCounter()
    nbytes, messages = start
    counter.observe("t", Usage(nbytes, messages))
    counted = Usage(0, 0)
    outcome = None
    for dbytes, dmessages in steps:
        nbytes, messages = nbytes + dbytes, messages + dmessages
        outcome = counter.observe("t", Usage(nbytes, messages))
        assert isinstance(outcome, Increment | Ignored)
        if isinstance(outcome, Increment):
            assert outcome.usage.bytes > 0 and outcome.usage.messages > 0
            counted = Usage(
                counted.bytes + outcome.usage.bytes, counted.messages + outcome.usage.messages
            )
    pending = outcome.pending if isinstance(outcome, Ignored) else Usage(0, 0)
    assert counted.bytes + pending.bytes == nbytes - start[0]
    assert counted.messages + pending.messages == messages - start[1]


@given(
    values=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=2, max_size=30)
)
def test_any_counters_never_give_negative_usage_and_resets_rebase(values):
    counter = UsageCounter()
    counter.observe("t", Usage(*values[0]))
    baseline = values[0]
    for value in values[1:]:
        outcome = counter.observe("t", Usage(*value))
        went_down = value[0] < baseline[0] or value[1] < baseline[1]
        if went_down:
            assert outcome == CounterReset(Usage(*value))
            baseline = value
        elif isinstance(outcome, Increment):
            assert outcome.usage == Usage(value[0] - baseline[0], value[1] - baseline[1])
            assert outcome.usage.bytes > 0 and outcome.usage.messages > 0
            baseline = value
        else:
            assert outcome == Ignored(Usage(value[0] - baseline[0], value[1] - baseline[1]))
