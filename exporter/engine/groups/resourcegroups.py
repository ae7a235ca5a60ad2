"""Resource-group quotas (PIP-82): Pulsar's own rules, exactly, and a round-by-round model.

`compute_local_quota` and `need_to_report` (pulsarcalc.py) mirror Apache Pulsar's
`ResourceQuotaCalculatorImpl` bit for bit; the allocators (Pulsar's rule, and `fair`) live
in `allocators`; usage bookkeeping (the usage map, counter diffs) in `usage`. They are
re-exported here so callers need one import, with the round-by-round model below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from exporter.engine.groups.allocators import (
    HEADROOM,
    Observed,
    allocate,
    fair_shares,
    max_min_fair_share,
    pip82_additive_share,
    proportional_share,
)
from exporter.engine.groups.pulsarcalc import compute_local_quota, need_to_report
from exporter.engine.groups.usage import (
    UNKNOWN,
    Accepted,
    AcceptOutcome,
    Baseline,
    CounterOutcome,
    CounterReset,
    Dimension,
    Dropped,
    EntryRejected,
    Expired,
    Fresh,
    Ignored,
    Increment,
    LookupOutcome,
    RejectReason,
    Stale,
    Unknown,
    Usage,
    UsageCounter,
    UsageMap,
    UsageReport,
)

__all__ = [
    "HEADROOM",
    "UNKNOWN",
    "AcceptOutcome",
    "Accepted",
    "Baseline",
    "CounterOutcome",
    "CounterReset",
    "Dimension",
    "Dropped",
    "EntryRejected",
    "Expired",
    "Fresh",
    "Ignored",
    "Increment",
    "LookupOutcome",
    "Observed",
    "RejectReason",
    "Stale",
    "Unknown",
    "Usage",
    "UsageCounter",
    "UsageMap",
    "UsageReport",
    "allocate",
    "compute_local_quota",
    "fair_shares",
    "max_min_fair_share",
    "need_to_report",
    "pip82_additive_share",
    "proportional_share",
    "simulate",
]

# --- the round-by-round model -----------------------------------------------------------------


def simulate(
    allocator: str,
    quota: float,
    demands: Sequence[Sequence[float]],
    initial_limits: Sequence[float] | None = None,
) -> list[list[float]]:
    """Limits after each round of a deterministic model of one RG × class × dimension.

    Round r: participant i uses `min(demands[r][i], limit_i)`; every participant then
    publishes a report (no suppression, no loss) carrying that usage and, since our reports
    carry it, its current limit; each computes its new limit with `allocator` from the same
    reports, so all agree. Limits start at `initial_limits`, else at the quota, which is what
    a Pulsar broker enforces before any usage is known (`ResourceGroupPublishLimiter` starts
    at the configured rate). A demand of 0 is an idle participant that still reports.
    The state between rounds is the limits alone, so runs chain: feed one run's last limits
    as the next run's `initial_limits` (e.g. to change the quota).
    """
    if not (math.isfinite(quota) and quota >= 0):
        raise ValueError(f"quota must be finite and ≥ 0 (no unlimited in a model), got {quota!r}")
    width = len(initial_limits) if initial_limits is not None else None
    if width is None:
        width = len(demands[0]) if demands else 0
    limits = [float(x) for x in initial_limits] if initial_limits is not None else [quota] * width
    if any(not (math.isfinite(x) and x >= 0) for x in limits):
        raise ValueError(f"initial limits must be finite and ≥ 0, got {limits!r}")
    history: list[list[float]] = []
    for r, row in enumerate(demands):
        if len(row) != width:
            raise ValueError(f"round {r} has {len(row)} demands for {width} participants")
        if any(not (math.isfinite(d) and d >= 0) for d in row):
            raise ValueError(f"round {r}: demands must be finite and ≥ 0, got {list(row)!r}")
        reports = {
            i: Observed(usage=min(float(d), limit), limit=limit)
            for i, (d, limit) in enumerate(zip(row, limits, strict=True))
        }
        shares = allocate(allocator, quota, reports)
        limits = [shares[i] for i in range(width)]
        history.append(limits)
    return history
