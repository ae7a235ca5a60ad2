"""The shedders of Pulsar's modular load manager, as pure functions over one cycle's loads.

`ModularLoadManagerImpl.doLoadShedding` (Pulsar 4.0) runs on the leader every
`loadBalancerSheddingIntervalMinutes`: nothing when `loadBalancerSheddingEnabled` is off
or one broker or fewer is available; else it drops bundles unloaded longer ago than
`loadBalancerSheddingGracePeriodMinutes` from its recently-unloaded map and asks the
configured `LoadSheddingStrategy` which bundles to unload, per broker:

- `OverloadShedder`: loadbalance.broker_verdict.
- `ThresholdShedder` (the default since 2.10): `threshold_shedder`.
- `UniformLoadShedder`: `uniform_shedder`.
- `AvgShedder` (5.0's default): avgshedder.avg_shedder, its hit counts in `AvgHits`.

`shed` applies the leader's rules and the configured strategy. The verdicts are the
strategy's picks: the leader then still skips a bundle whose namespace isolation or
anti-affinity policy leaves no other broker, or for which its placement strategy finds
no other broker; neither is modelled (the exporter knows no policies or placement).

Inputs Pulsar has and the exporter has not: the bundles' short-term moving averages
(we use the cycle's rates for broker and bundle alike), the leader's recently-unloaded
map (the caller approximates it, loadview.BundleMoves) and the leader's
`ThresholdShedder` history, kept here as `ThresholdHistory`, a state passed in and
returned, advanced at most once per `shedding_interval` (the leader's cadence) and
started from the first observation, as Pulsar starts it (a new leader starts afresh too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from exporter.config.settings import LoadManager, SheddingStrategy
from exporter.engine.javamath import INT_MAX, INT_MIN, java_int
from exporter.engine.load.avgshedder import NO_HITS, AvgHits, avg_shedder
from exporter.engine.load.loadbalance import (
    BrokerLoad,
    BrokerVerdict,
    Selection,
    ShedOutcome,
    ShedReason,
    VerdictExtra,
    broker_verdict,
    candidates,
    idle_verdict,
    largest_first,
    picked_verdict,
    select_by_throughput,
    weighted_usage,
)

# ThresholdShedder's LOWER_BOUNDARY_THRESHOLD_MARGIN: the lower-boundary pass sheds
# threshold × 0.5 of the busiest broker's traffic.
LOWER_BOUNDARY_MARGIN = 0.5
# UniformLoadShedder's constants: |min| ≤ EPS counts as 1.0; a bundle may exceed what is
# still required by DELTA; the minima start at Integer.MAX_VALUE.
UNIFORM_EPS = 1e-6
UNIFORM_DELTA = 1000


def _frozen(mapping: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class ThresholdHistory:
    """`ThresholdShedder.brokerAvgResourceUsage`: broker → smoothed usage (a fraction, as
    Pulsar keeps it), as of the last shedding run (`at`, seconds; None: never)."""

    usage: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    at: float | None = None


class SkipReason(StrEnum):
    """Why the leader would shed nothing at all this run."""

    SHEDDING_DISABLED = "shedding_disabled"  # loadBalancerSheddingEnabled=false
    SINGLE_BROKER = "single_broker"  # "Only 1 broker available"
    ZERO_AVERAGE = "zero_average"  # ThresholdShedder: "average max resource usage is 0"


@dataclass(frozen=True)
class Shedding:
    """One shedding run: a verdict per broker (the input's order), why nothing was
    considered (None: the strategy ran) and the history (or AvgShedder's hit counts)
    for the next cycle."""

    strategy: SheddingStrategy
    verdicts: tuple[BrokerVerdict, ...]
    skipped: SkipReason | None
    history: ThresholdHistory
    hits: AvgHits = field(default_factory=AvgHits)

    @property
    def unload(self) -> dict[str, tuple[str, ...]]:
        """broker → bundles to unload, the strategy's `Multimap` result."""
        return {v.broker: v.unload for v in self.verdicts if v.unload}


def shed(loads: Sequence[BrokerLoad], cfg: LoadManager, *,
         history: ThresholdHistory = ThresholdHistory(), hits: AvgHits = NO_HITS,
         recently_unloaded: frozenset[str] = frozenset(),
         alive: frozenset[str] | None = None, now: float | None = None) -> Shedding:
    """`doLoadShedding` with the configured strategy. `alive`: the brokers alive, with or
    without load (default: those in `loads`), for the at-least-two rule; the history is
    pruned to them (Pulsar's `onActiveBrokersChange`; AvgShedder's `hits` likewise) and
    committed when
    `shedding_interval` has passed since the last commit (always when `now` is None);
    between commits the verdict is what the leader would decide if it ran now."""
    loads = sorted(loads, key=lambda load: load.broker)
    alive = frozenset(load.broker for load in loads) if alive is None else alive
    kept = ThresholdHistory(_frozen({b: u for b, u in history.usage.items() if b in alive}),
                            history.at)
    skipped = None
    if not cfg.shedding_enabled:
        skipped = SkipReason.SHEDDING_DISABLED
    elif len(alive) <= 1:
        skipped = SkipReason.SINGLE_BROKER
    if skipped is not None or not loads:
        return Shedding(cfg.load_shedding_strategy,
                        tuple(idle_verdict(load, cfg) for load in loads), skipped, kept)
    strategy = cfg.load_shedding_strategy
    if strategy is SheddingStrategy.AVG:
        kept_hits = hits.pruned(alive)
        verdicts, counted = avg_shedder(loads, cfg, kept_hits, recently_unloaded)
        due = now is None or kept_hits.at is None or now - kept_hits.at >= cfg.shedding_interval
        after_hits = AvgHits(counted.high, counted.low, now) if due else kept_hits
        return Shedding(strategy, verdicts, None, ThresholdHistory(), after_hits)
    if strategy is SheddingStrategy.THRESHOLD:
        verdicts, usage, zero = threshold_shedder(loads, cfg, kept.usage, recently_unloaded)
        due = now is None or kept.at is None or now - kept.at >= cfg.shedding_interval
        after = ThresholdHistory(_frozen({**kept.usage, **usage}), now) if due else kept
        return Shedding(strategy, verdicts, SkipReason.ZERO_AVERAGE if zero else None, after)
    # Another strategy runs: no ThresholdShedder instance, so no history (a switch back
    # starts afresh, as after the broker restart Pulsar needs to change strategy).
    if strategy is SheddingStrategy.UNIFORM:
        verdicts = uniform_shedder(loads, cfg, recently_unloaded)
    else:
        verdicts = tuple(broker_verdict(load, cfg, recently_unloaded) for load in loads)
    return Shedding(strategy, verdicts, None, ThresholdHistory())


# --- ThresholdShedder -------------------------------------------------------------------

def smooth(loads: Sequence[BrokerLoad], cfg: LoadManager,
           history: Mapping[str, float]) -> dict[str, float]:
    """`ThresholdShedder.updateAvgResourceUsage` for every broker: the weighted maximum
    usage (a fraction), blended as `old × p + (1 − p) × new` with
    p = `history_resource_percentage`; a broker without history starts at its usage."""
    p = cfg.history_resource_percentage
    out = {}
    for load in loads:
        usage = weighted_usage(load, cfg)[1] / 100.0
        old = history.get(load.broker)
        out[load.broker] = usage if old is None else old * p + (1 - p) * usage
    return out


def threshold_shedder(loads: Sequence[BrokerLoad], cfg: LoadManager,
                      history: Mapping[str, float], recently_unloaded: frozenset[str],
                      ) -> tuple[tuple[BrokerVerdict, ...], dict[str, float], bool]:
    """Pulsar's `ThresholdShedder.findBundlesForUnloading`: (verdicts, the new history,
    whether the average was 0 so nothing was considered).

    Every broker's usage is smoothed (`smooth`) and averaged. A broker is picked when its
    smoothed usage is *not below* average + threshold
    (`broker_threshold_shedder_percentage`); it would shed
    `usage − average − threshold + margin` of its throughput, unless that many bytes/s
    are under `bundle_unload_min_throughput_threshold` (then nothing). Bundles are
    chosen as by OverloadShedder. With `lower_boundary_shedding_enabled` and nothing
    chosen, `lower_boundary`: note that Pulsar smooths the history a second time there.
    """
    usage = smooth(loads, cfg, history)
    average = sum(usage.values()) / len(loads) if loads else 0.0
    if average == 0:
        return tuple(idle_verdict(load, cfg) for load in loads), usage, True
    threshold = cfg.broker_threshold_shedder_percentage / 100.0
    margin = cfg.shed_margin_percent / 100.0
    minimum = cfg.bundle_unload_min_throughput_threshold
    verdicts = []
    for load in loads:
        seen: VerdictExtra = {"smoothed_usage_percent": usage[load.broker] * 100,
                              "average_usage_percent": average * 100}
        current = usage[load.broker]
        if current < average + threshold:
            verdicts.append(idle_verdict(load, cfg, **seen))
            continue
        fraction = current - average - threshold + margin
        to_shed = load.throughput * fraction
        selection = (Selection(ShedOutcome.BELOW_MINIMUM) if to_shed < minimum
                     else select_by_throughput(load.bundles, to_shed, recently_unloaded))
        verdicts.append(picked_verdict(load, cfg, ShedReason.ABOVE_AVERAGE, fraction,
                                       to_shed, selection, **seen))
    if cfg.lower_boundary_shedding_enabled and not any(v.unload for v in verdicts):
        return lower_boundary(loads, cfg, usage, recently_unloaded, verdicts)
    return tuple(verdicts), usage, False


def lower_boundary(loads: Sequence[BrokerLoad], cfg: LoadManager, usage: Mapping[str, float],
                   recently_unloaded: frozenset[str], verdicts: list[BrokerVerdict],
                   ) -> tuple[tuple[BrokerVerdict, ...], dict[str, float], bool]:
    """`ThresholdShedder.tryLowerBoundaryShedding` (`lowerBoundarySheddingEnabled`):
    when some broker is below average − threshold, the busiest broker above
    average − threshold with more than one bundle sheds threshold × 0.5 of its
    throughput, unless that is under the minimum. Pulsar recomputes the average through
    `getBrokerAvgUsage`, which smooths every broker's history once more: so does this."""
    again = smooth(loads, cfg, usage)
    average = sum(again.values()) / len(loads)
    threshold = cfg.broker_threshold_shedder_percentage / 100.0
    busiest, top, below = None, average - threshold, False
    for load in loads:  # by broker id: the first of equals wins, as Java's strict `>`
        current = again[load.broker]
        if current > top and len(load.bundles) > 1:
            busiest, top = load, current
        below = below or current < average - threshold
    fraction = threshold * LOWER_BOUNDARY_MARGIN
    if (not below or busiest is None
            or cfg.bundle_unload_min_throughput_threshold > busiest.throughput * fraction):
        return tuple(verdicts), again, False
    to_shed = busiest.throughput * fraction
    seen: VerdictExtra = {"smoothed_usage_percent": again[busiest.broker] * 100,
                          "average_usage_percent": average * 100}
    picked = picked_verdict(busiest, cfg, ShedReason.LOWER_BOUNDARY, fraction, to_shed,
                            select_by_throughput(busiest.bundles, to_shed, recently_unloaded),
                            **seen)
    return tuple(picked if v.broker == busiest.broker else v for v in verdicts), again, False


# --- UniformLoadShedder -----------------------------------------------------------------

def _wrap(value: int) -> int:
    """Java int arithmetic: two's-complement wrap-around."""
    return (value - INT_MIN) % 2**32 + INT_MIN


def uniform_shedder(loads: Sequence[BrokerLoad], cfg: LoadManager,
                    recently_unloaded: frozenset[str]) -> tuple[BrokerVerdict, ...]:
    """Pulsar's `UniformLoadShedder.findBundlesForUnloading`: at most one broker sheds.

    The brokers with the highest and lowest msg rate (in + out) and throughput are found
    (ties: the first by broker id; a minimum within ±1e-6 of 0 counts as 1.0). When the
    msg-rate gap `(max − min) × 100 / min` exceeds
    `msg_rate_difference_shedder_threshold`, the msg-rate broker sheds
    `(int) ((max − min) × max_unload_percentage)` msgs/s; otherwise, when `max / min`
    throughput exceeds `msg_throughput_multiplier_difference_shedder_threshold`, the
    throughput broker sheds that share of the throughput gap in bytes/s (a threshold ≤ 0
    is off). Only with more than one bundle and that amount ≥ `min_unload_message` /
    `min_unload_message_throughput`. Bundles, largest first, are taken whenever they are
    ≤ what is still required + 1000 (Java int arithmetic), at most
    `max_unload_bundle_num_per_shedding` (−1: no limit).
    """
    rate = {load.broker: load.msg_rate for load in loads}
    tput = {load.broker: load.throughput for load in loads}
    rate_max, top_rate, low_rate = _extremes(loads, rate)
    tput_max, top_tput, low_tput = _extremes(loads, tput)
    rate_gap = (top_rate - low_rate) * 100 / low_rate
    tput_ratio = top_tput / low_tput
    by_rate = (cfg.msg_rate_difference_shedder_threshold > 0
               and rate_gap > cfg.msg_rate_difference_shedder_threshold)
    by_tput = (cfg.msg_throughput_multiplier_difference_shedder_threshold > 0
               and tput_ratio > cfg.msg_throughput_multiplier_difference_shedder_threshold)
    verdicts = {load.broker: idle_verdict(load, cfg) for load in loads}
    if not (by_rate or by_tput):
        return tuple(verdicts.values())
    if by_rate:  # the msg-rate branch wins; the throughput one runs only without it
        broker, reason, minimum = rate_max, ShedReason.MSG_RATE_SPREAD, cfg.min_unload_message
        required = java_int((top_rate - low_rate) * cfg.max_unload_percentage)
        value = rate
    else:
        broker, reason = tput_max, ShedReason.THROUGHPUT_SPREAD
        minimum = cfg.min_unload_message_throughput
        required = java_int((top_tput - low_tput) * cfg.max_unload_percentage)
        value = tput
    load = next(load for load in loads if load.broker == broker)
    fraction = required / value[broker] if value[broker] > 0 else 0.0
    if len(load.bundles) <= 1:
        selection = select_by_throughput(load.bundles, 0.0, recently_unloaded)
    elif required < minimum:
        selection = Selection(ShedOutcome.BELOW_MINIMUM)
    else:
        selection = _fit(load, by_rate, required, cfg.max_unload_bundle_num_per_shedding,
                         recently_unloaded)
    verdicts[broker] = picked_verdict(
        load, cfg, reason, fraction, 0.0 if by_rate else float(required), selection,
        msg_rate_to_shed=float(required) if by_rate else 0.0)
    return tuple(verdicts.values())


def _extremes(loads: Sequence[BrokerLoad], value: Mapping[str, float],
              ) -> tuple[str, float, float]:
    """(the broker with the max, the max, the min): strict comparisons from −1 and
    Integer.MAX_VALUE, so the first of equals wins (loads are in broker-id order); a min
    within ±1e-6 of 0 becomes 1.0 (Pulsar's guard against dividing by 0)."""
    top, low = -1.0, float(INT_MAX)
    top_broker = loads[0].broker
    for load in loads:
        if value[load.broker] > top:
            top_broker, top = load.broker, value[load.broker]
        low = min(low, value[load.broker])
    return top_broker, top, 1.0 if -UNIFORM_EPS <= low <= UNIFORM_EPS else low


def _fit(load: BrokerLoad, by_rate: bool, required: int, cap: int,
         recently_unloaded: frozenset[str]) -> Selection:
    eligible, none = candidates(load.bundles, recently_unloaded)
    if none is not None:
        return Selection(none)
    chosen: list[str] = []
    for name, size in largest_first(eligible, by_rate):
        if cap != -1 and len(chosen) >= cap:
            break
        if size <= _wrap(required + UNIFORM_DELTA):
            required = _wrap(required - java_int(size))  # MutableInt.add(-double)
            chosen.append(name)
    return Selection(ShedOutcome.UNLOAD if chosen else ShedOutcome.NO_FITTING_BUNDLE,
                     tuple(chosen))
