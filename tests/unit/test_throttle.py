"""Kafka's client throttle formula (`ClientQuotaManager.throttleTime`) and the per
resource-group estimate."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from exporter.config.settings import MonitoringClass, RateLimit, ResourceGroup
from exporter.engine.groups.throttle import (
    LimitedBy,
    ObservedRates,
    resource_group_throttle,
    throttle_delay,
)

MiB = 1024 * 1024


# --- the formula -----------------------------------------------------------------------


def test_double_the_quota_is_delayed_by_one_window():
    # A producer with producer_byte_rate=10485760: quota 10 MiB/s. Observed at 20 MiB/s
    # over Kafka's default window (quota.window.num 11 × quota.window.size.seconds 1 = 11 s):
    # X = (20 − 10) / 10 · 11 = 11 s, so 20 MiB/s · 11 s = 10 MiB/s · 22 s.
    assert throttle_delay(20 * MiB, 10 * MiB, 11.0) == pytest.approx(11.0)


def test_fifty_percent_over_for_a_second():
    assert throttle_delay(1500.0, 1000.0, 1.0) == pytest.approx(0.5)


@pytest.mark.parametrize("observed", [0.0, 999.0, 1000.0])
def test_no_delay_at_or_below_quota(observed: float):
    # Kafka throttles only a strict violation (value > bound).
    assert throttle_delay(observed, 1000.0, 10.0) == 0.0


@pytest.mark.parametrize("quota", [-1, 0, -5.0])
def test_unlimited_or_zero_quota_never_delays(quota: float):
    assert throttle_delay(1e9, quota, 10.0) == 0.0


def test_infinite_quota_never_delays():
    assert throttle_delay(1e12, math.inf, 10.0) == 0.0


def test_cap_models_kafka_request_quotas():
    assert throttle_delay(5000.0, 1000.0, 10.0) == pytest.approx(40.0)
    assert throttle_delay(5000.0, 1000.0, 10.0, cap_seconds=1.0) == 1.0
    assert throttle_delay(1100.0, 1000.0, 1.0, cap_seconds=1.0) == pytest.approx(0.1)


@pytest.mark.parametrize("window", [0.0, -1.0, math.nan, math.inf])
def test_window_must_be_positive_and_finite(window: float):
    with pytest.raises(ValueError, match="window"):
        throttle_delay(2000.0, 1000.0, window)


@pytest.mark.parametrize(("observed", "quota"), [(math.nan, 1.0), (math.inf, 1.0), (1.0, math.nan)])
def test_nan_rates_are_rejected(observed: float, quota: float):
    with pytest.raises(ValueError):
        throttle_delay(observed, quota, 1.0)


def test_negative_cap_is_rejected():
    with pytest.raises(ValueError, match="cap"):
        throttle_delay(2.0, 1.0, 1.0, cap_seconds=-1.0)


_rate = st.floats(0.0, 1e9, allow_nan=False)
_quota = st.floats(1e-3, 1e9, allow_nan=False)
_window = st.floats(1e-3, 3600.0, allow_nan=False)


@given(o1=_rate, o2=_rate, quota=_quota, window=_window)
def test_monotone_in_observed_rate(o1: float, o2: float, quota: float, window: float):
    low, high = sorted((o1, o2))
    assert throttle_delay(low, quota, window) <= throttle_delay(high, quota, window)


@given(quota=_quota, below=st.floats(0.0, 1.0), window=_window)
def test_zero_at_or_below_quota(quota: float, below: float, window: float):
    assert throttle_delay(quota * below, quota, window) == 0.0


@given(observed=_rate, quota=_quota, window=_window)
def test_delayed_rate_equals_quota(observed: float, quota: float, window: float):
    # The defining property: spreading O·W over W + X brings the rate down to T.
    assume(observed > quota)
    delay = throttle_delay(observed, quota, window)
    assert delay > 0
    assert observed * window / (window + delay) == pytest.approx(quota, rel=1e-9)


@given(observed=_rate, quota=_quota, window=_window, cap=st.floats(0.0, 100.0))
def test_cap_bounds_the_delay(observed: float, quota: float, window: float, cap: float):
    capped = throttle_delay(observed, quota, window, cap_seconds=cap)
    assert capped == min(throttle_delay(observed, quota, window), cap)


# --- per resource group ----------------------------------------------------------------


GOLD = ResourceGroup(
    name="rg-gold",
    publish=RateLimit(messages_per_second=1000, bytes_per_second=10 * MiB),
    dispatch=RateLimit(),  # unlimited
)


def test_message_quota_binds_when_its_overshoot_is_larger():
    observed = {MonitoringClass.PUBLISH: ObservedRates(1500.0, 11 * MiB)}
    [estimate] = resource_group_throttle(GOLD, observed, window_seconds=10.0)
    assert estimate.resource_group == "rg-gold"
    assert estimate.monitoring_class is MonitoringClass.PUBLISH
    assert estimate.messages_delay_seconds == pytest.approx(5.0)  # 50 % over · 10 s
    assert estimate.bytes_delay_seconds == pytest.approx(1.0)  # 10 % over · 10 s
    assert estimate.delay_seconds == pytest.approx(5.0)
    assert estimate.limited_by is LimitedBy.MESSAGES


def test_byte_quota_binds_when_its_overshoot_is_larger():
    observed = {MonitoringClass.PUBLISH: ObservedRates(500.0, 30 * MiB)}
    [estimate] = resource_group_throttle(GOLD, observed, window_seconds=1.0)
    assert estimate.messages_delay_seconds == 0.0
    assert estimate.bytes_delay_seconds == pytest.approx(2.0)
    assert estimate.delay_seconds == pytest.approx(2.0)
    assert estimate.limited_by is LimitedBy.BYTES


def test_within_quota_and_unlimited_classes_have_no_delay():
    observed = {
        MonitoringClass.PUBLISH: ObservedRates(999.0, 1.0),
        MonitoringClass.DISPATCH: ObservedRates(1e9, 1e12),  # unlimited: never delayed
    }
    estimates = resource_group_throttle(GOLD, observed, window_seconds=60.0)
    assert [e.monitoring_class for e in estimates] == [
        MonitoringClass.PUBLISH,
        MonitoringClass.DISPATCH,
    ]
    for estimate in estimates:
        assert estimate.delay_seconds == 0.0
        assert estimate.limited_by is LimitedBy.NONE


def test_class_without_observations_yields_no_estimate():
    observed = {MonitoringClass.DISPATCH: ObservedRates(1.0, 1.0)}
    estimates = resource_group_throttle(GOLD, observed, window_seconds=1.0)
    assert [e.monitoring_class for e in estimates] == [MonitoringClass.DISPATCH]
    assert resource_group_throttle(GOLD, {}, window_seconds=1.0) == ()


def test_only_the_byte_quota_set():
    group = ResourceGroup(name="rg", dispatch=RateLimit(bytes_per_second=100))
    observed = {MonitoringClass.DISPATCH: ObservedRates(1e6, 400.0)}
    [estimate] = resource_group_throttle(group, observed, window_seconds=2.0)
    assert estimate.messages_delay_seconds == 0.0
    assert estimate.delay_seconds == pytest.approx(6.0)  # (400 − 100) / 100 · 2
    assert estimate.limited_by is LimitedBy.BYTES


@given(msgs=_rate, byts=_rate, window=_window)
def test_estimate_is_the_larger_of_both_delays(msgs: float, byts: float, window: float):
    observed = {MonitoringClass.PUBLISH: ObservedRates(msgs, byts)}
    [estimate] = resource_group_throttle(GOLD, observed, window)
    assert estimate.messages_delay_seconds == throttle_delay(msgs, 1000, window)
    assert estimate.bytes_delay_seconds == throttle_delay(byts, 10 * MiB, window)
    assert estimate.delay_seconds == max(
        estimate.messages_delay_seconds, estimate.bytes_delay_seconds
    )
    assert (estimate.limited_by is LimitedBy.NONE) == (estimate.delay_seconds == 0.0)


def test_equal_overshoot_names_the_message_quota():
    observed = {MonitoringClass.PUBLISH: ObservedRates(2000.0, 20 * MiB)}  # both 100 % over
    [estimate] = resource_group_throttle(GOLD, observed, window_seconds=3.0)
    assert estimate.messages_delay_seconds == estimate.bytes_delay_seconds == pytest.approx(3.0)
    assert estimate.limited_by is LimitedBy.MESSAGES
