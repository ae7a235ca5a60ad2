"""Every topic's backlog check in a cycle as columns; a topic's `TopicDecision` when asked.

At a million topics, the decisions as objects (a frozen `TopicDecision` a topic and a
`SubscriptionBacklog` a subscription) were a third of the decide and most of what the
driver held between cycles (docs/design.md, "Decisions as columns"), while a cycle reads
few of them: those that act (the plan),
and those published when `filters.max_topics` caps the topics or `exposition.topic_level`
is off. So the check runs over columns for every topic (which subscription holds the oldest
message, each limit's status), and `check_against` (engine/backlog/check.py, the one statement of
the check's rules) makes a topic's decision when it is read: at once for those over a
quota, which act, or too close to a size limit for a float to tell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import overload

import numpy as np

from exporter.config.settings import RetentionPolicy
from exporter.engine.backlog.check import MEASURED, LimitStatus, TopicDecision, check_against
from exporter.engine.backlog.publishtimes import BROKER, Subscriptions, first_per_row
from exporter.engine.backlog.quotas import ResolvedQuota

# A limit's status as a code: the index into STATUSES.
STATUSES = (LimitStatus.NO_LIMIT, LimitStatus.WITHIN, LimitStatus.EXCEEDED, LimitStatus.UNKNOWN)
NO_LIMIT, WITHIN, EXCEEDED, UNKNOWN = range(len(STATUSES))
_CODE = {status: code for code, status in enumerate(STATUSES)}
# Closer to a size limit than this share of it, a float product may round across it: the
# check's exact integers decide (engine/backlog/check.py `_bytes`).
_CLOSE = 2.0 ** -40
_EVICT = RetentionPolicy.CONSUMER_BACKLOG_EVICTION


@dataclass(frozen=True)
class TopicColumns:
    """What the cycle reads of every topic's decision, one item a decision."""

    topic: list[str]
    namespace: list[str]
    over: np.ndarray  # bool: a limit exceeded
    age: np.ndarray  # float64: the topic backlog's age, NaN: unknown
    backlog_bytes: np.ndarray  # float64, NaN: unknown
    time: np.ndarray  # int8: the time limit's status, a code into STATUSES
    messages: np.ndarray  # int64: the holder's backlog, 0 without one
    measured: np.ndarray  # bool: its publish time is the broker's own (MEASURED)
    evicts: np.ndarray  # bool: either limit's policy evicts


class TopicDecisions(Sequence[TopicDecision]):
    """A cycle's decisions in topic order; `columns` for every topic, a `TopicDecision`
    made when one is read (and kept only for those that act)."""

    __slots__ = ("_every", "_kept", "_make", "columns", "published")

    def __init__(self, columns: TopicColumns, make: Callable[[int], TopicDecision],
                 kept: dict[int, TopicDecision],
                 every: Callable[[], object] = lambda: None) -> None:
        """`every` is called before every decision is read (iterating): the cue to make
        what reading them all needs."""
        self.columns, self._make, self._kept, self._every = columns, make, kept, every
        self.published: tuple[int, ...] | None = None  # set by `only`

    def only(self, rows: Sequence[int]) -> TopicDecisions:
        """The decisions of `rows` (made now; `published`, in this order) and of those over a
        quota, beside every topic's columns: what a publication under `filters.max_topics`
        reads again (the status view, the last good decisions when a check fails) and the
        next cycle reads (the columns), without what makes the others' decisions (the
        cycle's subscription arrays, its limits a topic). The others' are not read again."""
        out = TopicDecisions(self.columns, partial(_published, {k: self[k] for k in rows}),
                             self._kept)
        out.published = tuple(rows)
        return out

    @classmethod
    def of(cls, decisions: Sequence[TopicDecision]) -> TopicDecisions:
        """Decisions already made (tests, a recorded cycle) with their columns."""
        decisions = tuple(decisions)
        return cls(_columns_of(decisions), decisions.__getitem__,
                   {k: d for k, d in enumerate(decisions) if d.exceeded})

    def __len__(self) -> int:
        return len(self.columns.topic)

    @overload
    def __getitem__(self, k: int) -> TopicDecision: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[TopicDecision]: ...

    def __getitem__(self, k: int | slice) -> TopicDecision | Sequence[TopicDecision]:
        if isinstance(k, slice):
            return tuple(self[i] for i in range(*k.indices(len(self))))
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        kept = self._kept.get(k)
        return kept if kept is not None else self._make(k)

    def __iter__(self) -> Iterator[TopicDecision]:
        self._every()
        kept, make = self._kept, self._make
        for k in range(len(self)):
            d = kept.get(k)
            yield d if d is not None else make(k)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal by content, as a list is

    def over(self) -> list[TopicDecision]:
        """The decisions with a limit exceeded: the only ones with an eviction plan."""
        return [self._kept[k] for k in sorted(self._kept)]

    def __repr__(self) -> str:
        return f"TopicDecisions({len(self)} topics, {len(self.over())} over a quota)"


def _published(made: dict[int, TopicDecision], k: int) -> TopicDecision:
    """A published topic's decision, as `only` made it; the others' were let go."""
    if (d := made.get(k)) is None:
        raise LookupError(f"topic row {k} was not published: its decision was not kept")
    return d


def _held(values: np.ndarray, holder: np.ndarray, has: np.ndarray,
          none: float | int) -> np.ndarray:
    """`values` of each holder (`none` where `has` is not), no copy of `values`."""
    out = np.full(holder.size, none, values.dtype)
    out[has] = values[holder[has]]
    return out


def check_topics(subs: Subscriptions, decided: np.ndarray, topics: list[str],
                 namespaces: list[str], limits: Sequence[ResolvedQuota],
                 averages: np.ndarray, checked: np.ndarray, now: float) -> TopicDecisions:
    """The check of each topic row in `decided` (`limits`: each one's, in that order) over
    `subs` (publishtimes.py). `topics`, `namespaces`, `averages` (bytes per message, NaN:
    unknown) and `checked` are per topic row."""
    row, messages, publish = subs.row, subs.messages, subs.publish
    unknown = np.isnan(publish)
    backlogged = (row >= 0) & (messages > 0) & checked[np.maximum(row, 0)]
    # _oldest_first: known times first, oldest first; then the largest backlog; then names
    holder = first_per_row(subs.starts, backlogged, (
        lambda at: np.where(unknown[at], math.inf, publish[at]), lambda at: -messages[at],
        lambda at: subs.name_rank[at]))[decided]
    has = holder >= 0
    oldest, held = _held(publish, holder, has, np.nan), _held(messages, holder, has, 0)
    average = averages[decided]
    reported = np.full(decided.size, np.nan)
    if subs.sizes:
        for k in np.flatnonzero(has).tolist():
            if (given := subs.sizes.get(int(holder[k]))) is not None:
                reported[k] = given
    # the bytes reported, else estimated (NaN where the average is unusable), 0 without a
    # holder, in place; with the statuses' rules as masks (`_status`), where each step and
    # each rule made an array (docs/design.md, "The driver once every age table is full")
    with np.errstate(invalid="ignore"):
        backlog_bytes = held * average
    backlog_bytes[~(np.isfinite(average) & (average >= 0))] = np.nan
    np.copyto(backlog_bytes, reported, where=~np.isnan(reported))
    backlog_bytes[~has] = 0.0
    size_limit, time_limit, evicting = _limits(limits)
    with np.errstate(invalid="ignore"):
        size = _status(size_limit, has, backlog_bytes, backlog_bytes > size_limit)
        time = _status(time_limit, has, oldest, oldest < now - time_limit)
        close = (size != NO_LIMIT) & (size != UNKNOWN) & has \
            & (np.abs(backlog_bytes - size_limit) <= size_limit * _CLOSE)
    # `decided` ascending: every row when as many (the lists as they are, no copy of each)
    every = decided.size == len(topics)
    names = topics if every else [topics[r] for r in decided.tolist()]
    spaces = namespaces if every else [namespaces[r] for r in decided.tolist()]
    starts = subs.starts

    def make(k: int) -> TopicDecision:
        r, a = int(decided[k]), float(average[k])
        return check_against(names[k], spaces[k], subs.backlogs(starts[r], starts[r + 1]),
                             None if a != a else a, limits[k], now)

    over = (size == EXCEEDED) | (time == EXCEEDED)
    kept = {}
    for k in np.flatnonzero(over | close).tolist():
        d = kept[k] = make(k)
        size[k], time[k] = _CODE[d.size], _CODE[d.time]
    over = (size == EXCEEDED) | (time == EXCEEDED)
    for k in [k for k, d in kept.items() if not d.exceeded]:
        del kept[k]  # close to its limit, within it: read again when asked, as the others
    with np.errstate(invalid="ignore"):
        age = np.where(has, np.maximum(0.0, now - oldest), 0.0)
    measured = _held(subs.source, holder, has, 0) >= BROKER  # with a time, always
    return TopicDecisions(TopicColumns(names, spaces, over, age, backlog_bytes, time, held,
                                       measured, evicting), make, kept, lambda: subs.lists)


def evicts(d: TopicDecision) -> bool:
    """Either quota type's policy evicts (each type has its own in Pulsar)."""
    return d.quota.policy is _EVICT if d.limits is None else _evicting(d.limits)


def _evicting(limits: ResolvedQuota) -> bool:
    return _EVICT in (limits.size.policy, limits.time.policy)


def _status(limit: np.ndarray, has: np.ndarray, measure: np.ndarray,
            exceeded: np.ndarray) -> np.ndarray:
    """A limit's status code per topic, the first that holds: no limit, within it without
    a holder, unknown without a measure, exceeded, else within. Assigned from the last
    rule to the first, so that the first that holds is the one left."""
    status = np.full(limit.size, WITHIN, np.int8)
    status[exceeded] = EXCEEDED
    status[np.isnan(measure)] = UNKNOWN
    status[~has] = WITHIN
    status[np.isnan(limit)] = NO_LIMIT
    return status


def _limits(limits: Sequence[ResolvedQuota]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each topic's size and time limit (NaN: none) and whether either policy evicts,
    worked out once a limits object: a Resolver hands one to every topic of a namespace."""
    unique = list({id(q): q for q in limits}.values())
    at = {id(q): i for i, q in enumerate(unique)}
    which = np.fromiter(map(at.__getitem__, map(id, limits)), np.int64, len(limits))
    size = np.array([math.nan if q.quota.limit_size is None else q.quota.limit_size
                     for q in unique], np.float64)
    time = np.array([math.nan if q.quota.limit_time is None else q.quota.limit_time
                     for q in unique], np.float64)
    evicting = np.array([_evicting(q) for q in unique], bool)
    return size[which], time[which], evicting[which]


def _columns_of(decisions: Sequence[TopicDecision]) -> TopicColumns:
    """The columns of decisions already made."""

    def nan(v: float | None) -> float:
        return math.nan if v is None else v

    return TopicColumns(
        [d.topic for d in decisions], [d.namespace for d in decisions],
        np.array([bool(d.exceeded) for d in decisions], bool),
        np.array([nan(d.backlog_age_seconds) for d in decisions], np.float64),
        np.array([nan(d.backlog_bytes) for d in decisions], np.float64),
        np.array([_CODE[d.time] for d in decisions], np.int8),
        np.array([d.backlog_messages for d in decisions], np.int64),
        np.array([d.time_source in MEASURED for d in decisions], bool),
        np.array([evicts(d) for d in decisions], bool))
