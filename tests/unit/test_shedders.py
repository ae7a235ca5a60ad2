"""ThresholdShedder, UniformLoadShedder and the leader's rules around them, against Pulsar
4.0.8's sources (`ThresholdShedder`, `UniformLoadShedder`, `ModularLoadManagerImpl.
doLoadShedding`). Every expected number is worked out by hand in the comments from those
sources' formulas and the inputs' literals, never read back from the code under test.

Brokers here report only cpu (memory and bandwidth 0), so the weighted usage
(`getMaxResourceUsageWithWeight`, cpu weight 1) is the cpu percentage.
"""

from __future__ import annotations

import dataclasses

import pytest

from exporter.config.settings import LoadManager, SheddingStrategy
from exporter.engine.load.loadbalance import BrokerLoad, BundleStats, ShedOutcome, ShedReason
from exporter.engine.load.shedders import (
    SkipReason,
    ThresholdHistory,
    java_int,
    shed,
    threshold_shedder,
    uniform_shedder,
)

MiB = 1024 * 1024
THRESHOLD = LoadManager()  # Pulsar's defaults: ThresholdShedder, 10 %, history 0.9, 10 MB
UNIFORM = LoadManager(load_shedding_strategy=SheddingStrategy.UNIFORM)


def bundle(broker: str, index: int, throughput: float = 0.0, rate: float = 0.0,
           namespace: str = "t/ns") -> BundleStats:
    lower = index * 0x01000000
    return BundleStats(f"{namespace}/0x{lower:08x}_0x{lower + 0x01000000:08x}", broker,
                       topics=2, producers=0, consumers=0, msg_rate_in=rate, msg_rate_out=0.0,
                       throughput_in=throughput, throughput_out=0.0)


def broker(name: str, cpu: float, throughputs: tuple[float, ...] = (),
           rates: tuple[float, ...] = ()) -> BrokerLoad:
    """A broker at `cpu` % owning one bundle per throughput (bytes/s) or per msg rate."""
    n = max(len(throughputs), len(rates))
    bundles = tuple(
        bundle(name, i, throughputs[i] if i < len(throughputs) else 0.0,
               rates[i] if i < len(rates) else 0.0) for i in range(n))
    return BrokerLoad(broker=name, cpu_percent=cpu, memory_percent=0.0,
                      bandwidth_in_percent=0.0, bandwidth_out_percent=0.0, bundles=bundles)


def names(load: BrokerLoad, *indices: int) -> tuple[str, ...]:
    return tuple(load.bundles[i].name for i in indices)


def by_broker(verdicts) -> dict:
    return {v.broker: v for v in verdicts}


# --- ThresholdShedder ---------------------------------------------------------------------

def test_threshold_sheds_the_broker_above_average_plus_threshold():
    # First run: no history, so each broker's usage is its current one: 0.9, 0.5, 0.4.
    # Average 1.8 / 3 = 0.6; a: 0.9 ≥ 0.6 + 0.1 → picked; b and c below 0.7.
    # Share to shed: 0.9 − 0.6 − 0.1 + 0.05 = 0.25 of a's 200 MiB/s = 50 MiB/s (≥ 10 MiB/s).
    # Highest throughput first: 100 MiB/s alone covers 50 → one bundle.
    a = broker("a", 90.0, (100 * MiB, 60 * MiB, 40 * MiB))
    b, c = broker("b", 50.0, (10 * MiB, 10 * MiB)), broker("c", 40.0, (5 * MiB, 5 * MiB))
    result = shed([c, a, b], THRESHOLD)
    assert result.strategy is SheddingStrategy.THRESHOLD and result.skipped is None
    v = by_broker(result.verdicts)
    assert [x.broker for x in result.verdicts] == ["a", "b", "c"]
    assert v["a"].outcome is ShedOutcome.UNLOAD and v["a"].reason is ShedReason.ABOVE_AVERAGE
    assert v["a"].smoothed_usage_percent == pytest.approx(90.0)
    assert v["a"].average_usage_percent == pytest.approx(60.0)
    assert v["a"].shed_fraction == pytest.approx(0.25)
    assert v["a"].throughput_to_shed == pytest.approx(50 * MiB)
    assert v["a"].unload == names(a, 0)
    assert v["a"].unload_throughput == 100 * MiB
    assert not v["b"].overloaded and not v["c"].overloaded
    assert result.unload == {"a": names(a, 0)}
    assert dict(result.history.usage) == pytest.approx({"a": 0.9, "b": 0.5, "c": 0.4})


def test_threshold_sheds_nothing_when_every_broker_is_equally_hot():
    # 95 % everywhere: average 0.95, nobody reaches 1.05. (OverloadShedder would shed
    # from all three: each is over 85 %.)
    loads = [broker(n, 95.0, (50 * MiB, 50 * MiB)) for n in "abc"]
    assert not any(v.overloaded for v in shed(loads, THRESHOLD).verdicts)
    overload = LoadManager(load_shedding_strategy=SheddingStrategy.OVERLOAD)
    assert all(v.outcome is ShedOutcome.UNLOAD for v in shed(loads, overload).verdicts)


def test_threshold_all_below_average_plus_threshold():
    # 0.60, 0.55, 0.50: average 0.55, bar 0.65: nobody.
    loads = [broker("a", 60.0, (50 * MiB, 50 * MiB)), broker("b", 55.0), broker("c", 50.0)]
    verdicts = shed(loads, THRESHOLD).verdicts
    assert [v.outcome for v in verdicts] == [ShedOutcome.NOT_OVERLOADED] * 3
    assert all(v.unload == () and v.shed_fraction == 0.0 for v in verdicts)


def test_threshold_usage_equal_to_the_bar_is_picked():
    # Pulsar skips a broker only while usage < average + threshold.
    # 0.6 and 0.4: average (0.6 + 0.4) / 2 = 0.5, bar 0.5 + 0.1 = 0.6 (exact in doubles).
    assert (0.6 + 0.4) / 2 + 10 / 100.0 == 60 / 100
    a = broker("a", 60.0, (300 * MiB, 100 * MiB))
    v = by_broker(shed([a, broker("b", 40.0)], THRESHOLD).verdicts)["a"]
    # 0.6 − 0.5 − 0.1 + 0.05 = 0.05 of 400 MiB/s = 20 MiB/s: the 300 MiB/s bundle
    assert v.outcome is ShedOutcome.UNLOAD and v.shed_fraction == pytest.approx(0.05)
    assert v.unload == names(a, 0)


def test_threshold_history_smoothing_delays_the_verdict():
    # Pulsar keeps old × 0.9 + 0.1 × new per broker. Both brokers sit at 50 % (history
    # 0.5 each), then a jumps to 100 %. After k runs at 100 %: a = 1 − 0.5 × 0.9^k, b = 0.5,
    # average (a + 0.5) / 2; picked when a ≥ average + 0.1 ⇔ a ≥ 0.7 ⇔ 0.9^k ≤ 0.6
    # ⇔ k ≥ ln 0.6 / ln 0.9 = 4.85: the 5th run. Run 4: a = 1 − 0.5 × 0.6561 = 0.67195.
    # Run 5: a = 1 − 0.5 × 0.59049 = 0.704755, average 0.6023775, bar 0.7023775 → picked,
    # shedding 0.704755 − 0.6023775 − 0.1 + 0.05 = 0.0523775 of its 1000 MiB/s.
    calm = [broker("a", 50.0, (600 * MiB, 400 * MiB)), broker("b", 50.0, (MiB, MiB))]
    hot = [broker("a", 100.0, (600 * MiB, 400 * MiB)), broker("b", 50.0, (MiB, MiB))]
    history = shed(calm, THRESHOLD).history
    assert dict(history.usage) == {"a": 0.5, "b": 0.5}
    picked_at = None
    for run in range(1, 8):
        result = shed(hot, THRESHOLD, history=history)
        history = result.history
        if result.verdicts[0].overloaded and picked_at is None:
            picked_at = run
            assert result.verdicts[0].smoothed_usage_percent == pytest.approx(70.4755)
            assert result.verdicts[0].average_usage_percent == pytest.approx(60.23775)
            assert result.verdicts[0].shed_fraction == pytest.approx(0.0523775)
    assert picked_at == 5
    # Without history (p = 0) the first hot run decides on raw usage: 1.0 ≥ 0.75 + 0.1.
    no_history = dataclasses.replace(THRESHOLD, history_resource_percentage=0.0)
    first = shed(hot, no_history, history=shed(calm, no_history).history)
    assert first.verdicts[0].overloaded


def test_threshold_history_advances_once_per_shedding_interval():
    # The leader runs every loadBalancerSheddingIntervalMinutes (60 s here). At t = 0 the
    # first run sets a = b = 0.5. At t = 30 a is at 100 %: the verdict previews one step
    # (0.5 × 0.9 + 0.1 × 1.0 = 0.55) but the history stays as of t = 0. At t = 60 the step
    # is taken once from 0.5 again (0.55, not 0.55 × 0.9 + 0.1 = 0.595) and committed.
    calm = [broker("a", 50.0), broker("b", 50.0)]
    hot = [broker("a", 100.0), broker("b", 50.0)]
    h0 = shed(calm, THRESHOLD, now=0.0).history
    assert (dict(h0.usage), h0.at) == ({"a": 0.5, "b": 0.5}, 0.0)
    mid = shed(hot, THRESHOLD, history=h0, now=30.0)
    assert mid.verdicts[0].smoothed_usage_percent == pytest.approx(55.0)
    assert mid.history == h0
    late = shed(hot, THRESHOLD, history=mid.history, now=60.0)
    assert dict(late.history.usage) == pytest.approx({"a": 0.55, "b": 0.5})
    assert late.history.at == 60.0


def test_threshold_minimum_throughput_filter():
    # a: 0.9 vs b 0.3 → average 0.6, share 0.9 − 0.6 − 0.1 + 0.05 = 0.25.
    # 30 MiB/s × 0.25 = 7.5 MiB/s < loadBalancerBundleUnloadMinThroughputThreshold 10 MB:
    # picked (overloaded) but nothing unloaded.
    a = broker("a", 90.0, (20 * MiB, 10 * MiB))
    v = by_broker(shed([a, broker("b", 30.0)], THRESHOLD).verdicts)["a"]
    assert v.overloaded and v.outcome is ShedOutcome.BELOW_MINIMUM and v.unload == ()
    assert v.throughput_to_shed == pytest.approx(7.5 * MiB)
    # a 7 MB minimum lets it through: 20 MiB/s covers 7.5 MiB/s
    low = dataclasses.replace(THRESHOLD, bundle_unload_min_throughput_threshold=7 * MiB)
    v = by_broker(shed([a, broker("b", 30.0)], low).verdicts)["a"]
    assert v.outcome is ShedOutcome.UNLOAD and v.unload == names(a, 0)


def test_threshold_sole_bundle_and_grace_period():
    # a: 0.9, b: 0.1 → average 0.5, share 0.9 − 0.5 − 0.1 + 0.05 = 0.35 of 100 MiB/s.
    only = broker("a", 90.0, (100 * MiB,))
    assert shed([only, broker("b", 10.0)], THRESHOLD).verdicts[0].outcome is (
        ShedOutcome.SOLE_BUNDLE)
    # 35 MiB/s to shed; the 60 MiB/s bundle is in its grace period, so 30 + 10 = 40.
    a = broker("a", 90.0, (60 * MiB, 30 * MiB, 10 * MiB))
    recent = frozenset(names(a, 0))
    v = shed([a, broker("b", 10.0)], THRESHOLD, recently_unloaded=recent).verdicts[0]
    assert v.unload == names(a, 1, 2)
    everything = frozenset(names(a, 0, 1, 2))
    v = shed([a, broker("b", 10.0)], THRESHOLD, recently_unloaded=everything).verdicts[0]
    assert v.outcome is ShedOutcome.ALL_RECENTLY_UNLOADED and v.unload == ()


def test_threshold_zero_average_considers_nobody():
    loads = [broker("a", 0.0, (MiB, MiB)), broker("b", 0.0)]
    result = shed(loads, THRESHOLD)
    assert result.skipped is SkipReason.ZERO_AVERAGE
    assert not any(v.overloaded for v in result.verdicts)
    assert dict(result.history.usage) == {"a": 0.0, "b": 0.0}  # updated before the check


def test_lower_boundary_sheds_from_the_busiest_broker():
    # 0.54, 0.50, 0.31: average 1.35 / 3 = 0.45. Nobody reaches 0.55; c is below 0.35.
    # lowerBoundarySheddingEnabled: the busiest broker above 0.35 with > 1 bundle (a)
    # sheds threshold × 0.5 = 0.05 of its 400 MiB/s = 20 MiB/s (≥ 10): the 150 MiB/s one.
    a = broker("a", 54.0, (150 * MiB, 100 * MiB, 90 * MiB, 60 * MiB))
    loads = [a, broker("b", 50.0, (MiB, MiB)), broker("c", 31.0, (MiB, MiB))]
    assert not any(v.overloaded for v in shed(loads, THRESHOLD).verdicts)
    cfg = dataclasses.replace(THRESHOLD, lower_boundary_shedding_enabled=True)
    v = by_broker(shed(loads, cfg).verdicts)
    assert v["a"].reason is ShedReason.LOWER_BOUNDARY and v["a"].outcome is ShedOutcome.UNLOAD
    assert v["a"].shed_fraction == pytest.approx(0.05)
    assert v["a"].unload == names(a, 0)
    assert not v["b"].overloaded and not v["c"].overloaded
    # At 100 MiB/s, 5 MiB/s is under the 10 MB minimum: nothing.
    small = broker("a", 54.0, (50 * MiB, 50 * MiB))
    assert not any(v.unload for v in shed([small, *loads[1:]], cfg).verdicts)


def test_lower_boundary_smooths_the_history_twice():
    # Pulsar's tryLowerBoundaryShedding recomputes the average with getBrokerAvgUsage,
    # which updates the history again. History a = b = 0.2, now a 30 %, b 10 %:
    # first pass a = 0.2 × 0.9 + 0.1 × 0.3 = 0.21, b = 0.18 + 0.01 = 0.19 (nobody picked);
    # second a = 0.21 × 0.9 + 0.03 = 0.219, b = 0.19 × 0.9 + 0.01 = 0.181.
    loads = [broker("a", 30.0), broker("b", 10.0)]
    before = {"a": 0.2, "b": 0.2}
    _, once, _ = threshold_shedder(loads, THRESHOLD, before, frozenset())
    assert once == pytest.approx({"a": 0.21, "b": 0.19})
    cfg = dataclasses.replace(THRESHOLD, lower_boundary_shedding_enabled=True)
    _, twice, _ = threshold_shedder(loads, cfg, before, frozenset())
    assert twice == pytest.approx({"a": 0.219, "b": 0.181})


def test_history_of_departed_brokers_is_dropped():
    # onActiveBrokersChange: only brokers still alive keep their history.
    history = ThresholdHistory({"a": 0.5, "gone": 0.9}, 0.0)
    result = shed([broker("a", 50.0), broker("b", 50.0)], THRESHOLD, history=history)
    assert set(result.history.usage) == {"a", "b"}
    skipped = shed([broker("a", 50.0)], THRESHOLD, history=history)
    assert skipped.skipped is SkipReason.SINGLE_BROKER
    assert set(skipped.history.usage) == {"a"}


# --- UniformLoadShedder -------------------------------------------------------------------

def test_uniform_msg_rate_branch_takes_what_fits():
    # a 30000 msgs/s, b 10000: gap (30000 − 10000) × 100 / 10000 = 200 % > 50 %.
    # Required (int) (20000 × 0.2) = 4000 ≥ minUnloadMessage 1000. Largest first, each
    # taken when ≤ required + 1000: 14000 no, 10000 no, 3000 ≤ 5000 yes (required 1000),
    # 1800 ≤ 2000 yes (required −800), 1200 ≤ 200 no.
    a = broker("a", 10.0, rates=(14000, 10000, 3000, 1800, 1200))
    b = broker("b", 10.0, rates=(10000, 0))
    v = by_broker(shed([a, b], UNIFORM).verdicts)
    assert v["a"].reason is ShedReason.MSG_RATE_SPREAD and v["a"].outcome is ShedOutcome.UNLOAD
    assert v["a"].unload == names(a, 2, 3)
    assert v["a"].msg_rate_to_shed == 4000 and v["a"].throughput_to_shed == 0.0
    assert v["a"].shed_fraction == pytest.approx(4000 / 30000)
    assert v["a"].unload_msg_rate == 4800
    assert not v["b"].overloaded


def test_uniform_throughput_branch():
    # Msg rates equal (no msg-rate gap); throughput 500 vs 100 MiB/s: 5× > 4×.
    # Required (int) (400 MiB × 0.2) = 80 MiB = 83886080 bytes/s ≥ 1 MiB minimum.
    # 300 MiB no, 120 MiB no, 50 MiB ≤ 80 MiB + 1000 (required 30 MiB), 30 MiB ≤ 30 MiB +
    # 1000 (required 0).
    a = broker("a", 10.0, (300 * MiB, 120 * MiB, 50 * MiB, 30 * MiB), (250, 250, 250, 250))
    b = broker("b", 10.0, (50 * MiB, 50 * MiB), (500, 500))
    v = by_broker(uniform_shedder([a, b], UNIFORM, frozenset()))
    assert v["a"].reason is ShedReason.THROUGHPUT_SPREAD
    assert v["a"].throughput_to_shed == 80 * MiB and v["a"].msg_rate_to_shed == 0.0
    assert v["a"].unload == names(a, 2, 3)
    assert v["a"].unload_throughput == 80 * MiB


def test_uniform_msg_rate_branch_wins_even_when_it_sheds_nothing():
    # a 1300 msgs/s, b 800: gap 500 × 100 / 800 = 62.5 % > 50 %, so only the msg-rate branch
    # runs; required (int) (500 × 0.2) = 100 < 1000: nothing. Throughput 100 MiB/s on b vs
    # 10 MiB/s on a (10×) would have picked b, but Pulsar's `else` never gets there.
    a = broker("a", 10.0, (5 * MiB, 5 * MiB), (650, 650))
    b = broker("b", 10.0, (50 * MiB, 50 * MiB), (400, 400))
    v = by_broker(uniform_shedder([a, b], UNIFORM, frozenset()))
    assert v["a"].reason is ShedReason.MSG_RATE_SPREAD
    assert v["a"].outcome is ShedOutcome.BELOW_MINIMUM and v["a"].msg_rate_to_shed == 100
    assert not v["b"].overloaded


def test_uniform_thresholds_are_strict_and_zero_turns_them_off():
    # 15000 vs 10000: gap exactly 50 % is not > 50; throughput 1:1. Nothing.
    a = broker("a", 10.0, (MiB, MiB), (7500, 7500))
    b = broker("b", 10.0, (MiB, MiB), (5000, 5000))
    assert not any(v.overloaded for v in uniform_shedder([a, b], UNIFORM, frozenset()))
    # 30000 vs 10000 is a 200 % gap, but a threshold of 0 turns the msg-rate check off;
    # throughput 2 MiB vs 2 MiB: nothing either.
    hot = broker("a", 10.0, (MiB, MiB), (15000, 15000))
    off = dataclasses.replace(UNIFORM, msg_rate_difference_shedder_threshold=0)
    assert not any(v.overloaded for v in uniform_shedder([hot, b], off, frozenset()))


def test_uniform_zero_minimum_counts_as_one_and_truncates_like_java():
    # b carries nothing: its 0 msgs/s counts as 1.0. a 9999.5 msgs/s:
    # required (int) ((9999.5 − 1.0) × 0.2) = (int) 1999.7 = 1999.
    # 7000 > 2999: no. 1500.5 ≤ 2999: yes, required 1999 − (int) 1500.5 = 499 (MutableInt
    # drops the fraction). 1499 ≤ 499 + 1000: yes (exactly 1498.5 would have said no).
    a = broker("a", 10.0, rates=(7000, 1500.5, 1499))
    b = broker("b", 10.0, rates=(0, 0))
    v = by_broker(uniform_shedder([a, b], UNIFORM, frozenset()))["a"]
    assert v.msg_rate_to_shed == 1999
    assert v.unload == names(a, 1, 2)


def test_uniform_bundle_cap_sole_bundle_and_grace_period():
    # As in the msg-rate example: 3000 and 1800 would fit; maxUnloadBundleNumPerShedding 1.
    a = broker("a", 10.0, rates=(14000, 10000, 3000, 1800, 1200))
    b = broker("b", 10.0, rates=(10000, 0))
    capped = dataclasses.replace(UNIFORM, max_unload_bundle_num_per_shedding=1)
    assert by_broker(uniform_shedder([a, b], capped, frozenset()))["a"].unload == names(a, 2)
    # 3000 in its grace period: 1800 ≤ 5000 (required 2200), 1200 ≤ 3200 (required 1000).
    recent = frozenset(names(a, 2))
    assert by_broker(uniform_shedder([a, b], UNIFORM, recent))["a"].unload == names(a, 3, 4)
    # Only bundles larger than required + 1000 (3000, 1800, 1200 recently unloaded).
    recent = frozenset(names(a, 2, 3, 4))
    v = by_broker(uniform_shedder([a, b], UNIFORM, recent))["a"]
    assert v.outcome is ShedOutcome.NO_FITTING_BUNDLE and v.unload == ()
    # One bundle of 30000: never shed.
    sole = broker("a", 10.0, rates=(30000,))
    v = by_broker(uniform_shedder([sole, b], UNIFORM, frozenset()))["a"]
    assert v.outcome is ShedOutcome.SOLE_BUNDLE and v.overloaded


def test_uniform_int_overflow_selects_nothing():
    # A throughput gap of 20 GiB/s: (int) (20 GiB × 0.2) saturates at 2147483647, and
    # Integer + 1000 wraps to −2147482649, so no bundle is ≤ it (Pulsar's int arithmetic).
    a = broker("a", 10.0, (10 * 1024 * MiB, 10 * 1024 * MiB), (100, 100))
    b = broker("b", 10.0, (1.0, 1.0), (100, 100))
    v = by_broker(uniform_shedder([a, b], UNIFORM, frozenset()))["a"]
    assert v.throughput_to_shed == 2**31 - 1
    assert v.outcome is ShedOutcome.NO_FITTING_BUNDLE


@pytest.mark.parametrize(("value", "expected"), [
    (1999.7, 1999), (-2500.7, -2500), (float("nan"), 0), (3e9, 2**31 - 1), (-3e9, -(2**31)),
    (float("inf"), 2**31 - 1),
])
def test_java_int_cast(value: float, expected: int):
    assert java_int(value) == expected


# --- the leader's rules -------------------------------------------------------------------

@pytest.mark.parametrize("strategy", list(SheddingStrategy))
def test_one_broker_sheds_nothing(strategy: SheddingStrategy):
    # doLoadShedding: "Only 1 broker available: no load shedding will be performed".
    cfg = LoadManager(load_shedding_strategy=strategy)
    only = broker("a", 99.0, (600 * MiB, 400 * MiB), (30000, 10))
    result = shed([only], cfg)
    assert result.skipped is SkipReason.SINGLE_BROKER
    assert result.verdicts[0].outcome is ShedOutcome.NOT_OVERLOADED
    assert result.history == ThresholdHistory()  # the strategy never ran


def test_brokers_without_usage_still_count_as_available():
    # One judged broker of two alive: the shedder runs; ThresholdShedder's average is a's
    # own usage, so a (0.99 < 0.99 + 0.1) is not picked; OverloadShedder picks it.
    only = broker("a", 99.0, (600 * MiB, 400 * MiB))
    alive = frozenset({"a", "lite"})
    result = shed([only], THRESHOLD, alive=alive, history=ThresholdHistory({"lite": 0.3}))
    assert result.skipped is None and not result.verdicts[0].overloaded
    # the history of a broker alive without usage this cycle is kept, as Pulsar keeps it
    assert dict(result.history.usage) == {"a": 0.99, "lite": 0.3}
    overload = LoadManager(load_shedding_strategy=SheddingStrategy.OVERLOAD)
    v = shed([only], overload, alive=alive).verdicts[0]
    assert v.reason is ShedReason.OVERLOADED and v.unload == names(only, 0)


def test_shedding_disabled_keeps_the_history():
    history = ThresholdHistory({"a": 0.5, "b": 0.5}, 0.0)
    cfg = dataclasses.replace(THRESHOLD, shedding_enabled=False)
    loads = [broker("a", 99.0, (MiB, MiB)), broker("b", 1.0)]
    result = shed(loads, cfg, history=history, now=120.0)
    assert result.skipped is SkipReason.SHEDDING_DISABLED
    assert not any(v.overloaded for v in result.verdicts)
    assert result.history == history


def test_another_strategy_drops_the_threshold_history():
    history = ThresholdHistory({"a": 0.5, "b": 0.5}, 0.0)
    result = shed([broker("a", 50.0), broker("b", 50.0)], UNIFORM, history=history)
    assert result.strategy is SheddingStrategy.UNIFORM
    assert result.history == ThresholdHistory()
