"""Backlog-quota engine: precedence, the topic backlog, strict limits, eviction plans."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import BacklogQuota, BacklogQuotas, RetentionPolicy
from exporter.engine.backlog.check import (
    EVICTION_TARGET,
    Action,
    HolderBasis,
    LimitStatus,
    QuotaSource,
    QuotaType,
    SizeBasis,
    SubscriptionBacklog,
    TimeSource,
    TopicBacklogState,
    check,
    effective_quota,
    skip_count,
)

TOPIC = "persistent://acme/orders/t1"
NS = "acme/orders"
EVICT = RetentionPolicy.CONSUMER_BACKLOG_EVICTION


def quotas(**default: object) -> BacklogQuotas:
    return BacklogQuotas(default=BacklogQuota(**default))  # type: ignore[arg-type]


def state(*subs: SubscriptionBacklog, avg: float | None = None) -> TopicBacklogState:
    return TopicBacklogState(TOPIC, NS, tuple(subs), avg)


def sub(
    name: str, messages: int, nbytes: int | None = None, oldest: float | None = None
) -> SubscriptionBacklog:
    return SubscriptionBacklog(name, messages, nbytes, oldest)


# --- precedence ---------------------------------------------------------------------------


def test_topic_beats_namespace_beats_default() -> None:
    default = BacklogQuota(limit_size=10)
    ns = BacklogQuota(limit_size=20)
    topic = BacklogQuota(limit_size=30)
    q = BacklogQuotas(default=default, namespaces={NS: ns}, topics={TOPIC: topic})
    assert effective_quota(TOPIC, NS, q) == (topic, QuotaSource.TOPIC)
    assert effective_quota("persistent://acme/orders/other", NS, q) == (ns, QuotaSource.NAMESPACE)
    assert effective_quota("persistent://x/y/z", "x/y", q) == (default, QuotaSource.DEFAULT)


def test_partitions_inherit_their_partitioned_topics_quota() -> None:
    base, own = BacklogQuota(limit_size=30), BacklogQuota(limit_size=40)
    q = BacklogQuotas(namespaces={NS: BacklogQuota(limit_size=20)},
                      topics={TOPIC: base, f"{TOPIC}-partition-1": own})
    assert effective_quota(f"{TOPIC}-partition-0", NS, q) == (base, QuotaSource.TOPIC)
    assert effective_quota(f"{TOPIC}-partition-1", NS, q) == (own, QuotaSource.TOPIC)
    # only a partition suffix is stripped: another topic sharing the prefix is not a partition
    assert effective_quota(f"{TOPIC}-partition-x", NS, q)[1] is QuotaSource.NAMESPACE


def test_the_most_specific_object_replaces_the_whole_quota() -> None:
    # The namespace names only a time limit: the default's size limit does not leak in.
    q = BacklogQuotas(
        default=BacklogQuota(limit_size=100, policy=EVICT),
        namespaces={NS: BacklogQuota(limit_time=600)},
    )
    decision = check(state(sub("s", 10, 10_000, oldest=0.0)), q, now=10.0)
    assert decision.quota_source is QuotaSource.NAMESPACE
    assert decision.size is LimitStatus.NO_LIMIT
    assert decision.time is LimitStatus.WITHIN
    assert decision.action is Action.NONE


names = st.sampled_from(["a", "b", "c"])
quota_objs = st.builds(
    BacklogQuota,
    limit_size=st.none() | st.integers(0, 10**6),
    limit_time=st.none() | st.floats(1, 10**5),
    policy=st.sampled_from(list(RetentionPolicy)),
)


@given(
    default=quota_objs,
    ns_map=st.dictionaries(names.map(lambda n: f"t/{n}"), quota_objs, max_size=3),
    topic_map=st.dictionaries(names.map(lambda n: f"persistent://t/a/{n}"), quota_objs, max_size=3),
    ns=names,
    leaf=names,
)
def test_precedence_law(default, ns_map, topic_map, ns, leaf) -> None:
    namespace = f"t/{ns}"
    topic = f"persistent://t/a/{leaf}"
    q = BacklogQuotas(default=default, namespaces=ns_map, topics=topic_map)
    quota, source = effective_quota(topic, namespace, q)
    if topic in topic_map:
        assert (quota, source) == (topic_map[topic], QuotaSource.TOPIC)
    elif namespace in ns_map:
        assert (quota, source) == (ns_map[namespace], QuotaSource.NAMESPACE)
    else:
        assert (quota, source) == (default, QuotaSource.DEFAULT)
    # Entries for other topics and namespaces never matter.
    only_mine = BacklogQuotas(
        default=default,
        namespaces={k: v for k, v in ns_map.items() if k == namespace},
        topics={k: v for k, v in topic_map.items() if k == topic},
    )
    assert effective_quota(topic, namespace, only_mine) == (quota, source)


# --- the topic backlog ----------------------------------------------------------------------


def test_topic_backlog_is_the_subscription_with_the_oldest_message() -> None:
    # "old" has the smaller backlog but the older message (individual acks leave holes).
    decision = check(
        state(sub("big", 500, 50_000, oldest=900.0), sub("old", 10, 1_000, oldest=100.0)),
        quotas(limit_size=10**9),
        now=1_000.0,
    )
    assert decision.holder == "old"
    assert decision.holder_basis is HolderBasis.OLDEST_MESSAGE
    assert decision.backlog_messages == 10
    assert decision.backlog_bytes == 1_000
    assert decision.backlog_age_seconds == 900.0
    assert decision.time_source is TimeSource.ESTIMATED


def test_without_publish_times_the_largest_backlog_stands_in_and_says_so() -> None:
    decision = check(
        state(sub("small", 10, 1_000), sub("big", 500, 50_000)),
        quotas(limit_time=60.0),
        now=1_000.0,
    )
    assert decision.holder == "big"
    assert decision.holder_basis is HolderBasis.LARGEST_BACKLOG
    assert decision.backlog_age_seconds is None
    assert decision.time is LimitStatus.UNKNOWN
    assert decision.action is Action.NONE


@pytest.mark.parametrize("source", list(TimeSource))
def test_the_holders_time_source_is_reported(source) -> None:
    holder = SubscriptionBacklog("s", 5, 500, 10.0, source)
    other = SubscriptionBacklog("r", 50, 5_000, 20.0, TimeSource.ADMIN)
    decision = check(state(other, holder), quotas(), now=70.0)
    assert decision.time_source is source
    assert decision.backlog_age_seconds == 60.0


def test_no_backlog_is_age_zero_and_within_every_limit() -> None:
    decision = check(
        state(sub("idle", 0, 0)), quotas(limit_size=0, limit_time=1.0, policy=EVICT), now=5.0
    )
    assert decision.holder is None
    assert decision.holder_basis is HolderBasis.NO_BACKLOG
    assert decision.backlog_age_seconds == 0.0
    assert (decision.size, decision.time) == (LimitStatus.WITHIN, LimitStatus.WITHIN)
    assert decision.action is Action.NONE
    assert decision.plan.is_empty


def test_bytes_come_from_the_average_message_size_when_not_reported() -> None:
    decision = check(state(sub("s", 30), avg=100.0), quotas(limit_size=2_000), now=0.0)
    assert decision.size_basis is SizeBasis.FROM_AVERAGE
    assert decision.backlog_bytes == 3_000
    assert decision.size is LimitStatus.EXCEEDED


def test_a_size_a_float_rounds_onto_the_limit_is_still_over_it() -> None:
    # 0.1 is stored as 0.1000000000000000055…: ten such messages are just over 1 byte,
    # while their float product rounds to 1.0, the limit.
    assert 10 * 0.1 == 1.0 and 10 * Fraction(0.1) > 1
    decision = check(state(sub("s", 10), avg=0.1), quotas(limit_size=1), now=0.0)
    assert decision.backlog_bytes == 1.0
    assert decision.size is LimitStatus.EXCEEDED


def test_size_is_unknown_without_bytes_or_average() -> None:
    decision = check(state(sub("s", 30)), quotas(limit_size=1, policy=EVICT), now=0.0)
    assert decision.size_basis is SizeBasis.UNKNOWN
    assert decision.backlog_bytes is None
    assert decision.size is LimitStatus.UNKNOWN
    assert decision.plan.is_empty


# --- limits ---------------------------------------------------------------------------------


def test_size_exceeded_means_strictly_greater() -> None:
    at_limit = check(state(sub("s", 10, 1_000)), quotas(limit_size=1_000), now=0.0)
    over = check(state(sub("s", 10, 1_001)), quotas(limit_size=1_000), now=0.0)
    assert at_limit.size is LimitStatus.WITHIN
    assert over.size is LimitStatus.EXCEEDED
    assert over.exceeded == {QuotaType.SIZE}


def test_time_exceeded_means_strictly_older() -> None:
    at_limit = check(state(sub("s", 1, 1, oldest=40.0)), quotas(limit_time=60.0), now=100.0)
    over = check(state(sub("s", 1, 1, oldest=39.5)), quotas(limit_time=60.0), now=100.0)
    assert at_limit.time is LimitStatus.WITHIN
    assert over.time is LimitStatus.EXCEEDED
    assert over.exceeded == {QuotaType.TIME}


@pytest.mark.parametrize(
    ("limit_size", "limit_time"), [(None, None), (-1, 0.0), (-1, -1.0)], ids=str
)
def test_disabled_limits(limit_size, limit_time) -> None:
    decision = check(
        state(sub("s", 10**6, 10**12, oldest=0.0)),
        quotas(limit_size=limit_size, limit_time=limit_time, policy=EVICT),
        now=10**6,
    )
    assert (decision.size, decision.time) == (LimitStatus.NO_LIMIT, LimitStatus.NO_LIMIT)
    assert decision.action is Action.NONE
    assert decision.plan.is_empty


@pytest.mark.parametrize(
    "policy", [RetentionPolicy.PRODUCER_REQUEST_HOLD, RetentionPolicy.PRODUCER_EXCEPTION]
)
def test_producer_policies_are_exported_without_a_plan(policy) -> None:
    decision = check(state(sub("s", 10, 5_000)), quotas(limit_size=1_000, policy=policy), now=0.0)
    assert decision.action.value == policy.value
    assert decision.plan.is_empty


# --- eviction plans -------------------------------------------------------------------------


def test_size_eviction_goes_down_to_ninety_percent_of_the_limit_as_pulsar() -> None:
    decision = check(state(sub("s", 20, 2_000)), quotas(limit_size=1_000, policy=EVICT), now=0.0)
    (eviction,) = decision.plan.size
    # 2000 bytes of 100-byte messages over a 1000-byte limit: down to 900 bytes, 11 messages
    # (BacklogQuotaManager.dropBacklogForSizeLimit's reductionFactor 0.9).
    assert (eviction.subscription, eviction.skip_messages) == ("s", 11)
    assert eviction.remaining_bytes == 900
    assert decision.plan.quota_types == {QuotaType.SIZE}


def test_size_eviction_truncates_as_the_broker_does() -> None:
    # 2050 bytes / 20 messages = 102.5 B each; the broker skips (int)((2050 − 900) / 2050 × 20)
    # = (int) 11.2 = 11, leaving 922.5 B: over the 900 B target by less than one message.
    decision = check(state(sub("s", 20, 2_050)), quotas(limit_size=1_000, policy=EVICT), now=0.0)
    (eviction,) = decision.plan.size
    assert eviction.skip_messages == 11
    assert eviction.remaining_bytes == pytest.approx(922.5)


def test_size_eviction_stops_where_the_broker_would_skip_nothing() -> None:
    # 1 large message over the limit: (int)((1500 − 900) / 1500 × 1) = 0, so the broker's loop
    # breaks ("no messages to skip") and so does the plan: no eviction, not a 1-message skip.
    decision = check(state(sub("s", 1, 1_500)), quotas(limit_size=1_000, policy=EVICT), now=0.0)
    assert decision.plan.size == ()


@pytest.mark.parametrize(("backlog", "target", "entries", "expected"), [
    (2_000.0, 900.0, 20, 11),
    (2_050.0, 900.0, 20, 11),
    (1_500.0, 900.0, 1, 0),
    (0.0, 900.0, 5, 0),
    (1e30, 0.0, 10**12, 2**31 - 1),  # Java's (int) saturates
])
def test_skip_count_is_the_brokers_truncating_int(backlog: float, target: float, entries: int,
                                                   expected: int) -> None:
    assert skip_count(backlog, target, entries) == expected


def test_size_eviction_walks_oldest_first_and_stops_at_the_first_within() -> None:
    subs = (
        sub("s1", 30, 3_000, oldest=100.0),
        sub("s2", 15, 1_500, oldest=110.0),
        sub("s3", 5, 500, oldest=120.0),
        sub("s4", 40, 4_000, oldest=130.0),  # over, but behind a subscription within the limit
    )
    decision = check(state(*subs), quotas(limit_size=1_000, policy=EVICT), now=200.0)
    assert [(e.subscription, e.skip_messages) for e in decision.plan.size] == [
        ("s1", 21),
        ("s2", 6),
    ]


def test_time_eviction_cuts_every_old_subscription_at_ninety_percent_of_the_limit() -> None:
    subs = (
        sub("old", 10, 100, oldest=100.0),
        sub("older", 20, 200, oldest=50.0),
        sub("fresh", 5, 50, oldest=950.0),
        sub("unknown", 7, 70),
        sub("caught-up", 0, 0),
    )
    decision = check(state(*subs), quotas(limit_time=600.0, policy=EVICT), now=1_000.0)
    assert decision.time is LimitStatus.EXCEEDED
    assert decision.holder == "older"
    planned = {(e.subscription, e.cutoff, e.oldest_publish_time) for e in decision.plan.time}
    assert planned == {  # now − 0.9 × 600 (dropBacklogForTimeLimit, precise)
        ("older", 460.0, 50.0),
        ("old", 460.0, 100.0),
        ("unknown", 460.0, None),
    }
    assert decision.plan.size == ()


def test_both_limits_are_planned_in_one_check() -> None:
    decision = check(
        state(sub("s", 20, 2_000, oldest=0.0)),
        quotas(limit_size=1_000, limit_time=10.0, policy=EVICT),
        now=100.0,
    )
    assert decision.exceeded == {QuotaType.SIZE, QuotaType.TIME}
    assert decision.plan.quota_types == {QuotaType.SIZE, QuotaType.TIME}


# --- laws -----------------------------------------------------------------------------------


@st.composite
def subscriptions(draw) -> SubscriptionBacklog:
    messages = draw(st.integers(0, 10**6))
    per_message = draw(st.integers(1, 10**4))
    nbytes = draw(st.none() | st.just(messages * per_message) | st.integers(messages, 10**10))
    oldest = draw(st.none() | st.floats(0, 2 * 10**6))
    return SubscriptionBacklog(draw(st.text(min_size=1, max_size=4)), messages, nbytes, oldest)


topic_states = st.builds(
    TopicBacklogState,
    topic=st.just(TOPIC),
    namespace=st.just(NS),
    subscriptions=st.lists(subscriptions(), max_size=5, unique_by=lambda s: s.name).map(tuple),
    average_message_size=st.none() | st.floats(0, 10**4),
)
eviction_quotas = st.builds(
    BacklogQuota,
    limit_size=st.none() | st.integers(0, 10**9),
    limit_time=st.none() | st.floats(1, 10**6),
    policy=st.sampled_from(list(RetentionPolicy)),
)


def exact_bytes(s: SubscriptionBacklog, avg: float | None) -> tuple[Fraction, Fraction]:
    """The subscription's backlog bytes and bytes per message, recomputed from the input."""
    if s.backlog_bytes is not None:
        return Fraction(s.backlog_bytes), Fraction(s.backlog_bytes, s.backlog_messages)
    assert avg is not None
    return s.backlog_messages * Fraction(avg), Fraction(avg)


@given(topic=topic_states, quota=eviction_quotas)
def test_the_size_check_compares_the_exact_bytes(topic, quota) -> None:
    """The holder's bytes are published as the float nearest the exact product, and the
    limit is compared with the exact product itself."""
    decision = check(topic, BacklogQuotas(default=quota), 0.0)
    holder = next((s for s in topic.subscriptions if s.name == decision.holder), None)
    if holder is None or decision.size_basis is SizeBasis.UNKNOWN:
        assert decision.size in (LimitStatus.NO_LIMIT, LimitStatus.UNKNOWN, LimitStatus.WITHIN)
        return
    backlog, _ = exact_bytes(holder, topic.average_message_size)
    assert decision.backlog_bytes == float(backlog)
    if quota.limit_size is not None:
        assert (decision.size is LimitStatus.EXCEEDED) == (backlog > quota.limit_size)


@given(topic=topic_states, quota=eviction_quotas, now=st.floats(0, 3 * 10**6))
def test_a_plan_takes_a_subscription_to_ninety_percent_as_the_broker(topic, quota, now) -> None:
    decision = check(topic, BacklogQuotas(default=quota), now)
    by_name = {s.name: s for s in topic.subscriptions}
    for eviction in decision.plan.size:
        s = by_name[eviction.subscription]
        backlog, per_message = exact_bytes(s, topic.average_message_size)
        remaining = backlog - eviction.skip_messages * per_message
        target = quota.limit_size * EVICTION_TARGET
        assert backlog > target
        assert eviction.skip_messages >= 1
        # The broker's truncating count: never below the target (beyond a double's rounding),
        # and within one message above it (one more skip would have reached it).
        slack = per_message / 10**6
        assert target - slack <= remaining < target + per_message + slack
    for eviction in decision.plan.time:
        assert eviction.cutoff == now - quota.limit_time * EVICTION_TARGET
        s = by_name[eviction.subscription]
        assert s.backlog_messages > 0
        assert s.oldest_publish_time is None or s.oldest_publish_time < eviction.cutoff
    # Every known-time subscription older than the cut-off is in the time plan.
    if decision.plan.time:
        planned = {e.subscription for e in decision.plan.time}
        cutoff = now - quota.limit_time * EVICTION_TARGET
        for s in topic.subscriptions:
            if s.backlog_messages > 0 and s.oldest_publish_time is not None:
                assert (s.name in planned) == (s.oldest_publish_time < cutoff)


@given(topic=topic_states, quota=eviction_quotas, now=st.floats(0, 3 * 10**6))
def test_no_plan_without_an_exceeded_eviction_quota(topic, quota, now) -> None:
    decision = check(topic, BacklogQuotas(default=quota), now)
    assert decision.plan.quota_types <= decision.exceeded
    if not decision.exceeded:
        assert decision.action is Action.NONE
    else:
        assert decision.action.value == quota.policy.value
    if quota.policy is not EVICT:
        assert decision.plan.is_empty
    elif decision.exceeded:
        # An exceeded quota under the eviction policy always gets a plan for that quota.
        assert decision.plan.quota_types == decision.exceeded
    if decision.size is LimitStatus.EXCEEDED:
        assert decision.backlog_bytes is not None
        assert decision.backlog_bytes > quota.limit_size
    if decision.time is LimitStatus.EXCEEDED:
        assert decision.backlog_age_seconds is not None
        assert decision.backlog_age_seconds > quota.limit_time - 1e-6
