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
  the table spans the whole history since its (re-)base (up to 2^32 − 1 messages, below).
  A sliding window that drops the oldest point instead would turn every backlog older
  than `max_points` check intervals into a lower bound (60 points × 60 s would cap ages
  near one hour, a common time limit). Tables begun together fill together, so the tables
  a cycle takes over the bound are thinned side by side in numpy, where a loop over each
  one's points made that cycle last (docs/design.md, "The age tables").
- All tables live in one store, a row each: column j of two 2-D arrays holds every
  table's j-th point, 6 bytes a point. A point's time is a tick of one clock the store
  keeps (each update is one tick, and the ticks no point holds are dropped when the
  clock fills): a uint16 while the clock holds at most 2^16 ticks, a uint32 from the
  first time it must hold more (below). Its count is an offset from its table's oldest
  count (uint32). A cycle
  observes every topic in one call (`observe_all`) and estimates every subscription's
  age in another (`ages`: a bisect in every row at once), both in numpy. The arrays are
  `max_points` + 1 columns wide and resident as far as they are filled: a column is
  contiguous, so the pages of columns no table has reached are never touched (numpy
  asks for huge pages, so a column of fewer than ~500k tables is resident with its
  neighbour). What a topic's table holds resident, after two cycles and once full, is
  measured by `tests.bench.pipeline --ages` (docs/design.md, "The driver once every age
  table is full"); it fills after `max_points` cycles of new messages. The ticks a store
  holds are at most the
  cycles it has run (each table's oldest point stays, so a fleet whose topics began
  over many cycles holds many): 2^16 is 45 days of one-minute cycles. Past that the
  ticks widen to uint32 for good, the store as large as it was before uint16 ones.
- A table spans at most 2^32 − 1 messages, what its offsets hold. A point further from
  the oldest drops the oldest points until it fits, so a backlog older than that many
  messages gets a lower bound, measured from the oldest point kept. At 50,000 messages
  a second that is a day of a topic's history since its broker last loaded it (a
  restart resets the table anyway).

The estimate is monotone: a larger backlog never gets a smaller age, so a topic's age, the
largest over its subscriptions (PIP-323; `engine/backlog/topicdecisions.py`), is its largest
backlog's. Pure: no clock reads, times are passed in (epoch seconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from exporter.engine.backlog.tablerows import Names, TableRows
from exporter.engine.backlog.thinning import thinned

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
    """The point was appended; `thinned` counts points dropped to stay within the bounds
    (`max_points`, and the messages a table spans)."""

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


_CHUNK = 4096  # tables thinned at once: their points side by side, ~4 MB
_ESTIMATES = 1 << 16  # backlogs estimated at once: a few MB of temporaries
_FAR = 2**62  # backlogs clipped to this, so that a target is an int64
_SPAN = 2**32 - 1  # the most messages a table spans: its counts are uint32 offsets
_TICKS = 1024  # the clock's least room
_NARROW = 2**16  # the ticks a uint16 names: a clock with room for more takes uint32 ones


# What `_update` found a point to be, a code a point.
_APPENDED, _COLLAPSED, _RESET, _STALE = 0, 1, 2, 3


class AgeTables:
    """Bounded (time, published) tables keyed by topic, a row each of one store; state kept
    between check cycles."""

    def __init__(self, max_points: int = DEFAULT_MAX_POINTS) -> None:
        if max_points < _MIN_POINTS:
            raise ValueError(f"max_points must be ≥ {_MIN_POINTS}, got {max_points}")
        self.max_points = max_points
        self._tables = TableRows()  # which row a topic's table is (tablerows.py)
        self._length = np.zeros(0, np.int64)  # points a row
        self._base = np.zeros(0, np.int64)  # a row's oldest count: its points are offsets
        self._when = np.zeros((max_points + 1, 0), np.uint16)  # [point, row]: a tick
        self._counts = np.zeros((max_points + 1, 0), np.uint32)  # [point, row] − base
        self._clock = np.zeros(_TICKS)  # a tick's time: one an update
        self._ticks = 0

    def __len__(self) -> int:
        return len(self._tables)

    def __contains__(self, topic: object) -> bool:
        return topic in self._tables

    def row(self, topic: str) -> int:
        """The row of `topic`'s table (`observe_all` answers it), -1 without one."""
        return self._tables.row(topic)

    def points(self, topic: str) -> tuple[Point, ...]:
        r = self._tables.row(topic)
        if r < 0:
            return ()
        n, base = int(self._length[r]), int(self._base[r])
        return tuple(Point(t, base + c) for t, c in zip(
            self._clock[self._when[:n, r]].tolist(), self._counts[:n, r].tolist(), strict=True))

    # --- observing ----------------------------------------------------------------------------
    def observe(self, topic: str, t: float, published_total: int) -> Observation:
        """Record that `topic` had published `published_total` messages at time `t`
        (a count a signed 64-bit integer holds, as the broker's counters are)."""
        newest = self.points(topic)[-1:]
        row = self._rows([topic], np.ones(1, bool))
        code, thinned = self._update(row, np.array([published_total], np.int64), t)
        if code[0] == _STALE and newest:
            return OutOfOrder(newest[0].time)
        if code[0] == _RESET and newest:
            return TableReset(newest[0].published, published_total)
        if code[0] == _COLLAPSED:
            return Collapsed(self.points(topic)[-2].time, published_total)
        return Inserted(thinned) if thinned else _INSERTED

    def observe_all(self, topics: Names, published: np.ndarray, seen: np.ndarray,
                    t: float) -> np.ndarray:
        """`observe` of every topic `seen` (its count in `published`) at one time `t`, the
        tables over the bound thinned together (the check's cycle: one call for all its
        topics). Returns each topic's row, for `ages` and `names` (-1: no table).

        `topics` may be an Arrow column (tablerows.py)."""
        rows = self._rows(topics, seen)
        at = np.flatnonzero(seen)
        if at.size and np.bincount(rows[at]).max() > 1:
            # A topic twice: its later points are not newer than its first, so stale.
            at = np.sort(at[np.unique(rows[at], return_index=True)[1]])
        self._update(rows[at], published[at], t)
        return rows

    def _rows(self, topics: Names, seen: np.ndarray) -> np.ndarray:
        """Each topic's row; a new one where `seen` and it has none, else -1."""
        rows, new = self._tables.find(topics, seen)
        self._reserve()
        self._length[new] = 0
        return rows

    def _reserve(self) -> None:
        """Room for every row given out. The arrays grow by a sixteenth more than asked:
        transparent huge pages make a column resident 2 MB at a time, so room held
        for tables to come is resident once the columns fill. Only the columns some
        table reached are copied."""
        used, held = self._tables.used, self._length.size
        if used <= held:
            return
        capacity = max(1024, used + used // 16)
        width = int(self._length.max()) if held else 0
        self._when = _copied(self._when, width, held, capacity, self._when.dtype)
        self._counts = _copied(self._counts, width, held, capacity, np.uint32)
        grown = np.zeros(capacity - held, np.int64)
        self._length = np.concatenate([self._length, grown])
        self._base = np.concatenate([self._base, grown])

    def _tick(self, t: float) -> int:
        """A tick for time `t`. A full clock is first rid of the ticks no point holds,
        then has room for as many again as it keeps (at least `_TICKS`)."""
        if self._ticks == self._clock.size:
            used = self._tables.used
            length = self._length[:used]
            width = int(length.max()) if used else 0
            held = np.zeros(self._ticks, bool)
            for j in range(width):
                held[self._when[j, :used][length > j]] = True
            kept = self._clock[:self._ticks][held]
            room = max(_TICKS, 2 * kept.size)
            if room > _NARROW and self._when.dtype == np.uint16:  # once, for good
                self._when = _copied(self._when, width, used, self._when.shape[1], np.uint32)
            renumbered = (np.cumsum(held) - 1).astype(self._when.dtype)
            for j in range(width):  # cells past a table's points: tick 0
                self._when[j, :used] = np.where(length > j, renumbered[self._when[j, :used]], 0)
            self._clock = np.zeros(room)
            self._clock[:kept.size], self._ticks = kept, kept.size
        self._clock[self._ticks] = t
        self._ticks += 1
        return self._ticks - 1

    def _update(self, rows: np.ndarray, published: np.ndarray, t: float,
                ) -> tuple[np.ndarray, int]:
        """One point a row (rows distinct) at time `t`: each point's code, and how many
        points each table over the bound lost (0 if none was)."""
        tick = self._tick(t)  # first: a full clock renumbers the ticks, may widen them
        when, counts, length = self._when, self._counts, self._length[rows]
        published = np.maximum(published, 0)  # a count below 0 counts none
        last = np.maximum(length - 1, 0)
        newest_t, newest_c = self._clock[when[last, rows]], counts[last, rows].astype(np.int64)
        offset = published - self._base[rows]
        begun = length > 0
        stale = begun & (t <= newest_t)
        reset = begun & ~stale & (offset < newest_c)
        flat = begun & ~stale & ~reset & (length >= 2) & (newest_c == offset) \
            & (counts[np.maximum(length - 2, 0), rows] == newest_c)
        code = np.full(rows.size, _APPENDED, np.int8)
        code[flat], code[reset], code[stale] = _COLLAPSED, _RESET, _STALE
        first = ~begun | reset  # the table (re)starts with this point
        r = rows[first]
        when[0, r], counts[0, r], self._length[r], self._base[r] = tick, 0, 1, published[first]
        when[last[flat], rows[flat]] = tick  # the flat run's right end moves
        grows = begun & (code == _APPENDED)
        lost = self._narrow(rows[far], offset[far]) if (far := grows & (offset > _SPAN)).any() \
            else 0
        r = rows[grows]
        at, offset = self._length[r], published[grows] - self._base[r]
        when[at, r], counts[at, r], self._length[r] = tick, offset, at + 1
        over = r[at >= self.max_points]
        return code, lost + (self._thin(over) if over.size else 0)

    def _narrow(self, rows: np.ndarray, offsets: np.ndarray) -> int:
        """Drop the oldest points of these tables until each spans at most `_SPAN`
        messages with its next point (at `offsets`): a backlog older than those is a
        lower bound, as if the table began there. How many points went."""
        lost = 0
        for r, offset in zip(rows.tolist(), offsets.tolist(), strict=True):
            n = int(self._length[r])
            k = int(np.searchsorted(self._counts[:n, r], offset - _SPAN))  # the first kept
            if k == n:  # none: the table begins anew with the next point, at offset 0
                self._base[r] += offset
            else:
                oldest = self._counts[k, r]
                self._when[:n - k, r] = self._when[k:n, r]
                self._counts[:n - k, r] = self._counts[k:n, r] - oldest
                self._base[r] += int(oldest)
            self._length[r], lost = n - k, lost + k
        return lost

    def _thin(self, rows: np.ndarray) -> int:
        """Merge away a quarter of these full tables' points (`max_points` + 1 each)."""
        n = self.max_points + 1
        quota = n // 4
        for at in range(0, rows.size, _CHUNK):
            chunk = rows[at:at + _CHUNK]
            when, counts = self._when[:, chunk].T, self._counts[:, chunk].T
            kept = ~thinned(self._clock[when], counts.astype(np.int64), quota)
            self._when[:n - quota, chunk] = when[kept].reshape(-1, n - quota).T
            self._counts[:n - quota, chunk] = counts[kept].reshape(-1, n - quota).T
        self._length[rows] = n - quota
        return quota

    # --- estimating ---------------------------------------------------------------------------
    def estimate(
        self, topic: str, backlog_messages: int, published_total: int, now: float
    ) -> AgeEstimate:
        """Age at `now` of the oldest of `backlog_messages` unacknowledged messages.

        Call `observe(topic, now, published_total)` for the same snapshot first; a
        `published_total` newer than the table is still used as the closing point.
        """
        if backlog_messages <= 0:
            return NoBacklog()
        ages, lower = self.ages(np.array([self._tables.row(topic)]),
                                np.array([backlog_messages]), np.array([published_total]), now)
        if ages[0] != ages[0]:
            return NoPoints()
        return Estimate(float(ages[0]), Method.LOWER_BOUND if lower[0] else Method.INTERPOLATED)

    def ages(self, rows: np.ndarray, backlogs: np.ndarray, published: np.ndarray, now: float,
             ) -> tuple[np.ndarray, np.ndarray]:
        """`estimate` of many backlogs (> 0) at once: each one's age in seconds (NaN for
        `NoPoints`, and where its row is -1) and whether it is a lower bound. `rows` are
        `observe_all`'s, `published` each row's count as observed now. Worked out
        `_ESTIMATES` at a time: the bisect's temporaries over every subscription at once
        were the decide's largest (docs/design.md, "The driver once every age table is
        full")."""
        ages, lower = np.full(rows.size, np.nan), np.zeros(rows.size, bool)
        for at in range(0, rows.size, _ESTIMATES):
            part = slice(at, at + _ESTIMATES)
            ages[part], lower[part] = self._ages(rows[part], backlogs[part], published[part],
                                                 now)
        return ages, lower

    def _ages(self, rows: np.ndarray, backlogs: np.ndarray, published: np.ndarray, now: float,
              ) -> tuple[np.ndarray, np.ndarray]:
        valid = (rows >= 0) & (rows < self._length.size)
        rows = np.where(valid, rows, 0)
        ages = np.full(rows.size, np.nan)
        if not self._length.size:
            return ages, np.zeros(rows.size, bool)
        clock, when, counts = self._clock, self._when, self._counts
        length = np.where(valid, self._length[rows], 0)
        last = np.maximum(length - 1, 0)
        # as offsets from each table's base: below it, a restart not yet observed
        published = np.maximum(np.maximum(published, 0) - self._base[rows], -_FAR)
        known = (length >= 2) & (published >= counts[last, rows])
        # The message the oldest unacknowledged one is: when did the counter reach it?
        target = published - np.clip(backlogs, 0, _FAR) + 1
        lo, hi = np.zeros(rows.size, np.int64), np.where(known, length, 0)
        while (searching := lo < hi).any():  # bisect_left in every row at once
            mid = (lo + hi) >> 1
            below = counts[np.minimum(mid, self.max_points), rows] < target
            lo = np.where(searching & below, mid + 1, lo)
            hi = np.where(searching & ~below, mid, hi)
        bound = known & (lo == 0)  # reached before the oldest point
        inside = known & (lo > 0) & (lo < length)
        newer = known & (lo == length) & (target <= published)  # closed by the snapshot
        j = np.clip(lo, 1, self.max_points)
        t0, c0 = clock[when[j - 1, rows]], counts[j - 1, rows].astype(np.int64)
        t1 = np.where(inside, clock[when[j, rows]], np.maximum(now, clock[when[last, rows]]))
        c1 = np.where(inside, counts[j, rows], published)
        with np.errstate(divide="ignore", invalid="ignore"):  # where neither, c1 may be c0
            at = t0 + (target - c0) / (c1 - c0) * (t1 - t0)  # c0 < target ≤ c1
            ages[inside | newer] = np.maximum(0.0, now - at)[inside | newer]
        ages[bound] = np.maximum(0.0, now - clock[when[0, rows]])[bound]
        return ages, bound

    # --- names and rows -----------------------------------------------------------------------
    def name(self, topic: str) -> str:
        """The str the table of `topic` keeps (tablerows.py): whoever keeps a topic's name
        past the cycle takes this one."""
        return self._tables.name(topic)

    def names(self, rows: np.ndarray) -> list[str | None]:
        """`name` of each row (`observe_all`'s), None for -1."""
        return self._tables.names(rows)

    def retain_rows(self, rows: np.ndarray) -> int:
        """Keep only the tables of these rows (`observe_all`'s; -1 ignored), as `retain`
        does of their topics; returns how many were dropped."""
        return self._dropped(self._tables.retain_rows(rows))

    def retain(self, topics: Iterable[str]) -> int:
        """Keep only these topics' tables (the others vanished); returns how many were dropped."""
        return self._dropped(self._tables.retain(topics))

    def _dropped(self, rows: list[int]) -> int:
        self._length[rows] = 0
        return len(rows)


def _copied(points: np.ndarray, width: int, used: int, capacity: int,
            dtype: np.dtype | type) -> np.ndarray:
    """`points` ([point, row]) in an array of `capacity` rows of `dtype`, only its first
    `width` points of its first `used` rows copied: the pages of the rest are mapped when
    first written."""
    grown: np.ndarray = np.zeros((points.shape[0], capacity), dtype)
    grown[:width, :used] = points[:width, :used]
    return grown

