"""The brokers' own PIP-82 usage reports, read off their topic: summed per broker, and
handed on one by one.

Apache Pulsar brokers tell each other what each resource group used on them since their
last report (`ResourceUsageTopicTransportManager`, decoded by `transport/pulsarwire.py`).
Reading that topic shows a group's usage as the brokers themselves account it, per broker:
the same numbers each broker adds to its `pulsar_resource_group_remote_usage_*_used`
counters, so the sums here equal those counters' increments over the same reports.
Each take also hands on the reports it decoded, in arrival order with the take's time
(`ReceivedReport`): the brokers' quota model (engine/groups/brokersplits.py) needs every report,
a suppressed class included, not only the sums.

Classes: publish and dispatch as reported; replication (Pulsar master's
`ReplicationDispatch`) as one pool per group and broker, the sum over remote clusters of the
entry's `replicator`s (the first per remote cluster, as master reads them), or the deprecated
field 6 an intermediate upstream version wrote, when an entry has no `replicator`. A left-out
class adds nothing; a replication series appears with the first report that carries one, so
4.0.8 brokers, which never do, show none. Fields this exporter does not know (a class newer
than it) are counted (`unknown_fields`: reports and entries carrying any) and named in one log
line per take; the rest of such a report is summed as usual.

Read-only: we never publish there (our own reports have their own topic, config/settings.py's
`USAGE_TOPIC`). A non-persistent topic keeps no history, so reports sent while we are not
connected are not counted (PIP-82 accepts the same undercount). A payload that does not
decode is counted by reason and logged once per take, never fatal. A broker silent for
`stale_after` seconds is forgotten, its series with it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from exporter.config.settings import MonitoringClass
from exporter.transport.pulsarwire import (
    BrokerUsageReport,
    GroupUsage,
    NetworkUsage,
    Undecodable,
    WireError,
    decode,
)

log = logging.getLogger(__name__)
REPLICATION = MonitoringClass.REPLICATION_DISPATCH


class PayloadSource(Protocol):
    """What the reports are read from (transport/channel.py's `UsageChannel`, read-only)."""

    def drain(self, limit: int = 10_000) -> list[bytes]: ...

    def close(self, timeout: float = 10.0) -> None: ...


@dataclass(frozen=True)
class ReportedUsage:
    """What `broker` reported for `resource_group` and class, summed over its reports."""

    resource_group: str
    broker: str
    monitoring_class: MonitoringClass
    bytes: int
    messages: int


@dataclass(frozen=True)
class ReceivedReport:
    """One decoded report and when it was read: the take's time (arrival times are as fine
    as the takes are frequent)."""

    at: float
    report: BrokerUsageReport


@dataclass(frozen=True)
class BrokerReportsView:
    usage: tuple[ReportedUsage, ...]
    last_report: tuple[tuple[str, float], ...]  # broker → unix seconds of its last report
    received: int  # reports decoded, since start
    rejected: tuple[tuple[WireError, int], ...]  # every reason, 0 included
    reports: tuple[ReceivedReport, ...] = ()  # decoded by this take, oldest first
    unknown_fields: int = 0  # reports and entries with a field we do not read, since start


class BrokerReports:
    """Drained and summed on each `take` (the check cycle's publish stage). Not re-entrant."""

    def __init__(self, channel: PayloadSource, *, stale_after: float = 600.0):
        self.channel = channel
        self.stale_after = stale_after
        self._sums: dict[tuple[str, str, MonitoringClass], tuple[int, int]] = {}
        self._last: dict[str, float] = {}
        self._received = 0
        self._rejected: Counter[WireError] = Counter({reason: 0 for reason in WireError})
        self._unknown = 0

    def take(self, now: float) -> BrokerReportsView:
        refused: Counter[WireError] = Counter()
        example = ""
        taken: list[ReceivedReport] = []
        unknown: Counter[int] = Counter()  # field number → messages carrying it, this take
        for payload in self.channel.drain():
            try:
                report = decode(payload)
            except Undecodable as exc:
                refused[exc.reason] += 1
                example = example or str(exc)
                continue
            self._received += 1
            self._last[report.broker] = now
            taken.append(ReceivedReport(now, report))
            for fields in (report.unknown_fields, *(e.unknown_fields for e in report.usage)):
                self._unknown += bool(fields)
                unknown.update(fields)
            for entry in report.usage:
                for cls, usage in ((MonitoringClass.PUBLISH, entry.publish),
                                   (MonitoringClass.DISPATCH, entry.dispatch)):
                    self._add((entry.owner, report.broker, cls), usage)
                replicated = _replication(entry)
                if replicated is not None:  # no series before the first: 4.0.8 has none
                    self._add((entry.owner, report.broker, REPLICATION), replicated)
        if refused:
            self._rejected.update(refused)
            log.warning("brokers' usage topic: %d report(s) refused (%s), e.g. %s",
                        refused.total(), ", ".join(f"{r.value}: {n}" for r, n in
                                                   refused.items()), example)
        if unknown:
            log.info("brokers' usage topic: fields this exporter does not read, skipped "
                     "(field number: messages) %s", _bounded(unknown))
        self._forget_silent(now)
        return BrokerReportsView(
            usage=tuple(ReportedUsage(group, broker, cls, b, m)
                        for (group, broker, cls), (b, m) in sorted(self._sums.items())),
            last_report=tuple(sorted(self._last.items())),
            received=self._received,
            rejected=tuple(self._rejected.items()),
            reports=tuple(taken),
            unknown_fields=self._unknown)

    def _add(self, key: tuple[str, str, MonitoringClass], usage: NetworkUsage | None) -> None:
        if usage is None:  # held back by the broker's suppression rule: nothing to add
            self._sums.setdefault(key, (0, 0))
            return
        b, m = self._sums.get(key, (0, 0))
        self._sums[key] = (b + usage.bytes, m + usage.messages)

    def _forget_silent(self, now: float) -> None:
        silent = {b for b, at in self._last.items() if now - at > self.stale_after}
        if silent:
            log.info("brokers' usage topic: no report from %s for %.0f s; forgetting them",
                     ", ".join(sorted(silent)), self.stale_after)
            self._last = {b: at for b, at in self._last.items() if b not in silent}
            self._sums = {k: v for k, v in self._sums.items() if k[1] not in silent}

    def close(self) -> None:
        self.channel.close()


def _replication(entry: GroupUsage) -> NetworkUsage | None:
    """The entry's replicated usage, all remote clusters as one: what master's pooled
    `ReplicationDispatch` quota sums (`ResourceGroupService.calculateQuotaByMonClass`)."""
    clusters = entry.by_remote_cluster()
    if not clusters:
        return entry.replication_dispatch
    return NetworkUsage(sum(u.bytes for u in clusters.values()),
                        sum(u.messages for u in clusters.values()))


def _bounded(numbers: Counter[int], most: int = 10) -> str:
    """Field numbers for a log line: any client may write that topic, so at most `most`."""
    shown = ", ".join(f"{n}: {c}" for n, c in sorted(numbers.items())[:most])
    return shown + (f" and {len(numbers) - most} more" if len(numbers) > most else "")


def broker_reports_for(service_url: str | None, topic: str | None, stale_after: float,
                       channel: Callable[..., PayloadSource] | None = None,
                       client_options: Mapping[str, Any] | None = None,
                       ) -> BrokerReports | None:
    """A reader of `topic`, when there is a broker to read it from and a topic to read;
    `client_options`: pulsar.Client's authentication and TLS (transport/client.py)."""
    if service_url is None or not topic:
        return None
    if channel is None:
        from exporter.transport.channel import UsageChannel

        return BrokerReports(UsageChannel(service_url, topic, "broker-reports", read_only=True,
                                          client_options=client_options),
                             stale_after=stale_after)
    extra = {"client_options": client_options} if client_options else {}
    return BrokerReports(channel(service_url, topic, "broker-reports", read_only=True,
                                 **extra), stale_after=stale_after)
