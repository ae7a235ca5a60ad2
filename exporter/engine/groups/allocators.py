"""How one resource group's quota is split between its participants, round by round.

Two allocators behind one call, `allocate(allocator, quota, reports)`; every participant
runs it on the same reports, so all arrive at the same split without a leader (PIP-82):

- "pulsar": exactly what a Pulsar 4.0 broker computes (`pulsarcalc.compute_local_quota`:
  `long` usages over the report period, `float` arithmetic, truncated to a `long`), so a
  quota of 100 split three ways is 33, 33, 33, as on the brokers, not 33.33.
  my + (Q − T)·my/T is Q·my/T: shares stay proportional to *usage*, so a participant
  throttled at a small limit uses exactly that limit and is handed it again. PIP-82's
  80/20 case (quota 100, both wanting more) never moves, and a participant that joins
  with limit 1 (Pulsar's floor for zero usage) stays at 1. `proportional_share` is the
  same rule on real numbers, for analysis.
- "fair": max-min fair share of the quota over *estimated* demands (below).

Quota < 0 means "not configured / unlimited": every participant gets -1, as in Pulsar.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exporter.config.settings import Allocator
from exporter.engine.groups.pulsarcalc import compute_local_quota

K = TypeVar("K", bound=Hashable)

# PIP-82's non-goal: "the limiting converges close to the configured quota, with an
# approximation of, say, 10%". `fair` never hands out more than quota × (1 + HEADROOM).
HEADROOM = 0.10
# A participant using all of its limit (to float rounding) is pinned: it is being
# throttled, so its usage says nothing about how much it wants. Deliberately no wider
# band: one using 98 % of its limit may well want exactly that, and treating it as
# pinned would hand it a share it leaves unused (quota under-used for good). A throttled
# participant whose measured usage jitters just below its limit is not cut either: as
# unpinned it gets MARGIN above its usage, and shows up pinned again.
PIN_TOLERANCE = 1e-9
# A pinned participant is assumed to want GROWTH × its limit, and at least an equal share.
GROWTH = 2.0
# An unpinned participant is given MARGIN above its usage (up to its fair share) so that
# it stays visibly unpinned; an idle one keeps SEED_SHARE of an equal share so that new
# demand shows up as "pinned" in the next round instead of being blocked at 0.
MARGIN = 0.05
SEED_SHARE = 0.05
# A pinned participant held below its fair share by the others' floors is probed with
# at most PROBE × quota in all (the room it needs to show that it wants more).
PROBE = 0.05


@dataclass(frozen=True)
class Observed:
    """A participant's last usage report: what it used in the period, and the limit it was
    running under (None when unknown or unlimited). Usage is in the quota's unit."""

    usage: float
    limit: float | None = None


def _check_usage(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be finite and ≥ 0, got {value!r}")
    return float(value)


def proportional_share(quota: float, my_usage: float, all_usages: Sequence[float]) -> float:
    """Pulsar's `computeLocalQuota` rule on real numbers: quota < 0 → -1; a negative usage
    → ValueError; total usage 0 → quota; else max(my + (quota − total)·my/total, 1).
    `all_usages` includes this participant's own report, as Pulsar's usage map does."""
    if math.isnan(quota):
        raise ValueError("quota must be a number, got nan")
    total = math.fsum(all_usages)
    if quota < 0:
        return -1.0
    if my_usage < 0 or total < 0:
        raise ValueError(f"Local usage ({my_usage}) or total usage ({total}) is negative")
    if total == 0:
        return float(quota)
    return max(my_usage + (quota - total) * (my_usage / total), 1.0)


def pip82_additive_share(quota: float, my_usage: float, all_usages: Sequence[float]) -> float:
    """PIP-82's first suggestion: under quota, *each* participant adds the whole
    unused remainder to its usage (10/50/30 of 100 → 20/60/40, "passing the set quota" in
    the short term); over quota it cuts proportionally, "the opposite" of the split.
    Kept to check PIP-82's worked example; Pulsar implemented the proportional split."""
    total = math.fsum(all_usages)
    if quota < 0:
        return -1.0
    if quota >= total:
        return my_usage + (quota - total)
    return proportional_share(quota, my_usage, all_usages)


def _water_fill(
    budget: float, floors: Sequence[float], caps: Sequence[float]
) -> tuple[list[float], float]:
    """Levels min(max(λ, floor_i), cap_i) that sum to `budget`, and λ: max-min fairness
    above per-participant floors. Requires floor_i ≤ cap_i; saturates at the floors or caps
    when the budget is outside [Σ floors, Σ caps] (λ = ∓inf)."""
    if budget >= math.fsum(caps):
        return list(caps), math.inf
    if budget <= math.fsum(floors):
        return list(floors), -math.inf

    def total_at(level: float) -> float:
        return math.fsum(min(max(level, f), c) for f, c in zip(floors, caps, strict=True))

    points = sorted(set(floors) | set(caps))
    lo, lo_total = points[0], total_at(points[0])
    level = points[-1]
    for hi in points[1:]:
        hi_total = total_at(hi)
        if hi_total >= budget:
            level = lo + (budget - lo_total) * (hi - lo) / (hi_total - lo_total)
            break
        lo, lo_total = hi, hi_total
    return [min(max(level, f), c) for f, c in zip(floors, caps, strict=True)], level


def max_min_fair_share(quota: float, demands: Sequence[float]) -> list[float]:
    """The max-min fair allocation of `quota` over known demands: everyone gets its demand
    if they all fit, else min(demand, λ) with λ chosen so the shares sum to the quota."""
    shares, _ = _water_fill(quota, [0.0] * len(demands), list(demands))
    return shares


def _is_pinned(seen: Observed) -> bool:
    """Throttled: using (nearly) all of a known limit. A limit of 0 pins (blocked); a
    negative limit is Pulsar's "unlimited" and, like None, never pins."""
    if seen.limit is None or seen.limit < 0:
        return False
    return seen.usage >= (1 - PIN_TOLERANCE) * seen.limit


def fair_shares(quota: float, reports: Mapping[K, Observed]) -> dict[K, float]:
    """Max-min fair share with demand estimation.

    1. Demand estimate: an unpinned participant wants what it used; a pinned one (usage at
       its limit) wants more than it could show: max(GROWTH × limit, quota / n).
    2. Split the quota max-min fairly over the estimates. If they all fit, everyone gets
       its estimate plus an equal part of what is left. When the current usages all fit
       in the quota, nobody is cut below its usage (a floor): nothing that runs today is
       throttled while the total fits.
    3. Headroom, at most HEADROOM × quota on top, water-filled lowest limit first: an
       unpinned participant gets up to MARGIN above its usage (never beyond its fair
       share), an idle one a seed; then a pinned participant that the floors kept below
       its fair share is probed toward it, PROBE × quota in all. That probe is what lets
       PIP-82's 80/20 state move: 80/20 → 80/25 → 50/50.

    Laws (tested): quota ≤ Σ limits ≤ quota × (1 + HEADROOM); if Σ usage ≤ quota, every
    limit ≥ that participant's usage.
    """
    if math.isnan(quota):
        raise ValueError("quota must be a number, got nan")
    keys = list(reports)
    if quota < 0:
        return {k: -1.0 for k in keys}
    n = len(keys)
    if n == 0:
        return {}
    seen = [reports[k] for k in keys]
    usage = [_check_usage(f"usage of {k!r}", s.usage) for k, s in zip(keys, seen, strict=True)]
    if any(s.limit is not None and math.isnan(s.limit) for s in seen):
        raise ValueError("a limit must be a number or None, got nan")
    if quota == 0:
        return {k: 0.0 for k in keys}
    pinned = [_is_pinned(s) for s in seen]
    estimate = [
        max(GROWTH * max(s.limit or 0.0, u), quota / n) if p else u
        for s, u, p in zip(seen, usage, pinned, strict=True)
    ]
    total_estimate = math.fsum(estimate)
    if total_estimate <= quota:
        spare = (quota - total_estimate) / n
        base = [e + spare for e in estimate]
        level = math.inf
    else:
        fair, level = _water_fill(quota, [0.0] * n, estimate)
        protected = math.fsum(usage) <= quota
        base = _water_fill(quota, usage, estimate)[0] if protected else fair
    # Headroom on top of the quota: margins and seeds first, then probes (capped smaller:
    # a probe that is used shows up as usage above the quota for one round).
    seed = SEED_SHARE * quota / n
    room = [
        b if p else max(b, min(u * (1 + MARGIN), level), seed)
        for b, u, p in zip(base, usage, pinned, strict=True)
    ]
    room, _ = _water_fill(math.fsum(base) + HEADROOM * quota, base, room)
    probe = [
        max(r, min(e, level)) if p else r for r, e, p in zip(room, estimate, pinned, strict=True)
    ]
    budget = min(math.fsum(base) + HEADROOM * quota, math.fsum(room) + PROBE * quota)
    final, _ = _water_fill(budget, room, probe)
    return dict(zip(keys, final, strict=True))


def allocate(allocator: str, quota: float, reports: Mapping[K, Observed],
             period: float = 1.0) -> dict[K, float]:
    """Every participant's next limit under the named allocator ("pulsar" or "fair").

    "pulsar" reads only usages, as Pulsar's brokers do: each a rate, turned into the
    whole count over `period` seconds (the report interval) that a broker's usage map
    holds, and the quota truncated to the `long` a broker is configured with. "fair" also
    reads the limits the reports carry. Unknown names raise ValueError.
    """
    kind = Allocator(allocator)
    if kind is Allocator.FAIR:
        return fair_shares(quota, reports)
    counts = {k: round(_check_usage(f"usage of {k!r}", s.usage) * period)
              for k, s in reports.items()}
    if math.isnan(quota):
        raise ValueError("quota must be a number, got nan")
    configured = -1 if quota < 0 else int(quota)
    total = list(counts.values())
    return {k: float(compute_local_quota(configured, mine, total)) for k, mine in counts.items()}
