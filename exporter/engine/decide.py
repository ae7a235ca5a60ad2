"""From the pipeline's per-entity tables to the engine's decisions, once per cycle.

This is the seam between the columnar world (pyarrow tables out of Spark) and the engine's
frozen dataclasses: the backlog check runs over columns and makes a topic's decision when
it is read (topicdecisions.py). It owns the state kept between cycles, all keyed by entity
and pruned of entities that vanished: the backlog-age tables, the publish times the brokers
measured (publishtimes.py), the resource-group usage counters, and the load verdicts'
`LoadState` (ThresholdShedder's history and the bundles seen moving).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.config.settings import BacklogQuotas, Config, MonitoringClass, RateLimit
from exporter.engine.backlog.agetable import AgeTables
from exporter.engine.backlog.measures import Measures
from exporter.engine.backlog.publishtimes import (
    ESTIMATED,
    LOWER_BOUND,
    Subscriptions,
    publish_times,
)
from exporter.engine.backlog.quotas import ResolvedQuota, Resolver, disagrees
from exporter.engine.backlog.sizes import message_sizes, slowest_backlogs
from exporter.engine.backlog.topicdecisions import TopicDecisions, check_topics
from exporter.engine.columns import counts, floats, positions, ranked, rows_of, shared
from exporter.engine.groups.participant import GroupKey, Participant, Round
from exporter.engine.groups.throttle import ObservedRates, ThrottleEstimate, resource_group_throttle
from exporter.engine.groups.usage import AcceptOutcome, Increment, Usage, UsageCounter, UsageReport
from exporter.engine.load.loadview import LoadResult, LoadState, evaluate_load
from exporter.engine.systemtopics import is_system_topic
from exporter.pipeline.aggregates import Aggregates
from exporter.pulsarnames import after_domain
from exporter.sources.results import AdminSnapshot

NO_QUOTAS = BacklogQuotas()  # what a system topic is checked against: nothing
_AT_ONCE = 1 << 16  # subscriptions whose age estimates are worked out at once


def _ours(topics: pa.ChunkedArray, own: tuple[str, ...]) -> np.ndarray:
    """Which topics are our own (usage reports, the enforcer lease): no backlog to check.
    pulsar-lite names them without their domain, so they arrive as persistent://: what
    follows the domain is compared. A test of the ending first, in Arrow: most topics fail
    it, and only those that pass are made strs."""
    ours = {after_domain(t) for t in own}
    maybe = np.zeros(len(topics), bool)
    for ending in ours:
        maybe |= pc.fill_null(pc.ends_with(topics, ending), False).to_numpy(
            zero_copy_only=False)
    at = np.flatnonzero(maybe)
    mine = np.zeros(len(topics), bool)
    mine[at] = [after_domain(t) in ours for t in topics.take(at).to_pylist()]
    return mine


@dataclass(frozen=True)
class GroupResult:
    """One resource group × monitoring class this cycle. Rates are per second; None while
    unknown (the first cycle only sets the counters' baseline)."""

    resource_group: str
    monitoring_class: MonitoringClass
    quota: Usage  # configured; -1 = unlimited
    usage: Usage | None  # this participant's rate
    cluster_usage: Usage | None  # all participants' last reported rates (ours: live until reported)
    local_quota: Usage | None  # this participant's share (-1 per dimension: unlimited)
    throttle: ThrottleEstimate | None  # for the cluster-wide rate against the quota
    peers: Mapping[str, Usage] = field(default_factory=dict)  # each peer's last report


@dataclass(frozen=True)
class Decisions:
    checked_at: float
    topics: TopicDecisions  # decisions made as they are read (topicdecisions.py)
    namespace_max_age: Mapping[str, float]
    groups: tuple[GroupResult, ...]
    peer_ages: Mapping[str, float] = field(default_factory=dict)  # peer → seconds since report
    participants: int = 1  # known, ourselves included
    load: LoadResult | None = None  # load verdicts (the configured Pulsar shedder's rules)
    # Topics whose Pulsar limits, as resolved here, differ from those their broker prints it
    # applies: a topic-level policy set since it was last read (sources/policies.py).
    doubted: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.topics, TopicDecisions):  # made already: a test's, a record's
            object.__setattr__(self, "topics", TopicDecisions.of(self.topics))


class Decider:
    """Stateful across cycles; `decide` is called once per cycle from the check loop."""

    def __init__(self, config: Config, participant: str | None = None) -> None:
        self.config = config
        self.participant = participant or config.resource_group_engine.participant
        self.ages = AgeTables()
        # (topic, subscription) → (publish time, backlog) last read from the broker itself
        self._measured = Measures.empty()
        self._counters = UsageCounter()
        self._last_at: float | None = None
        self.peer = Participant(self.participant, config.resource_group_engine)
        self._limits: dict[GroupKey, Usage] = {}
        self._own: dict[GroupKey, Usage] = {}  # the last cycle's usage, for the next report
        self._replicated: set[str] = set()  # groups seen replicating since start
        self._load = LoadState()  # the shedder's history and recent bundle moves
        # The exchange reports and receives on its own timer, the check loop computes
        # shares: both touch `peer`, `_own` and `_limits`, under this lock only.
        self.lock = threading.Lock()

    def reconfigure(self, config: Config) -> None:
        self.config = config
        with self.lock:
            self.peer.reconfigure(config.resource_group_engine)

    # --- backlog --------------------------------------------------------------------------
    def _subscriptions(self, at: np.ndarray, backlogs: np.ndarray, words: list[str | None],
                       rank: np.ndarray, rows: np.ndarray, published: np.ndarray,
                       per_entries: np.ndarray, now: float) -> Subscriptions:
        """Every subscription grouped by topic row, its publish time and source the age
        tables' estimate (publishtimes.py takes it from there). In topic-row order (those of
        no topic first): `at` each one's topic row (int32, -1 where none), `backlogs` its
        backlog as printed, `words` and `rank` its name (columns.ranked). Per topic row:
        `rows` its age table (-1 where none or not observed now), `published` its counter,
        `per_entries` its messages per backlog entry.

        Only the results are subscription-sized: the estimates' arguments, and the backlogs
        as integers, are worked out `_AT_ONCE` subscriptions at a time. Each argument of
        every subscription at once, and each result in the table's order beside its
        reordered copy, raised the decide's peak (docs/design.md, "The driver once every
        age table is full")."""
        estimated, lower = np.empty(len(at)), np.empty(len(at), bool)
        messages = np.empty(len(at), np.int64)
        for lo in range(0, len(at), _AT_ONCE):
            part, hi = at[lo:lo + _AT_ONCE], lo + _AT_ONCE
            none, topic = part < 0, np.maximum(part, 0)  # of no topic: no table
            # int(backlog), then round(messages × per_entry): the backlog in entries (sizes.py)
            whole = np.trunc(backlogs[lo:hi])
            entries = np.round(whole * np.where(none, 1.0, per_entries[topic]))
            estimated[lo:hi], lower[lo:hi] = self.ages.ages(
                np.where(none, -1, rows[topic]), np.clip(entries, 0, 2**62).astype(np.int64),
                np.where(none, 0, published[topic]), now)
            # int(backlog), a NaN none, clipped to what an int64 holds
            messages[lo:hi] = np.clip(np.nan_to_num(whole), -2.0**62, 2.0**62)
        # the estimates as publish times (NaN where none), in place: publishtimes.py's start
        source = np.where(np.isnan(estimated) | ~lower, ESTIMATED, LOWER_BOUND).astype(np.int8)
        del lower
        starts = np.searchsorted(at, np.arange(len(rows) + 1, dtype=at.dtype))  # no copy of `at`
        return Subscriptions(starts, at, words, rank,
                             messages, np.subtract(now, estimated, out=estimated), source)

    def _published(self, agg: Aggregates, admin: AdminSnapshot | None, checked: np.ndarray,
                   now: float) -> tuple[Subscriptions, list[str], np.ndarray, np.ndarray]:
        """Every subscription with its publish time (publishtimes.py), each topic's name
        as its age table keeps it, its average message size, and its age table's row. Its
        own per-subscription temporaries (a dozen subscription-sized arrays) go
        when it returns, before the check makes the decisions."""
        stats = {t.topic: t for t in admin.topics} if admin else {}
        admin_at = admin.fetched_at if admin else now
        topics = agg.topics["topic"]  # never null
        published, counted = counts(agg.topics["msg_in_total"])
        # Every table first, the tables over their bound thinned together (agetable.py),
        # before any subscription-sized array is made.
        observed = counted & checked
        rows = self.ages.observe_all(topics, published, observed, now)
        gauge = floats(agg.topics["backlog_age_seconds"], math.nan)
        # The broker prints -1 until its backlog-quota check has measured the age.
        with np.errstate(invalid="ignore"):
            gauge = np.where(np.isfinite(gauge) & (gauge >= 0), gauge, np.nan)
        at = positions(agg.subscriptions["topic"], topics,
                       agg.subscriptions["source"], agg.topics["source"])
        backlogs = floats(agg.subscriptions["backlog_messages"], 0.0)
        averages, per_entries = message_sizes(
            agg.topics, slowest_backlogs(at, backlogs, len(topics)), published)
        order = np.argsort(at, kind="stable")  # by topic row; those of no topic first
        at, backlogs = at[order], backlogs[order]  # the table's order is not kept
        # PIP-492's gauge: a subscription's age as its broker printed it (4.0.14+, 4.2.5+, 5.0)
        printed = floats(agg.subscriptions["backlog_age_seconds"], math.nan)[order]
        # a subscription's name is its key: never null
        words, rank = ranked(agg.subscriptions["subscription"].take(order).combine_chunks())
        del order
        grouped = self._subscriptions(at, backlogs, words, rank, np.where(observed, rows, -1),
                                      published, per_entries, now)
        del at
        # one str a topic across cycles, not one each: made here only for those no table
        # has (topics not observed, which have none)
        names = cast(list[str], self.ages.names(rows))
        missing = np.flatnonzero(rows < 0)
        for i, topic in zip(missing.tolist(), topics.take(missing).to_pylist(), strict=True):
            names[i] = topic
        views = {r: stats[t] for r, t in enumerate(names) if t in stats} if stats else {}
        subs, self._measured = publish_times(
            grouped, names, checked, backlogs, printed, gauge, views,
            admin_at, now, self._measured)
        return subs, names, averages, rows

    def _backlog(self, agg: Aggregates, admin: AdminSnapshot | None, now: float,
                 ) -> tuple[TopicDecisions, dict[str, float], frozenset[str]]:
        quotas = self.config.backlog_quotas
        limits, unlimited = Resolver(quotas, admin.quotas if admin else None), Resolver(NO_QUOTAS)
        # a topic's namespace is its key: never null
        namespaces = cast(list[str], shared(agg.topics["namespace"]))
        checked = ~_ours(agg.topics["topic"], (self.config.resource_group_engine.topic,
                                               quotas.lock_topic))
        subs, names, averages, rows = self._published(agg, admin, checked, now)
        decided = np.flatnonzero(checked)
        system = not quotas.system_topics
        # the broker's SystemTopic is never over a quota
        resolved = [(unlimited if system and is_system_topic(names[r]) else limits)(
            names[r], namespaces[r]) for r in decided.tolist()]
        decisions = check_topics(subs, decided, names, namespaces, resolved, averages,
                                 checked, now)
        columns = decisions.columns
        max_age: dict[str, float] = {}
        for ns, age in zip(columns.namespace, columns.age.tolist(), strict=True):
            if age == age:  # not NaN: known
                max_age[ns] = max(max_age.get(ns, 0.0), age)
        self.ages.retain_rows(rows)
        return decisions, max_age, self._doubted(agg, decided, resolved, columns.topic)

    @staticmethod
    def _doubted(agg: Aggregates, decided: np.ndarray, resolved: list[ResolvedQuota],
                 names: list[str]) -> frozenset[str]:
        """The topics whose limits resolved here disagree with those their broker printed
        (a topic-level policy set since it was last read): asked once a limits object and
        printed pair, and only of limits taken from Pulsar's policies."""
        pulsars = {key for key, q in {id(q): q for q in resolved}.items()
                   if q.size.origin.startswith("pulsar:") or q.time.origin.startswith("pulsar:")}
        if not pulsars:
            return frozenset()
        sizes = floats(agg.topics["backlog_quota_limit_bytes"], math.nan)[decided].tolist()
        times = floats(agg.topics["backlog_quota_limit_seconds"], math.nan)[decided].tolist()
        disagreeing: dict[tuple[int, float | None, float | None], bool] = {}
        doubted = []
        for k, q in enumerate(resolved):
            if id(q) not in pulsars:
                continue
            # by identity: the decisions hold every limits object, so no id is reused
            size = None if sizes[k] != sizes[k] else sizes[k]
            time = None if times[k] != times[k] else times[k]
            key = (id(q), size, time)
            if (differs := disagreeing.get(key)) is None:
                differs = disagreeing[key] = disagrees(q, size, time)
            if differs:
                doubted.append(names[k])
        return frozenset(doubted)

    # --- resource groups ------------------------------------------------------------------
    def accept(self, report: UsageReport, now: float) -> AcceptOutcome:
        """A peer's usage entry, already through the transport's gate."""
        with self.lock:
            return self.peer.accept(report, now)

    def forget(self, participant: str) -> bool:
        """A peer's goodbye."""
        with self.lock:
            return self.peer.forget(participant)

    def report_all_next(self) -> None:
        with self.lock:
            self.peer.report_all_next()

    def _own_rates(self, agg: Aggregates, now: float) -> dict[GroupKey, Usage]:
        """This participant's usage rate per configured RG × class, from counter diffs
        (publish, dispatch) or the broker's own rates (replication: it prints no counter);
        empty on the first cycle (it only sets the counters' baseline)."""
        elapsed = (now - self._last_at) if self._last_at is not None else None
        totals: dict[GroupKey, Usage] = {}
        printed: dict[GroupKey, Usage] = {}
        names, classes, msgs, byts, msg_rates, byte_rates = rows_of(
            agg.resource_groups, ("resource_group", "monitoring_class", "messages_total",
                                  "bytes_total", "messages_per_second", "bytes_per_second"))
        for name, cls, m, b, mr, br in zip(names, classes, msgs, byts, msg_rates, byte_rates,
                                           strict=True):
            key = (name, MonitoringClass(cls))
            if mr is not None or br is not None:
                printed[key] = Usage(bytes=br or 0.0, messages=mr or 0.0)
            else:
                totals[key] = Usage(bytes=b or 0.0, messages=m or 0.0)
        rates: dict[GroupKey, Usage] = {}
        counters: list[str] = []
        for group in self.config.resource_groups.values():
            for cls in MonitoringClass:
                counter = f"{group.name}\0{cls}"
                total = totals.get((group.name, cls))
                inc = Usage(0, 0)  # no topic of the group seen: no usage
                if total is not None:
                    counters.append(counter)
                    outcome = self._counters.observe(counter, total)
                    inc = outcome.usage if isinstance(outcome, Increment) else inc
                if elapsed and elapsed > 0:
                    rates[(group.name, cls)] = printed.get(
                        (group.name, cls), Usage(inc.bytes / elapsed, inc.messages / elapsed))
        self._counters.retain(counters)
        return rates

    def round(self, now: float) -> tuple[Round | None, tuple[str, ...]]:
        """One usage-report round (called by the exchange on its own timer): peers silent
        past stale_after go, then this round's report from the last cycle's usage."""
        with self.lock:
            dropped = self.peer.expire(now)
            round_ = self.peer.report(self._own, self._limits, now) if self._own else None
        return round_, dropped

    def _groups(self, agg: Aggregates, now: float) -> tuple[GroupResult, ...]:
        own = self._own_rates(agg, now)
        with self.lock:
            self._own = self._exchanged(own)
            return self._group_results(own, now)

    def _exchanged(self, own: Mapping[GroupKey, Usage]) -> dict[GroupKey, Usage]:
        """What our reports carry: every class but replication, which only for groups that
        limit it or replicated since we started (Pulsar's master too creates that class's
        entry on first use, `ResourceGroup.incrementLocalUsageStats`). Once in, it stays:
        leaving a report would let peers keep our last value until `stale_after`. So a
        fleet without geo-replication keeps the wire format older instances read
        (transport/codec.py, version 1)."""
        replication = MonitoringClass.REPLICATION_DISPATCH
        self._replicated |= {g for (g, cls), u in own.items()
                             if cls is replication and (u.bytes > 0 or u.messages > 0)}
        groups = self.config.resource_groups
        self._replicated &= set(groups)
        wanted = self._replicated | {name for name, g in groups.items()
                                     if g.replication_dispatch != RateLimit()}
        return {k: u for k, u in own.items() if k[1] is not replication or k[0] in wanted}

    def _group_results(self, own: Mapping[GroupKey, Usage], now: float,
                       ) -> tuple[GroupResult, ...]:
        results, limits = [], {}
        for group in self.config.resource_groups.values():
            rows = []
            for cls in MonitoringClass:
                key = (group.name, cls)
                limit = group.limit(cls)
                quota = Usage(bytes=limit.bytes_per_second, messages=limit.messages_per_second)
                everyone = self.peer.usages(key, now)
                if key in own:
                    everyone.setdefault(self.participant, own[key])
                    limits[key] = self.peer.local_quota(key, quota, now)
                cluster = (Usage(bytes=math.fsum(u.bytes for u in everyone.values()),
                                 messages=math.fsum(u.messages for u in everyone.values()))
                           if everyone else None)
                peers = {p: u for p, u in everyone.items() if p != self.participant}
                rows.append(GroupResult(group.name, cls, quota, own.get(key), cluster,
                                        limits.get(key), None, peers))
            rates = {g.monitoring_class: ObservedRates(g.cluster_usage.messages,
                                                       g.cluster_usage.bytes)
                     for g in rows if g.cluster_usage is not None}
            throttles = {t.monitoring_class: t for t in resource_group_throttle(
                group, rates, self.config.check_interval)}
            results += [replace(g, throttle=throttles.get(g.monitoring_class)) for g in rows]
        self._limits = limits  # the limits we run under, carried by our next report
        return tuple(results)

    # --- the cycle ------------------------------------------------------------------------
    def decide(self, agg: Aggregates, admin: AdminSnapshot | None, now: float) -> Decisions:
        topics, max_age, doubted = self._backlog(agg, admin, now)
        groups = self._groups(agg, now)
        self._last_at = now
        load = evaluate_load(agg, admin, self.config.load_manager, state=self._load, now=now)
        self._load = load.state
        with self.lock:
            ages, known = self.peer.peers(now), self.peer.known()
        return Decisions(now, topics, max_age, groups, ages, known, load, doubted)
