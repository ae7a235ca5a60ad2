"""One participant of the PIP-82 exchange: what it reports, what it knows of the others,
and its share of every resource group's quota.

Round by round, as a Pulsar broker does in `ResourceGroupService`:
1. `report` decides per RG × class whether this round's usage goes out or is suppressed
   (`need_to_report`: 5 % drift, forced after N rounds); what goes out is also stored as
   our own entry of the usage map, so totals include ourselves, as in Pulsar.
2. Peers' reports arrive (`accept`) at any time; a goodbye (`forget`) drops a peer at
   once; `expire` drops peers silent past `stale_after`.
3. `local_quota` splits each configured quota with the configured allocator over the
   fresh entries of the map, our own included.

Where we differ from Pulsar, on purpose: a drop of usage to 0 is reported at once (Pulsar
never reports a drop to 0 by drift and waits for the forced round, so an idle broker keeps
a share it no longer uses for up to N rounds), and the goodbye (Pulsar has none).

Replicas: instances sharing one name, of which one reports (runtime/exchange.py). A replica
standing by (`reporting` False) publishes nothing; the reporter's entries, arriving under our
name, become our entry of the map as they are (`_adopted`), so its shares are the reporter's;
where it has none fresh yet (just started), its own measurement of the same brokers stands in.
It keeps no suppression state, so on taking over it reports every entry at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.config.settings import Allocator, MonitoringClass, ResourceGroupEngine
from exporter.engine.groups.allocators import allocate
from exporter.engine.groups.resourcegroups import need_to_report
from exporter.engine.groups.usage import (
    Accepted,
    AcceptOutcome,
    Dimension,
    Fresh,
    Usage,
    UsageMap,
    UsageReport,
)

GroupKey = tuple[str, MonitoringClass]


@dataclass(frozen=True)
class Round:
    """What one report round decided: the entries to publish (empty: nothing to send)
    and how many were suppressed."""

    reports: tuple[UsageReport, ...]
    suppressed: int


def _long(v: float) -> int:
    """Rates in milli-units: Pulsar's rule works on longs, and a rate of 0.4 msg/s must not
    read as 0 (the drift percentage does not depend on the scale)."""
    return round(v * 1000)


class Participant:
    def __init__(self, name: str, settings: ResourceGroupEngine) -> None:
        self.name = name
        self.settings = settings
        self.usage = UsageMap(settings.stale_after)
        self._last_reported: dict[GroupKey, Usage] = {}
        self._rounds_since: dict[GroupKey, int] = {}
        self._heard: dict[str, float] = {}  # peer → when its last report was accepted
        self.reporting = True  # False: a replica standing by (module docstring)
        self._adopted: set[GroupKey] = set()  # our entries as the reporting replica sent them

    def reconfigure(self, settings: ResourceGroupEngine) -> None:
        """A reload may change the allocator, tolerances or stale_after; the map keeps its
        entries (a reload must not make every peer unknown for a round)."""
        self.settings = settings
        self.usage.stale_after = settings.stale_after

    # --- 1. our own report -------------------------------------------------------------
    def _must_report(self, key: GroupKey, usage: Usage) -> bool:
        last = self._last_reported.get(key)
        if last is None:
            return True
        if (usage.bytes <= 0 and usage.messages <= 0) and (last.bytes > 0 or last.messages > 0):
            return True  # a drop to zero goes out at once (see the module docstring)
        return need_to_report(
            _long(usage.bytes), _long(last.bytes), _long(usage.messages), _long(last.messages),
            self._rounds_since.get(key, 0) + 1,
            tolerance_percent=self.settings.suppression_tolerance_percent,
            max_suppressed_rounds=self.settings.max_suppressed_rounds,
        )

    def report_all_next(self) -> None:
        """Publish every entry at the next round, suppression aside (after a spoof of us,
        peers hold wrong numbers under our name until we report again)."""
        self._last_reported.clear()

    def report(self, usages: Mapping[GroupKey, Usage], limits: Mapping[GroupKey, Usage | None],
               now: float) -> Round:
        """This round's usage per RG × class → what to publish. Keys not in `usages` are
        forgotten (a group removed from the config)."""
        if not self.reporting:
            self._stand_by(usages, limits, now)
            return Round((), 0)
        self._adopted.clear()
        out, suppressed = [], 0
        for key in sorted(usages):
            usage = usages[key]
            if not self._must_report(key, usage):
                self._rounds_since[key] = self._rounds_since.get(key, 0) + 1
                suppressed += 1
                continue
            report = UsageReport(key[0], key[1], self.name, usage, limits.get(key))
            self.usage.accept(report, now)
            self._last_reported[key] = usage
            self._rounds_since[key] = 0
            out.append(report)
        for key in set(self._last_reported) - set(usages):
            del self._last_reported[key]
            self._rounds_since.pop(key, None)
        return Round(tuple(out), suppressed)

    def _stand_by(self, usages: Mapping[GroupKey, Usage],
                  limits: Mapping[GroupKey, Usage | None], now: float) -> None:
        for key in sorted(usages):
            held = self.usage.lookup(key[0], key[1], self.name, now)
            if key in self._adopted and isinstance(held, Fresh):
                continue
            self._adopted.discard(key)
            self.usage.accept(UsageReport(key[0], key[1], self.name, usages[key],
                                          limits.get(key)), now)
        self._last_reported.clear()
        self._rounds_since.clear()

    # --- 2. the others ------------------------------------------------------------------
    def accept(self, report: UsageReport, now: float) -> AcceptOutcome:
        """A peer's entry; under our own name, the reporting replica's (standing by)."""
        outcome = self.usage.accept(report, now)
        if isinstance(outcome, Accepted):
            if report.participant == self.name:
                self._adopted.add((report.resource_group, report.monitoring_class))
            else:
                self._heard[report.participant] = now
        return outcome

    def forget(self, participant: str) -> bool:
        """A goodbye: drop every entry of `participant`. Whether it was known."""
        known = participant in self._heard
        self.usage.forget(participant)
        self._heard.pop(participant, None)
        return known

    def expire(self, now: float) -> tuple[str, ...]:
        """Drop entries silent past stale_after; the peers now gone entirely."""
        self.usage.expire(now)
        present = self.usage.participants()
        gone = tuple(sorted(p for p in self._heard if p not in present))
        for p in gone:
            del self._heard[p]
        return gone

    def peers(self, now: float) -> dict[str, float]:
        """Peer → seconds since its last accepted report."""
        return {p: max(0.0, now - t) for p, t in sorted(self._heard.items())}

    def known(self) -> int:
        """Participants whose usage is known, ourselves included."""
        return len(self.usage.participants() | {self.name})

    # --- 3. quotas ----------------------------------------------------------------------
    def usages(self, key: GroupKey, now: float) -> dict[str, Usage]:
        """Fresh usage per participant (ourselves included, as last reported)."""
        by_bytes = self.usage.observed(key[0], key[1], Dimension.BYTES, now)
        by_messages = self.usage.observed(key[0], key[1], Dimension.MESSAGES, now)
        return {p: Usage(bytes=by_bytes[p].usage, messages=by_messages[p].usage)
                for p in by_bytes}

    def local_quota(self, key: GroupKey, quota: Usage, now: float) -> Usage:
        """Our share of `quota` (per dimension; -1 stays -1 = unlimited). Before our own
        usage is in the map we run at the whole quota, as a Pulsar broker starts at the
        configured rate."""
        return Usage(bytes=self._share(key, quota.bytes, Dimension.BYTES, now),
                     messages=self._share(key, quota.messages, Dimension.MESSAGES, now))

    def _share(self, key: GroupKey, quota: float, dim: Dimension, now: float) -> float:
        if quota < 0:
            return -1.0
        observed = self.usage.observed(key[0], key[1], dim, now)
        if self.name not in observed:
            return quota
        allocator: Allocator = self.settings.allocator
        return allocate(allocator, quota, observed, self.settings.report_interval)[self.name]


