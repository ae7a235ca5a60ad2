"""The brokers' own PIP-82 usage reports, read off their topic: summed per broker, and
handed on one by one.

Apache Pulsar brokers tell each other what each resource group used on them since their
last report (`ResourceUsageTopicTransportManager`, decoded by `transport/pulsarwire.py`).
Reading that topic shows a group's usage as the brokers themselves account it, per broker:
the same numbers each broker adds to its `pulsar_resource_group_remote_usage_*_used`
counters, so the sums here equal those counters' increments over the same reports.
Each take also hands on the reports it decoded, in arrival order with the take's time
(`ReceivedReport`): the brokers' quota model (engine/brokersplits.py) needs every report,
a suppressed class included, not only the sums.

Read-only: we never publish there (our own reports have their own topic, configmodel
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

from exporter.config.model import MonitoringClass
from exporter.transport.pulsarwire import (
    BrokerUsageReport,
    NetworkUsage,
    Undecodable,
    WireError,
    decode,
)

log = logging.getLogger(__name__)


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


class BrokerReports:
    """Drained and summed on each `take` (the check cycle's publish stage). Not re-entrant."""

    def __init__(self, channel: PayloadSource, *, stale_after: float = 600.0):
        self.channel = channel
        self.stale_after = stale_after
        self._sums: dict[tuple[str, str, MonitoringClass], tuple[int, int]] = {}
        self._last: dict[str, float] = {}
        self._received = 0
        self._rejected: Counter[WireError] = Counter({reason: 0 for reason in WireError})

    def take(self, now: float) -> BrokerReportsView:
        refused: Counter[WireError] = Counter()
        example = ""
        taken: list[ReceivedReport] = []
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
            for entry in report.usage:
                for cls, usage in ((MonitoringClass.PUBLISH, entry.publish),
                                   (MonitoringClass.DISPATCH, entry.dispatch)):
                    self._add((entry.owner, report.broker, cls), usage)
        if refused:
            self._rejected.update(refused)
            log.warning("brokers' usage topic: %d report(s) refused (%s), e.g. %s",
                        refused.total(), ", ".join(f"{r.value}: {n}" for r, n in
                                                   refused.items()), example)
        self._forget_silent(now)
        return BrokerReportsView(
            usage=tuple(ReportedUsage(group, broker, cls, b, m)
                        for (group, broker, cls), (b, m) in sorted(self._sums.items())),
            last_report=tuple(sorted(self._last.items())),
            received=self._received,
            rejected=tuple(self._rejected.items()),
            reports=tuple(taken))

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


def broker_reports_for(service_url: str | None, topic: str | None, stale_after: float,
                       channel: Callable[..., PayloadSource] | None = None,
                       client_options: Mapping[str, Any] | None = None,
                       ) -> BrokerReports | None:
    """A reader of `topic`, when there is a broker to read it from and a topic to read;
    `client_options`: pulsar.Client's authentication and TLS (transport/client.py)."""
    if service_url is None or not topic:
        return None
    if channel is None:
        from exporter.transport.channel import UsageChannel as channel
    extra = {"client_options": client_options} if client_options else {}
    return BrokerReports(channel(service_url, topic, "broker-reports", read_only=True,
                                 **extra), stale_after=stale_after)
