"""Load verdicts from the pipeline's tables (built by hand here, in the documented schemas):
broker identity, shedding and its fraction under each strategy, brokers without usage,
the state carried between cycles (ThresholdShedder's history, bundles seen moving), bundle
shares summed for split verdicts, admin-owned empty bundles, and the series publish_load adds.

Expected numbers are Pulsar 4.0.8's rules written out (OverloadShedder: (usage - threshold)
+ margin; ThresholdShedder: usage - average - threshold + margin) with the inputs'
literals, never values read back from the code under test.
"""

import dataclasses
import math

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import LoadManager, SheddingStrategy
from exporter.engine.load.loadbalance import (
    BundleStats,
    Resource,
    ShedOutcome,
    ShedReason,
    SplitReason,
)
from exporter.engine.load.loadview import (
    BundleMoves,
    Judged,
    LoadState,
    Unjudged,
    UsageGap,
    broker_id,
    broker_ids,
    evaluate_load,
    track_moves,
)
from exporter.engine.load.shedders import SkipReason
from exporter.exposition.build_load import add_load
from exporter.exposition.metricset import MetricSetBuilder
from exporter.exposition.render import render
from exporter.pipeline.aggregates import BROKERS, BUNDLES, FULL_BUNDLE, Aggregates
from exporter.sources.results import AdminSnapshot, BundleOwnership

A = "http://broker-a:8080/metrics"
B = "http://broker-b:8080/metrics"
LITE = "http://lite:18080/metrics"
BUSY = {"cpu_percent": 95.0, "memory_percent": 50.0, "bandwidth_in_percent": 10.0,
        "bandwidth_out_percent": 20.0}
CALM = {"cpu_percent": 30.0, "memory_percent": 40.0, "bandwidth_in_percent": 10.0,
        "bandwidth_out_percent": 20.0}
OVERLOAD = LoadManager(load_shedding_strategy=SheddingStrategy.OVERLOAD)
MiB = 1024 * 1024


def broker(source: str, **usage: float | None) -> dict:
    return {"source": source, "cluster": "prod", "topics": 0, "sessions": 0.0, "rate_in": 0.0,
            "rate_out": 0.0, "throughput_in": 0.0, "throughput_out": 0.0, **usage}


def share(source: str, namespace: str, bundle: str = FULL_BUNDLE, topics: int = 2,
          throughput: float = 0.0, **values: float | None) -> dict:
    return {"source": source, "namespace": namespace, "bundle": bundle, "topics": topics,
            "producers": 0.0, "consumers": 0.0, "rate_in": 0.0, "rate_out": 0.0,
            "throughput_in": throughput, "throughput_out": 0.0, **values}


def tables(brokers: list[dict], bundles: list[dict]) -> Aggregates:
    return dataclasses.replace(
        Aggregates.empty(),
        brokers=pa.Table.from_pylist(brokers, schema=BROKERS),
        bundles=pa.Table.from_pylist(bundles, schema=BUNDLES),
    )


def admin(*bundles: BundleOwnership) -> AdminSnapshot:
    return AdminSnapshot(fetched_at=0.0, topics=(), bundles=bundles)


# --- broker identity ------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("http://Broker-1.Example:8080/metrics", "broker-1.example:8080"),
    ("https://pulsar.example/metrics", "pulsar.example:443"),
    ("http://10.0.0.5/metrics", "10.0.0.5:80"),
    ("http://[::1]:8080/metrics", "[::1]:8080"),
    ("http://user@host:8443/metrics?x=1", "host:8443"),
    ("file:///var/spool/body.txt", "file:///var/spool/body.txt"),  # no host: kept as is
    ("http://host:port/metrics", "http://host:port/metrics"),  # no numeric port
])
def test_broker_id_is_host_and_port(source, expected):
    assert broker_id(source) == expected


def test_broker_ids_are_unique():
    ids = broker_ids(["http://h:8080/metrics", "http://h:8080/other", "http://k/metrics"])
    assert ids == {"http://h:8080/metrics": "http://h:8080/metrics",
                   "http://h:8080/other": "http://h:8080/other",
                   "http://k/metrics": "k:80"}


@given(st.lists(st.sampled_from(["a", "B", "c.d"]), min_size=1, max_size=4),
       st.lists(st.sampled_from([None, 80, 8080, 443]), min_size=1, max_size=4),
       st.lists(st.sampled_from(["/metrics", "/x", ""]), min_size=1, max_size=4))
def test_broker_ids_never_collide(hosts, ports, paths):
    sources = [f"http://{h}{'' if p is None else f':{p}'}{path}"
               for h, p, path in zip(hosts, ports, paths, strict=False)]
    ids = broker_ids(sources)
    assert set(ids) == set(sources)
    assert len(set(ids.values())) == len(ids)


# --- shedding -------------------------------------------------------------------------------

def test_overloaded_broker_sheds_usage_minus_threshold_plus_margin():
    agg = tables([broker(A, **BUSY), broker(B, **CALM)], [
        share(A, "shop/orders", "0x00000000_0x80000000", throughput=900.0),
        share(A, "shop/orders", "0x80000000_0xffffffff", throughput=100.0),
    ])
    result = evaluate_load(agg, None, OVERLOAD)
    assert result.strategy is SheddingStrategy.OVERLOAD and result.skipped is None
    a = result.broker("broker-a:8080")
    assert isinstance(a, Judged) and a.source == A
    assert a.verdict.resource is Resource.CPU
    assert a.verdict.max_usage_percent == 95.0
    assert a.verdict.shed_fraction == pytest.approx((95.0 - 85.0) / 100 + 5.0 / 100)
    assert a.verdict.throughput_to_shed == pytest.approx(1000.0 * 0.15)
    assert a.verdict.outcome is ShedOutcome.UNLOAD
    assert a.verdict.unload == ("shop/orders/0x00000000_0x80000000",)  # hottest first
    # another threshold and margin, another resource (memory is not weighed in 4.0)
    cfg = dataclasses.replace(OVERLOAD, overload_threshold_percent=80.0,
                              shed_margin_percent=10.0)
    agg = tables([broker(A, **{**CALM, "memory_percent": 99.0, "bandwidth_out_percent": 92.5}),
                  broker(B, **CALM)], [])
    verdict = evaluate_load(agg, None, cfg).brokers[0].verdict
    assert verdict.resource is Resource.BANDWIDTH_OUT
    assert verdict.shed_fraction == pytest.approx((92.5 - 80.0 + 10.0) / 100)
    assert verdict.outcome is ShedOutcome.NO_BUNDLES


def test_threshold_shedder_is_the_default_end_to_end():
    # Pulsar's default since 2.10. First cycle: no history, so usage = weighted max:
    # A max(95, 0 × dm, 10, 20) = 0.95, B max(30, 0, 10, 20) = 0.30. Average 0.625; A ≥
    # 0.725 → share 0.95 − 0.625 − 0.1 + 0.05 = 0.275 of 1000 MiB/s = 275 MiB/s: the
    # 600 MiB/s bundle alone covers it.
    agg = tables([broker(A, **BUSY), broker(B, **CALM)], [
        share(A, "shop/orders", "0x00000000_0x80000000", throughput=600.0 * MiB),
        share(A, "shop/orders", "0x80000000_0xffffffff", throughput=400.0 * MiB),
        share(B, "shop/misc", throughput=MiB),
    ])
    result = evaluate_load(agg, None, LoadManager())
    assert result.strategy is SheddingStrategy.THRESHOLD
    a, b = result.brokers
    assert a.verdict.reason is ShedReason.ABOVE_AVERAGE
    assert a.verdict.average_usage_percent == pytest.approx(62.5)
    assert a.verdict.shed_fraction == pytest.approx(0.275)
    assert a.verdict.unload == ("shop/orders/0x00000000_0x80000000",)
    assert not b.verdict.overloaded
    # The history goes to the next cycle: A at 30 % now is smoothed to
    # 0.95 × 0.9 + 0.3 × 0.1 = 0.885, B at 95 % to 0.3 × 0.9 + 0.95 × 0.1 = 0.365: average
    # 0.625, A still ≥ 0.725 (share 0.885 − 0.625 − 0.1 + 0.05 = 0.21), B not.
    swapped = tables([broker(A, **CALM), broker(B, **BUSY)], agg.bundles.to_pylist())
    again = evaluate_load(swapped, None, LoadManager(), state=result.state)
    a, b = again.brokers
    assert a.verdict.smoothed_usage_percent == pytest.approx(88.5)
    assert b.verdict.smoothed_usage_percent == pytest.approx(36.5)
    assert a.verdict.shed_fraction == pytest.approx(0.21) and not b.verdict.overloaded


def test_one_broker_is_never_shed_and_unjudged_ones_count_as_alive():
    agg = tables([broker(A, **BUSY)], [
        share(A, "shop/orders", "0x00000000_0x80000000", throughput=900.0),
        share(A, "shop/orders", "0x80000000_0xffffffff", throughput=100.0),
    ])
    alone = evaluate_load(agg, None, OVERLOAD)
    assert alone.skipped is SkipReason.SINGLE_BROKER
    assert not alone.brokers[0].verdict.overloaded
    # With a pulsar-lite broker beside it (no usage, so no verdict) two brokers are alive.
    with_lite = tables([broker(A, **BUSY), broker(LITE)], agg.bundles.to_pylist())
    result = evaluate_load(with_lite, None, OVERLOAD)
    assert result.skipped is None
    assert result.broker("broker-a:8080").verdict.outcome is ShedOutcome.UNLOAD


def test_a_broker_under_the_threshold_sheds_nothing():
    agg = tables([broker(A, **{**BUSY, "cpu_percent": 84.9})], [share(A, "shop/orders")])
    verdict = evaluate_load(agg, None, LoadManager()).brokers[0].verdict
    assert verdict.outcome is ShedOutcome.NOT_OVERLOADED
    assert not verdict.overloaded and verdict.shed_fraction == 0.0


def test_direct_memory_counts_when_reported_and_weighed():
    # loadBalancerDirectMemoryResourceWeight is 0 by default: 97 % × 0 = 0.
    agg = tables([broker(A, **CALM, direct_memory_percent=97.0), broker(B, **CALM)], [])
    verdict = evaluate_load(agg, None, OVERLOAD).brokers[0].verdict
    assert verdict.resource is Resource.CPU and not verdict.overloaded
    weighed = dataclasses.replace(OVERLOAD, direct_memory_resource_weight=1.0)
    verdict = evaluate_load(agg, None, weighed).brokers[0].verdict
    assert verdict.resource is Resource.DIRECT_MEMORY and verdict.overloaded


@pytest.mark.parametrize(("usage", "gap"), [
    ({}, UsageGap.NOT_REPORTED),
    ({"cpu_percent": 99.0, "memory_percent": 10.0}, UsageGap.INCOMPLETE),
    ({**BUSY, "cpu_percent": math.nan}, UsageGap.INVALID),
    ({**BUSY, "bandwidth_in_percent": -1.0}, UsageGap.INVALID),
])
def test_a_broker_without_usable_usage_gets_no_verdict(usage, gap):
    agg = tables([broker(LITE, **usage)], [share(LITE, "public/default", topics=3)])
    result = evaluate_load(agg, None, LoadManager())
    (lite,) = result.brokers
    assert isinstance(lite, Unjudged)
    assert (lite.broker, lite.gap) == ("lite:18080", gap)
    assert [b.name for b in lite.bundles] == [f"public/default/{FULL_BUNDLE}"]
    b = MetricSetBuilder()
    add_load(b, "prod", result)
    assert b"pulsar_load_broker" not in render(b.build(), topic_level=True)


def test_missing_nan_and_negative_rates_count_as_zero():
    agg = tables([broker(A, **BUSY)], [
        share(A, "x/y", "0x00000000_0x80000000", throughput=math.nan, rate_in=None),
        share(A, "x/y", "0x80000000_0xffffffff", throughput=50.0, rate_out=-3.0),
    ])
    (a,) = evaluate_load(agg, None, LoadManager()).brokers
    stats = {s.name: s for s in a.load.bundles}
    assert stats["x/y/0x00000000_0x80000000"].throughput == 0.0
    assert stats["x/y/0x00000000_0x80000000"].msg_rate_in == 0.0
    assert stats["x/y/0x80000000_0xffffffff"].msg_rate_out == 0.0
    assert a.verdict.throughput == 50.0


# --- bundles --------------------------------------------------------------------------------

def test_split_candidate_over_bundle_max_topics():
    agg = tables([broker(A, **CALM)], [
        share(A, "shop/orders", "0x00000000_0x80000000", topics=1001),
        share(A, "shop/orders", "0x80000000_0xffffffff", topics=1000),
    ])
    result = evaluate_load(agg, None, LoadManager())
    assert [(c.bundle, c.broker, c.reasons) for c in result.splits] == [
        ("shop/orders/0x00000000_0x80000000", "broker-a:8080", (SplitReason.TOPICS,))]
    # a lower limit catches the other one too
    result = evaluate_load(agg, None, LoadManager(bundle_max_topics=999))
    assert len(result.splits) == 2


def test_shares_of_one_bundle_are_summed_for_split_verdicts():
    # no boundaries known: each broker's part of the namespace is the whole-range bundle
    agg = tables([broker(A, **CALM), broker(B)], [
        share(A, "shop/orders", topics=600, producers=300.0),
        share(B, "shop/orders", topics=500, producers=250.0),
    ])
    result = evaluate_load(agg, None, LoadManager())
    (whole,) = result.bundles
    assert (whole.name, whole.topics, whole.producers) == (
        f"shop/orders/{FULL_BUNDLE}", 1100, 550)
    (candidate,) = result.splits
    assert candidate.broker == "broker-a:8080"  # holds most of its topics
    assert candidate.reasons == (SplitReason.TOPICS,)  # 550 sessions ≤ 1000
    # each broker keeps only its own share for shedding
    a = result.broker("broker-a:8080")
    assert [s.topics for s in a.load.bundles] == [600]


def test_admin_owned_empty_bundle_counts_for_the_sole_bundle_rule():
    ranges = ("0x00000000_0x80000000", "0x80000000_0xffffffff")
    agg = tables([broker(A, **BUSY), broker(B, **CALM)],
                 [share(A, "shop/orders", ranges[0], throughput=10.0)])
    alone = evaluate_load(agg, None, OVERLOAD).brokers[0].verdict
    assert alone.outcome is ShedOutcome.SOLE_BUNDLE
    snapshot = admin(BundleOwnership("shop/orders", ranges[0], "broker-a:8080"),
                     BundleOwnership("shop/orders", ranges[1], "BROKER-A:8080"))
    result = evaluate_load(agg, snapshot, OVERLOAD)
    a = result.brokers[0]
    assert [b.name for b in a.load.bundles] == [f"shop/orders/{r}" for r in ranges]
    assert a.verdict.outcome is ShedOutcome.UNLOAD
    assert a.verdict.unload == (f"shop/orders/{ranges[0]}",)


def test_admin_bundles_are_not_mixed_with_other_views_or_unscraped_owners():
    agg = tables([broker(A, **BUSY)], [share(A, "shop/orders"), share(A, "shop/misc")])
    snapshot = admin(
        # shop/orders was reported as one whole-range bundle: the admin's split is not added
        BundleOwnership("shop/orders", "0x00000000_0x80000000", "broker-a:8080"),
        BundleOwnership("shop/orders", "0x80000000_0xffffffff", "broker-a:8080"),
        # owned by a broker this exporter does not scrape, or by nobody
        BundleOwnership("shop/other", "0x00000000_0xffffffff", "broker-z:8080"),
        BundleOwnership("shop/idle", "0x00000000_0xffffffff", None),
    )
    (a,) = evaluate_load(agg, snapshot, LoadManager()).brokers
    assert [b.name for b in a.load.bundles] == [
        f"shop/misc/{FULL_BUNDLE}", f"shop/orders/{FULL_BUNDLE}"]


# --- publish --------------------------------------------------------------------------------

def test_publish_load_adds_the_catalogue_series():
    agg = tables([broker(A, **BUSY, direct_memory_percent=12.5), broker(B, **CALM),
                  broker(LITE)], [
        share(A, "shop/orders", "0x00000000_0x80000000", topics=1500, throughput=10.0),
        share(A, "shop/orders", "0x80000000_0xffffffff", topics=3, throughput=5.0,
              rate_in=40000.0),
    ])
    builder = MetricSetBuilder()
    add_load(builder, "prod-eu", evaluate_load(agg, None, OVERLOAD))
    lines = set(render(builder.build(), topic_level=True).decode().splitlines())
    a, b = 'cluster="prod-eu",broker="broker-a:8080"', 'cluster="prod-eu",broker="broker-b:8080"'
    expected = {
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="cpu"}} 0.95',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="memory"}} 0.5',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="direct_memory"}} 0.125',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="bandwidth_in"}} 0.1',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="bandwidth_out"}} 0.2',
        f"pulsar_load_broker_overloaded{{{a}}} 1",
        f'pulsar_load_broker_resource_usage_ratio{{{b},resource="cpu"}} 0.3',
        f"pulsar_load_broker_overloaded{{{b}}} 0",
        f"pulsar_load_broker_shed_ratio{{{b}}} 0",
        'pulsar_load_bundle_split_candidate{cluster="prod-eu",namespace="shop/orders",'
        'bundle="0x00000000_0x80000000",reason="topics"} 1',
        'pulsar_load_bundle_split_candidate{cluster="prod-eu",namespace="shop/orders",'
        'bundle="0x80000000_0xffffffff",reason="msg_rate"} 1',
        # A sheds 15 % of its traffic: its busiest bundle alone covers that
        f'pulsar_load_bundle_unload_candidate{{{a},namespace="shop/orders",'
        'bundle="0x00000000_0x80000000"} 1',
    }
    assert expected <= lines
    # 0.95 − 0.85 + 0.05 in doubles, as Pulsar computes it (0.14999999999999997)
    (shed_a,) = [line for line in lines if line.startswith(f"pulsar_load_broker_shed_ratio{{{a}}}")]
    assert float(shed_a.rpartition(" ")[2]) == pytest.approx(0.15)
    samples = {line for line in lines if not line.startswith("#")}
    # B reports no direct memory; the pulsar-lite broker has no series at all
    assert len(samples) == len(expected) + 4  # A's shed ratio, B's memory and bandwidths
    assert not any("lite" in line for line in samples)


# --- state between cycles -------------------------------------------------------------------

def _stats(name: str, broker_id: str) -> BundleStats:
    return BundleStats(name, broker_id, 1, 0, 0, 0.0, 0.0, 0.0, 0.0)


def test_a_bundle_that_changes_owner_is_recently_unloaded_for_the_grace_period():
    x, y = "shop/orders/0x00000000_0x80000000", "shop/orders/0x80000000_0xffffffff"
    seen = track_moves(BundleMoves(), [_stats(x, "a:1"), _stats(y, "a:1")], 0.0, 1800.0)
    assert seen.recent() == frozenset()  # first sight: no move
    moved = track_moves(seen, [_stats(x, "b:1"), _stats(y, "a:1")], 60.0, 1800.0)
    assert moved.recent() == {x} and moved.moved_at[x] == 60.0
    # still within 30 min at 60 + 1800 (Pulsar drops entries strictly older), gone after
    assert track_moves(moved, [_stats(x, "b:1")], 1860.0, 1800.0).recent() == {x}
    assert track_moves(moved, [_stats(x, "b:1")], 1861.0, 1800.0).recent() == frozenset()
    # a bundle no broker reports any more is forgotten, move and owner alike
    gone = track_moves(moved, [_stats(y, "a:1")], 120.0, 1800.0)
    assert gone.recent() == frozenset() and x not in gone.owners


def test_a_bundle_shared_by_brokers_has_no_owner_and_never_moves():
    # namespace-level series: each broker's share of a namespace is its full-range bundle
    name = f"shop/orders/{FULL_BUNDLE}"
    seen = track_moves(BundleMoves(), [_stats(name, "a:1"), _stats(name, "b:1")], 0.0, 1800.0)
    assert name not in seen.owners
    assert track_moves(seen, [_stats(name, "b:1")], 60.0, 1800.0).recent() == frozenset()


def test_evaluate_load_skips_bundles_seen_moving():
    # Cycle 1: hot on B. Cycle 2: hot moved to A (as the leader would have done), A now
    # overloaded: OverloadShedder would pick hot first, but it is in its grace period,
    # so the next one goes. Without `now` nothing is tracked.
    hot, cool = "shop/orders/0x00000000_0x80000000", "shop/orders/0x80000000_0xffffffff"
    first = tables([broker(A, **CALM), broker(B, **CALM)], [
        share(A, "shop/orders", cool.rpartition("/")[2], throughput=100.0),
        share(B, "shop/orders", hot.rpartition("/")[2], throughput=900.0),
        share(A, "shop/misc", throughput=50.0),
    ])
    state = evaluate_load(first, None, OVERLOAD, now=0.0).state
    second = tables([broker(A, **BUSY), broker(B, **CALM)], [
        share(A, "shop/orders", cool.rpartition("/")[2], throughput=100.0),
        share(A, "shop/orders", hot.rpartition("/")[2], throughput=900.0),
        share(A, "shop/misc", throughput=50.0),
    ])
    result = evaluate_load(second, None, OVERLOAD, state=state, now=60.0)
    assert result.recently_unloaded == {hot}
    assert result.broker("broker-a:8080").verdict.unload == (cool, f"shop/misc/{FULL_BUNDLE}")
    # 15 % of 1050 = 157.5: cool (100) alone is short, misc (50) makes 150, still short,
    # and nothing else is eligible: both go.
    untracked = evaluate_load(second, None, OVERLOAD, state=state)
    assert untracked.broker("broker-a:8080").verdict.unload == (hot,)


def test_default_state_is_empty():
    assert LoadState().moves.recent() == frozenset()
    assert dict(LoadState().history.usage) == {}
