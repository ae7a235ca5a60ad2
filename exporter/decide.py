"""From the pipeline's per-entity tables to the engine's decisions, once per cycle.

This is the seam between the columnar world (pyarrow tables out of Spark) and the engine's
frozen dataclasses. It owns the state kept between cycles: the backlog-age tables and the
resource-group usage counters, both keyed by entity and pruned of entities that vanished.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from exporter.config import Config, MonitoringClass, ResourceGroup
from exporter.engine.agetable import AgeTables, Estimate, Method
from exporter.engine.allocators import Observed, allocate
from exporter.engine.backlog import (
    SubscriptionBacklog,
    TimeSource,
    TopicBacklogState,
    TopicDecision,
    check,
)
from exporter.engine.throttle import ObservedRates, ThrottleEstimate, resource_group_throttle
from exporter.engine.usage import Increment, Usage, UsageCounter
from exporter.pipeline.model import Aggregates
from exporter.sources.model import AdminSnapshot, TopicStats


@dataclass(frozen=True)
class GroupResult:
    """One resource group × monitoring class this cycle. Rates are per second; None while
    unknown (the first cycle only sets the counters' baseline)."""

    resource_group: str
    monitoring_class: MonitoringClass
    quota: Usage  # configured; -1 = unlimited
    usage: Usage | None  # this participant's rate
    cluster_usage: Usage | None  # all participants' rates (only ours until peers report)
    local_quota: Usage | None  # this participant's share; None where unlimited
    throttle: ThrottleEstimate | None


@dataclass(frozen=True)
class Decisions:
    checked_at: float
    topics: tuple[TopicDecision, ...]
    namespace_max_age: Mapping[str, float]
    groups: tuple[GroupResult, ...]


def _columns(table, names: tuple[str, ...]) -> list[list]:
    return [table.column(n).to_pylist() for n in names]


def _int(v: float | None) -> int | None:
    return None if v is None or not math.isfinite(v) else int(v)


class Decider:
    """Stateful across cycles; `decide` is called once per cycle from the check loop."""

    def __init__(self, config: Config, participant: str | None = None) -> None:
        self.config = config
        self.participant = participant or config.resource_group_engine.participant
        self.ages = AgeTables()
        self._counters = UsageCounter()
        self._last_at: float | None = None

    def reconfigure(self, config: Config) -> None:
        self.config = config

    # --- backlog --------------------------------------------------------------------------
    def _subscriptions(self, agg: Aggregates) -> dict[str, list[tuple[str, float]]]:
        by_topic: dict[str, list[tuple[str, float]]] = defaultdict(list)
        topics, names, backlogs = _columns(
            agg.subscriptions, ("topic", "subscription", "backlog_messages"))
        for topic, name, backlog in zip(topics, names, backlogs, strict=True):
            by_topic[topic].append((name, backlog or 0.0))
        return by_topic

    def _topic_state(self, topic: str, namespace: str, published: int | None,
                     bytes_in: float | None, subs: list[tuple[str, float]],
                     admin: TopicStats | None, admin_at: float, now: float,
                     ) -> TopicBacklogState:
        admin_subs = {s.name: s for s in admin.subscriptions} if admin else {}
        precise = (admin.oldest_backlog_message_subscription
                   if admin and admin.oldest_backlog_message_age_seconds is not None else None)
        states = []
        for name, backlog in subs:
            messages = int(backlog)
            size = admin_subs[name].backlog_size if name in admin_subs else None
            publish_time, source = None, TimeSource.ESTIMATED
            if messages > 0 and name == precise:
                publish_time = admin_at - admin.oldest_backlog_message_age_seconds
                source = TimeSource.PRECISE
            elif messages > 0 and published is not None:
                est = self.ages.estimate(topic, messages, published, now)
                if isinstance(est, Estimate):
                    publish_time = now - est.age_seconds
                    if est.method is Method.LOWER_BOUND:
                        source = TimeSource.LOWER_BOUND
            states.append(SubscriptionBacklog(name, messages, size, publish_time, source))
        avg = (bytes_in / published) if published and bytes_in else None
        return TopicBacklogState(topic, namespace, tuple(states), avg)

    def _backlog(self, agg: Aggregates, admin: AdminSnapshot | None, now: float,
                 ) -> tuple[tuple[TopicDecision, ...], dict[str, float]]:
        subs = self._subscriptions(agg)
        stats = {t.topic: t for t in admin.topics} if admin else {}
        admin_at = admin.fetched_at if admin else now
        quotas = self.config.backlog_quotas
        decisions, max_age = [], {}
        topics, namespaces, msg_in, bytes_in = _columns(
            agg.topics, ("topic", "namespace", "msg_in_total", "bytes_in_total"))
        for topic, ns, published_f, bytes_f in zip(topics, namespaces, msg_in, bytes_in,
                                                   strict=True):
            published = _int(published_f)
            if published is not None:
                self.ages.observe(topic, now, published)
            state = self._topic_state(topic, ns, published, bytes_f, subs.get(topic, []),
                                      stats.get(topic), admin_at, now)
            decision = check(state, quotas, now)
            decisions.append(decision)
            if decision.backlog_age_seconds is not None:
                max_age[ns] = max(max_age.get(ns, 0.0), decision.backlog_age_seconds)
        self.ages.retain(topics)
        return tuple(decisions), max_age

    # --- resource groups ------------------------------------------------------------------
    def _groups(self, agg: Aggregates, now: float) -> tuple[GroupResult, ...]:
        elapsed = (now - self._last_at) if self._last_at is not None else None
        rows = {}
        names, classes, msgs, byts = _columns(
            agg.resource_groups, ("resource_group", "monitoring_class", "messages_total",
                                  "bytes_total"))
        for name, cls, m, b in zip(names, classes, msgs, byts, strict=True):
            rows[(name, MonitoringClass(cls))] = Usage(bytes=b or 0.0, messages=m or 0.0)
        results = []
        keys = []
        for group in self.config.resource_groups.values():
            rates: dict[MonitoringClass, ObservedRates] = {}
            per_class: dict[MonitoringClass, Usage | None] = {}
            for cls in MonitoringClass:
                key = f"{group.name}\0{cls}"
                keys.append(key)
                total = rows.get((group.name, cls))
                usage = None
                if total is not None:
                    outcome = self._counters.observe(key, total)
                    if elapsed and elapsed > 0:
                        inc = outcome.usage if isinstance(outcome, Increment) else Usage(0, 0)
                        usage = Usage(inc.bytes / elapsed, inc.messages / elapsed)
                per_class[cls] = usage
                if usage is not None:
                    rates[cls] = ObservedRates(usage.messages, usage.bytes)
            throttles = {t.monitoring_class: t for t in resource_group_throttle(
                group, rates, self.config.check_interval)}
            for cls in MonitoringClass:
                results.append(self._group_result(group, cls, per_class[cls],
                                                  throttles.get(cls)))
        self._counters.retain(keys)
        return tuple(results)

    def _group_result(self, group: ResourceGroup, cls: MonitoringClass, usage: Usage | None,
                      throttle: ThrottleEstimate | None) -> GroupResult:
        limit = group.limit(cls)
        quota = Usage(bytes=limit.bytes_per_second, messages=limit.messages_per_second)
        local = None
        if usage is not None:
            # Until peers report over the usage topic, this participant is the only one.
            reports = {self.participant: usage}
            local = Usage(
                bytes=self._share(quota.bytes, {p: u.bytes for p, u in reports.items()}),
                messages=self._share(quota.messages,
                                     {p: u.messages for p, u in reports.items()}),
            )
        return GroupResult(group.name, cls, quota, usage, usage, local, throttle)

    def _share(self, quota: float, usages: Mapping[str, float]) -> float:
        if quota < 0:
            return -1.0
        shares = allocate(self.config.resource_group_engine.allocator, quota,
                          {p: Observed(u) for p, u in usages.items()})
        return shares[self.participant]

    # --- the cycle ------------------------------------------------------------------------
    def decide(self, agg: Aggregates, admin: AdminSnapshot | None, now: float) -> Decisions:
        topics, max_age = self._backlog(agg, admin, now)
        groups = self._groups(agg, now)
        self._last_at = now
        return Decisions(now, topics, max_age, groups)
