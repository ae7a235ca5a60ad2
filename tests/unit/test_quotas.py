"""Which backlog quota applies (engine/backlog/quotas.py): Pulsar's per-type resolution, the YAML's
whole objects, the YAML over Pulsar with `source: both`, and what the check does with a
policy per quota type."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import BacklogQuota, BacklogQuotas, PolicySource, RetentionPolicy
from exporter.engine.backlog.check import (
    Action,
    LimitStatus,
    SubscriptionBacklog,
    TopicBacklogState,
    check,
)
from exporter.engine.backlog.quotas import QuotaSource, Resolver, configured, resolve
from exporter.sources.results import PulsarQuotas, QuotaType, TypedQuota

NS = "acme/orders"
TOPIC = f"persistent://{NS}/t1"
SIZE, TIME = QuotaType.SIZE, QuotaType.TIME
HOLD = RetentionPolicy.PRODUCER_REQUEST_HOLD
EXCEPTION = RetentionPolicy.PRODUCER_EXCEPTION
EVICT = RetentionPolicy.CONSUMER_BACKLOG_EVICTION
PULSAR, CONFIG, BOTH = (PolicySource.PULSAR, PolicySource.CONFIG,
                        PolicySource.BOTH)


def pulsar(default=None, namespaces=None, topics=None) -> PulsarQuotas:
    return PulsarQuotas(default or {}, namespaces or {}, topics or {})


def limits(topic: str, quotas: BacklogQuotas, p: PulsarQuotas | None):
    r = resolve(topic, topic.split("://")[1].rsplit("/", 1)[0], quotas, p)
    return (r.size.value, r.size.origin), (r.time.value, r.time.origin)


# --- Pulsar: each type on its own ------------------------------------------------------------


def test_pulsar_resolves_each_type_topic_then_namespace_then_broker_default() -> None:
    p = pulsar(default={SIZE: TypedQuota(10 * 2**30), TIME: TypedQuota(-1)},
               namespaces={NS: {TIME: TypedQuota(3600, EVICT)}},
               topics={TOPIC: {SIZE: TypedQuota(4096, EXCEPTION)}})
    quotas = BacklogQuotas(source=PULSAR)
    r = resolve(TOPIC, NS, quotas, p)
    assert (r.size.value, r.size.policy, r.size.origin) == (4096, EXCEPTION, "pulsar:topic")
    assert (r.time.value, r.time.policy, r.time.origin) == (3600, EVICT, "pulsar:namespace")
    assert r.source is QuotaSource.TOPIC  # the most specific of the two
    # another topic of the namespace: size falls through to the broker default
    assert limits(f"persistent://{NS}/other", quotas, p) == (
        (10 * 2**30, "pulsar:default"), (3600, "pulsar:namespace"))


def test_an_entry_decides_its_type_even_when_unlimited() -> None:
    # A topic entry of -1 is "no limit on this topic", not "ask the namespace" (Pulsar's
    # PolicyHierarchyValue takes the most specific entry that is set, whatever its value).
    p = pulsar(namespaces={NS: {SIZE: TypedQuota(4096), TIME: TypedQuota(60)}},
               topics={TOPIC: {SIZE: TypedQuota(-1), TIME: TypedQuota(0)}})
    assert limits(TOPIC, BacklogQuotas(source=PULSAR), p) == (
        (None, "pulsar:topic"), (None, "pulsar:topic"))


def test_partitions_have_their_partitioned_topics_policies_unless_their_own() -> None:
    p = pulsar(topics={TOPIC: {SIZE: TypedQuota(100)},
                       f"{TOPIC}-partition-1": {SIZE: TypedQuota(200)}})
    q = BacklogQuotas(source=PULSAR)
    assert limits(f"{TOPIC}-partition-0", q, p)[0] == (100, "pulsar:topic")
    assert limits(f"{TOPIC}-partition-1", q, p)[0] == (200, "pulsar:topic")


def test_without_any_pulsar_policy_nothing_is_limited() -> None:
    assert limits(TOPIC, BacklogQuotas(source=PULSAR), None) == (
        (None, "pulsar:default"), (None, "pulsar:default"))


# --- config: unchanged -----------------------------------------------------------------------


def test_config_ignores_pulsar_and_keeps_whole_objects() -> None:
    q = BacklogQuotas(default=BacklogQuota(limit_size=10, limit_time=99),
                      namespaces={NS: BacklogQuota(limit_time=30, policy=EVICT)})
    p = pulsar(topics={TOPIC: {SIZE: TypedQuota(5)}})
    r = resolve(TOPIC, NS, q, p)
    assert (r.size.value, r.time.value) == (None, 30)  # the default's size does not leak in
    assert {r.size.origin, r.time.origin} == {"config:namespace"}
    assert r.quota == q.namespaces[NS]
    assert configured(TOPIC, NS, q) == (q.namespaces[NS], QuotaSource.NAMESPACE)


# --- both: the YAML over Pulsar, per object --------------------------------------------------


def test_both_a_yaml_entry_replaces_pulsars_whole_quota() -> None:
    q = BacklogQuotas(source=BOTH, namespaces={NS: BacklogQuota(limit_time=30, policy=EVICT)})
    p = pulsar(default={SIZE: TypedQuota(1000)}, topics={TOPIC: {SIZE: TypedQuota(5)}})
    assert limits(TOPIC, q, p) == ((None, "config:namespace"), (30, "config:namespace"))


def test_both_topics_the_yaml_does_not_name_get_pulsars_with_the_yaml_default() -> None:
    p = pulsar(default={SIZE: TypedQuota(1000), TIME: TypedQuota(7200)},
               namespaces={NS: {TIME: TypedQuota(60, EVICT)}})
    no_default = BacklogQuotas(source=BOTH)
    assert limits(TOPIC, no_default, p) == ((1000, "pulsar:default"), (60, "pulsar:namespace"))
    # A YAML default with a limit stands in for the broker's default, whole.
    yaml_default = BacklogQuotas(source=BOTH, default=BacklogQuota(limit_size=500))
    assert limits(TOPIC, yaml_default, p) == ((500, "config:default"), (60, "pulsar:namespace"))
    assert limits("persistent://x/y/z", yaml_default, p) == (
        (500, "config:default"), (None, "config:default"))


@given(
    st.sampled_from([TOPIC, f"{TOPIC}-partition-0", f"persistent://{NS}/t2",
                     "persistent://x/y/z"]),
    st.one_of(st.none(), st.integers(0, 10**6)),
    st.one_of(st.none(), st.integers(1, 10**6)),
    st.booleans(), st.booleans(),
    st.sampled_from(list(RetentionPolicy)),
)
def test_both_without_pulsar_policies_decides_exactly_as_config(
        topic, size, time, ns_entry, topic_entry, policy) -> None:
    quota = BacklogQuota(limit_size=size, limit_time=time, policy=policy)
    entries = dict(default=BacklogQuota(limit_size=7, policy=EVICT),
                   namespaces={NS: quota} if ns_entry else {},
                   topics={TOPIC: BacklogQuota(limit_time=5)} if topic_entry else {})
    state = TopicBacklogState(topic, topic.split("://")[1].rsplit("/", 1)[0],
                              (SubscriptionBacklog("s", 10, 10_000, 0.0),))
    as_config = check(state, BacklogQuotas(**entries), 100.0)
    as_both = check(state, BacklogQuotas(**entries, source=BOTH), 100.0, pulsar())
    assert (as_both.quota, as_both.quota_source, as_both.plan, as_both.action) == (
        as_config.quota, as_config.quota_source, as_config.plan, as_config.action)


# --- a policy per type in the check ----------------------------------------------------------


def test_each_type_acts_on_its_own_policy() -> None:
    """Size held (producer_request_hold), time evicted: only the time cut is planned, and
    the action is the size policy's, the type Pulsar checks first."""
    p = pulsar(namespaces={NS: {SIZE: TypedQuota(1000, HOLD), TIME: TypedQuota(60, EVICT)}})
    state = TopicBacklogState(TOPIC, NS, (SubscriptionBacklog("s", 10, 5000, 0.0),))
    d = check(state, BacklogQuotas(source=PULSAR), 100.0, p)
    assert (d.size, d.time) == (LimitStatus.EXCEEDED, LimitStatus.EXCEEDED)
    assert d.action is Action.PRODUCER_REQUEST_HOLD
    assert d.plan.size == () and [t.subscription for t in d.plan.time] == ["s"]
    # Within the size limit, the time policy is the one acting.
    small = TopicBacklogState(TOPIC, NS, (SubscriptionBacklog("s", 10, 500, 0.0),))
    d = check(small, BacklogQuotas(source=PULSAR), 100.0, p)
    assert d.action is Action.CONSUMER_BACKLOG_EVICTION and d.quota.policy is EVICT
    assert (d.limits.size.origin, d.limits.time.origin) == ("pulsar:namespace",) * 2


# --- once a cycle ----------------------------------------------------------------------------


@given(st.sampled_from(list(PolicySource)), st.booleans(), st.booleans(), st.booleans())
def test_the_cycles_resolver_answers_as_resolve_for_every_topic(
        mode, yaml_topic, pulsar_topic, pulsar_given) -> None:
    """Topics no topic-level entry names share their namespace's resolution; a topic or
    partition an entry names (the YAML's or Pulsar's, for it or its parent) gets its own."""
    quotas = BacklogQuotas(default=BacklogQuota(limit_size=7),
                           namespaces={NS: BacklogQuota(limit_time=60)},
                           topics={TOPIC: BacklogQuota(limit_time=5)} if yaml_topic else {},
                           source=mode)
    p = pulsar(default={SIZE: TypedQuota(100)}, namespaces={NS: {TIME: TypedQuota(30)}},
               topics={f"persistent://{NS}/t2": {SIZE: TypedQuota(-1)}} if pulsar_topic
               else {}) if pulsar_given else None
    resolver = Resolver(quotas, p)
    topics = [f"persistent://{NS}/{name}" for name in ("other", "t1", "t1-partition-3", "t2",
                                                        "t2-partition-0", "t3")]
    for topic in [*topics, *reversed(topics), "persistent://x/y/z"]:
        namespace = topic.split("://")[1].rsplit("/", 1)[0]
        assert resolver(topic, namespace) == resolve(topic, namespace, quotas, p), topic
