"""Load verdicts against Pulsar's load-balance docs and its OverloadShedder / bundle-split
semantics (Pulsar 4.0.8: `OverloadShedder`, `LocalBrokerData.getMaxResourceUsageWithWeight`,
`NamespaceService.isSLAOrHeartbeatNamespace`). ThresholdShedder and UniformLoadShedder:
test_shedders.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import LoadManager
from exporter.engine.load.loadbalance import (
    BrokerLoad,
    BundleStats,
    Resource,
    ShedOutcome,
    ShedReason,
    SplitReason,
    broker_verdict,
    is_system_namespace,
    split_candidates,
    split_reasons,
    usage_percent,
    weighted_usage,
)

CFG = LoadManager()  # broker.conf defaults: 85 % threshold, 5 % margin, 1000/1000/30000/100 MB


def bundle(
    index: int = 0,
    *,
    broker: str = "b1",
    topics: int = 10,
    producers: int = 0,
    consumers: int = 0,
    msg_rate_in: float = 0.0,
    msg_rate_out: float = 0.0,
    throughput_in: float = 0.0,
    throughput_out: float = 0.0,
    hash_range: str | None = None,
) -> BundleStats:
    lower = index * 0x01000000
    name = f"t/ns/{hash_range or f'0x{lower:08x}_0x{lower + 0x01000000:08x}'}"
    return BundleStats(
        name=name,
        broker=broker,
        topics=topics,
        producers=producers,
        consumers=consumers,
        msg_rate_in=msg_rate_in,
        msg_rate_out=msg_rate_out,
        throughput_in=throughput_in,
        throughput_out=throughput_out,
    )


def load(cpu: float = 10.0, bundles: tuple[BundleStats, ...] = (), **usage: float) -> BrokerLoad:
    fields = {"memory_percent": 10.0, "bandwidth_in_percent": 10.0, "bandwidth_out_percent": 10.0}
    fields.update(usage)
    return BrokerLoad(broker="b1", cpu_percent=cpu, bundles=bundles, **fields)


# --- broker verdicts -------------------------------------------------------------------


def test_docs_worked_example_sheds_fifteen_percent():
    # Pulsar's load-balance docs, "Shed load automatically": 95 % CPU, 85 % threshold →
    # (95 − 85) + 5 = 15 % of the broker's traffic.
    # Ten bundles, 1000 B/s in all: 150 B/s must go; 120 alone is short, 120 + 110 covers it.
    traffic = [120, 110, 105, 100, 100, 95, 95, 95, 90, 90]
    bundles = tuple(
        bundle(i, throughput_in=t / 2, throughput_out=t / 2) for i, t in enumerate(traffic)
    )
    verdict = broker_verdict(load(cpu=95.0, bundles=bundles), CFG)
    assert verdict.outcome is ShedOutcome.UNLOAD
    assert verdict.overloaded
    assert verdict.resource is Resource.CPU
    assert verdict.max_usage_percent == 95.0
    assert verdict.shed_fraction == pytest.approx(0.15)
    assert verdict.throughput == pytest.approx(1000.0)
    assert verdict.throughput_to_shed == pytest.approx(150.0)
    assert verdict.unload == (bundles[0].name, bundles[1].name)
    assert verdict.unload_throughput == pytest.approx(230.0)


def test_below_threshold_is_not_overloaded_and_sheds_nothing():
    bundles = (bundle(0, throughput_in=500), bundle(1, throughput_in=500))
    verdict = broker_verdict(load(cpu=84.9, bundles=bundles), CFG)
    assert verdict.outcome is ShedOutcome.NOT_OVERLOADED
    assert not verdict.overloaded
    assert verdict.shed_fraction == 0.0
    assert verdict.unload == ()


def test_usage_equal_to_threshold_is_overloaded_like_pulsar():
    # OverloadShedder skips a broker only while usage < threshold.
    bundles = (bundle(0, throughput_in=600), bundle(1, throughput_in=400))
    verdict = broker_verdict(load(cpu=85.0, bundles=bundles), CFG)
    assert verdict.outcome is ShedOutcome.UNLOAD
    assert verdict.shed_fraction == pytest.approx(0.05)  # the margin alone
    assert verdict.unload == (bundles[0].name,)


@pytest.mark.parametrize(
    ("field", "resource"),
    [
        ("bandwidth_in_percent", Resource.BANDWIDTH_IN),
        ("bandwidth_out_percent", Resource.BANDWIDTH_OUT),
    ],
)
def test_each_weighed_resource_alone_can_overload(field: str, resource: Resource):
    bundles = (bundle(0, throughput_in=10), bundle(1, throughput_in=10))
    verdict = broker_verdict(load(cpu=10.0, bundles=bundles, **{field: 90.0}), CFG)
    assert verdict.overloaded
    assert verdict.reason is ShedReason.OVERLOADED
    assert verdict.resource is resource
    assert verdict.shed_fraction == pytest.approx(0.10)  # 0.90 − 0.85 + 0.05


def test_memory_is_not_weighed_and_direct_memory_weighs_zero_by_default():
    # Pulsar 4.0.8: getMaxResourceUsageWithWeight(cpu, directMemory, bwIn, bwOut) has no
    # memory term at all, and loadBalancerDirectMemoryResourceWeight defaults to 0:
    # 99 % memory and 99 % direct memory leave a broker at max(10, 0, 10, 10) = 10 %.
    bundles = (bundle(0, throughput_in=10), bundle(1, throughput_in=10))
    broker = load(cpu=10.0, bundles=bundles, memory_percent=99.0, direct_memory_percent=99.0)
    verdict = broker_verdict(broker, CFG)
    assert not verdict.overloaded
    assert (verdict.resource, verdict.max_usage_percent) == (Resource.CPU, 10.0)
    assert broker.max_usage() == (Resource.MEMORY, 99.0)  # the observation keeps it
    # With weight 1 direct memory counts: 99 × 1 ≥ 85, sheds 0.99 − 0.85 + 0.05 = 0.19.
    weighed = broker_verdict(broker, LoadManager(direct_memory_resource_weight=1.0))
    assert weighed.resource is Resource.DIRECT_MEMORY
    assert weighed.shed_fraction == pytest.approx(0.19)


def test_weights_scale_each_resource():
    # cpu 60 × 1.5 = 90, bandwidth in 80 × 0.5 = 40, out 70 × 1 = 70 → 90 % (cpu)
    cfg = LoadManager(cpu_resource_weight=1.5, bandwidth_in_resource_weight=0.5)
    broker = load(cpu=60.0, bandwidth_in_percent=80.0, bandwidth_out_percent=70.0)
    assert weighted_usage(broker, cfg) == (Resource.CPU, 90.0)
    # weight 0 everywhere: every term is 0 and the first (cpu) names the maximum
    zero = LoadManager(cpu_resource_weight=0, bandwidth_in_resource_weight=0,
                       bandwidth_out_resource_weight=0)
    assert weighted_usage(broker, zero) == (Resource.CPU, 0.0)


def test_unknown_direct_memory_is_left_out():
    broker = load(cpu=20.0, memory_percent=30.0)
    assert broker.direct_memory_percent is None
    assert [r for r, _ in broker.usages()] == [
        Resource.CPU,
        Resource.MEMORY,
        Resource.BANDWIDTH_IN,
        Resource.BANDWIDTH_OUT,
    ]
    # memory (30) is observed, not weighed: cpu 20 is the maximum
    assert broker_verdict(broker, CFG).resource is Resource.CPU
    assert weighted_usage(broker, LoadManager(direct_memory_resource_weight=5.0))[1] == 20.0


def test_tie_names_the_first_resource_in_pulsar_order():
    verdict = broker_verdict(load(cpu=90.0, memory_percent=90.0, bandwidth_out_percent=90.0), CFG)
    assert verdict.resource is Resource.CPU


def test_configured_threshold_and_margin_are_used():
    cfg = LoadManager(overload_threshold_percent=70.0, shed_margin_percent=10.0)
    bundles = (bundle(0, throughput_in=100), bundle(1, throughput_in=100))
    verdict = broker_verdict(load(cpu=75.0, bundles=bundles), cfg)
    assert verdict.shed_fraction == pytest.approx(0.15)
    assert broker_verdict(load(cpu=69.0, bundles=bundles), cfg).outcome is (
        ShedOutcome.NOT_OVERLOADED
    )


def test_sole_bundle_is_never_shed():
    only = (bundle(0, throughput_in=1e6),)
    verdict = broker_verdict(load(cpu=99.0, bundles=only), CFG)
    assert verdict.outcome is ShedOutcome.SOLE_BUNDLE
    assert verdict.overloaded
    assert verdict.unload == ()
    assert verdict.throughput_to_shed == pytest.approx(1e6 * 0.19)


def test_overloaded_without_bundles():
    verdict = broker_verdict(load(cpu=99.0), CFG)
    assert verdict.outcome is ShedOutcome.NO_BUNDLES
    assert verdict.unload == ()


def test_recently_unloaded_bundles_are_skipped_but_count_against_sole_bundle():
    big, small = bundle(0, throughput_in=900), bundle(1, throughput_in=100)
    verdict = broker_verdict(load(cpu=99.0, bundles=(big, small)), CFG, frozenset({big.name}))
    assert verdict.outcome is ShedOutcome.UNLOAD
    assert verdict.unload == (small.name,)
    # The grace period can leave nothing to pick.
    verdict = broker_verdict(
        load(cpu=99.0, bundles=(big, small)), CFG, frozenset({big.name, small.name})
    )
    assert verdict.outcome is ShedOutcome.ALL_RECENTLY_UNLOADED
    assert verdict.unload == ()


@pytest.mark.parametrize(("namespace", "system"), [
    ("pulsar/broker-1.example:8080", True),  # heartbeat, v2 name
    ("pulsar/prod/broker-1.example:8080", True),  # heartbeat, v1 name
    ("sla-monitor/prod/broker-1.example:8080", True),
    ("pulsar/system", False),  # no host:port
    ("pulsar/prod/system", False),
    ("tenant/broker:8080", False),
])
def test_system_namespaces_follow_pulsars_patterns(namespace: str, system: bool):
    assert is_system_namespace(namespace) is system


def test_heartbeat_bundles_count_as_owned_but_are_never_picked():
    # LoadData.getBundleDataForLoadShedding drops heartbeat / SLA bundles, while the
    # sole-bundle rule counts LocalBrokerData.getBundles(), heartbeat included.
    beat = BundleStats("pulsar/b1:8080/0x00000000_0xffffffff", "b1", 1, 0, 0, 0, 0, 9e9, 0)
    user = bundle(0, throughput_in=100)
    verdict = broker_verdict(load(cpu=99.0, bundles=(beat, user)), CFG)
    assert verdict.outcome is ShedOutcome.UNLOAD
    assert verdict.unload == (user.name,)
    only_beats = (beat, BundleStats("pulsar/prod/b1:8080/0x00000000_0xffffffff", "b1",
                                    1, 0, 0, 0, 0, 0, 0))
    verdict = broker_verdict(load(cpu=99.0, bundles=only_beats), CFG)
    assert verdict.outcome is ShedOutcome.NO_ELIGIBLE_BUNDLE and verdict.unload == ()


def test_idle_broker_still_unloads_one_bundle():
    # Pulsar selects at least one bundle even when no traffic has to move.
    bundles = (bundle(0), bundle(1))
    verdict = broker_verdict(load(cpu=99.0, bundles=bundles), CFG)
    assert verdict.outcome is ShedOutcome.UNLOAD
    assert len(verdict.unload) == 1


def test_huge_overload_takes_every_bundle():
    bundles = tuple(bundle(i, throughput_out=100) for i in range(4))
    verdict = broker_verdict(load(cpu=190.0, bundles=bundles), CFG)  # fraction 1.1
    assert verdict.shed_fraction == pytest.approx(1.1)
    assert set(verdict.unload) == {b.name for b in bundles}


def test_bundle_owned_elsewhere_is_rejected():
    with pytest.raises(ValueError, match="owned by"):
        load(bundles=(bundle(0, broker="b2"),))


def test_negative_or_nan_usage_is_rejected():
    with pytest.raises(ValueError, match="cpu"):
        load(cpu=-1.0)
    with pytest.raises(ValueError, match="memory"):
        load(memory_percent=float("nan"))


def test_usage_percent_follows_pulsar_resource_usage():
    assert usage_percent(50.0, 200.0) == 25.0
    assert usage_percent(50.0, 0.0) == 0.0  # unknown limit never overloads
    assert usage_percent(50.0, -1.0) == 0.0


_traffic = st.lists(st.floats(0, 1e9, allow_nan=False), min_size=0, max_size=12)


@given(
    traffic=_traffic,
    cpu=st.floats(0, 200),
    memory=st.floats(0, 200),
    recent=st.sets(st.integers(0, 11)),
)
def test_shedding_laws(traffic: list[float], cpu: float, memory: float, recent: set[int]):
    bundles = tuple(bundle(i, throughput_in=t) for i, t in enumerate(traffic))
    recently = frozenset(bundles[i].name for i in recent if i < len(bundles))
    verdict = broker_verdict(load(cpu=cpu, memory_percent=memory, bundles=bundles), CFG, recently)
    peak = max(cpu, 10.0)  # memory is not weighed; bandwidth in/out are 10
    assert verdict.max_usage_percent == peak
    assert verdict.overloaded == (peak / 100 >= CFG.overload_threshold_percent / 100)
    if not verdict.overloaded:
        assert verdict.unload == ()
        return
    assert verdict.shed_fraction == pytest.approx((peak - 85.0 + 5.0) / 100.0)
    by_name = {b.name: b.throughput for b in bundles}
    chosen = [by_name[n] for n in verdict.unload]
    assert not recently & set(verdict.unload)
    if verdict.outcome is not ShedOutcome.UNLOAD:
        assert chosen == []
        return
    assert len(bundles) >= 2 and chosen
    rest = [t for n, t in by_name.items() if n not in recently and n not in verdict.unload]
    # Highest traffic first ...
    assert chosen == sorted(chosen, reverse=True)
    assert all(c >= r for c in chosen for r in rest)
    # ... until the target is covered, and not one bundle more.
    assert sum(chosen) == pytest.approx(verdict.unload_throughput)
    assert sum(chosen[:-1]) < verdict.throughput_to_shed or len(chosen) == 1
    assert sum(chosen) >= verdict.throughput_to_shed or not rest


# --- split candidates ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"topics": 1001}, SplitReason.TOPICS),
        ({"producers": 600, "consumers": 401}, SplitReason.SESSIONS),
        ({"msg_rate_in": 20000.0, "msg_rate_out": 10000.5}, SplitReason.MSG_RATE),
        (
            {"throughput_in": 50 * 1024 * 1024, "throughput_out": 50 * 1024 * 1024 + 1},
            SplitReason.BANDWIDTH,
        ),
    ],
)
def test_each_threshold_alone_makes_a_candidate(overrides: dict, reason: SplitReason):
    b = bundle(3, **overrides)
    [candidate] = split_candidates([b], CFG)
    assert candidate.bundle == b.name
    assert candidate.broker == "b1"
    assert candidate.reasons == (reason,)


@pytest.mark.parametrize(
    "overrides",
    [
        {"topics": 1000},
        {"producers": 500, "consumers": 500},
        {"msg_rate_in": 15000.0, "msg_rate_out": 15000.0},
        {"throughput_in": 50 * 1024 * 1024, "throughput_out": 50 * 1024 * 1024},
    ],
)
def test_equal_to_a_threshold_does_not_split(overrides: dict):
    # Pulsar compares every split threshold with a strict `>`.
    assert split_candidates([bundle(0, **overrides)], CFG) == []


def test_every_exceeded_reason_is_reported_in_order():
    b = bundle(0, topics=5000, consumers=2000, msg_rate_out=1e6, throughput_in=1e12)
    assert split_reasons(b, CFG) == (
        SplitReason.TOPICS,
        SplitReason.SESSIONS,
        SplitReason.MSG_RATE,
        SplitReason.BANDWIDTH,
    )


@pytest.mark.parametrize("topics", [0, 1])
def test_bundle_with_fewer_than_two_topics_never_splits(topics: int):
    hot = bundle(0, topics=topics, consumers=5000, msg_rate_in=1e6, throughput_out=1e12)
    assert split_reasons(hot, CFG)  # over the thresholds ...
    assert split_candidates([hot], CFG) == []  # ... yet one topic cannot be halved


def test_two_topic_bundle_can_split():
    [candidate] = split_candidates([bundle(0, topics=2, msg_rate_in=40000.0)], CFG)
    assert candidate.reasons == (SplitReason.MSG_RATE,)


def test_hash_range_of_one_value_cannot_split():
    narrow = bundle(0, topics=5000, hash_range="0x00000010_0x00000011")
    assert split_candidates([narrow], CFG) == []
    wide_enough = bundle(0, topics=5000, hash_range="0x00000010_0x00000012")
    assert len(split_candidates([wide_enough], CFG)) == 1


def test_sessions_limit_zero_disables_the_sessions_check():
    cfg = LoadManager(bundle_max_sessions=0)
    assert split_candidates([bundle(0, producers=10**6)], cfg) == []
    assert split_reasons(bundle(0, producers=1), LoadManager(bundle_max_sessions=0)) == ()


def test_candidates_are_sorted_and_quiet_bundles_left_out():
    quiet = bundle(0)
    hot_b = bundle(2, topics=2000)
    hot_a = bundle(1, msg_rate_in=1e5)
    names = [c.bundle for c in split_candidates([hot_b, quiet, hot_a], CFG)]
    assert names == sorted([hot_a.name, hot_b.name])


def test_bundle_accessors():
    b = BundleStats(
        name="pub/default/ns/0x40000000_0x80000000",
        broker="b1",
        topics=3,
        producers=2,
        consumers=5,
        msg_rate_in=1.5,
        msg_rate_out=2.5,
        throughput_in=10.0,
        throughput_out=30.0,
    )
    assert b.namespace == "pub/default/ns"
    assert b.hash_range == (0x40000000, 0x80000000)
    assert (b.sessions, b.msg_rate, b.throughput) == (7, 4.0, 40.0)


@pytest.mark.parametrize(
    "name",
    ["0x00000000_0xffffffff", "t/ns/full", "t/ns/0x10_0x10", "t/ns/0x20_0x10", "t/ns/"],
)
def test_malformed_bundle_names_are_rejected(name: str):
    with pytest.raises(ValueError):
        BundleStats(name, "b1", 1, 0, 0, 0.0, 0.0, 0.0, 0.0)


def test_negative_counts_are_rejected():
    with pytest.raises(ValueError, match="topics"):
        bundle(0, topics=-1)
