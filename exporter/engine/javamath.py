"""Java's integer casts, where the engine must round exactly as the broker's code does
(`BacklogQuotaManager`'s skip count, the shedders' unload amounts)."""

from __future__ import annotations

import math

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)


def java_int(value: float) -> int:
    """Java's `(int)` of a double: truncated toward 0, saturated at the int range, NaN → 0."""
    if math.isnan(value):
        return 0
    if value >= INT_MAX:
        return INT_MAX
    if value <= INT_MIN:
        return INT_MIN
    return math.trunc(value)
