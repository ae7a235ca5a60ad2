"""Pulsar's `AvgShedder` (modular load manager, in the jar since 3.3, the default from 5.0:
apache/pulsar#26609), as a pure function over one cycle's loads and the hit counts.

From `pulsar-broker/.../loadbalance/impl/AvgShedder.java` as 4.0.8's jar has it (checked
with javap: the thresholds are int keys, the scores sort with `comparingDouble`):

- Each broker's score is `getMaxResourceUsageWithWeight(...) × 100`, the same weighted
  maximum usage as ThresholdShedder's (no smoothing, no msg rates): CPU, direct memory and
  NIC in/out with their weights.
- The brokers are sorted by score (a stable sort: equal scores keep the score map's
  HashMap order, `map_order`; an older source cast the gap to int, 4.0.8 does not), then
  paired from both ends: lowest with highest, second lowest with second highest, and so on (an odd
  middle broker is paired with itself, so its gap is 0).
- A pair whose gap is below `loadBalancerAvgShedderLowThreshold` (15) drops both
  brokers' hit counts; otherwise both brokers' low count goes up by 1, and also their
  high count when the gap is at least `loadBalancerAvgShedderHighThreshold` (40), else
  their high count is dropped. No pair at all clears every count.
- A pair sheds once either broker's high count reaches
  `loadBalancerAvgShedderHitCountHighThreshold` (2) or low count reaches
  `...HitCountLowThreshold` (8): its counts are dropped, and the busier broker sheds
  `maxUnloadPercentage` × the pair's msg-rate gap (in + out) when that exceeds
  `minUnloadMessage`, else that share of the throughput gap when it exceeds
  `minUnloadMessageThroughput`, else nothing.
- Bundles (not heartbeat / SLA, not recently unloaded) are taken largest first (by the
  chosen measure) whenever each is > 0 and ≤ what is still to move. A sole bundle is
  only warned about: it is still taken when it fits.

AvgShedder also places bundles (it is a `ModularLoadManagerStrategy`: an unloaded bundle
goes to its pair's lighter broker, a new one to a random broker); placement is not
modelled. The counts live in the leader's shedder instance: `AvgHits` carries them between
cycles, committed at most once per `shedding_interval`, as `ThresholdHistory` is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.config.settings import LoadManager
from exporter.engine.load.loadbalance import (
    BrokerLoad,
    BrokerVerdict,
    Selection,
    ShedOutcome,
    ShedReason,
    candidates,
    idle_verdict,
    largest_first,
    picked_verdict,
    weighted_usage,
)


def _frozen(mapping: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class AvgHits:
    """`AvgShedder.brokerHitCountForHigh` / `brokerHitCountForLow`: broker → consecutive
    runs its pair's gap was ≥ the high / low threshold, as of the last run (`at`,
    seconds; None: never)."""

    high: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    low: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    at: float | None = None

    def pruned(self, alive: frozenset[str]) -> AvgHits:
        """The counts of live brokers only (Pulsar keeps a gone broker's until its pair
        changes; a new leader starts afresh, which is what pruning approximates)."""
        return AvgHits(_frozen({b: n for b, n in self.high.items() if b in alive}),
                       _frozen({b: n for b, n in self.low.items() if b in alive}), self.at)


NO_HITS = AvgHits()  # before any run (and after a run with no pair)


def java_hash(text: str) -> int:
    """Java's `String.hashCode` (UTF-16 code units, int arithmetic)."""
    h = 0
    units = text.encode("utf-16-be")
    for k in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[k:k + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def map_order(brokers: Sequence[str]) -> list[str]:
    """The order AvgShedder's `brokerScoreMap` (a `HashMap`) iterates its broker keys: by
    bin, `(h ^ h >>> 16) & (table − 1)` with h the key's hashCode, the table 16 bins doubled
    while it holds more than ¾ of them (Pulsar clears, never shrinks, the map: a cluster
    that once had more brokers may have a bigger table). Keys sharing a bin go by name
    (Pulsar's order there is insertion)."""
    table = 16
    while len(brokers) > table * 3 // 4:
        table *= 2

    def spread(h: int) -> int:
        u = h & 0xFFFFFFFF
        return u ^ (u >> 16)

    return sorted(brokers, key=lambda b: (spread(java_hash(b)) & (table - 1), b))


def _order(loads: Sequence[BrokerLoad], score: Mapping[str, float]) -> list[BrokerLoad]:
    """`calculateScoresAndSort`: the map's entries sorted by `Comparator.comparingDouble`
    (a stable sort: equal scores keep `map_order`)."""
    position = {b: k for k, b in enumerate(map_order([load.broker for load in loads]))}
    start = sorted(loads, key=lambda load: position[load.broker])
    return sorted(start, key=lambda load: score[load.broker])


def avg_shedder(loads: Sequence[BrokerLoad], cfg: LoadManager, hits: AvgHits,
                recently_unloaded: frozenset[str],
                ) -> tuple[tuple[BrokerVerdict, ...], AvgHits]:
    """`AvgShedder.findBundlesForUnloading`: (verdicts in the input's order, the counts
    after this run; `at` is left to the caller). `loads` in broker-id order."""
    score = {load.broker: weighted_usage(load, cfg)[1] for load in loads}
    ordered = _order(loads, score)
    high, low = dict(hits.high), dict(hits.low)
    pairs: list[tuple[BrokerLoad, BrokerLoad]] = []
    i, j = 0, len(ordered) - 1
    while i <= j:
        lo, hi = ordered[i], ordered[j]
        gap = score[hi.broker] - score[lo.broker]
        brokers = (lo.broker, hi.broker)
        if gap < cfg.avg_shedder_low_threshold:
            for b in brokers:
                high.pop(b, None)
                low.pop(b, None)
        else:
            pairs.append((lo, hi))
            for b in brokers:  # Java bumps min then max: the same broker twice if i == j
                low[b] = low.get(b, 0) + 1
            if gap < cfg.avg_shedder_high_threshold:
                for b in brokers:
                    high.pop(b, None)
            else:
                for b in brokers:
                    high[b] = high.get(b, 0) + 1
        i, j = i + 1, j - 1
    verdicts = {load.broker: idle_verdict(load, cfg) for load in loads}
    if not pairs:
        return tuple(verdicts.values()), NO_HITS
    for lo, hi in pairs:
        due = any(high.get(b, 0) >= cfg.avg_shedder_hit_count_high_threshold
                  or low.get(b, 0) >= cfg.avg_shedder_hit_count_low_threshold
                  for b in (lo.broker, hi.broker))
        if not due:
            continue
        for b in (lo.broker, hi.broker):
            high.pop(b, None)
            low.pop(b, None)
        verdicts[hi.broker] = _pair_verdict(lo, hi, cfg, recently_unloaded)
    return tuple(verdicts.values()), AvgHits(_frozen(high), _frozen(low))


def _pair_verdict(lo: BrokerLoad, hi: BrokerLoad, cfg: LoadManager,
                  recently_unloaded: frozenset[str],
                  ) -> BrokerVerdict:
    """What the busier broker of a due pair sheds (see the module docstring); the
    reasons are UniformLoadShedder's, as both move a share of a max − min gap (the
    score, AvgShedder's trigger, is the verdict's `max_usage_percent`)."""
    rate = (hi.msg_rate - lo.msg_rate) * cfg.max_unload_percentage
    tput = (hi.throughput - lo.throughput) * cfg.max_unload_percentage
    if rate > cfg.min_unload_message:
        by_rate, required, reason = True, rate, ShedReason.MSG_RATE_SPREAD
    elif tput > cfg.min_unload_message_throughput:
        by_rate, required, reason = False, tput, ShedReason.THROUGHPUT_SPREAD
    else:
        return picked_verdict(hi, cfg, ShedReason.THROUGHPUT_SPREAD, 0.0, 0.0,
                              Selection(ShedOutcome.BELOW_MINIMUM))
    value = hi.msg_rate if by_rate else hi.throughput
    fraction = required / value if value > 0 else 0.0
    selection = _fit(hi, by_rate, required, recently_unloaded)
    return picked_verdict(hi, cfg, reason, fraction, 0.0 if by_rate else required, selection,
                          msg_rate_to_shed=required if by_rate else 0.0)


def _fit(load: BrokerLoad, by_rate: bool, required: float,
         recently_unloaded: frozenset[str]) -> Selection:
    """Largest first (equal sizes by name; Pulsar's order among them is a hash map's),
    each taken when > 0 and ≤ what is still required."""
    if not load.bundles:
        return Selection(ShedOutcome.NO_BUNDLES)
    eligible, none = candidates(load.bundles, recently_unloaded)
    if none is not None:
        return Selection(none)
    chosen: list[str] = []
    for name, size in largest_first(eligible, by_rate):
        if 0 < size <= required:
            chosen.append(name)
            required -= size
    return Selection(ShedOutcome.UNLOAD if chosen else ShedOutcome.NO_FITTING_BUNDLE,
                     tuple(chosen))
