"""Load verdicts from the pipeline's tables (built by hand here, in the documented schemas):
broker identity, shedding and its fraction, brokers without usage, bundle shares summed
for split verdicts, admin-owned empty bundles, and the series publish_load adds.

Expected numbers are Pulsar's OverloadShedder rule written out ((usage - threshold) + margin)
with the inputs' literals, never values read back from the code under test.
"""

import dataclasses
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.config.model import LoadManager
from exporter.engine.loadbalance import Resource, ShedOutcome, SplitReason
from exporter.engine.loadview import (
    Judged,
    Unjudged,
    UsageGap,
    broker_id,
    broker_ids,
    evaluate_load,
)
from exporter.exposition.build_load import add_load
from exporter.exposition.metricset import MetricSetBuilder, render
from exporter.pipeline.model import BROKERS, BUNDLES, FULL_BUNDLE, Aggregates
from exporter.sources.model import AdminSnapshot, BundleOwnership

A = "http://broker-a:8080/metrics"
B = "http://broker-b:8080/metrics"
LITE = "http://lite:18080/metrics"
BUSY = {"cpu_percent": 95.0, "memory_percent": 50.0, "bandwidth_in_percent": 10.0,
        "bandwidth_out_percent": 20.0}
CALM = {"cpu_percent": 30.0, "memory_percent": 40.0, "bandwidth_in_percent": 10.0,
        "bandwidth_out_percent": 20.0}


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


@settings(max_examples=200, deadline=None)
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
    agg = tables([broker(A, **BUSY)], [
        share(A, "shop/orders", "0x00000000_0x80000000", throughput=900.0),
        share(A, "shop/orders", "0x80000000_0xffffffff", throughput=100.0),
    ])
    result = evaluate_load(agg, None, LoadManager())
    a = result.broker("broker-a:8080")
    assert isinstance(a, Judged) and a.source == A
    assert a.verdict.resource is Resource.CPU
    assert a.verdict.max_usage_percent == 95.0
    assert a.verdict.shed_fraction == pytest.approx((95.0 - 85.0) / 100 + 5.0 / 100)
    assert a.verdict.throughput_to_shed == pytest.approx(1000.0 * 0.15)
    assert a.verdict.outcome is ShedOutcome.UNLOAD
    assert a.verdict.unload == ("shop/orders/0x00000000_0x80000000",)  # hottest first
    # another threshold and margin, another resource
    cfg = LoadManager(overload_threshold_percent=80.0, shed_margin_percent=10.0)
    agg = tables([broker(A, **{**CALM, "memory_percent": 92.5})], [])
    verdict = evaluate_load(agg, None, cfg).brokers[0].verdict
    assert verdict.resource is Resource.MEMORY
    assert verdict.shed_fraction == pytest.approx((92.5 - 80.0 + 10.0) / 100)
    assert verdict.outcome is ShedOutcome.NO_BUNDLES


def test_a_broker_under_the_threshold_sheds_nothing():
    agg = tables([broker(A, **{**BUSY, "cpu_percent": 84.9})], [share(A, "shop/orders")])
    verdict = evaluate_load(agg, None, LoadManager()).brokers[0].verdict
    assert verdict.outcome is ShedOutcome.NOT_OVERLOADED
    assert not verdict.overloaded and verdict.shed_fraction == 0.0


def test_direct_memory_counts_when_reported():
    agg = tables([broker(A, **CALM, direct_memory_percent=97.0)], [])
    verdict = evaluate_load(agg, None, LoadManager()).brokers[0].verdict
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
    agg = tables([broker(A, **BUSY)], [share(A, "shop/orders", ranges[0], throughput=10.0)])
    alone = evaluate_load(agg, None, LoadManager()).brokers[0].verdict
    assert alone.outcome is ShedOutcome.SOLE_BUNDLE
    snapshot = admin(BundleOwnership("shop/orders", ranges[0], "broker-a:8080"),
                     BundleOwnership("shop/orders", ranges[1], "BROKER-A:8080"))
    result = evaluate_load(agg, snapshot, LoadManager())
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
    add_load(builder, "prod-eu", evaluate_load(agg, None, LoadManager()))
    lines = set(render(builder.build(), topic_level=True).decode().splitlines())
    a, b = 'cluster="prod-eu",broker="broker-a:8080"', 'cluster="prod-eu",broker="broker-b:8080"'
    expected = {
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="cpu"}} 0.95',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="memory"}} 0.5',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="direct_memory"}} 0.125',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="bandwidth_in"}} 0.1',
        f'pulsar_load_broker_resource_usage_ratio{{{a},resource="bandwidth_out"}} 0.2',
        f"pulsar_load_broker_overloaded{{{a}}} 1",
        f"pulsar_load_broker_shed_ratio{{{a}}} 0.15",
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
    samples = {line for line in lines if not line.startswith("#")}
    # B reports no direct memory; the pulsar-lite broker has no series at all
    assert len(samples) == len(expected) + 3  # B's memory and bandwidth in/out ratios
    assert not any("lite" in line for line in samples)
