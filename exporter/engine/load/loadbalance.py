"""Load verdicts: is a broker overloaded, what would be shed, which bundles would split.

The exporter does not move bundles; it reports what Apache Pulsar's load manager would
decide from the same numbers, so operators see the verdict before (or instead of) the
broker acting on it. This module holds the shared vocabulary (a broker's load, a bundle,
a verdict), Pulsar 4.0's `OverloadShedder` and the bundle-split strategy
(`BundleSplitterTask` / `DefaultNamespaceBundleSplitStrategyImpl`); engine/load/shedders.py
holds `ThresholdShedder` and `UniformLoadShedder` and picks the configured one. The
thresholds are those of `exporter.config.settings.LoadManager` (broker.conf's `loadBalancer*`).

Units: resource usage in percent of its limit (Pulsar's `ResourceUsage.percentUsage()`,
the value of the broker's `pulsar_lb_*_usage` gauges); rates per second; throughput in
bytes per second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict, Unpack

from exporter.config.settings import LoadManager
from exporter.engine.systemtopics import SLA_OR_HEARTBEAT
from exporter.pulsarnames import bundle_range

# A full bundle name: the namespace ("tenant/ns", or "tenant/cluster/ns" for v1 names)
# then the hash range (names.bundle_range).

# Pulsar's `NamespaceService.isSLAOrHeartbeatNamespace`: every broker owns its heartbeat
# namespace (v1 and v2 names) and, with the SLA monitor, an SLA namespace. Their bundles
# count as owned (the sole-bundle rule) but `LoadData.getBundleDataForLoadShedding` leaves
# them out of every shedder's choice.


def is_system_namespace(namespace: str) -> bool:
    """A heartbeat or SLA-monitor namespace, never shed (Pulsar's patterns, whole match)."""
    return any(p.fullmatch(namespace) for p in SLA_OR_HEARTBEAT)


def usage_percent(used: float, limit: float) -> float:
    """Percent of `limit` in use; 0 when the limit is unknown (≤ 0), as Pulsar does, so a
    resource whose capacity was never detected can never make a broker look overloaded."""
    return used / limit * 100.0 if limit > 0 else 0.0


def _check_non_negative(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{owner}: {name} must be a finite number ≥ 0, got {value!r}")


class Resource(StrEnum):
    """The system resources a broker reports, in `LocalBrokerData`'s order. Pulsar 4.0
    compares cpu, direct memory and bandwidth in/out (`getMaxResourceUsageWithWeight`, the
    first of equal maxima winning); memory is reported but no longer weighed ("noisy by
    GC", deprecated `loadBalancerMemoryResourceWeight`)."""

    CPU = "cpu"
    MEMORY = "memory"
    DIRECT_MEMORY = "direct_memory"
    BANDWIDTH_IN = "bandwidth_in"
    BANDWIDTH_OUT = "bandwidth_out"


@dataclass(frozen=True)
class BundleStats:
    """One namespace bundle as the broker owning it reports it (Pulsar's
    `NamespaceBundleStats`). Rates are the pipeline's per-cycle rates, where Pulsar
    would use its short-term (shedding) or long-term (split) moving averages."""

    name: str  # "tenant/ns/0x00000000_0x40000000"
    broker: str  # owner
    topics: int
    producers: int
    consumers: int
    msg_rate_in: float
    msg_rate_out: float
    throughput_in: float  # bytes/s
    throughput_out: float  # bytes/s

    def __post_init__(self) -> None:
        namespace, _, hash_range = self.name.rpartition("/")
        if not namespace or bundle_range(hash_range) is None:
            raise ValueError(
                f"bundle {self.name!r}: expected 'tenant/ns/0x<lower>_0x<upper>', lower < upper"
            )
        _check_non_negative(
            self.name,
            topics=self.topics,
            producers=self.producers,
            consumers=self.consumers,
            msg_rate_in=self.msg_rate_in,
            msg_rate_out=self.msg_rate_out,
            throughput_in=self.throughput_in,
            throughput_out=self.throughput_out,
        )

    @property
    def namespace(self) -> str:
        return self.name.rpartition("/")[0]

    @property
    def hash_range(self) -> tuple[int, int]:
        """(lower, upper) of the bundle's hash range."""
        found = bundle_range(self.name.rpartition("/")[2])
        assert found is not None  # checked at construction
        return found

    @property
    def sessions(self) -> int:
        """Producers + consumers: what `loadBalancerNamespaceBundleMaxSessions` counts."""
        return self.producers + self.consumers

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.throughput_in + self.throughput_out


@dataclass(frozen=True)
class BrokerLoad:
    """One broker's resource usage (percent of each limit, may exceed 100 when a limit
    is mis-detected, e.g. a NIC speed) and the bundles it owns. Direct memory is
    optional: `None` leaves it out of the maximum (not every source reports it)."""

    broker: str
    cpu_percent: float
    memory_percent: float
    bandwidth_in_percent: float
    bandwidth_out_percent: float
    direct_memory_percent: float | None = None
    bundles: tuple[BundleStats, ...] = ()

    def __post_init__(self) -> None:
        _check_non_negative(self.broker, **{r.value: p for r, p in self.usages()})
        names = [b.name for b in self.bundles]
        if len(set(names)) != len(names):
            raise ValueError(f"broker {self.broker!r}: a bundle is listed twice")
        for bundle in self.bundles:
            if bundle.broker != self.broker:
                raise ValueError(
                    f"broker {self.broker!r}: bundle {bundle.name!r} is owned by {bundle.broker!r}"
                )

    def usages(self) -> tuple[tuple[Resource, float], ...]:
        """The compared resources in Pulsar's order, direct memory only when known."""
        pairs = [
            (Resource.CPU, self.cpu_percent),
            (Resource.MEMORY, self.memory_percent),
            (Resource.DIRECT_MEMORY, self.direct_memory_percent),
            (Resource.BANDWIDTH_IN, self.bandwidth_in_percent),
            (Resource.BANDWIDTH_OUT, self.bandwidth_out_percent),
        ]
        return tuple((r, p) for r, p in pairs if p is not None)

    def max_usage(self) -> tuple[Resource, float]:
        """The most used of the reported resources, memory included; on a tie the first
        in Pulsar's order. An observation: verdicts use `weighted_usage`."""
        best = self.usages()[0]
        for pair in self.usages()[1:]:
            if pair[1] > best[1]:
                best = pair
        return best

    @property
    def throughput(self) -> float:
        """Bytes/s in + out over the owned bundles: `LocalBrokerData.msgThroughputIn/Out`,
        which Pulsar sums over the broker's `NamespaceBundleStats` the same way."""
        return sum(b.throughput_in for b in self.bundles) + sum(
            b.throughput_out for b in self.bundles)

    @property
    def msg_rate(self) -> float:
        """Msgs/s in + out over the owned bundles (`LocalBrokerData.msgRateIn/Out`)."""
        return sum(b.msg_rate_in for b in self.bundles) + sum(
            b.msg_rate_out for b in self.bundles)


def weighted_usage(load: BrokerLoad, cfg: LoadManager) -> tuple[Resource, float]:
    """Pulsar's `LocalBrokerData.getMaxResourceUsageWithWeight(cpu, directMemory,
    bandwidthIn, bandwidthOut)` in percent (Pulsar divides by 100): the largest of each
    usage times its weight, the first of equal values winning (Java's strict `>` from
    −∞). Memory takes no part; unknown direct memory counts as 0 % (the broker always
    reports it, our sources may not)."""
    pairs = (
        (Resource.CPU, load.cpu_percent * cfg.cpu_resource_weight),
        (Resource.DIRECT_MEMORY,
         (load.direct_memory_percent or 0.0) * cfg.direct_memory_resource_weight),
        (Resource.BANDWIDTH_IN, load.bandwidth_in_percent * cfg.bandwidth_in_resource_weight),
        (Resource.BANDWIDTH_OUT,
         load.bandwidth_out_percent * cfg.bandwidth_out_resource_weight),
    )
    best = pairs[0]
    for pair in pairs[1:]:
        if pair[1] > best[1]:
            best = pair
    return best


class ShedOutcome(StrEnum):
    """What the shedder would do with one broker."""

    NOT_OVERLOADED = "not_overloaded"  # not picked (or shedding off: LoadResult says why)
    UNLOAD = "unload"  # bundles selected
    SOLE_BUNDLE = "sole_bundle"  # picked, but owns one bundle: Pulsar sheds nothing
    NO_BUNDLES = "no_bundles"  # picked while owning no bundle
    ALL_RECENTLY_UNLOADED = "all_recently_unloaded"  # every candidate is in its grace period
    NO_ELIGIBLE_BUNDLE = "no_eligible_bundle"  # only heartbeat / SLA bundles to choose from
    BELOW_MINIMUM = "below_minimum"  # the amount to shed is under the strategy's minimum
    NO_FITTING_BUNDLE = "no_fitting_bundle"  # UniformLoadShedder: every bundle too big


class ShedReason(StrEnum):
    """The rule that picked a broker (`NONE`: not picked)."""

    NONE = "none"
    OVERLOADED = "overloaded"  # OverloadShedder: usage ≥ threshold
    ABOVE_AVERAGE = "above_average"  # ThresholdShedder: usage ≥ average + threshold
    LOWER_BOUNDARY = "lower_boundary"  # ThresholdShedder's lowerBoundarySheddingEnabled
    MSG_RATE_SPREAD = "msg_rate_spread"  # UniformLoadShedder: max/min msg-rate gap
    THROUGHPUT_SPREAD = "throughput_spread"  # UniformLoadShedder: max/min throughput ratio


@dataclass(frozen=True)
class BrokerVerdict:
    broker: str
    outcome: ShedOutcome
    resource: Resource  # the resource of the weighted maximum, overloaded or not
    max_usage_percent: float  # the weighted maximum (LocalBrokerData), this cycle
    shed_fraction: float  # of the broker's traffic, 0–1 (may exceed 1); 0 when not picked
    throughput: float  # bytes/s in + out, summed over the broker's bundles
    throughput_to_shed: float  # bytes/s the strategy asks for (0: it measures msgs/s)
    unload: tuple[str, ...]  # bundle names, in the order the strategy picked them
    unload_throughput: float  # bytes/s carried by `unload`
    reason: ShedReason = ShedReason.NONE
    # ThresholdShedder: the broker's history-smoothed usage and the cluster's average
    # (percent) it is compared with; None under the other strategies.
    smoothed_usage_percent: float | None = None
    average_usage_percent: float | None = None
    msg_rate: float = 0.0  # msgs/s in + out, summed over the broker's bundles
    msg_rate_to_shed: float = 0.0  # UniformLoadShedder's msg-rate branch, else 0
    unload_msg_rate: float = 0.0  # msgs/s carried by `unload`

    @property
    def overloaded(self) -> bool:
        """Picked by the strategy's rule, whether or not a bundle could be chosen."""
        return self.outcome is not ShedOutcome.NOT_OVERLOADED


class VerdictExtra(TypedDict, total=False):
    """What only some strategies fill in on a `BrokerVerdict`."""

    smoothed_usage_percent: float | None
    average_usage_percent: float | None
    msg_rate_to_shed: float


def idle_verdict(load: BrokerLoad, cfg: LoadManager,
                 **extra: Unpack[VerdictExtra]) -> BrokerVerdict:
    """A broker the strategy does not pick."""
    resource, usage = weighted_usage(load, cfg)
    return BrokerVerdict(broker=load.broker, outcome=ShedOutcome.NOT_OVERLOADED,
                         resource=resource, max_usage_percent=usage, shed_fraction=0.0,
                         throughput=load.throughput, throughput_to_shed=0.0, unload=(),
                         unload_throughput=0.0, msg_rate=load.msg_rate, **extra)


def picked_verdict(load: BrokerLoad, cfg: LoadManager, reason: ShedReason, fraction: float,
                   to_shed: float, selection: Selection,
                   **extra: Unpack[VerdictExtra]) -> BrokerVerdict:
    """A broker the strategy picks, with what its selection gave."""
    resource, usage = weighted_usage(load, cfg)
    by_name = {b.name: b for b in load.bundles}
    return BrokerVerdict(
        broker=load.broker, outcome=selection.outcome, resource=resource,
        max_usage_percent=usage, shed_fraction=fraction, throughput=load.throughput,
        throughput_to_shed=to_shed, unload=selection.unload,
        unload_throughput=sum(by_name[n].throughput for n in selection.unload),
        reason=reason, msg_rate=load.msg_rate,
        unload_msg_rate=sum(by_name[n].msg_rate for n in selection.unload), **extra)


def broker_verdict(
    load: BrokerLoad,
    cfg: LoadManager,
    recently_unloaded: frozenset[str] = frozenset(),
) -> BrokerVerdict:
    """Pulsar's `OverloadShedder` on one broker.

    Overloaded when the weighted maximum usage (`weighted_usage`) is *at or above* the
    threshold (Pulsar skips a broker only while `usage < threshold`, both as fractions).
    The fraction of traffic to shed is `(usage − threshold) + margin` (Pulsar's
    load-balance docs, "Shed load automatically": 95 % CPU, 85 % threshold, 5 % margin →
    15 %). Bundles are chosen by `select_by_throughput`. No minimum applies: an idle
    broker still unloads one bundle.
    """
    _, usage = weighted_usage(load, cfg)
    threshold = cfg.overload_threshold_percent / 100.0
    if usage / 100.0 < threshold:
        return idle_verdict(load, cfg)
    fraction = usage / 100.0 - threshold + cfg.shed_margin_percent / 100.0
    to_shed = load.throughput * fraction
    return picked_verdict(load, cfg, ShedReason.OVERLOADED, fraction, to_shed,
                          select_by_throughput(load.bundles, to_shed, recently_unloaded))


@dataclass(frozen=True)
class Selection:
    outcome: ShedOutcome
    unload: tuple[str, ...] = ()


def largest_first(bundles: Iterable[BundleStats], by_rate: bool) -> list[tuple[str, float]]:
    """(name, msg rate or throughput) of each bundle, largest first, equal sizes by name
    (Pulsar's order among them is a hash map's): the order AvgShedder and
    UniformLoadShedder take bundles in."""
    size = {b.name: (b.msg_rate if by_rate else b.throughput) for b in bundles}
    return [(name, size[name]) for name in sorted(size, key=lambda n: (-size[n], n))]


def candidates(bundles: Iterable[BundleStats], recently_unloaded: frozenset[str],
               ) -> tuple[list[BundleStats], ShedOutcome | None]:
    """The bundles a shedder may choose from (not heartbeat / SLA, not in the grace
    period), or why there is none."""
    bundles = list(bundles)
    shed_able = [b for b in bundles if not is_system_namespace(b.namespace)]
    eligible = [b for b in shed_able if b.name not in recently_unloaded]
    if eligible:
        return eligible, None
    return [], (ShedOutcome.ALL_RECENTLY_UNLOADED if shed_able
                else ShedOutcome.NO_ELIGIBLE_BUNDLE)


def select_by_throughput(bundles: tuple[BundleStats, ...], to_shed: float,
                         recently_unloaded: frozenset[str]) -> Selection:
    """The choice shared by `OverloadShedder` and `ThresholdShedder`: with more than one
    owned bundle (heartbeat and recently unloaded ones count here), the candidates are
    taken highest short-term throughput first until they carry at least `to_shed`, and
    always at least one. Equal throughputs go by name (Pulsar's order among them is a
    hash map's)."""
    if not bundles:
        return Selection(ShedOutcome.NO_BUNDLES)
    if len(bundles) == 1:
        return Selection(ShedOutcome.SOLE_BUNDLE)
    eligible, none = candidates(bundles, recently_unloaded)
    if none is not None:
        return Selection(none)
    chosen: list[str] = []
    marked = 0.0
    for bundle in sorted(eligible, key=lambda b: (-b.throughput, b.name)):
        if chosen and marked >= to_shed:
            break
        chosen.append(bundle.name)
        marked += bundle.throughput
    return Selection(ShedOutcome.UNLOAD, tuple(chosen))


class SplitReason(StrEnum):
    """Which `loadBalancerNamespaceBundleMax*` threshold a bundle exceeds."""

    TOPICS = "topics"
    SESSIONS = "sessions"  # producers + consumers
    MSG_RATE = "msg_rate"  # in + out, msgs/s
    BANDWIDTH = "bandwidth"  # in + out, bytes/s


@dataclass(frozen=True)
class SplitCandidate:
    bundle: str
    broker: str
    reasons: tuple[SplitReason, ...]  # every threshold exceeded, in SplitReason order


def split_reasons(bundle: BundleStats, cfg: LoadManager) -> tuple[SplitReason, ...]:
    """Every threshold `bundle` is strictly above (Pulsar compares with `>`). A sessions
    limit ≤ 0 disables that check, as in Pulsar; the other limits have no such escape."""
    checks = (
        (SplitReason.TOPICS, bundle.topics > cfg.bundle_max_topics),
        (
            SplitReason.SESSIONS,
            cfg.bundle_max_sessions > 0 and bundle.sessions > cfg.bundle_max_sessions,
        ),
        (SplitReason.MSG_RATE, bundle.msg_rate > cfg.bundle_max_msg_rate),
        (SplitReason.BANDWIDTH, bundle.throughput > cfg.bundle_max_bandwidth),
    )
    return tuple(reason for reason, exceeded in checks if exceeded)


def splittable(bundle: BundleStats) -> bool:
    """A split halves the topic set and the hash range, so a bundle needs at least two
    topics and a range wider than one hash value (Pulsar's `canSplitBundle`)."""
    lower, upper = bundle.hash_range
    return bundle.topics >= 2 and upper - lower > 1


def split_candidates(bundles: Iterable[BundleStats], cfg: LoadManager) -> list[SplitCandidate]:
    """Bundles Pulsar would split, sorted by name. Not modelled: the namespace's
    `loadBalancerNamespaceMaximumBundles` cap, the per-cycle split limit and the
    consecutive-cycles condition of Pulsar's extensible load manager."""
    out = []
    for bundle in sorted(bundles, key=lambda b: b.name):
        if not splittable(bundle):
            continue
        reasons = split_reasons(bundle, cfg)
        if reasons:
            out.append(SplitCandidate(bundle=bundle.name, broker=bundle.broker, reasons=reasons))
    return out
