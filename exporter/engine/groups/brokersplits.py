"""Every broker's resource-group local quota, computed from the brokers' own PIP-82 reports.

The brokers enforce, we publish: one exporter reads the reports every Apache Pulsar broker
sends (`ResourceUsageTopicTransportManager`) and computes, for each broker, the limit that
broker computes for itself, and the `fair` allocator's split beside it as a what-if.

Pinned from Pulsar 4.0.8 (`pulsar-broker`, `broker/resourcegroup/`, read off the bytecode),
P = `resourceUsageTransportPublishIntervalInSecs`:
- Schedules. `ResourceUsageWriterTask` sends one report every P (fixed rate from the
  transport manager's creation, i.e. broker start), named by `getBrokerServiceUrl()`, with
  an entry per registered group; `calculateQuotaForAllResourceGroups` runs every P on its own
  timer (`maybeStartSchedulers`: from the first tenant/namespace registration). Unrelated
  phases: a quota round sees whichever reports have arrived.
- Report. `ResourceGroup.setUsageInMonitoredEntity` puts the usage counted since the last
  fill, per class, and resets it; when `needToReportLocalUsage` says no (drift ≤ 5 %, and
  less than 5 × P ms since the last *sent* report) the class is left out: an entry with its
  owner only. Usage not reported is never sent later.
- Map. `ResourceUsageReader` reads the topic from `latest` (each broker its own reports
  too) and drops a whole report older than 2 × P at receipt ("Stale resource usage msg");
  `rgResourceUsageListener` → `getUsageFromMonitoredEntity` overwrites
  `usageFromOtherBrokers[broker]` with each class the report carries. A left-out class keeps
  the previous value. No entry ever expires: `lastResourceUsageReadTimeMSecsSinceEpoch` is
  written, never read, so a dead broker's last usage counts until the reader restarts.
- My usage (`getLocalUsageStatsFromBrokerReports`): the broker's own entry in that map, the
  value of its last non-suppressed report as read back off the topic (0 before one), not
  its live count. All usages (`getGlobalUsageStats`): the `long` sum of every entry, its
  own included, however old, passed as one element to `computeLocalQuota`.
- Quota (`ResourceQuotaCalculatorImpl.computeLocalQuota`, `pulsarcalc.compute_local_quota`)
  per group × class, bytes then messages, configured = the group's `publishRateInBytes` …
  `dispatchRateInMsgs` (null → -1). Each round adds each result ≥ 0 to
  `pulsar_resource_group_calculated_{bytes,messages}_quota{ResourceGroup, MonitoringClass}`
  (exposed with `_total`); -1 (no limit) adds nothing; an exception (a negative usage or a
  wrapped sum) adds nothing for that class. Both classes are counted; only Publish reaches
  the limiter (`updateLocalQuota` returns null for Dispatch). Unit: configured × my/total
  (as my + (configured − total) × my/total), so the configured rate's, per second; the
  usage counts, per P, only enter as a ratio.

On Pulsar's master (`ResourceGroup.java` ascentstream/pulsar 3d379028, the fork tracking
apache master; `ResourceGroupService.java` 1b6132c1; `ResourceUsage.proto` apache/pulsar
17548093), what differs for the third class, `ReplicationDispatch`:
- Usage. `aggregateResourceGroupLocalUsages` counts, per topic and remote cluster, what its
  replicator sent (`bytesOutCount`, `msgOutCount` deltas), and charges a topic's usage to every
  distinct group of its tenant, namespace and topic (`incrementUsage`), not to the most
  specific binding only.
- Report and map. Keyed by (class, remote cluster), each key with its own suppression: a
  report carries one `replicator` per remote cluster not held back, and a left-out cluster
  keeps its previous value. The listener takes the first `replicator` naming a remote cluster;
  `localCluster` is not read, nor is the deprecated field 6.
- Quota (`calculateQuotaByMonClass`). Remote clusters without a `replicatorDispatchRate`
  entry ("local->remote") are one pool: computeLocalQuota(`replicationDispatchRateIn*`,
  Σ over clusters of my value, [Σ over clusters and brokers]), set on the group's shared
  replication limiter (`updateLocalQuota(…, null)`) and added to the calculated-quota
  counters once per remote cluster (label `RemoteCluster`), the pooled quota each time.
  Nothing is computed while the broker has no key of the class. A cluster with its own entry
  gets its own quota: not modelled (no such entries in our config), so a group that has them
  is computed as if it had none.
- Not modelled either: master's map entries expire (Caffeine `expireAfterWrite`,
  P × max(`resourceUsageMaxUsageReportSuppressRounds`, 1) × 2, from an entry's creation, as the
  listener updates the cached value in place): our values never do. Master's newer
  computeLocalQuota early returns (pulsarcalc.py) are not applied; master also throttles
  Dispatch, which here keeps 4.0.8's rule.

What we model: one map per group × class (replication: × remote cluster) of the last value
each broker sent, and per broker since when it listens. A broker first heard a period after
we began listening started then (its first report comes P after its reader opens); one
silent for over a period while others spoke, then sending a full report (a fresh broker's
first fill always reports), restarted. Either holds only values sent since. A broker that
may hold a value sent before we listened, or about when it began to (within the slack), is
`Unknown`: no number rather than a wrong one. Not modelled: the 2 × P drop (we see no
publish times; a healthy cluster delivers in milliseconds), a group deleted and re-created.
Silent for `silent_after`, a broker is no longer a participant; its values go once no live
broker can hold them. A period with no report from anyone (we were cut off, or every broker
went): we start over, as if we had just begun to listen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from exporter.config.settings import MonitoringClass, ResourceGroup
from exporter.engine.groups.allocators import Observed, fair_shares
from exporter.engine.groups.pulsarcalc import compute_local_quota

REPLICATION = MonitoringClass.REPLICATION_DISPATCH
_DIMENSIONS = ("bytes", "messages")
# Classes whose computed quota a broker runs under (see `_fair`).
_THROTTLED = (MonitoringClass.PUBLISH, REPLICATION)


def java_long(value: int) -> int:
    """A protobuf uint64 as the broker's `long` getter returns it (2**63 and above wrap
    negative, which `computeLocalQuota` then refuses)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True)
class Counts:
    bytes: int
    messages: int


@dataclass(frozen=True)
class Entry:
    """One group in one report; a class is None when the broker left it out (suppressed).

    `replication`: (remote cluster, counts) per `ReplicatorUsage` of the report (master's
    `ReplicationDispatch`), the first per remote cluster counting; a cluster not there was
    left out. 4.0.8 brokers never send one."""

    resource_group: str
    publish: Counts | None = None
    dispatch: Counts | None = None
    replication: tuple[tuple[str, Counts], ...] = ()

    def carried(self) -> dict[tuple[MonitoringClass, str | None], Counts]:
        """What the entry carries, by (class, remote cluster: None but for replication)."""
        out: dict[tuple[MonitoringClass, str | None], Counts] = {
            (cls, None): c for cls, c in ((MonitoringClass.PUBLISH, self.publish),
                                          (MonitoringClass.DISPATCH, self.dispatch))
            if c is not None}
        for remote, counts in self.replication:
            out.setdefault((REPLICATION, remote), counts)
        return out


@dataclass(frozen=True)
class Report:
    broker: str  # as the report names it: the broker's service URL
    at: float  # when it arrived (seconds)
    entries: tuple[Entry, ...]


class Unknown(StrEnum):
    """Why a broker's quota is not published."""

    NOT_CONFIGURED = "not_configured"  # the group's limits are not known to us
    UNHEARD = "unheard"  # it may hold a value sent before we listened
    AMBIGUOUS = "ambiguous"  # a value it may hold arrived about when it started listening


@dataclass(frozen=True)
class Quota:
    """One broker's quota for one group × class as the broker computes it.

    `pulsar`: `computeLocalQuota`'s longs (-1: no limit), None when it throws (the broker
    adds nothing and keeps its limit). `fair_*`: the `fair` allocator over the same usages,
    per second (-1: no limit; NaN: no answer)."""

    resource_group: str
    monitoring_class: MonitoringClass
    broker: str
    pulsar: Counts | None
    fair_bytes: float
    fair_messages: float

    @property
    def increment(self) -> Counts:
        """What this round adds to the broker's `pulsar_resource_group_calculated_*`."""
        p = self.pulsar or Counts(-1, -1)
        return Counts(max(p.bytes, 0), max(p.messages, 0))


@dataclass(frozen=True)
class Unknowable:
    resource_group: str
    monitoring_class: MonitoringClass
    broker: str
    reason: Unknown


Split = Quota | Unknowable


@dataclass(frozen=True)
class Splits:
    """Every live broker's split of every group it reports, as of `at`."""

    at: float
    splits: tuple[Split, ...]

    def get(self, broker: str, group: str, cls: MonitoringClass) -> Split | None:
        return next((s for s in self.splits if (s.broker, s.resource_group, s.monitoring_class)
                     == (broker, group, cls)), None)


@dataclass
class _Broker:
    last: float  # its last report
    seq: int  # reports accepted (from anyone) when its last came in
    since: float | None  # listening since; None: before we did (it heard all we heard)


@dataclass(frozen=True)
class _Value:
    counts: Counts
    at: float


class BrokerSplits:
    """The brokers' PIP-82 state, fed report by report (`accept`), read by `splits`.

    `period`: the brokers' report interval P (seconds); `silent_after`: a broker silent that
    long is no longer a participant; `resolution`: how coarse the arrival times are (the
    check interval when reports are drained once per cycle). Not thread-safe."""

    def __init__(self, period: float, *, silent_after: float, resolution: float = 0.0):
        if not (period > 0 and silent_after > 0 and resolution >= 0):
            raise ValueError("period and silent_after must be > 0, resolution ≥ 0")
        self.period, self.silent_after = period, silent_after
        self.slack = resolution + 0.05 * period
        self._brokers: dict[str, _Broker] = {}
        # (group, class, remote cluster or None, sender) → its last value
        self._values: dict[tuple[str, MonitoringClass, str | None, str], _Value] = {}
        self._named: dict[str, set[str]] = {}  # group → brokers whose reports name it
        self._first: float | None = None  # our first report: we listen since then at least
        self._last: float | None = None  # the last report from anyone
        self._seq = 0

    def accept(self, report: Report) -> None:
        at, name = report.at, report.broker
        if self._last is not None and at - self._last > self.period + self.slack:
            self._start_over()  # a period without a report: we were deaf, or all went down
        self._forget(at)
        if self._first is None:
            self._first = at
        self._last = at
        seen = self._brokers.get(name)
        if seen is None:  # new, if we listened a period before and heard nothing from it
            fresh = at - self._first >= self.period + self.slack
            seen = self._brokers[name] = _Broker(at, self._seq, at - self.period if fresh else None)
        elif (at - seen.last > self.period + self.slack and self._seq > seen.seq
              and all(None not in (e.publish, e.dispatch) for e in report.entries)):
            seen.since = at - self.period  # silent while others spoke, then a full report
        self._seq += 1
        seen.last, seen.seq = at, self._seq
        for entry in report.entries:
            self._named.setdefault(entry.resource_group, set()).add(name)
            # a left-out class (remote cluster) keeps the previous value
            for (cls, remote), counts in entry.carried().items():
                self._values[(entry.resource_group, cls, remote, name)] = _Value(counts, at)

    def splits(self, groups: Mapping[str, ResourceGroup], now: float) -> Splits:
        """Each live broker's quota for each group it reports, under `groups` (the limits
        the brokers have: Pulsar's own resource groups)."""
        live = self._live(now)
        out: list[Split] = []
        for group in sorted(self._named):
            brokers = sorted(self._named[group] & live)
            conf = groups.get(group)
            for cls in (MonitoringClass.PUBLISH, MonitoringClass.DISPATCH):
                out += self._split(group, cls, (None,), conf, brokers)
            remotes = sorted({remote for g, cls, remote, _ in self._values
                              if (g, cls) == (group, REPLICATION) and remote is not None})
            limit = None if conf is None else _configured(conf, REPLICATION)
            # Pulsar computes nothing without a key of the class (no replication heard), and
            # a group without a replication limit (every 4.0.8 group) gets -1: no split.
            if remotes and (limit is None or max(limit.bytes, limit.messages) >= 0):
                out += self._split(group, REPLICATION, remotes, conf, brokers)
        return Splits(now, tuple(out))

    # --- one group × class ----------------------------------------------------------------
    def _split(self, group: str, cls: MonitoringClass, remotes: Sequence[str | None],
               conf: ResourceGroup | None, brokers: list[str]) -> list[Split]:
        """`remotes`: the keys of the class, pooled (replication: every remote cluster
        heard; the others: None)."""
        if conf is None:
            return [Unknowable(group, cls, b, Unknown.NOT_CONFIGURED) for b in brokers]
        configured = _configured(conf, cls)
        views = {b: self._pooled(group, cls, remotes, b) for b in brokers}
        pulsar = {b: _pulsar(configured, b, v) for b, v in views.items() if isinstance(v, dict)}
        out: list[Split] = []
        for b, view in views.items():
            if not isinstance(view, dict):
                out.append(Unknowable(group, cls, b, view))
                continue
            fair = [self._fair(getattr(configured, d), b, view, pulsar, d, cls)
                    for d in _DIMENSIONS]
            out.append(Quota(group, cls, b, pulsar[b], *fair))
        return out

    def _pooled(self, group: str, cls: MonitoringClass, remotes: Sequence[str | None],
                broker: str) -> dict[str, Counts] | Unknown:
        """Each sender's value summed over `remotes` (as `long`s, as Pulsar sums them), in
        the maps `broker` holds; unknown if one of them is."""
        pooled: dict[str, Counts] = {}
        for remote in remotes:
            view = self._view(group, cls, remote, broker)
            if not isinstance(view, dict):
                return view
            for sender, c in view.items():
                p = pooled.get(sender, Counts(0, 0))
                pooled[sender] = Counts(java_long(p.bytes + c.bytes),
                                        java_long(p.messages + c.messages))
        return pooled

    def _view(self, group: str, cls: MonitoringClass, remote: str | None,
              broker: str) -> dict[str, Counts] | Unknown:
        """The usage map `broker` holds for the group, class and remote cluster, as far as
        we can know it."""
        since = self._brokers[broker].since
        held: dict[str, Counts] = {}
        for sender in sorted(self._named[group]):
            value = self._values.get((group, cls, remote, sender))
            if value is None:  # only left-out classes (clusters) heard from it
                if since is None:
                    return Unknown.UNHEARD
                continue
            if since is None or value.at >= since + self.slack:
                held[sender] = value.counts
            elif value.at > since - self.slack:
                return Unknown.AMBIGUOUS
        return held

    def _fair(self, quota: int, me: str, view: dict[str, Counts],
              pulsar: Mapping[str, Counts | None], dimension: str, cls: MonitoringClass) -> float:
        """`fair` over the same usages per second; the limit a broker runs under is its
        Pulsar quota where Pulsar applies it, else none."""
        usages = {**{me: Counts(0, 0)}, **view}
        reports = {}
        for sender, counts in usages.items():
            # Publish: 4.0.8's updateLocalQuota sets the publish limiter (and returns null
            # for Dispatch: Pulsar 4.0 throttles no dispatch). Replication (master only):
            # updateLocalQuota(ReplicationDispatch, quota, null) sets the group's shared
            # replication limiter, the one every remote cluster without its own entry uses;
            # the pooled quota is that limiter's rate.
            limit = pulsar.get(sender) if cls in _THROTTLED else None
            value = getattr(limit, dimension) if limit is not None else -1
            reports[sender] = Observed(getattr(counts, dimension) / self.period,
                                       float(value) if value >= 0 else None)
        try:
            return fair_shares(float(quota), reports)[me]
        except ValueError:  # a usage past a Java long: no answer
            return math.nan

    # --- liveness and forgetting ----------------------------------------------------------
    def _live(self, now: float) -> set[str]:
        return {b for b, s in self._brokers.items() if now - s.last <= self.silent_after}

    def _start_over(self) -> None:
        """What we knew may be out of date: listen again as if we had just started."""
        self._brokers, self._values, self._named = {}, {}, {}
        self._first = None

    def _forget(self, now: float) -> None:
        """Drop values no live broker can hold any more, then brokers gone with nothing
        left: bounded by what the live brokers' own maps hold."""
        live = self._live(now)
        starts = [self._brokers[b].since for b in live]

        def held(key: tuple[str, MonitoringClass, str | None, str], value: _Value) -> bool:
            return key[3] in live or any(s is None or value.at > s - self.slack for s in starts)

        self._values = {k: v for k, v in self._values.items() if held(k, v)}
        keep = live | {sender for _, _, _, sender in self._values}
        self._brokers = {b: s for b, s in self._brokers.items() if b in keep}
        self._named = {g: named & keep for g, named in self._named.items() if named & keep}


def _configured(conf: ResourceGroup, cls: MonitoringClass) -> Counts:
    limit = conf.limit(cls)
    return Counts(limit.bytes_per_second, limit.messages_per_second)


def _pulsar(configured: Counts, me: str, view: Mapping[str, Counts]) -> Counts | None:
    """`calculateQuotaForAllResourceGroups` for one broker: bytes, then messages."""
    mine = view.get(me, Counts(0, 0))
    try:
        return Counts(
            compute_local_quota(configured.bytes, mine.bytes, [c.bytes for c in view.values()]),
            compute_local_quota(configured.messages, mine.messages,
                                [c.messages for c in view.values()]))
    except ValueError:  # Pulsar logs it; nothing added this round
        return None
