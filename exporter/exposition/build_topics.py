"""A cycle's topic decisions → each topic's own series, and its eviction counters' seeds.

What an operator of a large fleet publishes is chosen here: every topic, the topics that
matter under `filters.max_topics`, or (`exposition.topic_level: false`) none, the eviction
counters summed per namespace by the render. The choice reads the decisions' columns
(engine/backlog/topicdecisions.py), so that only the published topics' decisions are made.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Sequence
from typing import TypeGuard

import numpy as np

from exporter.catalogue import QUOTA_TYPES
from exporter.config.settings import RetentionPolicy
from exporter.engine.backlog.check import MEASURED, LimitStatus, QuotaType, TopicDecision
from exporter.engine.backlog.topicdecisions import TopicColumns, TopicDecisions, evicts
from exporter.engine.decide import Decisions
from exporter.exposition.metricset import MetricSetBuilder


def add_topics(b: MetricSetBuilder, cluster: str, topics: TopicDecisions, topic_level: bool,
               max_topics: int | None, enforce: bool, subscriptions_at: float | None) -> None:
    """The topics' own series (those `max_topics` keeps) and their eviction counters at 0;
    without topic-level series, only the seeds the namespace sums need."""
    if topic_level:  # else none built: rendered without, they cost seconds at 1M topics
        published = published_topics(topics, max_topics)
        _add_topics(b, cluster, published, enforce, subscriptions_at)
        _seed_evictions(b, cluster, ((d.namespace, d.topic) for d in published if evicts(d)))
    else:  # summed per namespace: every namespace's, whichever topics max_topics keeps
        _seed_evictions(b, cluster, _first_evicting(topics.columns))


def finite(v: float | None) -> TypeGuard[float]:
    return v is not None and math.isfinite(v)


def enforcer(origin: str, policy: RetentionPolicy, enforce: bool) -> str:
    """Who acts on a limit: the broker when the limit is Pulsar's own (it holds, fails or
    evicts by its policy; measured on 4.0.8: a limit only in our YAML blocks no producer),
    this exporter when it evicts for a limit of its own, else no one (a dry run, or a
    producer policy on a limit Pulsar does not have: we cannot hold producers)."""
    if origin.startswith("pulsar:"):
        return "broker"
    if enforce and policy is RetentionPolicy.CONSUMER_BACKLOG_EVICTION:
        return "exporter"
    return "none"


_AGE, _ESTIMATED = "pulsar_storage_backlog_age_seconds", "pulsar_storage_backlog_age_estimated"
_SIZE, _LIMIT = "pulsar_storage_backlog_size", "pulsar_storage_backlog_quota_limit"
_LIMIT_TIME = "pulsar_storage_backlog_quota_limit_time"
_EXCEEDED = "pulsar_storage_backlog_quota_exceeded"
_HOLDER = "pulsar_storage_backlog_oldest_subscription_info"
_SUB_AGE = "pulsar_subscription_storage_backlog_age_seconds"
_SUB_ESTIMATED = "pulsar_subscription_storage_backlog_age_estimated"
_STATUSES = (LimitStatus.WITHIN, LimitStatus.EXCEEDED)
# The families `_add_topics` gathers, in the order it unpacks their lists.
_TOPIC_FAMILIES = (_AGE, _ESTIMATED, _SIZE, _LIMIT, _LIMIT_TIME, _EXCEEDED, _HOLDER, _SUB_AGE,
                   _SUB_ESTIMATED)


def _add_topics(b: MetricSetBuilder, cluster: str, topics: Iterable[TopicDecision],
                enforce: bool, subscriptions_at: float | None) -> None:
    """Every topic's own series, gathered a family at a time and added with `add_all`: a
    checked `add` a series was most of the publication's build at 100k topics, and a call
    a series to gather them most of the rest (each family's lists are appended to in
    place). `subscriptions_at`: the check's time, when each subscription's age is
    published too."""
    families: dict[str, tuple[list[tuple[str, ...]], list[float]]] = {
        name: ([], []) for name in _TOPIC_FAMILIES}
    (age_k, age_v), (est_k, est_v), (size_k, size_v), (limit_k, limit_v), \
        (time_k, time_v), (over_k, over_v), (holder_k, holder_v), (sub_k, sub_v), \
        (sub_est_k, sub_est_v) = families.values()
    # A limit's labels (type, policy, who enforces it), by the identity of the limit or
    # quota they come from: a Resolver hands one object to every topic of a namespace, and
    # the decisions hold them all through this call, so no id is reused.
    labels: dict[tuple[int, QuotaType], tuple[str, str, str]] = {}
    for d in topics:
        key = (cluster, d.namespace, d.topic)
        if d.backlog_age_seconds is not None:
            age_k.append(key)
            age_v.append(d.backlog_age_seconds)
            est_k.append(key)
            est_v.append(0.0 if d.time_source in MEASURED else 1.0)
        if finite(d.backlog_bytes):
            size_k.append(key)
            size_v.append(d.backlog_bytes)
        quota = d.quota
        if quota.limit_size is not None and quota.limit_size >= 0:
            limit_k.append(key)
            limit_v.append(quota.limit_size)
        if quota.limit_time is not None and quota.limit_time > 0:
            time_k.append(key)
            time_v.append(quota.limit_time)
        for quota_type, status in ((QuotaType.SIZE, d.size), (QuotaType.TIME, d.time)):
            if status in _STATUSES:
                limit = d.limits.limit(quota_type) if d.limits else None
                which = (id(limit if limit else quota), quota_type)
                if (suffix := labels.get(which)) is None:
                    policy = limit.policy if limit else quota.policy
                    by = enforcer(limit.origin if limit else "config:", policy, enforce)
                    suffix = labels[which] = (quota_type.value, policy.value, by)
                over_k.append((*key, *suffix))
                over_v.append(1.0 if status is LimitStatus.EXCEEDED else 0.0)
        if d.holder is not None and d.backlog_messages > 0:
            holder_k.append((*key, d.holder))
            holder_v.append(1.0)
        if subscriptions_at is None:
            continue
        # Each subscription's own backlog age (PIP-492's name and labels, so one dashboard
        # serves brokers that print it and those that do not): 0 without a backlog, none
        # where unknown (as Pulsar, which writes no sample for -1).
        for s in d.subscriptions:
            if s.backlog_messages <= 0:
                age, estimated = 0.0, 0.0
            elif s.oldest_publish_time is None:
                continue
            else:
                age = max(0.0, subscriptions_at - s.oldest_publish_time)
                estimated = 0.0 if s.time_source in MEASURED else 1.0
            sub_k.append((*key, s.name))
            sub_v.append(age)
            sub_est_k.append((*key, s.name))
            sub_est_v.append(estimated)
    for name, (keys, values) in families.items():
        if keys:
            b.add_all(name, keys, values)


def _seed_evictions(b: MetricSetBuilder, cluster: str,
                    topics: Iterable[tuple[str, str]]) -> None:
    """The eviction counters of each (namespace, topic) whose policy evicts exist at 0
    from the start, so that a first eviction is an increase to alert on."""
    keys = [(cluster, ns, topic, quota_type) for ns, topic in topics for quota_type in QUOTA_TYPES]
    for name in ("pulsar_storage_backlog_quota_exceeded_evictions_total",
                 "pulsar_storage_backlog_quota_would_evict_total"):
        b.seed_all(name, keys)


def _first_evicting(columns: TopicColumns) -> list[tuple[str, str]]:
    """Without topic-level series, the counters are rendered summed per namespace
    (`namespace_fallback`), and a namespace's sum exists once any of its topics has a
    series: so only its first evicting topic is seeded. The body is the same; seeding them
    all made one seed a topic and counter, then folded them (docs/design.md, "Publishing
    the decisions")."""
    firsts: dict[str, int] = {}
    evicting = np.flatnonzero(columns.evicts).tolist()
    namespaces = columns.namespace
    for k in reversed(evicting):  # each namespace's first, as the last written
        firsts[namespaces[k]] = k
    return [(namespaces[k], columns.topic[k]) for k in sorted(firsts.values())]


def published_topics(topics: TopicDecisions, cap: int | None) -> list[TopicDecision]:
    """The decisions of the topics whose series are published (`published_rows`)."""
    rows = published_rows(topics, cap)
    return list(topics) if rows is None else [topics[k] for k in rows]


def as_published(decisions: Decisions, cap: int | None) -> Decisions:
    """The decisions as a publication under `filters.max_topics` reads them again, and the
    next cycle: every topic's columns, the published topics' decisions (`TopicDecisions.only`).
    What makes the others' goes, off the driver between cycles and at the next one's peaks
    (`tests.bench.steady`; docs/design.md, "The driver once every age table is full").
    Uncapped, every decision is published: kept as they are."""
    topics = decisions.topics
    rows = published_rows(topics, cap)
    if rows is None or topics.published is not None:  # every one, or kept already
        return decisions
    return dataclasses.replace(decisions, topics=topics.only(rows))


def published_rows(topics: TopicDecisions, cap: int | None) -> Sequence[int] | None:
    """The topic rows whose series are published under `filters.max_topics` (None: every
    one); those `as_published` kept if so, whatever `cap`. Those over a quota first, then
    the oldest and largest backlogs (what an operator looks for), then by name, so that
    the choice only moves when the backlogs do. Chosen on the columns: only the chosen
    topics' decisions are made."""
    if topics.published is not None:
        return topics.published
    if cap is None or len(topics) <= cap:
        return None
    c = topics.columns
    age = np.where(np.isfinite(c.age), c.age, 0.0)
    size = np.where(np.isfinite(c.backlog_bytes), c.backlog_bytes, 0.0)
    order = np.lexsort((-size, -age, ~c.over))
    # Those tied with the last one kept are settled by name (in a heap of as many as are
    # wanted: a fleet of idle topics is one tie).
    last = order[cap - 1]
    tied = (c.over == c.over[last]) & (age == age[last]) & (size == size[last])
    ahead = order[:cap][~tied[order[:cap]]]
    names = c.topic
    chosen = sorted([*ahead.tolist(), *heapq.nsmallest(
        cap - ahead.size, np.flatnonzero(tied).tolist(), key=names.__getitem__)])

    def rank(k: int) -> tuple:
        return (not c.over[k], -age[k], -size[k], names[k])

    return sorted(chosen, key=rank)


