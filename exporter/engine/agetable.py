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
  Cost: one O(n log n) pass per n/4 inserts.
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

    def thin(self) -> int:
        """Merge away a quarter of the points, those whose loss costs the least (see module).
        The scores are numpy's: at a million topics every busy table thins in the same
        cycle (they began together), and a loop over the points took 44 µs a table."""
        times = np.frombuffer(self.times, np.float64)
        counts = np.frombuffer(self.counts, np.int64)
        n = len(times)
        before, after, at = counts[:-2], counts[2:], times[1:-1]
        span = (after - before).astype(np.float64)  # > 0: no three equal in a row
        merged = times[:-2] + (counts[1:-1] - before) / span * (times[2:] - times[:-2])
        error = np.abs(at - merged) / np.maximum(times[-1] - at, 1e-9)
        taken = bytearray(n)
        dropped = 0
        for i in (np.lexsort((at, error)) + 1).tolist():  # by error, then time
            if dropped == n // 4:
                break
            if not taken[i - 1] and not taken[i + 1]:
                taken[i] = 1
                dropped += 1
        keep = np.frombuffer(taken, np.uint8) == 0
        self.times = array("d", times[keep].tobytes())
        self.counts = array("q", counts[keep].tobytes())
        return dropped

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
        thinned = table.thin() if len(table.times) > self.max_points else 0
        return Inserted(thinned) if thinned else _INSERTED

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
