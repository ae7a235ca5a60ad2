"""Backlog-age estimator: interpolation, idle topics, resets, bounded tables, monotonicity."""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.engine.backlog.agetable import (
    AgeTables,
    Collapsed,
    Estimate,
    Inserted,
    Method,
    NoBacklog,
    NoPoints,
    OutOfOrder,
    Point,
    TableReset,
)

T = "persistent://acme/orders/t1"


def table(*points: tuple[float, int], max_points: int = 60) -> AgeTables:
    tables = AgeTables(max_points)
    for t, published in points:
        tables.observe(T, t, published)
    return tables


# --- interpolation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backlog", "age", "method"),
    [
        # Table: 0 messages at t=0, 100 at t=100, 300 at t=200; now=250, published 300.
        (1, 50.0, Method.INTERPOLATED),  # message #300, published at t=200
        (100, 99.5, Method.INTERPOLATED),  # #201: 100 + 101/200·100 = 150.5
        (200, 149.5, Method.INTERPOLATED),  # #101: 100 + 1/200·100 = 100.5
        (250, 199.0, Method.INTERPOLATED),  # #51: t=51
        (300, 249.0, Method.INTERPOLATED),  # #1: t=1
        (301, 250.0, Method.LOWER_BOUND),  # older than the oldest point: ≥ now − 0
        (10**6, 250.0, Method.LOWER_BOUND),
    ],
)
def test_interpolation_on_a_hand_built_table(backlog, age, method) -> None:
    tables = table((0.0, 0), (100.0, 100), (200.0, 300))
    result = tables.estimate(T, backlog, 300, now=250.0)
    assert result == Estimate(pytest.approx(age), method)


def test_a_snapshot_newer_than_the_table_closes_it() -> None:
    # Not yet observed: (200, 200) is taken from the snapshot itself.
    tables = table((0.0, 0), (100.0, 100))
    assert tables.estimate(T, 50, 200, now=200.0) == Estimate(49.0, Method.INTERPOLATED)


def test_the_earliest_time_a_count_was_reached_is_used() -> None:
    # 100 reached at t=10, then flat until t=50; the 100th message dates from t=10.
    tables = table((0.0, 0), (10.0, 100), (50.0, 100), (60.0, 200))
    assert tables.estimate(T, 101, 200, now=60.0) == Estimate(50.0, Method.INTERPOLATED)


def test_no_backlog_and_no_points() -> None:
    tables = table((0.0, 0), (10.0, 10))
    assert tables.estimate(T, 0, 10, now=20.0) == NoBacklog()
    assert tables.estimate("persistent://other/ns/t", 5, 10, now=20.0) == NoPoints()
    assert table((0.0, 10)).estimate(T, 5, 10, now=20.0) == NoPoints()
    # The snapshot's counter is below the table's: a restart not yet observed.
    assert tables.estimate(T, 5, 3, now=20.0) == NoPoints()


def test_age_is_never_negative_when_now_lags_the_table() -> None:
    tables = table((0.0, 0), (100.0, 100))
    result = tables.estimate(T, 1, 100, now=50.0)
    assert isinstance(result, Estimate)
    assert result.age_seconds == 0.0


# --- observe() outcomes ---------------------------------------------------------------------


def test_idle_topic_ages_by_wall_time_and_its_table_stays_small() -> None:
    tables = AgeTables(max_points=5)
    assert tables.observe(T, 0.0, 0) == Inserted()
    assert tables.observe(T, 60.0, 100) == Inserted()
    assert tables.observe(T, 120.0, 100) == Inserted()
    for k in range(3, 1_000):
        assert tables.observe(T, 60.0 * k, 100) == Collapsed(run_start=60.0, published=100)
    assert tables.points(T) == (Point(0.0, 0), Point(60.0, 100), Point(60.0 * 999, 100))
    # Message #51 was published at t=30.6 whatever the table's age; it ages with the clock.
    for now in (60.0 * 999, 10**6):
        assert tables.estimate(T, 50, 100, now=now) == Estimate(
            pytest.approx(now - 30.6), Method.INTERPOLATED
        )


def test_counter_reset_rebases_the_table() -> None:
    tables = table((0.0, 0), (60.0, 600))
    assert tables.observe(T, 120.0, 10) == TableReset(previous=600, published=10)
    assert tables.points(T) == (Point(120.0, 10),)
    assert tables.estimate(T, 100, 10, now=120.0) == NoPoints()
    assert tables.observe(T, 180.0, 70) == Inserted()
    # The backlog outlived the restart (100 > 70 published since): at least since the re-base.
    assert tables.estimate(T, 100, 70, now=200.0) == Estimate(80.0, Method.LOWER_BOUND)
    # Message #41 of the new epoch: 120 + (41 − 10) / (70 − 10) · 60 = 151.
    assert tables.estimate(T, 30, 70, now=200.0) == Estimate(
        pytest.approx(200.0 - 151.0), Method.INTERPOLATED
    )


def test_out_of_order_points_are_ignored() -> None:
    tables = table((0.0, 0), (60.0, 600))
    assert tables.observe(T, 60.0, 700) == OutOfOrder(newest_time=60.0)
    assert tables.observe(T, 30.0, 700) == OutOfOrder(newest_time=60.0)
    assert tables.points(T) == (Point(0.0, 0), Point(60.0, 600))


def test_max_points_must_leave_an_interior() -> None:
    with pytest.raises(ValueError, match="max_points"):
        AgeTables(max_points=3)


# --- bounded memory -------------------------------------------------------------------------


def test_bounded_under_ten_thousand_observations() -> None:
    rng = random.Random(7)
    tables = AgeTables(max_points=60)
    t, published, thinned = 0.0, 0, 0
    first = rng.uniform(1, 120)
    for _ in range(10_000):
        t += rng.uniform(1, 120) if t else first
        published += rng.choice([0, 0, 1, 10, 1_000])
        result = tables.observe(T, t, published)
        thinned += result.thinned if isinstance(result, Inserted) else 0
        assert len(tables.points(T)) <= 60
    points = tables.points(T)
    assert thinned > 0
    assert points[0].time == first  # the oldest point is never merged away
    assert all(a.time < b.time and a.published <= b.published for a, b in pairwise(points))
    assert points[-1] == Point(t, published)


def test_thinning_keeps_a_steady_rate_exact() -> None:
    tables = AgeTables(max_points=20)
    for second in range(10_001):
        tables.observe(T, float(second), 10 * second)
    assert len(tables.points(T)) <= 20
    assert tables.points(T)[0] == Point(0.0, 0)
    # Message #50001 was published at t=5000.1 (10 per second).
    assert tables.estimate(T, 50_000, 100_000, now=10_000.0) == Estimate(
        pytest.approx(4_999.9), Method.INTERPOLATED
    )


def test_thinning_keeps_the_start_of_an_idle_stretch() -> None:
    tables = AgeTables(max_points=20)
    for second in range(0, 1_001, 10):  # busy: 1 message per second until t=1000
        tables.observe(T, float(second), second)
    for second in range(1_010, 5_001, 10):  # idle until t=5000
        tables.observe(T, float(second), 1_000)
    for second in range(5_010, 20_001, 10):  # busy again
        tables.observe(T, float(second), 1_000 + (second - 5_000))
    published = 1_000 + 15_000
    # The 1000th message was published at t=1000, before the idle stretch.
    result = tables.estimate(T, published - 999, published, now=20_000.0)
    assert isinstance(result, Estimate)
    assert result.age_seconds == pytest.approx(19_000.0, rel=0.01)


def test_retain_drops_vanished_topics() -> None:
    tables = AgeTables()
    for topic in ("a", "b", "c"):
        tables.observe(topic, 0.0, 0)
    assert tables.retain(["b", "d"]) == 2
    assert len(tables) == 1
    assert "b" in tables
    assert tables.points("a") == ()


def test_a_topic_keeps_the_name_its_table_was_made_with() -> None:
    first, later = "".join(["persistent://t/ns/", "x"]), "".join(["persistent://t/ns/", "x"])
    assert first == later and first is not later  # each cycle's tables spell names afresh
    tables = AgeTables()
    tables.observe(first, 0.0, 0)
    tables.observe(later, 60.0, 5)
    assert tables.name(later) is first
    assert tables.name("persistent://t/ns/y") == "persistent://t/ns/y"  # no table: itself
    tables.observe(later, 120.0, 1)  # a reset begins the table anew, under its name
    assert tables.name(later) is first


# --- laws -------------------------------------------------------------------------------------

histories = st.lists(
    st.tuples(st.floats(0.001, 1_000), st.sampled_from([0, 0, 1, 7, 100, 5_000])),
    min_size=1,
    max_size=80,
)


@given(
    history=histories,
    start=st.integers(0, 10**6),
    backlogs=st.lists(st.integers(0, 10**6), min_size=2, max_size=20),
    lag=st.floats(-100, 10**5),
    max_points=st.integers(4, 30),
)
def test_estimate_is_monotone_in_backlog_and_never_negative(
    history, start, backlogs, lag, max_points
) -> None:
    tables = AgeTables(max_points)
    t, published = 0.0, start
    tables.observe(T, t, published)
    for dt, added in history:
        t += dt
        published += added
        tables.observe(T, t, published)
    now = t + lag
    ages = []
    methods = []
    for backlog in sorted(backlogs):
        result = tables.estimate(T, backlog, published, now)
        assert not isinstance(result, NoPoints)
        assert result.age_seconds >= 0
        ages.append(result.age_seconds)
        methods.append(result.method if isinstance(result, Estimate) else None)
    assert ages == sorted(ages)
    # Once a backlog reaches past the oldest point, every larger one does too.
    first_bound = next((i for i, m in enumerate(methods) if m is Method.LOWER_BOUND), None)
    if first_bound is not None:
        assert all(m is Method.LOWER_BOUND for m in methods[first_bound:])


def _thinned_by_the_rule(points: list[Point]) -> list[Point]:
    """The module's thinning rule, point by point in plain Python: score each interior
    point by the time error its removal causes, relative to its age; drop a quarter, least
    cost first (ties: the older), never two neighbours."""
    n, newest = len(points), points[-1].time
    scored = []
    for i in range(1, n - 1):
        a, p, b = points[i - 1], points[i], points[i + 1]
        merged = a.time + (p.published - a.published) / (b.published - a.published) \
            * (b.time - a.time)
        scored.append((abs(p.time - merged) / max(newest - p.time, 1e-9), p.time, i))
    drop: set[int] = set()
    for _, _, i in sorted(scored):
        if len(drop) == n // 4:
            break
        if i - 1 not in drop and i + 1 not in drop:
            drop.add(i)
    return [p for i, p in enumerate(points) if i not in drop]


def _observed(tables: AgeTables, start: int, steps) -> Iterator[tuple[Point, object]]:
    """Each point of a history observed (`start` messages at t=0, then each step's seconds
    later and messages more), with what `observe` answered."""
    t, published = 0.0, start
    yield Point(t, published), tables.observe(T, t, published)
    for dt, added in steps:
        t, published = t + dt, published + added
        yield Point(t, published), tables.observe(T, t, published)


@given(history=histories, start=st.integers(0, 2**62), max_points=st.integers(4, 30))
def test_thinning_drops_what_the_rule_says(history, start, max_points) -> None:
    tables, expected = AgeTables(max_points), []
    for point, result in _observed(tables, start, history):
        if isinstance(result, Inserted):
            expected.append(point)
            if len(expected) > max_points:
                kept = _thinned_by_the_rule(expected)
                assert result.thinned == len(expected) - len(kept)
                expected = kept
        elif isinstance(result, Collapsed):
            expected[-1] = point
        assert list(tables.points(T)) == expected


@given(histories=st.lists(histories, min_size=1, max_size=6), max_points=st.integers(4, 12))
def test_observing_all_topics_at_once_keeps_what_observing_each_keeps(histories, max_points
                                                                      ) -> None:
    """The check observes every topic in one call, thinning the full tables together."""
    one, all_ = AgeTables(max_points), AgeTables(max_points)
    topics = [f"{T}-{i}" for i in range(len(histories))]
    published = dict.fromkeys(topics, 0)
    t = 0.0
    for step in range(max(len(h) for h in histories)):
        t += 1.0 + step % 3 * 0.5
        now: list[int | None] = []
        for topic, history in zip(topics, histories, strict=True):
            now.append(None)  # a topic without a count this cycle: its table is kept
            if step < len(history):
                published[topic] += history[step][1]
                one.observe(topic, t, published[topic])
                now[-1] = published[topic]
        all_.observe_all(topics, np.array([c or 0 for c in now]),
                         np.array([c is not None for c in now]), t)
        assert [all_.points(topic) for topic in topics] == [one.points(topic) for topic in topics]


def test_ties_in_cost_drop_the_older_point_first() -> None:
    """A rate repeating every three points: points of equal cost, and time decides among
    them (a sort that is not stable picked others)."""
    tables, expected, published = AgeTables(), [], 0
    for second in range(61):
        published += (1, 2, 2)[second % 3]
        tables.observe(T, 10.0 * second, published)
        expected.append(Point(10.0 * second, published))
    assert list(tables.points(T)) == _thinned_by_the_rule(expected)


# --- the store: many tables at once -------------------------------------------------------


@given(histories=st.lists(histories, min_size=1, max_size=8),
       backlogs=st.lists(st.integers(1, 10**6), min_size=1, max_size=8),
       lag=st.floats(-100, 10**5), max_points=st.integers(4, 12))
def test_ages_of_many_tables_at_once_are_each_ones_estimate(histories, backlogs, lag,
                                                            max_points) -> None:
    """The check asks every subscription's age in one call, over tables of every length:
    each answer is what `estimate` gives for that table alone."""
    tables = AgeTables(max_points)
    topics = [f"{T}-{i}" for i in range(len(histories))]
    published = dict.fromkeys(topics, 0)
    t = 0.0
    for step in range(max(len(h) for h in histories)):
        t += 1.0
        for topic, history in zip(topics, histories, strict=True):
            if step < len(history):
                published[topic] += history[step][1]
                tables.observe(topic, t + history[step][0] / 1e4, published[topic])
    asked = [(topic, backlog) for topic in (*topics, "never observed") for backlog in backlogs]
    rows = np.array([tables.row(topic) for topic, _ in asked])
    counts = np.array([published.get(topic, 0) for topic, _ in asked])
    ages, lower = tables.ages(rows, np.array([b for _, b in asked]), counts, t + lag)
    for (topic, backlog), age, bound in zip(asked, ages.tolist(), lower.tolist(), strict=True):
        expected = tables.estimate(topic, backlog, published.get(topic, 0), t + lag)
        if isinstance(expected, NoPoints):
            assert age != age
        else:
            assert (age, bound) == (expected.age_seconds, expected.method is Method.LOWER_BOUND)


def test_backlogs_past_one_batch_of_estimates_are_each_ones_estimate() -> None:
    """`ages` works out its estimates a batch at a time: over three batches and a part,
    every answer is still `estimate`'s for its table and backlog, in its place."""
    tables, rng = AgeTables(), random.Random(7)
    topics = [f"{T}-{i}" for i in range(5)]
    for k in range(30):
        for i, topic in enumerate(topics):
            tables.observe(topic, 60.0 * k + i, (i + 1) * k * k)
    asked = [(rng.randrange(-1, 5), rng.choice([1, 9, 100, 5000, 10**9]))
             for _ in range(3 * 2**16 + 5)]
    rows = np.array([tables.row(topics[i]) if i >= 0 else -1 for i, _ in asked])
    published = np.array([(i + 1) * 29 * 29 if i >= 0 else 0 for i, _ in asked])
    ages, lower = tables.ages(rows, np.array([b for _, b in asked]), published, 2000.0)
    expected = {(i, b): tables.estimate(topics[i], b, (i + 1) * 29 * 29, 2000.0)
                for i in range(5) for b in (1, 9, 100, 5000, 10**9)}
    for (i, b), age, bound in zip(asked, ages.tolist(), lower.tolist(), strict=True):
        if i < 0:
            assert age != age and not bound
        else:
            e = expected[(i, b)]
            assert isinstance(e, Estimate)
            assert (age, bound) == (e.age_seconds, e.method is Method.LOWER_BOUND)


def test_an_arrow_column_of_names_is_observed_as_its_strs_are() -> None:
    """The check hands its topics as the pipeline's Arrow column, made strs a batch at a
    time: over two batches and a part, with a topic twice and some not seen, the rows, the
    points and the names are those of the same names as strs."""
    names = [f"{T}-{i}" for i in range(2**17 + 10)] + [f"{T}-3"]
    column = pa.chunked_array([pa.array(names[:1000]), pa.array(names[1000:])])
    strs, arrow = AgeTables(), AgeTables()
    seen = np.arange(len(names)) % 11 != 0
    for k in range(3):
        published = np.arange(len(names)) + 10 * k * (np.arange(len(names)) % 3)
        if k == 2:
            published[5] = 0  # a restart: its table begins anew
        rows = strs.observe_all(names, published, seen, 60.0 * k)
        assert np.array_equal(arrow.observe_all(column, published, seen, 60.0 * k), rows)
    assert all(strs.points(n) == arrow.points(n) for n in names[::997])
    assert arrow.names(rows) == strs.names(rows)
    assert arrow.name(names[5]) == names[5] and len(arrow) == len(strs)


def test_retaining_rows_keeps_the_tables_of_those_rows() -> None:
    tables = AgeTables()
    rows = tables.observe_all(["a", "b", "c"], np.zeros(3, np.int64), np.ones(3, bool), 0.0)
    assert tables.retain_rows(np.array([rows[1], -1])) == 2
    assert len(tables) == 1 and "b" in tables and tables.points("a") == ()
    assert tables.observe("a", 60.0, 4) == Inserted()  # a row of its own again
    assert tables.points("a") == (Point(60.0, 4),)


def test_a_topic_twice_in_one_cycle_is_observed_once() -> None:
    tables = AgeTables()
    seen = np.ones(2, bool)
    tables.observe_all([T, T], np.array([5, 9]), seen, 0.0)
    tables.observe_all([T, T], np.array([7, 8]), seen, 60.0)
    assert tables.points(T) == (Point(0.0, 5), Point(60.0, 7))


def test_a_dropped_tables_row_starts_a_new_topic_afresh() -> None:
    tables = AgeTables(max_points=4)
    for k in range(5):  # full, thinned once
        tables.observe("gone", 60.0 * k, 10 * k)
    tables.retain([])
    assert tables.observe("new", 600.0, 100) == Inserted()  # above the old table's count
    assert tables.points("new") == (Point(600.0, 100),)
    assert tables.estimate("new", 1, 100, now=600.0) == NoPoints()
    assert tables.name("new") == "new" and "gone" not in tables


def test_rows_outgrow_the_store_and_keep_their_points() -> None:
    tables, names = AgeTables(), [f"{T}-{i}" for i in range(3000)]
    seen = np.ones(len(names), bool)
    for k in range(3):
        tables.observe_all(names[:1000 * (k + 1)], np.arange(1000 * (k + 1)) + k,
                           seen[:1000 * (k + 1)], 60.0 * k)
    assert tables.points(names[0]) == (Point(0.0, 0), Point(60.0, 1), Point(120.0, 2))
    assert tables.points(names[2999]) == (Point(120.0, 3001),)


def test_a_table_spans_at_most_the_messages_its_offsets_hold() -> None:
    """Counts are uint32 offsets from a table's oldest: a point further than 2^32 − 1
    messages from it drops the oldest points, and a backlog older than those is a lower
    bound from the oldest kept. Counts stay exact past 2^32."""
    tables = AgeTables()
    tables.observe(T, 0.0, 10)
    tables.observe(T, 60.0, 10 + 2**31)
    assert tables.observe(T, 120.0, 10 + 2**32) == Inserted(thinned=1)
    assert tables.points(T) == (Point(60.0, 10 + 2**31), Point(120.0, 10 + 2**32))
    published = 10 + 2**32
    assert tables.estimate(T, 2**31 + 5, published, now=180.0) == \
        Estimate(120.0, Method.LOWER_BOUND)  # message 2^31 + 6: before the oldest kept
    # message 2^31 + 11, the first after the oldest kept: 60 s + 60 / 2^31 after it
    assert tables.estimate(T, 2**31, published, now=180.0) == \
        Estimate(180.0 - (60.0 + 60.0 / 2**31), Method.INTERPOLATED)
    # Further than that from every point: the table begins anew, as after a restart.
    assert tables.observe(T, 180.0, published + 2**33) == Inserted(thinned=2)
    assert tables.points(T) == (Point(180.0, published + 2**33),)
    assert tables.estimate(T, 1, published + 2**33, now=180.0) == NoPoints()


@given(steps=st.lists(st.tuples(st.floats(0.001, 1_000), st.sampled_from(
    [0, 0, 1, 2**20, 2**31, 2**32 - 1, 2**32, 2**33])), min_size=1, max_size=40),
       start=st.integers(0, 2**62))
def test_a_table_keeps_the_points_within_its_span_of_the_newest(steps, start) -> None:
    """Points more than 2^32 − 1 messages below the newest go, oldest first, counted as
    dropped; the rest stay exact (no thinning here: `max_points` is never reached)."""
    tables, expected = AgeTables(max_points=100), []
    for point, result in _observed(tables, start, steps):
        if isinstance(result, Collapsed):
            expected[-1] = point
        else:
            kept = [p for p in [*expected, point] if point.published - p.published < 2**32]
            assert result == Inserted(thinned=len(expected) + 1 - len(kept))
            expected = kept
        assert list(tables.points(T)) == expected


def test_the_clock_keeps_only_the_times_some_point_holds() -> None:
    """A point's time is a tick of the store's clock, one an update. Ticks no point holds
    go when the clock fills, the points keep their times, and the clock stays its least."""
    quiet, busy = AgeTables(), AgeTables()
    for second in range(5000):
        if second % 50 == 0:
            quiet.observe(T, float(second), second * 3)
            busy.observe(T, float(second), second * 3)
        busy.observe(f"{T}-{second % 7}", second + 0.5, second)  # a tick each
        if second == 4000:
            busy.retain([T, f"{T}-1"])
    assert busy.points(T) == quiet.points(T) and len(busy.points(T)) > 40
    assert busy.points(f"{T}-1")[-1] == Point(4999.5, 4999)
    assert busy._clock.size == 1024  # what the store holds is the point


def test_a_clock_past_what_a_uint16_names_widens_its_ticks_and_keeps_every_time() -> None:
    """A point's tick is a uint16 while the clock has room for at most 2^16: each table's
    oldest point stays, so a store whose topics began one update apart holds a tick for
    each. The compaction that needs more room widens the ticks to uint32, once, and every
    point keeps its time."""
    tables, n = AgeTables(), 2**16 + 3
    seen = np.ones(1, bool)
    for k in range(n):  # a tick each, every one held by the table it began
        tables.observe_all([f"{T}-{k % 1000}" if k < 2000 else f"{T}-{k}"],
                           np.array([k]), seen, float(k))
    assert tables._when.dtype == np.uint32
    assert tables.points(f"{T}-7") == (Point(7.0, 7), Point(1007.0, 1007))
    assert tables.points(f"{T}-{n - 1}") == (Point(n - 1.0, n - 1),)
    assert all(tables.points(f"{T}-{k}") == (Point(float(k), k),) for k in range(2000, n, 997))
    # and it keeps counting: a second point on a table begun before the widening
    tables.observe(f"{T}-7", n + 0.5, 5000)
    assert tables.estimate(f"{T}-7", 1, 5000, now=n + 0.5) == Estimate(0.0, Method.INTERPOLATED)
    # message #1001, published at 1001 s: between the points of the ticks made first
    assert tables.estimate(f"{T}-7", 4000, 5000, now=n + 0.5) == Estimate(
        n + 0.5 - 1001.0, Method.INTERPOLATED)


def test_ticks_stay_uint16_while_the_clock_has_room_for_at_most_2_16() -> None:
    tables = AgeTables()
    for k in range(20_000):  # 20k ticks held: a clock of room for 2^15 at most
        tables.observe(f"{T}-{k}", float(k), k)
    assert tables._when.dtype == np.uint16 and tables._clock.size <= 2**16
    assert tables.points(f"{T}-19999") == (Point(19999.0, 19999),)
