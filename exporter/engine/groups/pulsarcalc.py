"""Apache Pulsar's `ResourceQuotaCalculatorImpl` (pulsar-broker, broker/resourcegroup/), bit
for bit, as the 4.0 LTS line ships it (read off 4.0.8's bytecode): `computeLocalQuota` and
`needToReportLocalUsage`, with their Java arithmetic — 64-bit `long` sums that wrap,
`float` (IEEE single) intermediates, and the truncating `(long)` cast.

Later Pulsar (master, 2025+) adds two early returns to `computeLocalQuota` (own usage 0,
and a total rate at or below `resourceGroupLocalQuotaThreshold` × configured, both →
configured) and writes the split as my/total × configured; 4.0.x has neither.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

# --- Java arithmetic ----------------------------------------------------------------------

_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1


def _check_long(name: str, value: int) -> int:
    """Pulsar's arguments are Java `long`s; anything else cannot reach its code."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (a Java long), got {value!r}")
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{name} does not fit a Java long: {value}")
    return value


def _wrap_long(value: int) -> int:
    """Two's-complement wrap of a Python int to 64 bits, as Java `long` arithmetic does."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def _f32(value: float) -> float:
    """Round a double to the nearest IEEE single. Rounding each Java `float` operation's
    exact-in-double result this way is exact for + − × ÷ (double has > 2·24 + 2 bits)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _long_to_f32(value: int) -> float:
    """Java's `long` → `float` widening: round to nearest, ties to even, directly from the
    integer (going through a double first could round twice above 2**53)."""
    magnitude = abs(value)
    if magnitude < 1 << 24:
        return float(value)
    shift = magnitude.bit_length() - 24
    kept, rest = divmod(magnitude, 1 << shift)
    half = 1 << (shift - 1)
    if rest > half or (rest == half and kept & 1):
        kept += 1
    return math.copysign(float(kept << shift), value)


def _f2l(value: float) -> int:
    """Java's `(long)` cast of a float: NaN → 0, saturating, else truncation toward 0."""
    if math.isnan(value):
        return 0
    if value >= 2.0**63:
        return _LONG_MAX
    if value <= -(2.0**63):
        return _LONG_MIN
    return int(value)


# --- ResourceQuotaCalculatorImpl ------------------------------------------------------------


def compute_local_quota(configured: int, my_usage: int, all_usages: Sequence[int]) -> int:
    """This participant's next local limit, as Pulsar's `computeLocalQuota` computes it.

    Order of checks and arithmetic as in `ResourceQuotaCalculatorImpl.computeLocalQuota`,
    the rule Pulsar has had since the floor of 1 was added (#11916, 2021):
    - total = the `long` sum of `all_usages`. In Pulsar, `calculateQuotaForAllResourceGroups`
      passes one element, the sum over the whole usage map *including this broker's own
      last report*, and `my_usage` is that own reported value (not its live usage);
    - configured < 0 (limit not set) → -1, before any other check;
    - my_usage < 0 or total < 0 → error (`PulsarAdminException`; `ValueError` here);
    - total == 0 → configured;
    - else `max(my + (configured − total) × (my / total), 1)` in `float`, cast to `long`.
      The floor of 1 exists because Pulsar's rate limiter reads ≤ 0 as "no limit" (#11916).

    my_usage > total only logs a warning in Pulsar and is computed all the same.
    A recent change on Pulsar master also returns `configured` when my_usage == 0 or when
    the total rate is below `resourceGroupLocalQuotaThreshold` × configured, and writes
    the split as my/total × configured (the same number); the long-standing rule above is
    the one this project pins.
    """
    _check_long("configured", configured)
    _check_long("my_usage", my_usage)
    total = 0
    for usage in all_usages:
        total = _wrap_long(total + _check_long("all_usages[]", usage))
    if configured < 0:
        return -1
    if my_usage < 0 or total < 0:
        raise ValueError(f"Local usage ({my_usage}) or total usage ({total}) is negative")
    if total == 0:
        return configured
    residual = _long_to_f32(_wrap_long(configured - total))
    fraction = _f32(_long_to_f32(my_usage) / _long_to_f32(total))
    calculated = _f32(_long_to_f32(my_usage) + _f32(residual * fraction))
    return _f2l(max(calculated, 1.0))


def _drifted(current: int, last: int, tolerance: float) -> bool:
    """One dimension of `needToReportLocalUsage`: only a positive current usage can trigger a
    report (a drop to 0 never does, by drift); last == 0 or tolerance ≤ 0 always do."""
    if current <= 0:
        return False
    if last == 0 or tolerance <= 0:
        return True
    diff = _wrap_long(abs(_wrap_long(current - last)))  # Math.abs(Long.MIN_VALUE) stays negative
    percent = _f32(_f32(_long_to_f32(diff) * 100.0) / _long_to_f32(last))
    return percent > tolerance


def need_to_report(
    current_bytes: int,
    last_bytes: int,
    current_messages: int,
    last_messages: int,
    rounds_since_report: int,
    *,
    tolerance_percent: float = 5,
    max_suppressed_rounds: int = 5,
) -> bool:
    """Whether this round's usage must be published or may be suppressed (Pulsar's rule).

    `ResourceQuotaCalculatorImpl.needToReportLocalUsage`, with Pulsar's elapsed time since
    the last *sent* report (≥ publish interval × `resourceUsageMaxUsageReportSuppressRounds`
    forces one) counted here in rounds: with 5, rounds 1–4 after a report may be
    suppressed and round 5 is forced. 0 reports every round; a negative value never forces.
    Otherwise a report goes out when bytes or messages drift from the last *reported* value
    by more than `tolerance_percent` (strictly; 5 % is Pulsar's default), computed in
    `float` as `|current − last| × 100 / last`. Edge cases as in Pulsar: a last report of
    0 with current usage > 0 reports; a tolerance ≤ 0 reports any usage > 0; a current
    usage of 0 never reports by drift, only when forced. (Older Pulsar reached the same
    answers for last == 0 through a float division by zero, and compared milliseconds
    since the last attempt with interval *seconds* × rounds, a unit slip that forced a
    report every round; current master counts from the last sent report, in ms.)
    """
    for name, value in (
        ("current_bytes", current_bytes),
        ("last_bytes", last_bytes),
        ("current_messages", current_messages),
        ("last_messages", last_messages),
        ("rounds_since_report", rounds_since_report),
        ("max_suppressed_rounds", max_suppressed_rounds),
    ):
        _check_long(name, value)
    if max_suppressed_rounds == 0:
        return True
    if max_suppressed_rounds > 0 and rounds_since_report >= max_suppressed_rounds:
        return True
    tolerance = _f32(float(tolerance_percent))
    return _drifted(current_bytes, last_bytes, tolerance) or _drifted(
        current_messages, last_messages, tolerance
    )


