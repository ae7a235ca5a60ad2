"""What the engine asks the evictors to do, and what they answer: one order per
subscription cut, one result per order, every reason a closed set counted by value
(the catalogue's vocabulary of the eviction-failure counter is `EvictionFailure`); and the
enforcer lease's state as the exposition publishes it (actions/lease.py holds the lease).

Nothing here loads pulsar-client: the catalogue and the exposition import this module in
every process, and only one that evicts or holds the lease needs the client, whose import
alone costs memory and time (docs/design.md, "Start-up and memory")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Protocol

from exporter.sources.results import QuotaType

_QUOTA_TYPES = tuple(q.value for q in QuotaType)


class LeaseState(StrEnum):
    """The `state` label values of pulsar_quota_exporter_enforcer."""

    HOLDING = "holding"  # this instance evicts
    STANDING_BY = "standing_by"  # another instance holds the lease, or none can be had now
    UNFENCED = "unfenced"  # the broker does not honour exclusive producers: we evict alone


@dataclass(frozen=True)
class LeaseView:
    """What the exposition publishes about the lease."""

    state: LeaseState
    acquired: int
    lost: int


class EvictionFailure(StrEnum):
    """Why an eviction was not performed: the `reason` label values of the failure counter."""

    NO_SERVICE_URL = "no_service_url"
    CONSUMER_CONNECTED = "consumer_connected"
    NOT_FOUND = "not_found"
    TIMEOUT = "timeout"
    BROKER_ERROR = "broker_error"
    FORBIDDEN = "forbidden"  # the broker refused our credentials or our role's permissions
    SYSTEM_CURSOR = "system_cursor"  # __compaction and kin: engine/systemtopics.py
    LEASE_LOST = "lease_lost"  # another instance took the enforcer lease (actions/lease.py)
    # The broker's own stats, read just before the cut, show less to cut than the cycle saw
    # (a consumer caught up, or the cycle's figures were stale or spoofed): not cut
    STALE_SIZE = "stale_size"  # the subscription is within the size target now
    STALE_TIME = "stale_time"  # nothing in its backlog is older than the cut-off now
    OTHER = "other"


class EvictionMethod(StrEnum):
    SEEK = "seek"  # binary protocol, consumer.seek(publish_time_ms)
    ACKNOWLEDGE = "acknowledge"  # binary protocol, receive + individual acks
    ADMIN_EXPIRE = "admin_expire"  # …/expireMessages/{seconds}, the broker's precise rule
    ADMIN_SKIP = "admin_skip"


class Completion(StrEnum):
    CONFIRMED = "confirmed"
    UNCONFIRMED = "unconfirmed"  # the broker dropped the connection after the request
    PARTIAL = "partial"  # the time budget ran out before all messages were acknowledged
    STARTED = "started"  # the broker accepted it and finishes on its own (expireMessages)


@dataclass(frozen=True)
class EvictionOrder:
    """One subscription to cut: EITHER everything published before `before_publish_time`
    (epoch seconds) OR its `messages` oldest messages. `quota_type` is the label to count under."""

    topic: str  # persistent://tenant/ns/name
    subscription: str
    quota_type: str  # "time" | "size"
    before_publish_time: float | None = None
    messages: int | None = None
    # Connected consumers as the cycle's /metrics reported them (None: not reported); the
    # binary path evicts only when 0 (actions/plan.py fills it in).
    consumers: int | None = None
    # Size orders: the bytes the broker's own eviction cuts to (0.9 × the size limit, as
    # BacklogQuotaManager's reductionFactor), so that the cut can be made again from the
    # broker's stats at the moment of the cut (actions/admin.py). None: `messages` at most.
    target_bytes: float | None = None
    # Size orders: the limit itself; a backlog within it now is not evicted (the broker
    # evicts only a topic over its quota)
    limit_bytes: float | None = None
    # Size orders: the messages the cycle's cut leaves (its backlog less `messages`). The
    # binary path reads no stats: it bounds the cut by the backlog it sees now less these
    # (actions/binary.py). None: `messages` at most.
    keep_messages: int | None = None

    def __post_init__(self) -> None:
        parts = self.topic.removeprefix("persistent://").split("/", 2)
        if not self.topic.startswith("persistent://") or len(parts) != 3 or not all(parts):
            raise ValueError(f"not a persistent topic's full name: {self.topic!r}")
        if not self.subscription:
            raise ValueError("empty subscription name")
        if self.quota_type not in _QUOTA_TYPES:
            raise ValueError(f"quota_type must be one of {_QUOTA_TYPES}: {self.quota_type!r}")
        if (self.before_publish_time is None) == (self.messages is None):
            raise ValueError("give exactly one of before_publish_time and messages")
        if self.messages is not None and (
            isinstance(self.messages, bool) or not isinstance(self.messages, int)
            or self.messages < 1
        ):
            raise ValueError(f"messages must be a positive integer: {self.messages!r}")
        if self.before_publish_time is not None and not (
            math.isfinite(self.before_publish_time) and self.before_publish_time > 0
        ):
            raise ValueError(f"before_publish_time must be positive: {self.before_publish_time!r}")

    @property
    def cutoff_ms(self) -> int | None:
        """Smallest integer ms not before the cut: `pt < cutoff_ms` ⇔ `pt < before × 1000`
        for integer publish times, computed exactly (no float rounding)."""
        if self.before_publish_time is None:
            return None
        return math.ceil(Fraction(self.before_publish_time) * 1000)

    @property
    def path(self) -> tuple[str, str, str]:
        """(tenant, namespace, local name) as in the admin REST paths."""
        tenant, ns, local = self.topic.removeprefix("persistent://").split("/", 2)
        return tenant, ns, local


@dataclass(frozen=True)
class Performed:
    order: EvictionOrder
    method: EvictionMethod
    messages: int | None  # acknowledged/skipped; None when the broker does not say (seek, reset)
    completion: Completion


@dataclass(frozen=True)
class NothingToEvict:
    """The subscription holds nothing the order would remove (no backlog, or none before the
    cut); not counted as an eviction (the broker counts these, we do not)."""

    order: EvictionOrder
    detail: str


@dataclass(frozen=True)
class Skipped:
    """Deliberately not attempted: nothing to reach it with, or not safe now."""

    order: EvictionOrder
    reason: EvictionFailure  # NO_SERVICE_URL | CONSUMER_CONNECTED | LEASE_LOST
    detail: str


@dataclass(frozen=True)
class EvictionFailed:
    order: EvictionOrder
    reason: EvictionFailure  # NOT_FOUND | TIMEOUT | BROKER_ERROR | OTHER
    detail: str


EvictionResult = Performed | NothingToEvict | Skipped | EvictionFailed


def unfenced() -> bool:
    return True


def lease_lost(order: EvictionOrder) -> Skipped:
    return Skipped(order, EvictionFailure.LEASE_LOST,
                   "the enforcer lease went to another instance before this eviction")


class Evictor(Protocol):
    def perform(self, orders: Sequence[EvictionOrder],
                fence: Callable[[], bool] = unfenced) -> tuple[EvictionResult, ...]:
        """`fence()` is asked before each order: False (the lease is gone) skips it."""
        ...
