"""Backlog age without reading messages: per-topic tables of (time, messages published).

Where no source reports the oldest unacknowledged message's publish time (pulsar-lite never
does; Apache Pulsar < 3.2 neither), we estimate it the way kafka-lag-exporter estimates time
lag (its `LookupTable`): remember, per topic, when the cumulative publish counter had which
value, and read the table backwards. A subscription with backlog B on a topic that has
published P messages has acknowledged up to message P − B (0-based number of its oldest
unacknowledged message), so that message is the (P − B + 1)-th one: it was published at the
moment the counter first reached P − B + 1. Between two points the counter is taken to grow
linearly (messages evenly spaced), which makes the last message of a segment land exactly
on the segment's right end.

Rules, all documented here because the exported series depends on them:

- Flat runs (an idle topic) are collapsed to their two end points, so repeated snapshots of
  an idle topic do not push real history out of the table, and its backlog ages by wall
  time: the oldest unacked message keeps its publish time while `now` advances.
- The counter reaching a value is looked up at the *earliest* time it did (the left end of a
  flat run), never inside a flat run.
- Older than the oldest point (the counter had already reached the target there): the
  publish time is at or before that point, so the age is reported as a lower bound,
  `now − oldest point time`, with `Method.LOWER_BOUND`. We do not extrapolate backwards with
  an average rate: for a topic that was idle before the table began any rate is a guess, and
  a lower bound never over-reports a time quota.
- Newer than the newest point: the snapshot's own (now, published_total) closes the table,
  so the time is interpolated between the newest point and now.
- A counter that goes down (broker restart, topic reload: Pulsar's `msgInCounter` restarts
  at 0 while the backlog persists) clears the table and re-bases it on the new value; a
  backlog older than the restart then gets a lower bound measured from the re-base.
- Memory is bounded: at most `max_points` per topic. When the table overflows, a quarter
  of it is merged away: the interior points whose removal moves an interpolated publish
  time the least *relative to that point's age* are dropped (never the oldest or newest
  point, never two neighbours in one pass). Recent history stays dense, old history gets
  sparse, the left end of an idle stretch (a large time error if dropped) survives, and
  the table spans the whole history since its (re-)base. A sliding window that drops the
  oldest point instead would turn every backlog older than `max_points` check intervals
  into a lower bound (60 points × 60 s would cap ages near one hour, a common time limit).
  Cost: one O(n log n) pass per n/4 inserts. Tables begun together fill together, so the
  check observes every topic in one call (`observe_all`), and the tables it takes over
  the bound are thinned side by side in numpy: ~4 µs a table where a loop over each
  one's points took 44 (`tests.bench.pipeline --ages`).
- Points are kept in typed arrays (`array('d')` times, `array('q')` counts), 16 bytes a
  point, not lists of float and int objects (~76): a busy topic's full table, its dict
  entry included, is 1,293 bytes instead of 4,567 (`tests.bench.pipeline --ages`, the name
  aside: a table refers to the one it was made with, for the decisions to share). At a
  million topics that is 1.3 GB instead of 4.6 once every table has filled, after
  `max_points` cycles of new messages: a growth no short run shows.

The estimate is monotone: a larger backlog never gets a smaller age. The topic's age is the
largest over its subscriptions (`topic_age`); by monotonicity that is the estimate for the
largest backlog. Pure: no clock reads, times are passed in (epoch seconds).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

DEFAULT_MAX_POINTS = 60
_MIN_POINTS = 4  # thinning keeps both ends and needs an interior to merge


@dataclass(frozen=True)
class Point:
    """The counter had value `published` (cumulative messages) at `time` (epoch seconds)."""

    time: float
    published: int


# --- observe() outcomes -------------------------------------------------------------------


@dataclass(frozen=True)
class Inserted:
    """The point was appended; `thinned` counts points dropped to stay within the bound."""

    thinned: int = 0


@dataclass(frozen=True)
class Collapsed:
    """Same count as the two newest points: the flat run's right end moved to this time."""

    run_start: float
    published: int


@dataclass(frozen=True)
class TableReset:
    """The counter went down (broker restart): the table now holds only this point."""

    previous: int
    published: int


@dataclass(frozen=True)
class OutOfOrder:
    """Not newer than the newest point: ignored (the table must be ordered by time)."""

    newest_time: float


Observation = Inserted | Collapsed | TableReset | OutOfOrder
_INSERTED = Inserted()  # what most observations answer: one object, it is frozen
_OVER = Inserted(-1)  # inserted, and the table is over its bound: not an answer, a mark


# --- estimate() outcomes ------------------------------------------------------------------


class Method(StrEnum):
    INTERPOLATED = "interpolated"  # the publish time lies inside the table (or up to now)
    LOWER_BOUND = "lower_bound"  # published at or before the oldest point: age ≥ value


@dataclass(frozen=True)
class NoPoints:
    """Not enough history (fewer than two points, or the snapshot's counter is below the
    table's: a restart not yet observed). The exporter leaves the series absent."""


@dataclass(frozen=True)
class NoBacklog:
    """Nothing unacknowledged: the age is 0."""

    age_seconds: float = 0.0


@dataclass(frozen=True)
class Estimate:
    age_seconds: float
    method: Method


AgeEstimate = NoPoints | NoBacklog | Estimate


class _Table:
    """One topic's points, ordered by time, counts non-decreasing, no three equal in a row."""

    __slots__ = ("counts", "name", "times")

    def __init__(self, name: str, t: float, published: int) -> None:
        self.name = name
        self.times = array("d", (t,))
        self.counts = array("q", (published,))

    def append(self, t: float, published: int) -> None:
        self.times.append(t)
        self.counts.append(published)

    def time_reached(self, target: int, now: float, published_total: int,
                     ) -> tuple[float, Method] | None:
        """When the counter first reached `target`, as an age at `now`; None if unknown."""
        times, counts = self.times, self.counts
        j = bisect_left(counts, target)
        if j == 0:
            return max(0.0, now - times[0]), Method.LOWER_BOUND
        if j < len(counts):
            t0, c0, t1, c1 = times[j - 1], counts[j - 1], times[j], counts[j]
        elif target <= published_total:
            # Newer than the table: the snapshot itself, (now, published_total), closes it.
            t0, c0, t1, c1 = times[-1], counts[-1], max(now, times[-1]), published_total
        else:
            return None
        published_at = t0 + (target - c0) / (c1 - c0) * (t1 - t0)  # c0 < target ≤ c1
        return max(0.0, now - published_at), Method.INTERPOLATED


_CHUNK = 4096  # tables thinned at once: their points side by side, ~4 MB


def _thin(tables: list[_Table]) -> int:
    """Merge away a quarter of each table's points, those whose loss costs the least (see
    the module), for tables of one length: every table over the bound has `max_points` + 1.
    Tables begun together fill together, so at a million topics every busy one thins in
    the same cycle: they are scored side by side, and chosen in lockstep (a loop over each
    table's points took 44 µs a table). Returns how many points each table lost."""
    n = len(tables[0].times)
    quota = n // 4
    for at in range(0, len(tables), _CHUNK):
        chunk = tables[at:at + _CHUNK]
        k = len(chunk)
        times = np.frombuffer(b"".join(t.times for t in chunk), np.float64).reshape(k, n)
        counts = np.frombuffer(b"".join(t.counts for t in chunk), np.int64).reshape(k, n)
        before, middle, after = counts[:, :-2], times[:, 1:-1], times[:, 2:]
        span = (counts[:, 2:] - before).astype(np.float64)  # > 0: no three equal in a row
        merged = times[:, :-2] + (counts[:, 1:-1] - before) / span * (after - times[:, :-2])
        error = np.abs(middle - merged) / np.maximum(times[:, -1:] - middle, 1e-9)
        # Least error first; times increase along a table, so a stable sort breaks ties by
        # time, as the module says.
        order = np.argsort(error, axis=1, kind="stable") + 1
        taken = np.zeros((k, n), bool)
        lost = np.zeros(k, np.int64)
        rows = np.arange(k)
        for j in range(n - 2):  # each table's j-th cheapest point, all tables at once
            i = order[:, j]
            free = ~taken[rows, i - 1] & ~taken[rows, i + 1] & (lost < quota)
            taken[rows[free], i[free]] = True
            lost += free
            if lost.min() == quota:
                break
        # A greedy choice of points no two adjacent among n - 2 finds at least (n - 2) / 3,
        # so every table loses the same n // 4 (n ≥ 5): the kept points stay rectangular.
        kept_times = times[~taken].reshape(k, n - quota)
        kept_counts = counts[~taken].reshape(k, n - quota)
        for table, row_times, row_counts in zip(chunk, kept_times, kept_counts, strict=True):
            table.times = array("d", row_times.tobytes())
            table.counts = array("q", row_counts.tobytes())
    return quota


class AgeTables:
    """Bounded (time, published) tables keyed by topic; state kept between check cycles."""

    def __init__(self, max_points: int = DEFAULT_MAX_POINTS) -> None:
        if max_points < _MIN_POINTS:
            raise ValueError(f"max_points must be ≥ {_MIN_POINTS}, got {max_points}")
        self.max_points = max_points
        self._tables: dict[str, _Table] = {}

    def __len__(self) -> int:
        return len(self._tables)

    def __contains__(self, topic: object) -> bool:
        return topic in self._tables

    def points(self, topic: str) -> tuple[Point, ...]:
        table = self._tables.get(topic)
        if table is None:
            return ()
        return tuple(Point(t, c) for t, c in zip(table.times, table.counts, strict=True))

    def observe(self, topic: str, t: float, published_total: int) -> Observation:
        """Record that `topic` had published `published_total` messages at time `t`
        (a count a signed 64-bit integer holds, as the broker's counters are)."""
        observation = self._add(topic, t, published_total)
        if observation is _OVER:
            return Inserted(_thin([self._tables[topic]]))
        return observation

    def observe_all(self, points: Iterable[tuple[str, int]], t: float) -> None:
        """`observe` of every (topic, published_total) at one time `t`, the tables over
        the bound thinned together (the check's cycle: one call for all its topics)."""
        over = [self._tables[topic] for topic, published in points
                if self._add(topic, t, published) is _OVER]
        if over:
            _thin(over)

    def _add(self, topic: str, t: float, published_total: int) -> Observation:
        """`observe` but the thinning: `_OVER` where the table needs it."""
        table = self._tables.get(topic)
        if table is None:
            self._tables[topic] = _Table(topic, t, published_total)
            return _INSERTED
        if t <= table.times[-1]:
            return OutOfOrder(table.times[-1])
        newest = table.counts[-1]
        if published_total < newest:
            self._tables[topic] = _Table(topic, t, published_total)
            return TableReset(newest, published_total)
        if len(table.counts) >= 2 and table.counts[-2] == newest == published_total:
            table.times[-1] = t
            return Collapsed(table.times[-2], published_total)
        table.append(t, published_total)
        return _OVER if len(table.times) > self.max_points else _INSERTED

    def estimate(
        self, topic: str, backlog_messages: int, published_total: int, now: float
    ) -> AgeEstimate:
        """Age at `now` of the oldest of `backlog_messages` unacknowledged messages.

        Call `observe(topic, now, published_total)` for the same snapshot first; a
        `published_total` newer than the table is still used as the closing point.
        """
        if backlog_messages <= 0:
            return NoBacklog()
        found = self.age(topic, backlog_messages, published_total, now)
        return NoPoints() if found is None else Estimate(*found)

    def age(self, topic: str, backlog_messages: int, published_total: int, now: float,
            ) -> tuple[float, Method] | None:
        """`estimate` of a backlog > 0 as (age in seconds, method), None for `NoPoints`:
        the backlog check asks for a subscription of every topic, every cycle, and an
        `Estimate` an answer was 8 % of its time (py-spy, 100k topics)."""
        table = self._tables.get(topic)
        if table is None or len(table.times) < 2 or published_total < table.counts[-1]:
            return None
        return table.time_reached(published_total - backlog_messages + 1, now,
                                  published_total)

    def name(self, topic: str) -> str:
        """The str this table was made with for `topic` (equal to it). Whoever keeps a
        topic's name past the cycle takes this one: each cycle's tables spell every name
        afresh (a second copy of each was 78 bytes a topic at 100k topics, tracemalloc)."""
        table = self._tables.get(topic)
        return topic if table is None else table.name

    def retain(self, topics: Iterable[str]) -> int:
        """Keep only these topics' tables (the others vanished); returns how many were dropped."""
        keep = set(topics)
        gone = [topic for topic in self._tables if topic not in keep]
        for topic in gone:
            del self._tables[topic]
        return len(gone)


def topic_age(estimates: Iterable[AgeEstimate]) -> AgeEstimate:
    """The topic's backlog age: the largest over its subscriptions (PIP-323).

    Unknown if any subscription's is unknown (the maximum cannot be known then); a lower
    bound wins a tie with an interpolated value, since the true age may be larger. No
    subscriptions, or none with a backlog: `NoBacklog`.
    """
    best: Estimate | None = None
    for estimate in estimates:
        if isinstance(estimate, NoPoints):
            return estimate
        if not isinstance(estimate, Estimate):
            continue
        if best is None or (estimate.age_seconds, estimate.method is Method.LOWER_BOUND) > (
            best.age_seconds,
            best.method is Method.LOWER_BOUND,
        ):
            best = estimate
    return NoBacklog() if best is None else best
