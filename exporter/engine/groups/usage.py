"""Resource-group usage bookkeeping: local usage from counters, everyone's from reports.

- `UsageCounter` turns cumulative per-topic counters into per-period usage by difference,
  as Pulsar's `ResourceGroupService.updateStatsWithDiff` does.
- `UsageMap` keeps RG × monitoring class → participant → last report, as Pulsar's
  `ResourceGroup.usageFromOtherBrokers` (which also holds the broker's own report: totals
  include oneself). Unlike Pulsar it honours a goodbye, and it ages entries by a time the
  caller passes in (no clock reads in the engine).

Outcomes are small closed types, so callers count them by kind (accepted, dropped,
rejected by reason; fresh, stale, unknown) instead of decoding booleans.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from exporter.config.settings import MonitoringClass
from exporter.engine.groups.allocators import Observed


class Dimension(StrEnum):
    """Pulsar rate-limits and reports bytes and messages separately (BytesAndMessagesCount)."""

    BYTES = "bytes"
    MESSAGES = "messages"


@dataclass(frozen=True)
class Usage:
    """Bytes and messages, per period (a usage, a limit) or cumulative (a counter)."""

    bytes: float
    messages: float

    def of(self, dimension: Dimension) -> float:
        return self.bytes if dimension is Dimension.BYTES else self.messages

    def is_finite(self) -> bool:
        return math.isfinite(self.bytes) and math.isfinite(self.messages)


@dataclass(frozen=True)
class UsageReport:
    """One participant's usage in one RG and class over the last period. `limit` is the
    local limit it ran under (-1: unlimited), which Pulsar's wire format lacks and the
    `fair` allocator needs. A goodbye carries usage 0 and says "forget me now"."""

    resource_group: str
    monitoring_class: MonitoringClass
    participant: str
    usage: Usage
    limit: Usage | None = None
    goodbye: bool = False


# --- outcomes -----------------------------------------------------------------------------


class RejectReason(StrEnum):
    MISSING_NAME = "missing_name"  # empty resource group or participant
    NOT_FINITE = "not_finite"  # NaN or infinite usage or limit
    NEGATIVE_USAGE = "negative_usage"
    GOODBYE_WITH_USAGE = "goodbye_with_usage"  # a goodbye must carry usage 0


@dataclass(frozen=True)
class Accepted:
    participant: str
    joined: bool  # not in the map before (new, or back after expiry / goodbye)


@dataclass(frozen=True)
class Dropped:
    """A goodbye: the participant is gone from the map at once."""

    participant: str
    was_known: bool


@dataclass(frozen=True)
class EntryRejected:
    reason: RejectReason


AcceptOutcome = Accepted | Dropped | EntryRejected


@dataclass(frozen=True)
class Fresh:
    report: UsageReport
    age: float


@dataclass(frozen=True)
class Stale:
    """Still held, but older than `stale_after`: no longer counted in totals."""

    report: UsageReport
    age: float


@dataclass(frozen=True)
class Unknown:
    pass


UNKNOWN = Unknown()
LookupOutcome = Fresh | Stale | Unknown


@dataclass(frozen=True)
class Expired:
    resource_group: str
    monitoring_class: MonitoringClass
    participant: str
    age: float


# --- the usage map ----------------------------------------------------------------------------

_Group = tuple[str, MonitoringClass]


def _validate(report: UsageReport) -> RejectReason | None:
    if not report.resource_group or not report.participant:
        return RejectReason.MISSING_NAME
    if not report.usage.is_finite() or (report.limit is not None and not report.limit.is_finite()):
        return RejectReason.NOT_FINITE
    if report.usage.bytes < 0 or report.usage.messages < 0:
        return RejectReason.NEGATIVE_USAGE
    if report.goodbye and (report.usage.bytes != 0 or report.usage.messages != 0):
        return RejectReason.GOODBYE_WITH_USAGE
    return None


class UsageMap:
    """RG × class → participant → (last report, time received).

    An entry is stale once its age reaches `stale_after` seconds: a peer that died
    silently stops counting after that. Pulsar 4.0.8 keeps a peer's last report in a plain
    HashMap (`ResourceGroup.usageFromOtherBrokers`, read off its jar) until the broker
    restarts; master expires it, in a Caffeine cache with `expireAfterWrite` (publish
    interval × max suppressed rounds × 2, 600 s by default). Stale entries are left out of
    `observed` at once and removed by `expire`. A goodbye (our addition; Pulsar has none,
    so a stopped broker's share lingers) removes at once.
    """

    def __init__(self, stale_after: float):
        if not (math.isfinite(stale_after) and stale_after > 0):
            raise ValueError(f"stale_after must be finite and > 0, got {stale_after!r}")
        self.stale_after = stale_after
        self._groups: dict[_Group, dict[str, tuple[UsageReport, float]]] = {}

    def __len__(self) -> int:
        return sum(len(members) for members in self._groups.values())

    def accept(self, report: UsageReport, now: float) -> AcceptOutcome:
        """Store (replace) the participant's report, drop it on a goodbye, or reject it."""
        reason = _validate(report)
        if reason is not None:
            return EntryRejected(reason)
        group = (report.resource_group, report.monitoring_class)
        members = self._groups.get(group, {})
        held = members.get(report.participant)
        was_live = held is not None and not self._is_stale(held[1], now)
        if report.goodbye:
            if held is not None:
                del members[report.participant]
                if not members:
                    del self._groups[group]
            return Dropped(report.participant, was_known=was_live)
        self._groups.setdefault(group, members)[report.participant] = (report, now)
        return Accepted(report.participant, joined=not was_live)

    def lookup(
        self, resource_group: str, monitoring_class: MonitoringClass, participant: str, now: float
    ) -> LookupOutcome:
        held = self._groups.get((resource_group, monitoring_class), {}).get(participant)
        if held is None:
            return UNKNOWN
        report, received = held
        age = max(0.0, now - received)
        return Stale(report, age) if self._is_stale(received, now) else Fresh(report, age)

    def observed(
        self,
        resource_group: str,
        monitoring_class: MonitoringClass,
        dimension: Dimension,
        now: float,
    ) -> dict[str, Observed]:
        """Fresh reports in one dimension, as the allocators take them (sorted by name)."""
        members = self._groups.get((resource_group, monitoring_class), {})
        result: dict[str, Observed] = {}
        for participant in sorted(members):
            report, received = members[participant]
            if self._is_stale(received, now):
                continue
            limit = None if report.limit is None else report.limit.of(dimension)
            result[participant] = Observed(
                usage=report.usage.of(dimension),
                limit=None if limit is None or limit < 0 else limit,
            )
        return result

    def groups(self) -> tuple[tuple[str, MonitoringClass], ...]:
        return tuple(sorted(self._groups))

    def participants(self) -> set[str]:
        return {p for members in self._groups.values() for p in members}

    def forget(self, participant: str) -> int:
        """Drop every entry of `participant` (its goodbye covers all groups); how many."""
        dropped = 0
        for group in list(self._groups):
            members = self._groups[group]
            if members.pop(participant, None) is not None:
                dropped += 1
                if not members:
                    del self._groups[group]
        return dropped

    def expire(self, now: float) -> tuple[Expired, ...]:
        """Remove every stale entry; say which, for the "stale peers dropped" counter."""
        gone: list[Expired] = []
        for group in sorted(self._groups):
            members = self._groups[group]
            for participant in sorted(members):
                received = members[participant][1]
                if self._is_stale(received, now):
                    del members[participant]
                    gone.append(Expired(group[0], group[1], participant, now - received))
            if not members:
                del self._groups[group]
        return tuple(gone)

    def _is_stale(self, received: float, now: float) -> bool:
        return now - received >= self.stale_after


# --- usage from cumulative counters ------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """First sighting: remembered, no usage. (Pulsar counts the whole counter as usage the
    first time it sees a topic; for an exporter started next to a long-running broker that
    would be one huge fake spike.)"""

    total: Usage


@dataclass(frozen=True)
class Increment:
    usage: Usage


@dataclass(frozen=True)
class Ignored:
    """Bytes or messages did not grow: no usage, baseline kept, as in Pulsar (which needs
    both diffs > 0), so `pending` is counted at the next observation that grows both."""

    pending: Usage


@dataclass(frozen=True)
class CounterReset:
    """A counter went down (broker restart, topic unloaded and reloaded): no usage this
    round, and the new value becomes the baseline. Pulsar keeps the old baseline instead,
    so it sees no usage until the counter climbs past its pre-reset value."""

    total: Usage


CounterOutcome = Baseline | Increment | Ignored | CounterReset


class UsageCounter:
    """Cumulative (bytes, messages) counters per key (a topic) → usage since last time."""

    def __init__(self) -> None:
        self._last: dict[str, Usage] = {}

    def __len__(self) -> int:
        return len(self._last)

    def observe(self, key: str, total: Usage) -> CounterOutcome:
        if not total.is_finite() or total.bytes < 0 or total.messages < 0:
            raise ValueError(f"cumulative counters must be finite and ≥ 0, got {total!r}")
        last = self._last.get(key)
        if last is None:
            self._last[key] = total
            return Baseline(total)
        diff = Usage(total.bytes - last.bytes, total.messages - last.messages)
        if diff.bytes < 0 or diff.messages < 0:
            self._last[key] = total
            return CounterReset(total)
        if diff.bytes == 0 or diff.messages == 0:
            return Ignored(diff)
        self._last[key] = total
        return Increment(diff)

    def retain(self, keys: Iterable[str]) -> int:
        """Forget every key not in `keys` (topics that vanished); returns how many."""
        keep = set(keys)
        gone = [key for key in self._last if key not in keep]
        for key in gone:
            del self._last[key]
        return len(gone)
