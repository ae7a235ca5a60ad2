"""Who acts on a limit (`publish.enforcer`), as the `enforced_by` label says."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import ENFORCERS
from exporter.config.settings import RetentionPolicy
from exporter.exposition.build_topics import as_published, enforcer, published_topics

HOLD, EXC, EVICT = (RetentionPolicy.PRODUCER_REQUEST_HOLD, RetentionPolicy.PRODUCER_EXCEPTION,
                    RetentionPolicy.CONSUMER_BACKLOG_EVICTION)


@pytest.mark.parametrize(("origin", "policy", "enforce", "expected"), [
    ("pulsar:namespace", HOLD, False, "broker"),  # Pulsar's own quota: the broker acts
    ("pulsar:default", EVICT, True, "broker"),  # it evicts itself, whatever we do
    ("config:topic", EVICT, True, "exporter"),  # only our eviction acts
    ("config:topic", EVICT, False, "none"),  # dry run
    ("config:namespace", HOLD, True, "none"),  # we cannot hold producers
    ("config:default", EXC, True, "none"),
])
def test_who_enforces(origin: str, policy: RetentionPolicy, enforce: bool, expected: str):
    assert enforcer(origin, policy, enforce) == expected
    assert expected in ENFORCERS


NOW = 10_000.0


def _decisions():
    """Topics over and within limits of each type, without a backlog, without a limit, and
    under another namespace's policy."""
    from exporter.config.settings import BacklogQuota, BacklogQuotas
    from exporter.engine.backlog.check import (
        SubscriptionBacklog,
        TimeSource,
        TopicBacklogState,
        check,
    )
    from exporter.engine.decide import Decisions

    now, ns = NOW, "t/ns"
    quotas = BacklogQuotas(namespaces={ns: BacklogQuota(1000, 60.0, EVICT),
                                       "t/hold": BacklogQuota(1000, 60.0, HOLD)})
    over = TopicBacklogState(f"persistent://{ns}/over", ns, (
        SubscriptionBacklog("slow", 50, 5000, now - 600, TimeSource.BROKER),
        SubscriptionBacklog("fast", 2, 200, now - 30, TimeSource.ESTIMATED)))
    within = TopicBacklogState(f"persistent://{ns}/within", ns, (
        SubscriptionBacklog("a", 3, None, now - 10, TimeSource.ESTIMATED),), 100.0)
    idle = TopicBacklogState(f"persistent://{ns}/idle", ns, (SubscriptionBacklog("a", 0),))
    free = TopicBacklogState("persistent://other/ns/free", "other/ns", (
        SubscriptionBacklog("a", 7, 70, None),))
    held = TopicBacklogState("persistent://t/hold/held", "t/hold", (
        SubscriptionBacklog("a", 9, 9000, now - 900, TimeSource.BROKER),))
    topics = tuple(check(state, quotas, now) for state in (over, within, held, idle, free))
    return Decisions(now, topics, {ns: 600.0}, ())


def test_each_topic_family_carries_its_decisions_value() -> None:
    """Every topic-level series of a cycle's decisions, with its labels and value, for
    topics over and within limits of each type, without a backlog, without a limit, and
    under another namespace's policy (whose own labels it keeps)."""
    from exporter.exposition.build import CycleFacts, Tallies, build
    from exporter.exposition.render import render
    from tests.harness.pulsar import Metrics

    facts = CycleFacts("c", NOW, {}, NOW, 60.0, 10.0, 60.0, enforce=True,
                       subscription_ages=True)
    metrics = Metrics(render(build(facts, _decisions(), (), Tallies(), "me"),
                             topic_level=True).decode())

    def values(name: str) -> dict[tuple[str, ...], float]:
        return {(s.labels["topic"].rpartition("/")[2],
                 *(v for k, v in sorted(s.labels.items())
                   if k not in ("cluster", "namespace", "topic"))): s.value
                for s in metrics.find(name)}

    assert values("pulsar_storage_backlog_age_seconds") == {
        ("over",): 600.0, ("within",): 10.0, ("held",): 900.0, ("idle",): 0.0}
    assert values("pulsar_storage_backlog_age_estimated") == {
        ("over",): 0.0, ("within",): 1.0, ("held",): 0.0, ("idle",): 1.0}
    assert values("pulsar_storage_backlog_size") == {
        ("over",): 5000.0, ("within",): 300.0, ("held",): 9000.0, ("idle",): 0.0,
        ("free",): 70.0}
    limited = {("over",): 1000.0, ("within",): 1000.0, ("held",): 1000.0, ("idle",): 1000.0}
    assert values("pulsar_storage_backlog_quota_limit") == limited
    assert values("pulsar_storage_backlog_quota_limit_time") == {k: 60.0 for k in limited}
    assert values("pulsar_storage_backlog_quota_exceeded") == {
        (topic, "exporter", policy, kind): value
        for topic, kind, value in (("over", "size", 1.0), ("over", "time", 1.0),
                                   ("within", "size", 0.0), ("within", "time", 0.0),
                                   ("idle", "size", 0.0), ("idle", "time", 0.0))
        for policy in ("consumer_backlog_eviction",)} | {
        ("held", "none", "producer_request_hold", kind): 1.0 for kind in ("size", "time")}
    assert values("pulsar_storage_backlog_oldest_subscription_info") == {
        ("over", "slow"): 1.0, ("within", "a"): 1.0, ("held", "a"): 1.0, ("free", "a"): 1.0}
    assert values("pulsar_subscription_storage_backlog_age_seconds") == {
        ("over", "slow"): 600.0, ("over", "fast"): 30.0, ("within", "a"): 10.0,
        ("held", "a"): 900.0, ("idle", "a"): 0.0}
    # a topic whose policy evicts has its eviction counters from the start, at 0
    for counter in ("pulsar_storage_backlog_quota_exceeded_evictions_total",
                    "pulsar_storage_backlog_quota_would_evict_total"):
        assert values(counter) == {(topic, kind): 0.0 for topic in ("over", "within", "idle")
                                   for kind in ("size", "time")}
    assert values("pulsar_subscription_storage_backlog_age_estimated") == {
        ("over", "slow"): 0.0, ("over", "fast"): 1.0, ("within", "a"): 1.0,
        ("held", "a"): 0.0, ("idle", "a"): 0.0}


def test_without_topic_level_series_none_are_built_and_the_body_is_the_same() -> None:
    """`exposition.topic_level: false` renders no topic's own series, so none are built;
    the eviction counters, summed per namespace, still start at 0 and count."""
    from collections import Counter
    from dataclasses import replace

    from exporter.exposition.build import CycleFacts, Tallies, build
    from exporter.exposition.render import render

    facts = CycleFacts("c", NOW, {}, NOW, 60.0, 10.0, 60.0, enforce=True,
                       subscription_ages=True)
    # Namespaces whose evicting topics interleave, and a count on a topic not the first.
    decisions = _decisions()
    over = decisions.topics[0]
    others = [replace(over, topic=f"persistent://t/{ns}/{i}", namespace=f"t/{ns}")
              for i in range(3) for ns in ("b", "a")]
    decisions = replace(decisions, topics=(*others[:3], *decisions.topics, *others[3:]))
    tallies = Tallies(evictions=Counter({("t/ns", "persistent://t/ns/over", "size"): 2,
                                         ("t/b", "persistent://t/b/2", "time"): 1}))
    bodies = {level: render(build(replace(facts, topic_level=level), decisions, (),
                                  tallies, "me"), topic_level=False)
              for level in (True, False)}
    assert bodies[True] == bodies[False]
    lines = bodies[False].decode().splitlines()
    assert 'pulsar_storage_backlog_quota_exceeded_evictions_total{cluster="c",' \
        'namespace="t/ns",quota_type="size"} 2' in lines
    assert 'pulsar_storage_backlog_quota_would_evict_total{cluster="c",' \
        'namespace="t/ns",quota_type="time"} 0' in lines
    assert 'pulsar_storage_backlog_quota_exceeded_evictions_total{cluster="c",' \
        'namespace="t/b",quota_type="time"} 1' in lines
    built = build(replace(facts, topic_level=False), decisions, (), tallies, "me")
    assert built.value("pulsar_storage_backlog_age_seconds",
                       ("c", "t/ns", "persistent://t/ns/over")) is None


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.booleans(),
                          st.sampled_from([None, math.nan, 0.0, 5.0, 60.0]),
                          st.sampled_from([None, math.inf, 0.0, 100.0])),
                unique_by=lambda t: t[0]),
       st.integers(1, 7))
def test_max_topics_keeps_those_over_a_quota_then_the_oldest_largest_then_by_name(
        topics: list, cap: int) -> None:
    """`filters.max_topics`' choice, in order: a quota exceeded first, then the oldest
    backlog, then the largest, then the name; an unknown age or size counts as 0."""
    from dataclasses import replace

    from exporter.engine.backlog.check import LimitStatus
    from exporter.engine.backlog.topicdecisions import TopicDecisions

    base = _decisions().topics[0]
    decisions = TopicDecisions.of(
        replace(base, topic=name, size=LimitStatus.EXCEEDED if over else LimitStatus.WITHIN,
                time=LimitStatus.WITHIN, backlog_age_seconds=age, backlog_bytes=size)
        for name, over, age, size in topics)

    def known(v: float | None) -> float:
        return v if v is not None and math.isfinite(v) else 0.0

    expected = sorted(topics, key=lambda t: (not t[1], -known(t[2]), -known(t[3]), t[0]))
    got = [d.topic for d in published_topics(decisions, cap)]
    assert got == [t[0] for t in (expected[:cap] if len(topics) > cap else topics)]


def test_without_topic_level_series_every_namespace_sum_starts_at_zero_under_max_topics(
        ) -> None:
    """`filters.max_topics` chooses which topics' own series are published; without
    topic-level series there are none to choose, and the eviction counters summed per
    namespace exist at 0 for every namespace with a topic whose policy evicts."""
    from dataclasses import replace

    from exporter.exposition.build import CycleFacts, Tallies, build
    from exporter.exposition.render import render
    from tests.harness.pulsar import Metrics

    decisions = _decisions()
    over = decisions.topics[0]
    quiet = replace(over, topic="persistent://t/quiet/q", namespace="t/quiet",
                    backlog_age_seconds=0.0, backlog_bytes=0.0)
    decisions = replace(decisions, topics=(*decisions.topics, quiet))
    facts = CycleFacts("c", NOW, {}, NOW, 60.0, 10.0, 60.0, enforce=True, max_topics=1)
    for level in (True, False):
        metrics = Metrics(render(build(replace(facts, topic_level=level), decisions, (),
                                       Tallies(), "me"), topic_level=level).decode())
        assert metrics.value("pulsar_quota_exporter_topics_dropped",
                             reason="max_topics") == len(decisions.topics) - 1
    counted = {s.labels["namespace"]
               for s in metrics.find("pulsar_storage_backlog_quota_would_evict_total")}
    assert counted == {"t/ns", "t/quiet"}


def test_as_published_keeps_what_a_capped_publication_reads_again_and_no_more() -> None:
    """Under `filters.max_topics` the decisions held after a publication (the last good
    ones, the status view's, the next cycle's columns) publish the same body and status
    as those of the check, whatever the cap reads then; the others' are let go."""
    from exporter.exposition.build import CycleFacts, Tallies, build
    from exporter.exposition.build_topics import as_published
    from exporter.exposition.render import render
    from exporter.exposition.status import view

    decisions = _decisions()
    facts = CycleFacts("c", NOW, {}, NOW, 60.0, 10.0, 60.0, enforce=True, max_topics=3)

    def published(d, cap: int = 3) -> tuple[bytes, dict]:
        return (render(build(replace(facts, max_topics=cap), d, (), Tallies(), "me"),
                       topic_level=True), view("c", NOW, d, (), {}, cap))

    kept = as_published(decisions, 3)
    chosen = [d.topic for d in published_topics(decisions.topics, 3)]
    assert kept.topics.published is not None and len(kept.topics.published) == 3
    assert [d.topic for d in published_topics(kept.topics, None)] == chosen  # any cap
    assert published(kept) == published(decisions)
    assert kept.topics.columns is decisions.topics.columns
    assert kept.topics.over() == decisions.topics.over()  # those over a quota, only
    assert not all(d.exceeded for d in published_topics(kept.topics, 3))
    others = [k for k in range(len(decisions.topics)) if k not in kept.topics.published
              and not decisions.topics[k].exceeded]
    assert others
    with pytest.raises(LookupError, match="not published"):
        kept.topics[others[0]]
    assert as_published(kept, 1) is kept  # kept once: as published
    assert as_published(decisions, None) is decisions  # uncapped: every one is published
    assert as_published(decisions, 5) is decisions


def test_the_status_lists_at_most_status_topics_chosen_as_max_topics_chooses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Uncapped or capped above it, a status document lists STATUS_TOPICS topics at most:
    those over a quota first, then the oldest backlogs; `topics_dropped` counts the rest."""
    from exporter.exposition import status

    decisions = _decisions()
    assert len(status.view("c", NOW, decisions, ())["topics"]) == 5  # under the bound
    assert "topics_dropped" not in status.view("c", NOW, decisions, ())
    monkeypatch.setattr(status, "STATUS_TOPICS", 2)
    ranked = [d.topic for d in published_topics(decisions.topics, 2)]
    for cap in (None, 4, 2):
        doc = status.view("c", NOW, decisions, (), {}, cap)
        assert [t["topic"] for t in doc["topics"]] == sorted(ranked), cap
        assert doc["topics_dropped"] == 3
    kept = as_published(decisions, 4)  # the decisions a capped cycle keeps
    assert [t["topic"] for t in status.view("c", NOW, kept, (), {}, 4)["topics"]] == \
        sorted(ranked)


@pytest.mark.parametrize("state", ["holding", "standing_by", "unfenced"])
def test_the_usage_reporter_lease_is_one_state_per_participant(state: str) -> None:
    """pulsar_quota_exporter_usage_reporter: this replica's state of its participant's
    reporter lease, 1 on that state and 0 on the others; no series without a lease."""
    from exporter.actions.orders import LeaseState, LeaseView
    from exporter.exposition.build import CycleFacts, Tallies, build
    from exporter.exposition.render import render
    from tests.harness.pulsar import Metrics

    facts = CycleFacts("c", NOW, {}, NOW, 60.0, 10.0, 60.0,
                       reporter=LeaseView(LeaseState(state), 1, 0))
    metrics = Metrics(render(build(facts, None, (), Tallies(), "broker-1"),
                             topic_level=True).decode())
    got = {(s.labels["participant"], s.labels["state"]): s.value
           for s in metrics.find("pulsar_quota_exporter_usage_reporter")}
    assert got == {("broker-1", s.value): float(s.value == state) for s in LeaseState}
    alone = Metrics(render(build(replace(facts, reporter=None), None, (), Tallies(), "b"),
                           topic_level=True).decode())
    assert alone.find("pulsar_quota_exporter_usage_reporter") == []
