"""The allocators behind `allocate`: Pulsar's proportional rule and `fair`, per round."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import Allocator
from exporter.engine.groups.allocators import (
    HEADROOM,
    PROBE,
    Observed,
    allocate,
    fair_shares,
    max_min_fair_share,
    proportional_share,
)


def test_allocate_names_both_allocators():
    reports = {"a": Observed(10, 10), "b": Observed(30, 30)}
    assert allocate("pulsar", 100, reports) == {
        "a": pytest.approx(25),
        "b": pytest.approx(75),
    }
    assert allocate(Allocator.FAIR, 100, reports) == fair_shares(100, reports)
    with pytest.raises(ValueError):
        allocate("greedy", 100, reports)


@pytest.mark.parametrize("allocator", ["pulsar", "fair"])
def test_unset_quota_means_unlimited_for_everyone(allocator):
    assert allocate(allocator, -1, {"a": Observed(5, 5), "b": Observed(0)}) == {
        "a": -1.0,
        "b": -1.0,
    }


@pytest.mark.parametrize("allocator", ["pulsar", "fair"])
def test_no_reports_no_limits(allocator):
    assert allocate(allocator, 100, {}) == {}


def test_pulsar_ignores_limits_and_gives_the_quota_before_any_usage():
    assert allocate("pulsar", 100, {"a": Observed(0, 3), "b": Observed(0)}) == {
        "a": 100.0,
        "b": 100.0,
    }


def test_proportional_share_mirrors_pulsars_checks():
    assert proportional_share(-1, -5, [3]) == -1.0
    with pytest.raises(ValueError, match="negative"):
        proportional_share(100, -1, [5])
    assert proportional_share(100, 0, [0, 0]) == 100.0
    assert proportional_share(100, 0, [0, 50]) == 1.0  # Pulsar's floor


def test_max_min_fair_share():
    assert max_min_fair_share(100, [5, 10, 20, 60, 120]) == pytest.approx([5, 10, 20, 32.5, 32.5])
    assert max_min_fair_share(100, [10, 20]) == [10, 20]  # all fit: demands
    assert max_min_fair_share(90, [40, 40, 40]) == pytest.approx([30, 30, 30])


def test_fair_single_participant_gets_the_quota():
    assert fair_shares(100, {"a": Observed(100, 100)}) == {"a": pytest.approx(100)}
    assert fair_shares(100, {"a": Observed(20, 100)}) == {"a": pytest.approx(100)}


def test_fair_zero_quota_blocks_everyone():
    assert fair_shares(0, {"a": Observed(3, 5), "b": Observed(0)}) == {"a": 0.0, "b": 0.0}


def test_fair_probes_a_throttled_participant_held_down_by_the_floors():
    # PIP-82's 80/20, both pinned: the usages fill the quota, so nobody may be cut,
    # and the headroom lets the small one grow toward its share.
    shares = fair_shares(100, {"b1": Observed(80, 80), "b2": Observed(20, 20)})
    assert shares == {"b1": pytest.approx(80), "b2": pytest.approx(20 + PROBE * 100)}


def test_fair_cuts_to_max_min_when_usage_exceeds_the_quota():
    shares = fair_shares(100, {"b1": Observed(80, 80), "b2": Observed(30, 30)})
    assert shares == {"b1": pytest.approx(50), "b2": pytest.approx(50)}


def test_fair_gives_an_unpinned_participant_a_margin_and_an_idle_one_a_seed():
    shares = fair_shares(
        100,
        {"busy": Observed(200, 200), "steady": Observed(20, 50), "idle": Observed(0, 10)},
    )
    assert shares["steady"] > 20  # usage 20, not pinned: a margin above it
    assert shares["steady"] <= 20 * 1.05 + 1e-9
    assert shares["idle"] > 0  # can show new demand next round
    assert sum(shares.values()) <= 100 * (1 + HEADROOM) + 1e-9


def test_fair_treats_unknown_and_unlimited_limits_as_unthrottled():
    # Without a limit, usage is demand: 30 and 20 fit, the rest is shared evenly.
    shares = fair_shares(100, {"a": Observed(30), "b": Observed(20, -1)})
    assert shares == {"a": pytest.approx(55), "b": pytest.approx(45)}


def test_fair_rejects_bad_usage():
    with pytest.raises(ValueError, match="usage"):
        fair_shares(100, {"a": Observed(-1, 5)})
    with pytest.raises(ValueError, match="usage"):
        fair_shares(100, {"a": Observed(math.nan)})
    with pytest.raises(ValueError, match="limit"):
        fair_shares(100, {"a": Observed(1, math.nan)})


# --- per-round laws, for any reports ----------------------------------------------------------

amount = st.one_of(st.just(0.0), st.floats(0, 5), st.floats(0, 500))
report = st.builds(Observed, usage=amount, limit=st.one_of(st.none(), amount))


@given(
    quota=st.one_of(st.just(100.0), st.floats(0.5, 500)),
    reports=st.dictionaries(st.text(min_size=1, max_size=3), report, min_size=1, max_size=7),
)
def test_fair_round_laws(quota, reports):
    shares = fair_shares(quota, reports)
    assert set(shares) == set(reports)
    assert all(share >= 0 for share in shares.values())
    total = sum(shares.values())
    assert quota * (1 - 1e-9) <= total <= quota * (1 + HEADROOM) * (1 + 1e-9)
    if sum(r.usage for r in reports.values()) <= quota:
        # Nothing running today is cut while it all fits.
        assert all(shares[k] >= r.usage - 1e-9 * quota for k, r in reports.items())
