"""From the engine's decisions to evictions: the dry run, the size-cut hold-back, the counts.

Plans hold only the quota types whose policy is `consumer_backlog_eviction`. With
enforcement off each (topic, quota type) is counted once per check as "would evict" and
logged once while it lasts. With it on, orders go to the evictor with the connected
consumers the cycle saw on each subscription (the binary path evicts only when there are
none), one eviction per topic and quota type is counted per check, as Pulsar counts them,
and every failure is counted by reason. Each check's counts come back as `Acted`, which the
running tallies add up (exposition/build.py). Of several enforcing instances only the holder
of the enforcer lease evicts (actions/lease.py); the others decide, export and stand by.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from exporter.actions.orders import (
    EvictionFailed,
    EvictionFailure,
    EvictionOrder,
    Evictor,
    Performed,
    Skipped,
    unfenced,
)
from exporter.engine.backlog.check import EVICTION_TARGET
from exporter.engine.decide import Decisions
from exporter.engine.systemtopics import is_system_cursor
from exporter.pipeline.aggregates import Aggregates

if TYPE_CHECKING:  # pulsar-client, loaded only by an instance that enforces
    from exporter.actions.lease import EnforcerLease

log = logging.getLogger(__name__)

Consumers = Mapping[tuple[str, str], int | None]  # (topic, subscription) → connected
Counted = tuple[str, str, str]  # (namespace, topic, quota_type)


@dataclass(frozen=True, slots=True)
class Acted:
    """One check's enforcement as counts: the (namespace, topic, quota type) evicted and
    those that would have been, each at most once per check as Pulsar counts them, and the
    reason of every order not performed, once per order."""

    evictions: frozenset[Counted] = frozenset()
    would_evict: frozenset[Counted] = frozenset()
    failures: tuple[str, ...] = ()


def consumers_seen(agg: Aggregates, topics: Collection[str]) -> dict[tuple[str, str], int | None]:
    """Connected consumers per (topic, subscription) of these topics (those with orders),
    as the cycle's /metrics reported them (`pulsar_subscription_consumers_count`); None
    where the broker printed none. Only theirs: every subscription's, as Python values in
    a dict, is hundreds of MB at a large fleet's scale the moment anything is to be evicted
    (docs/design.md, "The driver once every age table is full")."""
    table = agg.subscriptions
    table = table.filter(pc.is_in(table["topic"], pa.array(sorted(topics), pa.string())))
    topics, names, counts = (table[c].to_pylist() for c in ("topic", "subscription", "consumers"))
    return {(t, n): int(c) if c is not None and math.isfinite(c) else None
            for t, n, c in zip(topics, names, counts, strict=True)}


def orders_for(decisions: Decisions, consumers: Consumers | None = None) -> list[EvictionOrder]:
    seen = consumers or {}
    orders = []
    for d in decisions.topics.over():  # only a topic over a quota has a plan
        limit = None if d.quota.limit_size is None else float(d.quota.limit_size)
        target = None if limit is None else float(EVICTION_TARGET) * limit  # Java's product
        orders += [EvictionOrder(d.topic, s.subscription, "size", messages=s.skip_messages,
                                 consumers=seen.get((d.topic, s.subscription)),
                                 target_bytes=target, limit_bytes=limit,
                                 keep_messages=round(s.remaining_bytes / s.bytes_per_message))
                   for s in d.plan.size if s.skip_messages > 0]
        orders += [EvictionOrder(d.topic, t.subscription, "time", before_publish_time=t.cutoff,
                                 consumers=seen.get((d.topic, t.subscription)))
                   for t in d.plan.time]
    return orders


class Enforcement:
    """What must outlive a check: dry-run lines already logged, and the backlog each size
    cut was made at (`_not_yet_seen_by_broker`)."""

    def __init__(self) -> None:
        self._logged_dry_run: set[tuple[str, str]] = set()
        self._size_cuts: dict[tuple[str, str], float | None] = {}
        self._logged_system: set[tuple[str, str]] = set()

    def act(self, decisions: Decisions, *, enforce: bool, evictor: Evictor,
            consumers: Callable[[Collection[str]], Consumers],
            lease: EnforcerLease | None = None,
            system_cursors: bool = False) -> Acted:
        """`consumers` is called only when there is something to evict, with the topics
        that have orders. `lease`: enforcing with others, evict only while holding it
        (None: alone, as a test's evictor is).
        `system_cursors` (backlog_quotas.evict_system_cursors): cut `__compaction` too."""
        namespaces = {d.topic: d.namespace for d in decisions.topics.over()}
        if not enforce:
            return Acted(would_evict=self._dry_run(orders_for(decisions), namespaces))
        if lease is not None and not lease.refresh():
            self._size_cuts.clear()  # the holder cuts; its cuts are not ours to wait on
            return Acted()
        orders = orders_for(decisions)
        if not orders:
            self._size_cuts.clear()
            return Acted()
        orders = orders_for(decisions, consumers({o.topic for o in orders}))
        failures: list[str] = []
        if not system_cursors:
            orders = self._without_system_cursors(orders, failures)
        backlog_bytes = {(d.topic, s.subscription): s.backlog_bytes
                         for d in decisions.topics.over() for s in d.plan.size}
        performed: set[Counted] = set()
        fence = lease.confirm if lease is not None else unfenced
        for result in evictor.perform(self._not_yet_seen_by_broker(orders, backlog_bytes),
                                      fence):
            o = result.order
            if isinstance(result, Performed):
                performed.add((namespaces[o.topic], o.topic, o.quota_type))
                if o.messages is not None:
                    self._size_cuts[(o.topic, o.subscription)] = backlog_bytes.get(
                        (o.topic, o.subscription))
                log.info("evicted %s on %s (%s quota, %s)", o.subscription, o.topic,
                         o.quota_type, result.method.value)
            elif isinstance(result, EvictionFailed | Skipped):
                failures.append(result.reason.value)
                log.warning("eviction of %s on %s not performed: %s (%s)", o.subscription,
                            o.topic, result.reason.value, result.detail)
        # one eviction per topic and quota type per check, as Pulsar
        return Acted(evictions=frozenset(performed), failures=tuple(failures))

    def _without_system_cursors(self, orders: list[EvictionOrder],
                                failures: list[str]) -> list[EvictionOrder]:
        """`__compaction` and its kind (engine/systemtopics.py) are left alone, counted as
        `system_cursor` at every check they would be cut, logged once while they are."""
        kept, held = [], set()
        for o in orders:
            if not is_system_cursor(o.subscription):
                kept.append(o)
                continue
            failures.append(EvictionFailure.SYSTEM_CURSOR.value)
            held.add((o.topic, o.subscription))
            if (o.topic, o.subscription) not in self._logged_system:
                log.warning("not evicting the system cursor %s on %s (%s quota): set "
                            "backlog_quotas.evict_system_cursors to cut it as the broker would",
                            o.subscription, o.topic, o.quota_type)
        self._logged_system = held
        return kept

    def _dry_run(self, orders: list[EvictionOrder],
                 namespaces: Mapping[str, str]) -> frozenset[Counted]:
        seen: set[tuple[str, str]] = set()
        for o in orders:
            key = (o.topic, o.quota_type)
            if key in seen:
                continue
            seen.add(key)
            if key not in self._logged_dry_run:
                log.info("dry run: would evict %s on %s (%s quota)", o.subscription, o.topic,
                         o.quota_type)
        self._logged_dry_run = seen
        return frozenset((namespaces[topic], topic, kind) for topic, kind in seen)

    def _not_yet_seen_by_broker(self, orders: list[EvictionOrder],
                                now: dict[tuple[str, str], float]) -> list[EvictionOrder]:
        """Size cuts skip a number of messages, so repeating one on numbers the broker has
        not refreshed since (pulsar-lite's gauges lag by up to 5 s) would drop more than
        the quota asks. A size cut waits until the subscription's backlog has changed
        since the last cut. Time cuts (a publish-time cutoff) are safe to repeat. `now`:
        this cycle's backlog bytes per (topic, subscription) with a size cut planned."""
        kept = []
        for o in orders:
            key = (o.topic, o.subscription)
            if (o.messages is not None and key in self._size_cuts
                    and self._size_cuts[key] == now.get(key)):
                log.debug("size cut of %s on %s waits for fresh broker numbers",
                          o.subscription, o.topic)
                continue
            kept.append(o)
        self._size_cuts = {k: v for k, v in self._size_cuts.items() if now.get(k) == v}
        return kept
