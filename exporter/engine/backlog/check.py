"""Backlog quota: which quota applies to a topic, whether it is exceeded, and how far to evict.

Pulsar's broker (`BrokerService.monitorBacklogQuota`, `PersistentTopic`,
`BacklogQuotaManager`) is the reference; where we differ it is on purpose, as listed here.

- Which quota: engine/backlog/quotas.py (the YAML's whole objects, Pulsar's per-type resolution, or
  the YAML over Pulsar). Each quota type keeps its own policy, as in Pulsar: an eviction
  plan is made for the types whose policy is `consumer_backlog_eviction`.
- The topic backlog is that of the subscription holding the oldest unacknowledged message
  (PIP-323). Where no subscription's publish time is known we fall back to the one with the
  largest backlog (without individual-ack holes it is the same subscription) and say so.
- Size exceeded: strictly more bytes than the limit (Pulsar: `backlog >= limit`,
  `isSizeBacklogExceeded`; a backlog exactly at the limit is within what the operator
  wrote). Time exceeded: the oldest message is strictly older than the limit, as in Pulsar
  (`now > publish + limit`). Disabled: `None`, a negative size, a time ≤ 0 (Pulsar's -1 /
  ≤ 0 conventions).
- Eviction goes to 90 % of the limit (`EVICTION_TARGET`), as the broker's does: for size
  always (`dropBacklogForSizeLimit`, reductionFactor 0.9), for time in its precise mode
  (`dropBacklogForTimeLimit` expires at `(int)(0.9 × limitTime)`). The hysteresis keeps a
  topic that just went over from being evicted again at every check. Size: per
  subscription the broker's own count, `skip_count` (`(int)((backlog − target) / backlog ×
  entries)`, which may leave it a message over the target, as the broker does). Time: the
  cut-off `now − 0.9 × limit`; messages published before it go, nothing newer.
- Which subscriptions. Size: as Pulsar's eviction loop (skip on the slowest cursor, recompute
  the topic backlog, repeat while it is over the target): oldest-first, every subscription
  over the target until the first one within it. Time: every subscription with messages
  older than the cut-off (Pulsar expires on all subscriptions), including those whose
  publish time is unknown: expiring by cut-off removes nothing a time limit allows to keep.
- Both limits in one check: Pulsar evaluates the time quota only when the size quota is not
  exceeded; we report both and plan both (each cut is required on its own; applied together
  a subscription loses the larger of the two heads).
- The decision ignores `enforce`: actions/ performs a plan or only counts it (dry run).
  `producer_request_hold` / `producer_exception` are exported as what the broker would do.

Pure: no I/O, no clock; `now` is epoch seconds passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from fractions import Fraction

from exporter.config.settings import BacklogQuota, BacklogQuotas, RetentionPolicy
from exporter.engine.backlog.quotas import QuotaSource, ResolvedQuota, configured, resolve
from exporter.engine.javamath import java_int
from exporter.sources.results import PulsarQuotas, QuotaType

__all__ = ["QuotaSource", "QuotaType"]  # re-exported: they were defined here first

EVICTION_TARGET = Fraction(9, 10)  # of the limit, as BacklogQuotaManager's reductionFactor


class TimeSource(StrEnum):
    # The admin REST's `oldestBacklogMessageAgeSeconds`, as the broker's last backlog-quota
    # check measured it: the oldest message read with `preciseTimeBasedBacklogQuotaCheck`,
    # else the close of its ledger (Pulsar's default; PersistentTopic).
    ADMIN = "admin"
    BROKER = "broker"  # the broker's PIP-323 gauge on /metrics (the slowest cursor's)
    ESTIMATED = "estimated"  # our age table (agetable.py), interpolated
    LOWER_BOUND = "lower_bound"  # age table: published at or before this time, maybe earlier


MEASURED = frozenset({TimeSource.ADMIN, TimeSource.BROKER})  # the broker's own, not ours

class LimitStatus(StrEnum):
    NO_LIMIT = "no_limit"
    WITHIN = "within"
    EXCEEDED = "exceeded"
    UNKNOWN = "unknown"  # a limit is set but the measure is missing: no action on it


class HolderBasis(StrEnum):
    """How the subscription that defines the topic backlog was chosen."""

    OLDEST_MESSAGE = "oldest_message"  # PIP-323's definition
    LARGEST_BACKLOG = "largest_backlog"  # fallback: no publish time known
    NO_BACKLOG = "no_backlog"  # nothing unacknowledged on any subscription


class SizeBasis(StrEnum):
    REPORTED = "reported"  # the source gave the subscription's backlog bytes
    FROM_AVERAGE = "from_average"  # messages × the topic's average message size
    UNKNOWN = "unknown"


class Action(StrEnum):
    """What the broker does (or would do) about this topic now."""

    NONE = "none"
    PRODUCER_REQUEST_HOLD = RetentionPolicy.PRODUCER_REQUEST_HOLD.value
    PRODUCER_EXCEPTION = RetentionPolicy.PRODUCER_EXCEPTION.value
    CONSUMER_BACKLOG_EVICTION = RetentionPolicy.CONSUMER_BACKLOG_EVICTION.value


# The members the check reads for every topic, as module names: an Enum's class attribute
# costs ten times a global's in Python 3.11, and the check reads a dozen a topic.
_NO_LIMIT, _WITHIN = LimitStatus.NO_LIMIT, LimitStatus.WITHIN
_EXCEEDED, _UNKNOWN = LimitStatus.EXCEEDED, LimitStatus.UNKNOWN
_OLDEST, _LARGEST = HolderBasis.OLDEST_MESSAGE, HolderBasis.LARGEST_BACKLOG
_NO_BACKLOG = HolderBasis.NO_BACKLOG
_REPORTED, _FROM_AVERAGE = SizeBasis.REPORTED, SizeBasis.FROM_AVERAGE
_SIZE_UNKNOWN = SizeBasis.UNKNOWN
_NONE = Action.NONE


# --- input --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionBacklog:
    name: str
    backlog_messages: int
    backlog_bytes: int | None = None  # None: the source does not report it per subscription
    oldest_publish_time: float | None = None  # epoch seconds; None: unknown
    time_source: TimeSource = TimeSource.ESTIMATED


@dataclass(frozen=True, slots=True)
class TopicBacklogState:
    topic: str  # persistent://tenant/ns/t
    namespace: str  # tenant/ns
    subscriptions: tuple[SubscriptionBacklog, ...]
    average_message_size: float | None = None  # bytes/message, from cumulative counters


# --- output -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SizeEviction:
    """Skip `skip_messages` of the subscription's oldest messages."""

    subscription: str
    skip_messages: int
    backlog_bytes: float  # before the skip
    bytes_per_message: float  # the subscription's own average where known, else the topic's

    @property
    def remaining_bytes(self) -> float:
        return self.backlog_bytes - self.skip_messages * self.bytes_per_message


@dataclass(frozen=True, slots=True)
class TimeEviction:
    """Drop the subscription's messages published before `cutoff` (epoch seconds)."""

    subscription: str
    cutoff: float
    oldest_publish_time: float | None  # None: unknown; the cut then removes only what is older


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    size: tuple[SizeEviction, ...] = ()
    time: tuple[TimeEviction, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.size and not self.time

    @property
    def quota_types(self) -> frozenset[QuotaType]:
        return frozenset(
            kind
            for kind, part in ((QuotaType.SIZE, self.size), (QuotaType.TIME, self.time))
            if part
        )


@dataclass(frozen=True, slots=True)
class TopicDecision:
    topic: str
    namespace: str
    quota: BacklogQuota
    quota_source: QuotaSource
    holder: str | None  # subscription defining the topic backlog
    holder_basis: HolderBasis
    backlog_messages: int
    backlog_bytes: float | None
    size_basis: SizeBasis
    oldest_publish_time: float | None
    time_source: TimeSource | None
    backlog_age_seconds: float | None  # 0 with no backlog; None: unknown (series absent)
    size: LimitStatus
    time: LimitStatus
    action: Action
    plan: EvictionPlan  # only the types whose policy is consumer_backlog_eviction
    limits: ResolvedQuota | None = None  # per type: value, policy, origin (quotas.py)
    # every subscription as checked: its backlog and oldest publish time, with its source
    subscriptions: tuple[SubscriptionBacklog, ...] = ()

    @property
    def exceeded(self) -> frozenset[QuotaType]:
        return frozenset(
            kind
            for kind, status in ((QuotaType.SIZE, self.size), (QuotaType.TIME, self.time))
            if status is LimitStatus.EXCEEDED
        )


_NO_PLAN = EvictionPlan()  # what most topics get: one shared object, it is frozen


# --- the engine ---------------------------------------------------------------------------


def effective_quota(
    topic: str, namespace: str, quotas: BacklogQuotas
) -> tuple[BacklogQuota, QuotaSource]:
    """The most specific configured quota object, whole, and the level it came from
    (quotas.configured: a partition has its partitioned topic's quota unless it has its own)."""
    return configured(topic, namespace, quotas)


def check(state: TopicBacklogState, quotas: BacklogQuotas, now: float,
          pulsar: PulsarQuotas | None = None) -> TopicDecision:
    """Check one topic's backlog against its quota and plan the eviction it requires.
    `pulsar`: Pulsar's own policies, used unless `quotas.source` is `config`."""
    return check_against(state.topic, state.namespace, state.subscriptions,
                         state.average_message_size,
                         resolve(state.topic, state.namespace, quotas, pulsar), now)


def check_against(topic: str, namespace: str, subscriptions: tuple[SubscriptionBacklog, ...],
                  average_message_size: float | None, limits: ResolvedQuota, now: float,
                  ) -> TopicDecision:
    """`check` of a topic's parts, its quota already resolved (quotas.Resolver, once a
    cycle): the decide makes no `TopicBacklogState` a topic (docs/design.md, "Publishing
    the decisions")."""
    quota, source = limits.quota, limits.source
    ordered = _oldest_first(subscriptions)
    avg = _usable(average_message_size)
    limit_size, limit_time = quota.limit_size, quota.limit_time
    cutoff = None if limit_time is None else now - limit_time

    # Built positionally, in field order: one decision a topic, and keywords cost more than
    # half as much again (Python 3.11; docs/design.md, "Building the decisions").
    if not ordered:
        return TopicDecision(
            topic, namespace, quota, source,
            None, _NO_BACKLOG, 0, 0.0, _REPORTED,  # holder, bytes
            None, None, 0.0,  # oldest publish time, its source, age
            _NO_LIMIT if limit_size is None else _WITHIN,
            _NO_LIMIT if cutoff is None else _WITHIN,
            _NONE, _NO_PLAN, limits, subscriptions)

    holder = ordered[0]
    oldest = holder.oldest_publish_time
    holder_bytes, size_basis = _bytes(holder, avg)
    if limit_size is None:
        size = _NO_LIMIT
    elif holder_bytes is None:
        size = _UNKNOWN
    else:
        numerator, denominator = holder_bytes
        size = _EXCEEDED if numerator > limit_size * denominator else _WITHIN
    if cutoff is None:
        time = _NO_LIMIT
    elif oldest is None:
        time = _UNKNOWN
    else:
        time = _EXCEEDED if oldest < cutoff else _WITHIN

    # Pulsar checks size first and acts on the first exceeded type's policy.
    acting = limits.size.policy if size is _EXCEEDED else \
        limits.time.policy if time is _EXCEEDED else None
    action, plan = _NONE, _NO_PLAN
    if acting is not None:
        action, quota = Action(acting.value), replace(quota, policy=acting)
        evicting = RetentionPolicy.CONSUMER_BACKLOG_EVICTION
        plan = EvictionPlan(  # a limit is exceeded only where there is one (not None)
            size=(_size_plan(ordered, avg, limit_size)
                  if size is _EXCEEDED and limit_size is not None
                  and limits.size.policy is evicting else ()),
            time=(_time_plan(ordered, now - limit_time * EVICTION_TARGET)
                  if time is _EXCEEDED and limit_time is not None
                  and limits.time.policy is evicting else ()),
        )
    return TopicDecision(
        topic, namespace, quota, source,
        holder.name,
        _LARGEST if oldest is None else _OLDEST,
        holder.backlog_messages,
        None if holder_bytes is None else holder_bytes[0] / holder_bytes[1],
        size_basis,
        oldest,
        None if oldest is None else holder.time_source,
        None if oldest is None else max(0.0, now - oldest),  # the age
        size, time, action, plan, limits, subscriptions)


def _usable(avg: float | None) -> float | None:
    return avg if avg is not None and math.isfinite(avg) and avg >= 0 else None


def _oldest_first(subscriptions: Sequence[SubscriptionBacklog]) -> list[SubscriptionBacklog]:
    """Subscriptions with a backlog, the one holding the topic's oldest message first.

    Known publish times first, oldest first; then those with unknown times, largest backlog
    first (the slowest cursor when acks leave no holes). Names break ties, for determinism.
    """
    backlogged = [s for s in subscriptions if s.backlog_messages > 0]
    if len(backlogged) > 1:  # most topics have one or none: nothing to order
        backlogged.sort(key=_order)
    return backlogged


def _order(s: SubscriptionBacklog) -> tuple[bool, float, int, str]:
    """Unknown times after known ones (all the same time among themselves: 0)."""
    t = s.oldest_publish_time
    return t is None, 0.0 if t is None else t, -s.backlog_messages, s.name


def _bytes(sub: SubscriptionBacklog, avg: float | None,
           ) -> tuple[tuple[int, int] | None, SizeBasis]:
    """The subscription's backlog bytes, exactly, as a numerator and a denominator. Integers,
    not a Fraction: the check asks for every topic, and a Fraction costs far more than the
    comparison. Their quotient (int / int) is the nearest float, as the Fraction's was."""
    if sub.backlog_bytes is not None:
        return (sub.backlog_bytes, 1), _REPORTED
    if avg is not None:
        numerator, denominator = avg.as_integer_ratio()
        return (sub.backlog_messages * numerator, denominator), _FROM_AVERAGE
    return None, _SIZE_UNKNOWN


def _bytes_per_message(sub: SubscriptionBacklog, avg: float | None) -> Fraction | None:
    """The subscription's own average where known (what Pulsar's skip factor uses)."""
    if sub.backlog_bytes is not None:
        return Fraction(sub.backlog_bytes, sub.backlog_messages)
    return None if avg is None else Fraction(avg)


def _size_plan(
    ordered: Sequence[SubscriptionBacklog], avg: float | None, limit_size: float
) -> tuple[SizeEviction, ...]:
    """Every subscription over the target, slowest first, skips down to it (the loop of
    BacklogQuotaManager.dropBacklogForSizeLimit, per subscription and in messages)."""
    limit = Fraction(limit_size) * EVICTION_TARGET
    java_target = float(EVICTION_TARGET) * float(limit_size)  # Java's double product
    plan: list[SizeEviction] = []
    for sub in ordered:
        exact, _ = _bytes(sub, avg)
        backlog = None if exact is None else Fraction(*exact)
        per_message = _bytes_per_message(sub, avg)
        if backlog is None or per_message is None or backlog <= limit or per_message <= 0:
            break  # the topic backlog is within the limit from here on (or unknowable)
        skip = skip_count(float(backlog), java_target, sub.backlog_messages)
        if skip <= 0:
            break  # the broker's "no messages to skip": its loop stops there
        plan.append(SizeEviction(sub.name, skip, float(backlog), float(per_message)))
    return tuple(plan)


def skip_count(backlog_bytes: float, target_bytes: float, entries: int) -> int:
    """How many of `entries` the broker skips to bring `backlog_bytes` to `target_bytes`:
    `BacklogQuotaManager.dropBacklogForSizeLimit`'s `(int) ((backlogSize − targetSize) /
    backlogSize × entriesInBacklog)`, in doubles as Java computes it. The plan and the
    eviction's fresh re-count (actions/admin.py) both use it, so the status says what is cut."""
    if backlog_bytes <= 0 or entries <= 0:
        return 0
    return max(0, java_int((backlog_bytes - target_bytes) / backlog_bytes * entries))


def _time_plan(
    ordered: Sequence[SubscriptionBacklog], cutoff: float
) -> tuple[TimeEviction, ...]:
    return tuple(
        TimeEviction(sub.name, cutoff, sub.oldest_publish_time)
        for sub in ordered
        if sub.oldest_publish_time is None or sub.oldest_publish_time < cutoff
    )
