"""Load verdicts: is a broker overloaded, what would be shed, which bundles would split.

The exporter does not move bundles; it reports what Apache Pulsar's load manager would
decide from the same numbers, so operators see the verdict before (or instead of) the
broker acting on it. Semantics follow Pulsar's `OverloadShedder` and the bundle-split
strategy (`BundleSplitterTask` / `DefaultNamespaceBundleSplitStrategyImpl`), with the
thresholds of `exporter.config.LoadManager` (broker.conf's `loadBalancer*` defaults).

Units: resource usage in percent of its limit (Pulsar's `ResourceUsage.percentUsage()`,
the value of the broker's `pulsar_lb_*_usage` gauges); rates per second; throughput in
bytes per second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from exporter.config.model import LoadManager
from exporter.names import bundle_range

# A full bundle name: the namespace ("tenant/ns", or "tenant/cluster/ns" for v1 names)
# then the hash range (names.bundle_range).


def usage_percent(used: float, limit: float) -> float:
    """Percent of `limit` in use; 0 when the limit is unknown (≤ 0), as Pulsar does, so a
    resource whose capacity was never detected can never make a broker look overloaded."""
    return used / limit * 100.0 if limit > 0 else 0.0


def _check_non_negative(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{owner}: {name} must be a finite number ≥ 0, got {value!r}")


class Resource(StrEnum):
    """The system resources Pulsar's `LocalBrokerData.getMaxResourceUsage` compares,
    in its order (the first of equal maxima wins)."""

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
        """The most used resource; on a tie the first in Pulsar's order."""
        best = self.usages()[0]
        for pair in self.usages()[1:]:
            if pair[1] > best[1]:
                best = pair
        return best


class ShedOutcome(StrEnum):
    """What `OverloadShedder` would do with one broker."""

    NOT_OVERLOADED = "not_overloaded"
    UNLOAD = "unload"  # bundles selected
    SOLE_BUNDLE = "sole_bundle"  # overloaded by its only bundle: Pulsar sheds nothing
    NO_BUNDLES = "no_bundles"  # overloaded while owning no bundle
    ALL_RECENTLY_UNLOADED = "all_recently_unloaded"  # every bundle is in its grace period


@dataclass(frozen=True)
class BrokerVerdict:
    broker: str
    outcome: ShedOutcome
    resource: Resource  # the most used resource, overloaded or not
    max_usage_percent: float
    shed_fraction: float  # of the broker's traffic, 0–1 (may exceed 1); 0 when not overloaded
    throughput: float  # bytes/s in + out, summed over the broker's bundles
    throughput_to_shed: float  # bytes/s: throughput × shed_fraction
    unload: tuple[str, ...]  # bundle names, highest traffic first
    unload_throughput: float  # bytes/s carried by `unload`

    @property
    def overloaded(self) -> bool:
        return self.outcome is not ShedOutcome.NOT_OVERLOADED


def broker_verdict(
    load: BrokerLoad,
    cfg: LoadManager,
    recently_unloaded: frozenset[str] = frozenset(),
) -> BrokerVerdict:
    """Pulsar's `OverloadShedder` on one broker.

    Overloaded when the most used resource is *at or above* the threshold (Pulsar skips
    a broker only while `usage < threshold`). The fraction of traffic to shed is
    `(usage − threshold) + margin` (Pulsar's load-balance docs, "Shed load automatically":
    95 % CPU, 85 % threshold, 5 % margin → 15 %). Bundles not in `recently_unloaded`
    (Pulsar's shedding grace period) are taken highest throughput first until they carry at
    least that share of the broker's throughput, and always at least one. A broker owning a
    single bundle is never shed.
    """
    resource, usage = load.max_usage()
    throughput = sum(b.throughput for b in load.bundles)
    if usage < cfg.overload_threshold_percent:
        return BrokerVerdict(
            broker=load.broker,
            outcome=ShedOutcome.NOT_OVERLOADED,
            resource=resource,
            max_usage_percent=usage,
            shed_fraction=0.0,
            throughput=throughput,
            throughput_to_shed=0.0,
            unload=(),
            unload_throughput=0.0,
        )
    fraction = (usage - cfg.overload_threshold_percent + cfg.shed_margin_percent) / 100.0
    to_shed = throughput * fraction
    outcome, unload, unloaded = _select(load.bundles, to_shed, recently_unloaded)
    return BrokerVerdict(
        broker=load.broker,
        outcome=outcome,
        resource=resource,
        max_usage_percent=usage,
        shed_fraction=fraction,
        throughput=throughput,
        throughput_to_shed=to_shed,
        unload=unload,
        unload_throughput=unloaded,
    )


def _select(
    bundles: tuple[BundleStats, ...], to_shed: float, recently_unloaded: frozenset[str]
) -> tuple[ShedOutcome, tuple[str, ...], float]:
    # Pulsar counts all owned bundles (recently unloaded included) for the sole-bundle rule.
    if not bundles:
        return ShedOutcome.NO_BUNDLES, (), 0.0
    if len(bundles) == 1:
        return ShedOutcome.SOLE_BUNDLE, (), 0.0
    eligible = sorted(
        (b for b in bundles if b.name not in recently_unloaded),
        key=lambda b: (-b.throughput, b.name),  # name: a stable order among equals
    )
    if not eligible:
        return ShedOutcome.ALL_RECENTLY_UNLOADED, (), 0.0
    chosen: list[str] = []
    marked = 0.0
    for bundle in eligible:
        if chosen and marked >= to_shed:
            break
        chosen.append(bundle.name)
        marked += bundle.throughput
    return ShedOutcome.UNLOAD, tuple(chosen), marked


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
