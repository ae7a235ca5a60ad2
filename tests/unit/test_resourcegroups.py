"""Pulsar's own resource-group rules (exact), PIP-82's worked examples, the model."""

from __future__ import annotations

import ctypes
import itertools

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from exporter.engine.groups.resourcegroups import (
    Observed,
    allocate,
    compute_local_quota,
    max_min_fair_share,
    need_to_report,
    pip82_additive_share,
    proportional_share,
    simulate,
)

LONG_MAX = (1 << 63) - 1


def f32(x: float) -> float:
    """Reference float32 rounding through C's `float` (the code under test uses struct)."""
    return ctypes.c_float(x).value


def reference_local_quota(conf: int, my: int, total: int) -> int:
    """Java's computeLocalQuota for non-negative inputs below 2**53, written out with ctypes:
    float residual = conf − total; float frac = (float) my / total;
    (long) max(my + residual * frac, 1)."""
    if conf < 0:
        return -1
    if total == 0:
        return conf
    residual = f32(float(conf - total))
    fraction = f32(f32(float(my)) / f32(float(total)))
    quota = f32(f32(float(my)) + f32(residual * fraction))
    return int(max(quota, 1.0))


# --- ResourceQuotaCalculatorImplTest (Apache Pulsar) vectors ----------------------------------


def test_pulsar_rq_calc_negative_conf():
    # ResourceQuotaCalculatorImplTest.testRQCalcNegativeConfTest
    assert compute_local_quota(-1, 0, [0]) == -1


def test_pulsar_rq_calc_negative_local_usage():
    # ResourceQuotaCalculatorImplTest.testRQCalcNegativeLocalUsageTest
    with pytest.raises(ValueError, match="negative"):
        compute_local_quota(0, -1, [0])


def test_pulsar_rq_calc_negative_all_usage():
    # ResourceQuotaCalculatorImplTest.testRQCalcNegativeAllUsageTest
    with pytest.raises(ValueError, match="negative"):
        compute_local_quota(0, 0, [-1])


def test_pulsar_rq_calc_glob_used_less_than_config():
    # ResourceQuotaCalculatorImplTest.testRQCalcGlobUsedLessThanConfigTest: quota grows.
    assert compute_local_quota(100, 20, [40]) > 20


def test_pulsar_rq_calc_glob_used_equals_config():
    # ResourceQuotaCalculatorImplTest.testRQCalcGlobUsedEqualsToConfigTest
    assert compute_local_quota(100, 20, [100]) == 20


def test_pulsar_rq_calc_glob_used_greater_than_config():
    # ResourceQuotaCalculatorImplTest.testRQCalcGlobUsedGreaterThanConfigTest: quota shrinks.
    assert compute_local_quota(100, 20, [150]) < 20


def test_pulsar_rq_calc_proportional_increment():
    # ResourceQuotaCalculatorImplTest.testRQCalcProportionalIncrementTest: the ratio of the
    # new quotas (as float) equals the ratio of the usages, 20/40.
    q1 = compute_local_quota(100, 20, [60])
    q2 = compute_local_quota(100, 40, [60])
    assert f32(f32(q1) / f32(q2)) == f32(f32(20.0) / f32(40.0))


def test_pulsar_rq_calc_glob_used_zero():
    # ResourceQuotaCalculatorImplTest.testRQCalcGlobUsedZeroTest
    assert compute_local_quota(10, 0, [0]) == 10


@pytest.mark.parametrize(
    ("conf", "local", "remote", "expected"),
    [
        # ResourceGroupServiceTest.testQuotaCalculation (Pulsar master), whose comments
        # compute local / (local + remote) × conf — the same number as
        # local + (conf − total) × local / total, in float, truncated.
        (200, 150, 600, 40),  # publish messages
        (100, 50, 250, 16),  # publish bytes
        (300, 100, 20, 250),  # replicator r1 messages
        (150, 75, 50, 90),  # replicator r1 bytes
        (400, 90, 280, 97),  # replicator r2 messages
        (2000, 1400, 400, 1555),  # replicator r2 bytes
    ],
)
def test_pulsar_quota_calculation_vectors(conf: int, local: int, remote: int, expected: int):
    # Pulsar sums the whole usage map, the broker's own report included.
    assert compute_local_quota(conf, local, [local, remote]) == expected


# --- computeLocalQuota: the rest of its semantics ----------------------------------------------


def test_unset_limit_wins_over_negative_usage():
    # `confUsage < 0` is checked before the usages are.
    assert compute_local_quota(-1, -5, [-7]) == -1


def test_total_is_the_sum_of_all_usages_including_mine():
    # 10 + (100 − 90) × 10/90 = 11.1 → 11; with my own usage left out of the list the
    # total would be 80 and the answer 10 + 20 × 10/80 = 12.
    assert compute_local_quota(100, 10, [10, 50, 30]) == 11
    assert compute_local_quota(100, 10, [50, 30]) == 12


def test_local_usage_above_total_is_computed_not_refused():
    # Pulsar only logs a warning: 50 + (100 − 20) × 50/20 = 250.
    assert compute_local_quota(100, 50, [20]) == 250


def test_floor_of_one_when_own_usage_is_zero():
    # A participant that used nothing gets 1 (Pulsar's rate limiter reads 0 as "no limit").
    assert compute_local_quota(100, 0, [60]) == 1
    # Over quota by far, a small user is floored at 1 too: 1 + (10 − 1000) × 1/1000 < 1.
    assert compute_local_quota(10, 1, [1, 999]) == 1


def test_float_arithmetic_not_exact_arithmetic():
    # 2**40 / 3 is not a float32; Java's float result is a multiple of the float32 ulp
    # at that magnitude (2**15), not the exact quotient's floor.
    result = compute_local_quota(1 << 40, 1, [3])
    assert result != (1 << 40) // 3
    assert result % (1 << 15) == 0
    assert result == reference_local_quota(1 << 40, 1, 3)


def test_long_overflow_of_the_total_is_a_negative_total():
    # Java's long sum wraps: 2**62 + 2**62 = −2**63, which Pulsar rejects as negative.
    with pytest.raises(ValueError, match="negative"):
        compute_local_quota(100, 1, [1 << 62, 1 << 62])


def test_arguments_must_be_java_longs():
    with pytest.raises(ValueError, match="Java long"):
        compute_local_quota(LONG_MAX + 1, 0, [1])
    with pytest.raises(TypeError):
        compute_local_quota(100, 1.5, [3])  # type: ignore[arg-type]


@given(
    conf=st.integers(-5, 1 << 50),
    my=st.integers(0, 1 << 50),
    others=st.lists(st.integers(0, 1 << 48), max_size=5),
)
def test_matches_a_ctypes_float32_reference(conf: int, my: int, others: list[int]):
    usages = [my, *others]
    assert compute_local_quota(conf, my, usages) == reference_local_quota(conf, my, sum(usages))


# --- needToReportLocalUsage --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current_bytes", "current_messages", "expected"),
    [(1040, 104, False), (950, 95, False), (1060, 106, True), (940, 94, True)],
)
def test_pulsar_need_to_report_local_usage(current_bytes, current_messages, expected):
    # ResourceQuotaCalculatorImplTest.testNeedToReportLocalUsage: last reported 1000 bytes
    # and 100 messages, reported just now; more than 5 % drift either way reports.
    assert need_to_report(current_bytes, 1000, current_messages, 100, 0) is expected


def test_exactly_the_tolerance_is_suppressed():
    assert need_to_report(1050, 1000, 105, 100, 1) is False
    assert need_to_report(1051, 1000, 100, 100, 1) is True


def test_messages_alone_can_trigger():
    assert need_to_report(1000, 1000, 110, 100, 1) is True


def test_forced_after_max_suppressed_rounds():
    unchanged = (1000, 1000, 100, 100)
    assert [need_to_report(*unchanged, r) for r in range(1, 7)] == [
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    assert need_to_report(*unchanged, 2, max_suppressed_rounds=2) is True


def test_zero_max_suppressed_rounds_reports_every_round():
    assert need_to_report(1000, 1000, 100, 100, 0, max_suppressed_rounds=0) is True


def test_negative_max_suppressed_rounds_never_forces():
    assert need_to_report(1000, 1000, 100, 100, 10**6, max_suppressed_rounds=-1) is False


def test_last_reported_zero_reports_any_usage():
    assert need_to_report(1, 0, 0, 0, 1) is True
    assert need_to_report(0, 0, 1, 0, 1) is True


def test_a_drop_to_zero_is_not_reported_by_drift():
    # Pulsar only looks at drift when current usage > 0: an RG that went idle is
    # reported only when the report is forced.
    assert need_to_report(0, 1000, 0, 100, 1) is False
    assert need_to_report(0, 1000, 0, 100, 5) is True


def test_zero_tolerance_reports_any_usage():
    assert need_to_report(1000, 1000, 100, 100, 1, tolerance_percent=0) is True
    assert need_to_report(0, 1000, 0, 100, 1, tolerance_percent=0) is False


def test_drift_is_computed_in_float():
    # Exactly, 50_000_001 × 100 / 10**9 = 5.0000001 % > 5 %; in float the diff rounds to
    # 50_000_000 and the drift to 5.0, which is not above the tolerance.
    assert need_to_report(1_050_000_001, 1_000_000_000, 0, 0, 1) is False


@given(
    current=st.integers(0, 1 << 40),
    last=st.integers(0, 1 << 40),
    tolerance=st.sampled_from([0.5, 1.0, 5.0, 10.0, 33.3]),
)
def test_drift_rule_matches_a_ctypes_float32_reference(current, last, tolerance):
    if current == 0:
        expected = False
    elif last == 0:
        expected = True
    else:
        percent = f32(f32(f32(float(abs(current - last))) * 100.0) / f32(float(last)))
        expected = percent > f32(tolerance)
    got = need_to_report(current, last, 0, 0, 1, tolerance_percent=tolerance)
    assert got is expected


# --- PIP-82's worked examples -----------------------------------------------------------------

PIP82_USAGES = [10, 50, 30]  # PIP-82: quota 100, brokers using 10, 50, 30


def test_pip82_even_split_of_the_remainder():
    # "each adding the remaining 10 units": 20, 60, 40 — 120 in all, over the quota.
    shares = [pip82_additive_share(100, u, PIP82_USAGES) for u in PIP82_USAGES]
    assert shares == [20, 60, 40]
    assert sum(shares) > 100


def test_pip82_proportional_split_of_the_remainder():
    # "1/9th, 5/9ths, and 1/3rd of the residual 10 units": 11.11, 55.56, 33.33.
    shares = [proportional_share(100, u, PIP82_USAGES) for u in PIP82_USAGES]
    assert [round(s, 2) for s in shares] == [11.11, 55.56, 33.33]
    # Pulsar's implementation of that split truncates to whole units.
    assert [compute_local_quota(100, u, PIP82_USAGES) for u in PIP82_USAGES] == [11, 55, 33]


def test_a_published_second_phase_is_not_what_the_formula_gives():
    # A Chinese-language walkthrough of PIP-82, "Apache Pulsar Tenant 和 Namespace
    # 级别限速使用与实现", says that from 20/60/40 (total 120) the proportional rule yields
    # 11.11/55.56/33.33. It yields 16.67/50/33.33: the 11.11… figures are PIP-82's
    # alternative computed from the 10/50/30 usages.
    after_even = [20, 60, 40]
    shares = [proportional_share(100, u, after_even) for u in after_even]
    assert [round(s, 2) for s in shares] == [16.67, 50.0, 33.33]


def test_pip82_80_20_is_stuck_under_pulsar():
    # PIP-82: quota 100, limits 80/20, both brokers want more. The proportional rule
    # hands each its usage back, for ever.
    history = simulate("pulsar", 100, [[200, 200]] * 20, initial_limits=[80, 20])
    assert all(limits == pytest.approx([80, 20]) for limits in history)


def test_pip82_80_20_leaves_within_three_rounds_under_fair():
    history = simulate("fair", 100, [[200, 200]] * 6, initial_limits=[80, 20])
    assert history[0][1] > 20  # broker-2 is raised at once, as PIP-82 asks ("higher than 20")
    assert history[2] == pytest.approx([50, 50], rel=0.10)
    assert history[-1] == pytest.approx([50, 50])


def test_pip82_uniform_load_allocated_70_30():
    # PIP-82's fairness goal: both see a load of 70, one is allocated 70 and one 30.
    assert simulate("pulsar", 100, [[70, 70]] * 10, [70, 30])[-1] == pytest.approx([70, 30])
    assert simulate("fair", 100, [[70, 70]] * 10, [70, 30])[-1] == pytest.approx([50, 50])


def test_pip82_no_under_use_when_one_side_wants_less():
    # PIP-82's utilisation goal: allocated 70/30, using 80/20 (broker-2 wants only 20):
    # broker-1 must end up with everything broker-2 leaves.
    history = simulate("fair", 100, [[200, 20]] * 6, [70, 30])
    usage = [min(200, history[-1][0]), min(20, history[-1][1])]
    assert usage == pytest.approx([80, 20])


def test_fair_does_not_take_nearly_full_use_for_throttling():
    # Broker-2 wants 49.5, just under its fair half. Taking "uses 99 % of its limit" for
    # "throttled" would keep handing it 50 while broker-1 is held at 50: 0.5 lost for good.
    history = simulate("fair", 100, [[200, 49.5]] * 10, [50, 50])
    assert history[-1][0] == pytest.approx(50.5)
    assert min(200, history[-1][0]) + min(49.5, history[-1][1]) == pytest.approx(100)


# --- the model ------------------------------------------------------------------------------


def test_simulate_starts_at_the_quota_like_pulsar():
    # Round 0 with limits at the quota: usages are the demands (10, 50, 30).
    first = simulate("pulsar", 100, [[10, 50, 30]])[0]
    # 100 × (10, 50, 30) / 90 = 11.1, 55.6, 33.3: a Pulsar broker truncates to a long
    assert first == [11.0, 55.0, 33.0]
    assert [int(proportional_share(100, u, PIP82_USAGES)) for u in PIP82_USAGES] == first


def test_the_pulsar_allocator_gives_the_brokers_integers():
    # three equal participants of a 100 msg/s quota: 33 each on the brokers, not 33.33
    reports = {p: Observed(20.0) for p in "abc"}
    assert allocate("pulsar", 100, reports, period=60) == {"a": 33.0, "b": 33.0, "c": 33.0}
    # rates become the whole counts over the report period that a broker's map holds:
    # 0.4 msg/s over 60 s is 24 messages, not 0 (which would return the quota)
    skewed = {"a": Observed(0.4), "b": Observed(1.6)}
    assert allocate("pulsar", 100, skewed, period=60) == {"a": 20.0, "b": 80.0}


def test_simulate_chains_through_initial_limits():
    demands = [[30, 90, 10]] * 4
    whole = simulate("fair", 100, demands * 2)
    first = simulate("fair", 100, demands)
    second = simulate("fair", 100, demands, initial_limits=first[-1])
    assert whole == first + second


def test_a_joiner_stays_at_one_under_pulsar_and_gets_its_share_under_fair():
    demands = [[80, 80, 0]] * 5 + [[80, 80, 80]] * 10
    assert simulate("pulsar", 100, demands)[-1][2] == pytest.approx(1.0)
    assert simulate("fair", 100, demands)[-1] == pytest.approx([100 / 3] * 3)


def test_simulate_rejects_bad_input():
    with pytest.raises(ValueError, match="quota"):
        simulate("fair", -1, [[1.0]])
    with pytest.raises(ValueError, match="round 1"):
        simulate("fair", 10, [[1.0, 2.0], [1.0]])
    with pytest.raises(ValueError, match="demands"):
        simulate("fair", 10, [[-1.0]])
    with pytest.raises(ValueError):
        simulate("greedy", 10, [[1.0]])


# --- laws of the fair allocator over random demands ---------------------------------------------

demand = st.one_of(st.just(0.0), st.floats(0, 5), st.floats(0, 300), st.just(100.0))


@st.composite
def scenarios(draw):
    quota = draw(st.one_of(st.just(100.0), st.floats(1, 300)))
    n = draw(st.integers(1, 6))
    demands = draw(st.lists(demand, min_size=n, max_size=n))
    initial = draw(
        st.one_of(
            st.none(),
            st.lists(st.floats(0, 400), min_size=n, max_size=n),
        )
    )
    return quota, demands, initial


ROUNDS = 12
SETTLED = 8  # observed worst case is 5 rounds


def usages(demands, initial, history, quota):
    limits = [initial or [quota] * len(demands), *history]
    return [[min(d, lim) for d, lim in zip(demands, row, strict=True)] for row in limits]


@given(scenarios())
def test_fair_hands_out_between_the_quota_and_ten_percent_more(scenario):
    quota, demands, initial = scenario
    for limits in simulate("fair", quota, [demands] * ROUNDS, initial):
        assert quota * (1 - 1e-9) <= sum(limits) <= quota * 1.1 * (1 + 1e-9)


@given(scenarios())
def test_fair_never_throttles_below_demand_when_it_fits(scenario):
    quota, demands, initial = scenario
    assume(sum(demands) <= quota)
    used = usages(demands, initial, simulate("fair", quota, [demands] * ROUNDS, initial), quota)
    for before, after in itertools.pairwise(used):
        assert all(a >= b - 1e-9 for a, b in zip(after, before, strict=True))
    assert used[SETTLED] == pytest.approx(demands, abs=1e-9)


@given(scenarios())
def test_fair_never_under_uses_the_quota_when_demand_exceeds_it(scenario):
    quota, demands, initial = scenario
    assume(sum(demands) >= quota)
    used = usages(demands, initial, simulate("fair", quota, [demands] * ROUNDS, initial), quota)
    assert sum(used[SETTLED]) >= quota * (1 - 1e-9)
    # … and what is used is the max-min fair share.
    assert used[SETTLED] == pytest.approx(max_min_fair_share(quota, demands), abs=1e-6 * quota)


@given(
    quota=st.floats(1, 1000),
    split=st.floats(0.01, 0.99),
    wants=st.tuples(st.floats(1, 3), st.floats(1, 3)),
)
def test_fair_leaves_any_two_way_split_within_three_rounds(quota, split, wants):
    # Generalises PIP-82's 80/20: both want more than the whole quota.
    limits = [quota * split, quota * (1 - split)]
    demands = [quota * wants[0], quota * wants[1]]
    third = simulate("fair", quota, [demands] * 3, limits)[2]
    assert third == pytest.approx([quota / 2, quota / 2], rel=0.10)


@given(
    quota=st.floats(1, 1e6),
    usages_=st.lists(st.floats(1e-3, 1e6), min_size=1, max_size=8),
)
def test_proportional_shares_sum_to_the_quota(quota, usages_):
    total = sum(usages_)
    assume(all(quota * u / total >= 1 for u in usages_))  # Pulsar's floor of 1 not in play
    shares = [proportional_share(quota, u, usages_) for u in usages_]
    assert sum(shares) == pytest.approx(quota, rel=1e-9)
