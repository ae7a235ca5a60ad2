"""From the pipeline's per-entity tables to the engine's decisions, once per cycle.

This is the seam between the columnar world (pyarrow tables out of Spark) and the engine's
frozen dataclasses. It owns the state kept between cycles: the backlog-age tables and the
resource-group usage counters, both keyed by entity and pruned of entities that vanished,
and the load verdicts' `LoadState` (ThresholdShedder's history and the bundles seen moving,
both keyed by broker or bundle and pruned the same way).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from exporter.config.model import BacklogQuotas, Config, MonitoringClass, RateLimit
from exporter.engine.agetable import AgeTables
from exporter.engine.attention import disagrees
from exporter.engine.backlog import (
    MEASURED,
    SubscriptionBacklog,
    TimeSource,
    TopicDecision,
    check_against,
)
from exporter.engine.columns import counts, floats, positions, rows_of, shared
from exporter.engine.loadview import LoadResult, LoadState, evaluate_load
from exporter.engine.participant import GroupKey, Participant, Round
from exporter.engine.quotas import Resolver
from exporter.engine.sizes import message_sizes, slowest_backlogs
from exporter.engine.systemtopics import is_system_topic
from exporter.engine.throttle import ObservedRates, ThrottleEstimate, resource_group_throttle
from exporter.engine.usage import AcceptOutcome, Increment, Usage, UsageCounter, UsageReport
from exporter.pipeline.model import Aggregates
from exporter.sources.model import AdminSnapshot, TopicStats


@dataclass(frozen=True)
class _Subscriptions:
    """A cycle's subscriptions as the check reads them, grouped by topic row: row r's are
    items `starts[r]` to `starts[r + 1]` of each list, in the order the broker printed
    them (one list a column, not a tuple a subscription gathered in a dict a topic)."""

    starts: list[int]
    names: list[str]
    backlogs: list[float]
    estimates: list[float]  # the age tables' estimate (NaN: none)
    bounds: list[bool]  # whether that estimate is a lower bound


NO_QUOTAS = BacklogQuotas()  # what a system topic is checked against: nothing


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
    topics: tuple[TopicDecision, ...]
    namespace_max_age: Mapping[str, float]
    groups: tuple[GroupResult, ...]
    peer_ages: Mapping[str, float] = field(default_factory=dict)  # peer → seconds since report
    participants: int = 1  # known, ourselves included
    load: LoadResult | None = None  # load verdicts (the configured Pulsar shedder's rules)
    # Topics whose Pulsar limits, as resolved here, differ from those their broker prints it
    # applies: a topic-level policy set since it was last read (sources/policies.py).
    doubted: frozenset[str] = frozenset()


class Decider:
    """Stateful across cycles; `decide` is called once per cycle from the check loop."""

    def __init__(self, config: Config, participant: str | None = None) -> None:
        self.config = config
        self.participant = participant or config.resource_group_engine.participant
        self.ages = AgeTables()
        # (topic, subscription) → (publish time, backlog) last read from the broker itself
        self._measured: dict[tuple[str, str], tuple[float, int]] = {}
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
    def _subscriptions(self, agg: Aggregates, at: np.ndarray, backlogs: np.ndarray,
                       rows: np.ndarray, published: np.ndarray, per_entries: np.ndarray,
                       now: float) -> tuple[_Subscriptions, dict[tuple[str, str], float]]:
        """Every subscription's backlog and the age tables' estimate of it, by topic row
        (`at`: each one's topic row, -1 where none; `rows`: each topic's table, -1 where
        none or not observed now); per (topic, subscription), the age its broker printed
        (PIP-492's gauge, Pulsar >= 5.0)."""
        subscriptions = agg.subscriptions
        # A subscription of no topic (at -1) reads the last of each: no table.
        rows, published = np.append(rows, -1), np.append(published, 0)
        # int(backlog), then round(messages × per_entry): the backlog in entries (sizes.py)
        entries = np.round(np.trunc(backlogs) * np.append(per_entries, 1.0)[at])
        estimated, lower = self.ages.ages(rows[at], np.clip(entries, 0, 2**62).astype(np.int64),
                                          published[at], now)
        order = np.argsort(at, kind="stable")  # by topic row; those of no topic first
        grouped = _Subscriptions(
            np.searchsorted(at[order], np.arange(len(rows))).tolist(),
            # a subscription's name is its key: never null
            cast(list[str], shared(subscriptions["subscription"].take(order))),
            backlogs[order].tolist(),
            estimated[order].tolist(), lower[order].tolist())
        printed = floats(subscriptions["backlog_age_seconds"], -1.0)
        known = np.flatnonzero(np.isfinite(printed) & (printed >= 0))  # none before 5.0
        ages = dict(zip(zip(subscriptions["topic"].take(known).to_pylist(),
                            subscriptions["subscription"].take(known).to_pylist(),
                            strict=True), printed[known].tolist(), strict=True))
        return grouped, ages

    def _topic_state(self, topic: str, subs: _Subscriptions, lo: int, hi: int,
                     admin: TopicStats | None,
                     admin_at: float, now: float, broker_age: float | None,
                     measured: dict[tuple[str, str], tuple[float, int]],
                     sub_ages: Mapping[tuple[str, str], float],
                     ) -> tuple[SubscriptionBacklog, ...]:
        """Each subscription's oldest publish time, best source first: its own age where
        the broker has one (PIP-492, Pulsar >= 5.0: the admin REST's per subscription, else
        its /metrics gauge, `sub_ages`), the admin REST's topic-level
        `oldestBacklogMessageAgeSeconds` (its subscription named), else the broker's PIP-323
        gauge `broker_age`, else our age table's estimate (NaN where none; with whether it
        is a lower bound). The gauge
        (`PersistentTopic.getBestEffortOldestUnacknowledgedMessageAgeSeconds`) is the
        slowest cursor's oldest position as of the last backlog-quota check, so it goes to
        the subscription with the largest backlog; no estimate of another is older.
        A subscription measured by the broker in an earlier cycle and not now keeps that
        publish time while its backlog has not shrunk (`measured`: this cycle's record).
        The topic's subscriptions are items `lo` to `hi` of `subs`."""
        admin_subs = {s.name: s for s in admin.subscriptions} if admin else {}
        precise, precise_time = None, None  # the admin REST's topic-level oldest, when given
        if admin and admin.oldest_backlog_message_age_seconds is not None:
            precise = admin.oldest_backlog_message_subscription
            precise_time = admin_at - admin.oldest_backlog_message_age_seconds
        slowest, slowest_time = None, None  # the gauge's subscription and its publish time
        if precise is None and broker_age is not None:
            backlogged = [(-b, n) for n, b in zip(subs.names[lo:hi], subs.backlogs[lo:hi],
                                                  strict=True) if b > 0]
            if backlogged:
                slowest, slowest_time = min(backlogged)[1], now - broker_age
        states = []
        names, backlogs, estimates, bounds = subs.names, subs.backlogs, subs.estimates, \
            subs.bounds
        for j in range(lo, hi):
            name, messages, estimate = names[j], int(backlogs[j]), estimates[j]
            sub = admin_subs.get(name) if admin_subs else None
            size = None if sub is None else sub.backlog_size
            if messages <= 0:  # nothing unacknowledged: no publish time to look for
                states.append(SubscriptionBacklog(name, messages, size))
                continue
            publish_time: float | None = None
            source = TimeSource.ESTIMATED
            own = None if sub is None else sub.oldest_backlog_message_age_seconds
            if own is not None:
                publish_time, source = admin_at - own, TimeSource.PRECISE
            elif sub_ages and (topic, name) in sub_ages:
                publish_time, source = now - sub_ages[(topic, name)], TimeSource.BROKER
            elif name == precise:
                publish_time, source = precise_time, TimeSource.PRECISE
            elif name == slowest:
                publish_time, source = slowest_time, TimeSource.BROKER
            elif estimate == estimate:  # not NaN: the age table has one
                publish_time = now - estimate
                if slowest_time is not None:
                    publish_time = max(publish_time, slowest_time)
                elif bounds[j]:
                    source = TimeSource.LOWER_BOUND
            if source in MEASURED and publish_time is not None:  # always, for those two
                measured[(topic, name)] = (publish_time, messages)
            elif (last := self._measured.get((topic, name))) is not None \
                    and messages >= last[1] and (publish_time is None or publish_time > last[0]):
                # Measured before, not now: the topic was just loaded again (a bundle moved,
                # a broker restarted) and its owner has not run its backlog-quota check yet,
                # while its counters restarted at 0 and reset our age table. A backlog that
                # has not shrunk still holds that oldest message, as far as we can tell.
                publish_time, source = last[0], TimeSource.ESTIMATED
                measured[(topic, name)] = last
            states.append(SubscriptionBacklog(name, messages, size, publish_time, source))
        return tuple(states)

    def _backlog(self, agg: Aggregates, admin: AdminSnapshot | None, now: float,
                 ) -> tuple[tuple[TopicDecision, ...], dict[str, float], frozenset[str]]:
        stats = {t.topic: t for t in admin.topics} if admin else {}
        admin_at = admin.fetched_at if admin else now
        quotas = self.config.backlog_quotas
        limits, unlimited = Resolver(quotas, admin.quotas if admin else None), Resolver(NO_QUOTAS)
        decisions: list[TopicDecision] = []
        max_age: dict[str, float] = {}
        doubted: list[str] = []
        measured: dict[tuple[str, str], tuple[float, int]] = {}
        topics, namespaces, ages, sizes, times = rows_of(
            agg.topics, ("topic", "namespace", "backlog_age_seconds",
                         "backlog_quota_limit_bytes", "backlog_quota_limit_seconds"))
        published, counted = counts(agg.topics["msg_in_total"])
        at = positions(agg.subscriptions["topic"], agg.topics["topic"])
        backlogs = floats(agg.subscriptions["backlog_messages"], 0.0)
        averages, per_entries = message_sizes(
            agg.topics, slowest_backlogs(at, backlogs, len(topics)), published)
        # Our own topics (usage reports, the enforcer lease) are no backlog to check.
        # pulsar-lite names them without their domain, so they arrive as persistent://:
        # compare what follows the domain.
        ours = {t.partition("://")[2] for t in (self.config.resource_group_engine.topic,
                                                quotas.lock_topic)}
        endings = tuple(ours)  # a test of the ending first: most topics fail it, cheaply
        checked = [not (t.endswith(endings) and t.partition("://")[2] in ours) for t in topics]
        # Every table first, the tables over their bound thinned together (agetable.py).
        observed = counted & np.array(checked, bool)
        rows = self.ages.observe_all(topics, published, observed, now)
        subs, sub_ages = self._subscriptions(agg, at, backlogs, np.where(observed, rows, -1),
                                             published, per_entries, now)
        names = self.ages.names(rows)  # one str a topic across cycles, not one each
        system = not quotas.system_topics
        # Whether the limits resolved here disagree with those a broker printed: the same
        # for every topic of a namespace with the same printed limits, so asked once.
        disagreeing: dict[tuple[int, float | None, float | None], bool] = {}
        for topic, name, check, ns, age, avg, limit_size, limit_time, lo, hi in zip(
                topics, names, checked, namespaces, ages, averages, sizes, times,
                subs.starts[:-1], subs.starts[1:], strict=True):
            if not check:
                continue
            topic = name or topic
            # The broker prints -1 until its backlog-quota check has measured the age.
            broker_age = age if age is not None and math.isfinite(age) and age >= 0 else None
            states = self._topic_state(topic, subs, lo, hi, stats.get(topic), admin_at, now,
                                       broker_age, measured, sub_ages)
            # the broker's SystemTopic is never over a quota
            resolver = unlimited if system and is_system_topic(topic) else limits
            decision = check_against(topic, ns, states, avg, resolver(topic, ns), now)
            decisions.append(decision)
            if (resolved := decision.limits) is not None:
                # by identity: its decision holds it, so no other object takes its id
                key = (id(resolved), limit_size, limit_time)
                if (differs := disagreeing.get(key)) is None:
                    differs = disagreeing[key] = disagrees(resolved, limit_size, limit_time)
                if differs:
                    doubted.append(topic)
            if decision.backlog_age_seconds is not None:
                max_age[ns] = max(max_age.get(ns, 0.0), decision.backlog_age_seconds)
        self.ages.retain(topics)
        self._measured = measured  # only topics seen this cycle: bounded like the age tables
        return tuple(decisions), max_age, frozenset(doubted)

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
