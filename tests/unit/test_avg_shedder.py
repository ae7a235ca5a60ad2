"""AvgShedder against Pulsar 4.0.8's `AvgShedder.java`, with AvgShedderTest's scenarios
(high threshold hit twice, low threshold hit N times, two pairs) re-derived for loads whose
broker msg rate is the sum of its bundles' (as the exporter computes it). Every expected
number is worked out in the comments from the source's formulas and the literals here.

Brokers report only cpu, so a broker's score is its cpu percentage.
"""

from __future__ import annotations

import dataclasses

import pytest

from exporter.config.load import parse
from exporter.config.settings import LoadManager, SheddingStrategy
from exporter.engine.load.avgshedder import NO_HITS, AvgHits, avg_shedder, java_hash, map_order
from exporter.engine.load.loadbalance import ShedOutcome, ShedReason
from exporter.engine.load.shedders import shed
from tests.unit.test_config import FILE, merged, minimal
from tests.unit.test_shedders import broker, by_broker, names

# Pulsar's defaults: low 15, high 40, hit counts 8 / 2, maxUnloadPercentage 0.2.
AVG = LoadManager(load_shedding_strategy=SheddingStrategy.AVG)
# AvgShedderTest's setting: maxUnloadPercentage 0.5 (move half the gap).
HALF = dataclasses.replace(AVG, max_unload_percentage=0.5)


def loaded_trio(low_cpu: float = 30.0, high_cpu: float = 80.0):
    """AvgShedderTest's three brokers: b1 busy with 11 bundles of 900 msgs/s (9900),
    b2 idle-ish with one bundle of 1000, b3 in the middle at 50 % with 5000."""
    b1 = broker("b1", high_cpu, rates=(900.0,) * 11)
    b2 = broker("b2", low_cpu, rates=(1000.0,))
    b3 = broker("b3", 50.0, rates=(5000.0,))
    return b1, b2, b3


def test_defaults_are_pulsars():
    # ServiceConfiguration / broker.conf of 4.0.8.
    assert (AVG.avg_shedder_low_threshold, AVG.avg_shedder_high_threshold) == (15, 40)
    assert AVG.avg_shedder_hit_count_low_threshold == 8
    assert AVG.avg_shedder_hit_count_high_threshold == 2


def test_high_threshold_needs_two_runs_then_moves_half_the_gap():
    b1, b2, b3 = loaded_trio()
    loads = [b1, b2, b3]
    # Sorted by score: b2 30, b3 50, b1 80. Pairs: (b2, b1) gap 50 ≥ 40 → high and low
    # counts 1; (b3, b3) gap 0 < 15 → b3's counts dropped.
    first, hits = avg_shedder(loads, HALF, NO_HITS, frozenset())
    assert not any(v.unload for v in first)
    assert dict(hits.high) == {"b2": 1, "b1": 1} and dict(hits.low) == {"b2": 1, "b1": 1}
    # Second run: high count 2 ≥ 2 → due. Gap 9900 − 1000 = 8900 msgs/s × 0.5 = 4450 > 1000
    # (minUnloadMessage) → by msg rate; bundles of 900: 900·4 = 3600 ≤ 4450, a 5th would
    # need 4500 > 4450 → 4 bundles (largest first; all equal, so by name).
    second, after = avg_shedder(loads, HALF, hits, frozenset())
    v = by_broker(second)
    assert v["b1"].unload == names(b1, 0, 1, 2, 3)
    assert v["b1"].reason is ShedReason.MSG_RATE_SPREAD
    assert v["b1"].msg_rate_to_shed == pytest.approx(4450.0)
    assert not v["b2"].unload and not v["b3"].unload
    assert dict(after.high) == {} and dict(after.low) == {}  # a hit clears the pair


def test_low_threshold_needs_n_runs():
    # AvgShedderTest: low threshold 20, hit count 6; cpu 60 / 40 → gap 20 (≥ 20, < 40).
    cfg = dataclasses.replace(HALF, avg_shedder_low_threshold=20,
                              avg_shedder_hit_count_low_threshold=6)
    loads = list(loaded_trio(low_cpu=40.0, high_cpu=60.0))
    hits = NO_HITS
    for run in range(1, 6):  # runs 1..5: low count 1..5 < 6, high count never set
        verdicts, hits = avg_shedder(loads, cfg, hits, frozenset())
        assert not any(v.unload for v in verdicts), run
        assert dict(hits.low) == {"b2": run, "b1": run} and dict(hits.high) == {}
    verdicts, hits = avg_shedder(loads, cfg, hits, frozenset())
    assert by_broker(verdicts)["b1"].unload == names(loads[0], 0, 1, 2, 3)
    # With the default low threshold (15) a gap of 20 also counts, but needs 8 runs.
    hits = NO_HITS
    for _ in range(7):
        verdicts, hits = avg_shedder(loads, HALF, hits, frozenset())
        assert not any(v.unload for v in verdicts)
    verdicts, _ = avg_shedder(loads, HALF, hits, frozenset())
    assert by_broker(verdicts)["b1"].unload


def test_two_pairs_shed_at_once():
    # AvgShedderTest.testSheddingMultiplePairs: b1 80 / b2 30 and b3 75 / b4 35.
    b1 = broker("b1", 80.0, rates=(900.0,) * 11)
    b2 = broker("b2", 30.0, rates=(1000.0,))
    b3 = broker("b3", 75.0, rates=(900.0,) * 11)
    b4 = broker("b4", 35.0, rates=(1000.0,))
    loads = [b1, b2, b3, b4]
    # Sorted: b2 30, b4 35, b3 75, b1 80 → pairs (b2, b1) gap 50, (b4, b3) gap 40: both ≥ 40.
    _, hits = avg_shedder(loads, HALF, NO_HITS, frozenset())
    assert dict(hits.high) == {"b1": 1, "b2": 1, "b3": 1, "b4": 1}
    verdicts, _ = avg_shedder(loads, HALF, hits, frozenset())
    got = by_broker(verdicts)
    # Each busy broker: (9900 − 1000) × 0.5 = 4450 → 4 bundles of 900.
    assert got["b1"].unload == names(b1, 0, 1, 2, 3)
    assert got["b3"].unload == names(b3, 0, 1, 2, 3)
    assert not got["b2"].unload and not got["b4"].unload


def test_small_gap_resets_counts_and_no_pair_clears_all():
    b1, b2, b3 = loaded_trio()
    _, hits = avg_shedder([b1, b2, b3], HALF, NO_HITS, frozenset())
    assert hits.high  # b1 and b2 counted once
    # Now b1 cools to 40: scores b2 30, b1 40, b3 50 → pairs (b2, b3) gap 20 ≥ 15 → low
    # counts b2 2, b3 1 and high counts dropped; (b1, b1) gap 0 → b1's counts dropped.
    cooled = broker("b1", 40.0, rates=(900.0,) * 11)
    verdicts, hits = avg_shedder([cooled, b2, b3], HALF, hits, frozenset())
    assert not any(v.unload for v in verdicts)
    assert dict(hits.low) == {"b2": 2, "b3": 1} and dict(hits.high) == {}
    # All within 15 points: no pair, every count cleared.
    even = [broker("b1", 40.0), broker("b2", 45.0), broker("b3", 50.0)]
    _, hits = avg_shedder(even, HALF, hits, frozenset())
    assert hits == NO_HITS


def test_scores_sort_exactly():
    # 4.0.8 sorts with Comparator.comparingDouble (no int cast): 30.2 < 30.9, so b1 is the
    # lowest and pairs with b2 (90); b0 is in the middle, paired with itself.
    loads = [broker("b0", 30.9, rates=(2000.0,)), broker("b1", 30.2, rates=(2000.0,)),
             broker("b2", 90.0, rates=(900.0,) * 11)]
    _, hits = avg_shedder(loads, HALF, NO_HITS, frozenset())
    assert dict(hits.high) == {"b1": 1, "b2": 1}


def test_below_minimums_sheds_nothing_but_clears_the_pair():
    # Gap 50 points but rates 1500 vs 0: 1500 × 0.2 = 300 ≤ 1000 msgs/s, and throughput 0.
    loads = [broker("b1", 80.0, rates=(500.0,) * 3), broker("b2", 30.0)]
    _, hits = avg_shedder(loads, AVG, NO_HITS, frozenset())
    verdicts, hits = avg_shedder(loads, AVG, hits, frozenset())
    assert by_broker(verdicts)["b1"].outcome is ShedOutcome.BELOW_MINIMUM
    assert hits == AvgHits()


def test_throughput_branch_and_sole_bundle_still_moves():
    # Msg rates equal (gap 0), throughput 30 MiB vs 0: 30 × 0.5 = 15 MiB > 1 MiB → by
    # throughput; the sole bundle (10 MiB ≤ 15) is taken, Pulsar only warns about it.
    mib = 1024 * 1024
    b1 = broker("b1", 90.0, throughputs=(10 * mib, 20 * mib))
    b2 = broker("b2", 10.0)
    _, hits = avg_shedder([b1, b2], HALF, NO_HITS, frozenset())
    verdicts, _ = avg_shedder([b1, b2], HALF, hits, frozenset())
    v = by_broker(verdicts)["b1"]
    # 20 MiB ≤ 15? no; 10 MiB ≤ 15 → taken.
    assert v.unload == names(b1, 0) and v.reason is ShedReason.THROUGHPUT_SPREAD
    assert v.throughput_to_shed == pytest.approx(15 * mib)
    sole = broker("b1", 90.0, throughputs=(10 * mib,))
    _, hits = avg_shedder([sole, b2], HALF, NO_HITS, frozenset())
    verdicts, _ = avg_shedder([sole, b2], HALF, hits, frozenset())
    # 10 MiB × 0.5 = 5 MiB < the 10 MiB bundle → nothing fits.
    assert by_broker(verdicts)["b1"].outcome is ShedOutcome.NO_FITTING_BUNDLE


def test_recently_unloaded_bundles_are_skipped():
    b1, b2, b3 = loaded_trio()
    _, hits = avg_shedder([b1, b2, b3], HALF, NO_HITS, frozenset())
    recent = frozenset(names(b1, 0, 1))
    verdicts, _ = avg_shedder([b1, b2, b3], HALF, hits, recent)
    assert by_broker(verdicts)["b1"].unload == names(b1, 2, 3, 4, 5)


def test_shed_dispatch_carries_hits_per_interval():
    b1, b2, b3 = loaded_trio()
    first = shed([b1, b2, b3], HALF, now=0.0)
    assert first.hits.at == 0.0 and dict(first.hits.high) == {"b1": 1, "b2": 1}
    # 30 s later (< shedding_interval 60 s): the leader has not run again; the verdict is
    # what it would decide now (due), but the committed counts stay.
    between = shed([b1, b2, b3], HALF, hits=first.hits, now=30.0)
    assert between.unload == {"b1": names(b1, 0, 1, 2, 3)}
    assert between.hits == first.hits
    later = shed([b1, b2, b3], HALF, hits=first.hits, now=60.0)
    assert later.unload == {"b1": names(b1, 0, 1, 2, 3)} and later.hits.at == 60.0
    assert dict(later.hits.high) == {}
    # A broker gone from `alive` loses its counts.
    pruned = shed([b1, b3], HALF, hits=first.hits, alive=frozenset({"b1", "b3"}), now=90.0)
    assert "b2" not in pruned.hits.high


def test_config_keys_are_read():
    c = parse(merged(minimal(), {"load_manager": {
        "load_shedding_strategy": "AvgShedder", "avg_shedder_low_threshold": 10,
        "avg_shedder_high_threshold": 30, "avg_shedder_hit_count_low_threshold": 5,
        "avg_shedder_hit_count_high_threshold": 1}}), FILE).load_manager
    assert c.load_shedding_strategy is SheddingStrategy.AVG
    assert (c.avg_shedder_low_threshold, c.avg_shedder_high_threshold) == (10, 30)
    assert (c.avg_shedder_hit_count_low_threshold,
            c.avg_shedder_hit_count_high_threshold) == (5, 1)


def test_map_order_is_javas_concurrent_hash_map():
    # Printed by Java 17: String.hashCode of "hello", and `String.join(",", m.keySet())`
    # of a map filled in the order given (ConcurrentHashMap, which bins as HashMap does
    # for these few keys; `java Chm.java` during development).
    assert java_hash("hello") == 99162322
    assert map_order(["b0", "b1", "b2"]) == ["b2", "b0", "b1"]
    assert map_order(["127.0.0.1:36001", "127.0.0.1:36002", "127.0.0.1:36003",
                      "127.0.0.1:36004"]) == ["127.0.0.1:36003", "127.0.0.1:36002",
                                               "127.0.0.1:36001", "127.0.0.1:36004"]


def test_equal_scores_pair_by_map_order():
    # All weights 0: every score is 0, so the pair is (first, last) of map_order: b2 (the
    # lighter side) and b1 (the busier side). b1 has the traffic: 100 + 25 msgs/s vs 0 →
    # (125 − 0) × 0.5 = 62.5 > 10: the 100 bundle does not fit, the 25 one does.
    cfg = dataclasses.replace(HALF, cpu_resource_weight=0.0, bandwidth_in_resource_weight=0.0,
                              bandwidth_out_resource_weight=0.0, min_unload_message=10,
                              avg_shedder_low_threshold=0,
                              avg_shedder_hit_count_low_threshold=1)
    b1 = broker("b1", 90.0, rates=(100.0, 25.0))
    loads = [broker("b0", 10.0), b1, broker("b2", 50.0)]
    verdicts, _ = avg_shedder(loads, cfg, NO_HITS, frozenset())
    assert by_broker(verdicts)["b1"].unload == names(b1, 1)
    # In broker-id order the pair would be (b0, b2) and b1, in the middle, would shed nothing.
