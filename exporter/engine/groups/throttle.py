"""Client throttle model: how long a rate limiter would hold a client over its quota.

Kafka's rule (its docs' "Quotas", `ClientQuotaManager.throttleTime` / `QuotaUtils`): a client
observed at rate O over a window W, with quota T, is delayed by X such that the rate over
the stretched window is back at quota, O·W = T·(W + X), so X = (O − T) / T · W.
We export that delay for each resource group over its (cluster-wide) quota, so operators
see how hard Pulsar's resource-group rate limiter is — or would be — pushing back.

The window W is the caller's: Kafka measures over `quota.window.num` ×
`quota.window.size.seconds` (defaults 11 × 1 s; its `Rate` counts at least
`num − 1` whole windows plus the elapsed part of the current one); Pulsar's resource-group
limiter is a token bucket refilled every 1 s; the exporter's own rates are averaged over
the check interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from exporter.config.settings import MonitoringClass, ResourceGroup


def throttle_delay(
    observed_rate: float,
    quota_rate: float,
    window_seconds: float,
    cap_seconds: float | None = None,
) -> float:
    """Seconds of delay X = (O − T) / T · W that bring rate O back to quota T over W.

    0 when O ≤ T (Kafka only throttles a strict violation) and when the quota is ≤ 0,
    i.e. -1 "unlimited" or 0, which Pulsar's resource-group limiter also treats as "no
    limiter". Uncapped like Kafka's byte-rate quotas; Kafka caps request-time quotas at
    one `quota.window.size.seconds`, pass `cap_seconds` to model that. Kafka rounds to
    whole milliseconds because it sleeps; this returns the exact value.
    """
    if not math.isfinite(observed_rate):
        raise ValueError(f"observed_rate must be finite, got {observed_rate!r}")
    if math.isnan(quota_rate):
        raise ValueError("quota_rate must be a number, got nan")
    if not (math.isfinite(window_seconds) and window_seconds > 0):
        raise ValueError(f"window_seconds must be finite and > 0, got {window_seconds!r}")
    if cap_seconds is not None and not cap_seconds >= 0:
        raise ValueError(f"cap_seconds must be ≥ 0, got {cap_seconds!r}")
    if quota_rate <= 0 or observed_rate <= quota_rate:
        return 0.0
    delay = (observed_rate - quota_rate) / quota_rate * window_seconds
    return delay if cap_seconds is None else min(delay, cap_seconds)


@dataclass(frozen=True)
class ObservedRates:
    """A resource group's cluster-wide rates in one monitoring class."""

    messages_per_second: float
    bytes_per_second: float


class LimitedBy(StrEnum):
    """Which quota sets the delay. A Pulsar limiter admits a message only when both its
    message and its byte bucket allow it, so the longer of the two delays applies."""

    NONE = "none"  # within quota, or no quota set
    MESSAGES = "messages"
    BYTES = "bytes"


@dataclass(frozen=True)
class ThrottleEstimate:
    resource_group: str
    monitoring_class: MonitoringClass
    delay_seconds: float  # max(messages_delay_seconds, bytes_delay_seconds)
    messages_delay_seconds: float
    bytes_delay_seconds: float
    limited_by: LimitedBy


def resource_group_throttle(
    group: ResourceGroup,
    observed: Mapping[MonitoringClass, ObservedRates],
    window_seconds: float,
) -> tuple[ThrottleEstimate, ...]:
    """One estimate per monitoring class present in `observed`, in `MonitoringClass`
    order; a class without observed rates yields no estimate (its series is absent
    rather than a made-up 0). On equal non-zero delays the message quota is named."""
    estimates = []
    for cls in MonitoringClass:
        rates = observed.get(cls)
        if rates is None:
            continue
        limit = group.limit(cls)
        msgs = throttle_delay(rates.messages_per_second, limit.messages_per_second, window_seconds)
        byts = throttle_delay(rates.bytes_per_second, limit.bytes_per_second, window_seconds)
        if msgs == byts == 0.0:
            by = LimitedBy.NONE
        else:
            by = LimitedBy.MESSAGES if msgs >= byts else LimitedBy.BYTES
        estimates.append(
            ThrottleEstimate(
                resource_group=group.name,
                monitoring_class=cls,
                delay_seconds=max(msgs, byts),
                messages_delay_seconds=msgs,
                bytes_delay_seconds=byts,
                limited_by=by,
            )
        )
    return tuple(estimates)
