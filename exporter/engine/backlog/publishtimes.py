"""Every subscription's oldest publish time in a cycle, over the pipeline's columns at once.

Best source first: the subscription's own age where the broker has one (PIP-492, Pulsar
4.0.14+, 4.2.5+ and 5.0: the admin REST's per subscription, else its /metrics gauge), the
admin REST's topic-level `oldestBacklogMessageAgeSeconds` (its subscription named), else the
broker's PIP-323 gauge, else our age table's estimate (none where it has none; a lower bound
where the table says so). The gauge
(`PersistentTopic.getBestEffortOldestUnacknowledgedMessageAgeSeconds`) is the slowest
cursor's oldest position as of the last backlog-quota check, so it goes to the subscription
with the largest backlog, and no estimate of another is older. A subscription measured by
the broker in an earlier cycle and not now keeps that publish time while its backlog has not
shrunk: the topic was loaded again (a bundle moved, a broker restarted) and its owner has not
run its backlog-quota check yet, while its counters restarted at 0 and reset our age table.

Each rule is a masked assignment over every subscription, from the weakest source to the
best. Visited one by one: the subscriptions of topics with an admin REST view, and, when
some measure of the last cycle is not taken now, those not measured now (measures.py, a
search by key hash each). A subscription's
`SubscriptionBacklog` is made only when a decision that holds it is
(engine/backlog/topicdecisions.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import cast

import numpy as np

from exporter.engine.backlog.check import SubscriptionBacklog, TimeSource
from exporter.engine.backlog.measures import Measures, hashes
from exporter.sources.results import TopicStats

# A subscription's time source, as a code: the index into SOURCES.
SOURCES = (TimeSource.ESTIMATED, TimeSource.LOWER_BOUND, TimeSource.BROKER,
           TimeSource.ADMIN)
ESTIMATED, LOWER_BOUND, BROKER, ADMIN = range(len(SOURCES))
_ROWS = 1 << 15  # topic rows whose first subscription `first_per_row` finds at once
Key = Callable[[slice], np.ndarray]  # a key's values of the items in a slice



@dataclass(frozen=True)
class Subscriptions:
    """A cycle's subscriptions grouped by topic row: row r's are items `starts[r]` to
    `starts[r + 1]`, in the order the broker printed them. The arrays serve the checks over
    every topic; `words`, each name as the decisions hold it, once (columns.ranked)."""

    starts: np.ndarray  # int64, one more than the topic rows
    row: np.ndarray  # int32: each one's topic row (-1: of no topic; those come first)
    words: Sequence[str | None]  # the distinct names, in str order
    name_rank: np.ndarray  # int32: each one's name, as an index into `words`: where it sorts
    messages: np.ndarray  # int64: the backlog, truncated as `int()` does
    publish: np.ndarray  # float64 epoch seconds, NaN: unknown
    source: np.ndarray  # int8, codes into SOURCES
    sizes: Mapping[int, int] = field(default_factory=dict)  # the admin REST's backlog bytes

    def backlogs(self, lo: int, hi: int) -> tuple[SubscriptionBacklog, ...]:
        """Items `lo` to `hi` as the check reads them: from `lists` once made, else from
        the arrays' slices (a few topics read: under `max_topics`, 10,000 of 1M)."""
        words, sizes = self.words, self.sizes
        made = self.__dict__.get("lists")
        if made is None:
            ranks, messages, publish, source = (
                a[lo:hi].tolist()
                for a in (self.name_rank, self.messages, self.publish, self.source))
            first = lo
        else:
            (ranks, messages, publish, source), first = made, 0
        out = []
        for j in range(lo, hi):
            size = sizes.get(j) if sizes else None
            i = j - first
            name = cast(str, words[ranks[i]])
            if messages[i] <= 0:
                out.append(SubscriptionBacklog(name, messages[i], size))
            else:
                t = publish[i]
                out.append(SubscriptionBacklog(name, messages[i], size,
                                               None if t != t else t, SOURCES[source[i]]))
        return tuple(out)

    def of_row(self, r: int) -> Iterator[tuple[int, str]]:
        """Topic row `r`'s items, each with its name."""
        lo, hi = int(self.starts[r]), int(self.starts[r + 1])
        return enumerate(self.names_of(self.name_rank[lo:hi]), lo)

    def names_of(self, ranks: np.ndarray) -> list[str]:
        """The names of these `name_rank`s (never null: a subscription's name is its key)."""
        words = self.words
        return [cast(str, words[r]) for r in ranks.tolist()]

    @cached_property
    def lists(self) -> tuple[list[int], list[int], list[float], list[int]]:
        """The arrays as lists, for reading every topic: a topic's slices of four arrays,
        read as Python values, cost more than the lists of all. Made only then: held with
        the decisions, they cost memory for nothing when `max_topics` reads a few
        (docs/design.md, "The driver once every age table is full")."""
        return (self.name_rank.tolist(), self.messages.tolist(), self.publish.tolist(),
                self.source.tolist())


def first_per_row(starts: np.ndarray, among: np.ndarray, keys: Sequence[Key],
                  at_once: int = _ROWS) -> np.ndarray:
    """Per row (row r's items are `starts[r]` to `starts[r + 1]`, as `Subscriptions`'),
    the item where `among` (a mask) least by `keys` (no NaN in them), the first of those
    that tie (-1 where the row has none): a topic's subscription that sorts first. A key
    gives its values of the items in a slice.

    No sort: each key in turn narrows every row's candidates to those at the row's least
    value of it, one pass over the items a key (a lexsort of every subscription by four
    keys held far more temporaries), `at_once` rows at a time, each key made for those
    rows' items only: the keys and the passes' temporaries over every row at once, each
    the size of the subscriptions, raised `publish_times`' peak (docs/design.md, "The
    driver once every age table is full")."""
    first = np.empty(len(starts) - 1, np.int64)
    for r in range(0, len(first), at_once):
        first[r:r + at_once] = _first_per_row(starts[r:r + at_once + 1], among, keys)
    return first


def _first_per_row(starts: np.ndarray, among: np.ndarray, keys: Sequence[Key],
                   ) -> np.ndarray:
    lo, hi = int(starts[0]), int(starts[-1])
    counts = np.diff(starts)
    candidate = among[lo:hi].copy()
    for key in keys:
        values = key(slice(lo, hi))
        top = _last(values.dtype)
        least = _least_per_row(np.where(candidate, values, top), starts - lo, counts, top)
        candidate &= values == np.repeat(least, counts)
    first = _least_per_row(np.where(candidate, np.arange(hi - lo), hi - lo), starts - lo,
                           counts, hi - lo)
    return np.where(first < hi - lo, first + lo, -1)


def _last(dtype: np.dtype) -> float | int | bool:
    """What sorts after every value of `dtype`."""
    if dtype.kind == "f":
        return math.inf
    return True if dtype.kind == "b" else int(np.iinfo(dtype).max)


def _least_per_row(values: np.ndarray, starts: np.ndarray, counts: np.ndarray,
                   none: float | int | bool) -> np.ndarray:
    """Each row's least of `values` (its items `starts[r]` to `starts[r + 1]`), `none`
    for a row without items."""
    if not counts.size:
        return np.zeros(0, values.dtype)
    least = np.minimum.reduceat(np.append(values, np.array(none, values.dtype)),
                                starts[:-1])
    least[counts == 0] = none
    return least


def publish_times(grouped: Subscriptions, topics: Sequence[str], checked: np.ndarray,
                  backlogs: np.ndarray, printed: np.ndarray, gauge: np.ndarray,
                  stats: Mapping[int, TopicStats], admin_at: float, now: float,
                  before: Measures) -> tuple[Subscriptions, Measures]:
    """`grouped` with every subscription's publish time, source and admin bytes, and this
    cycle's measures. `grouped` comes with the age tables' times (NaN: none) and sources
    (ESTIMATED, LOWER_BOUND), which are overwritten in place: a copy of each would raise
    the decide's peak (docs/design.md, "The driver once every age table is full"). Per
    subscription,
    in `grouped`'s order: `backlogs` as printed, `printed` its own age on /metrics
    (PIP-492; < 0 or NaN: none).
    Per topic row: `topics` (names), `checked`, `gauge` (PIP-323's age, NaN: none),
    `stats` (the admin REST's views). `before`: the last cycle's measures."""
    row, starts = grouped.row, grouped.starts
    ours = (row >= 0) & checked[np.maximum(row, 0)]
    publish, source = grouped.publish, grouped.source
    # The admin REST's topic-level oldest takes the gauge's place: its subscription is named.
    oldest = {r: (view.oldest_backlog_message_subscription,
                  admin_at - view.oldest_backlog_message_age_seconds)
              for r, view in stats.items()
              if view.oldest_backlog_message_age_seconds is not None
              and view.oldest_backlog_message_subscription is not None}
    gauged = ~np.isnan(gauge)
    gauged[list(oldest)] = False
    # The gauge goes to the largest backlog (then the first name); no estimate is older.
    slowest = first_per_row(starts, ours & (backlogs > 0) & gauged[row],
                            (lambda at: -backlogs[at], lambda at: grouped.name_rank[at]))
    has = slowest >= 0
    under = ~np.isnan(publish) & ours & has[row]
    publish[under] = np.maximum(publish[under], now - gauge[row[under]])
    source[under] = ESTIMATED
    publish[slowest[has]], source[slowest[has]] = now - gauge[has], BROKER
    for r, (name, at) in oldest.items():
        for j, named in grouped.of_row(r):
            if named == name:
                publish[j], source[j] = at, ADMIN
    own = ours & np.isfinite(printed) & (printed >= 0)
    publish[own], source[own] = now - printed[own], BROKER
    sizes = _admin_subscriptions(grouped, stats, admin_at, publish, source)
    backlogged = ours & (grouped.messages > 0)
    publish[~backlogged], source[~backlogged] = np.nan, ESTIMATED
    measured = np.flatnonzero(backlogged & (source >= BROKER))
    measures = Measures.of([topics[r] for r in row[measured].tolist()],
                           grouped.names_of(grouped.name_rank[measured]), publish[measured],
                           grouped.messages[measured])
    done = replace(grouped, publish=publish, source=source, sizes=sizes)
    if not before.within(measures.keys):  # some measure of the last cycle is not taken now
        unmeasured = np.setdiff1d(np.flatnonzero(backlogged), measured, assume_unique=True)
        measures = measures.joined(_carry(done, topics, unmeasured, before))
    return done, measures


def _admin_subscriptions(grouped: Subscriptions, stats: Mapping[int, TopicStats],
                         admin_at: float, publish: np.ndarray, source: np.ndarray,
                         ) -> dict[int, int]:
    """The admin REST's per-subscription views: each one's own oldest message's age
    (PIP-492), the best source there is, into `publish` and `source`; returns their
    backlog bytes, by subscription."""
    sizes: dict[int, int] = {}
    for r, view in stats.items():
        by_name = {s.name: s for s in view.subscriptions}
        for j, name in grouped.of_row(r):
            if (sub := by_name.get(name)) is None:
                continue
            if sub.backlog_size is not None:
                sizes[j] = sub.backlog_size
            if sub.oldest_backlog_message_age_seconds is not None:
                publish[j] = admin_at - sub.oldest_backlog_message_age_seconds
                source[j] = ADMIN
    return sizes


def _carry(subs: Subscriptions, topics: Sequence[str], unmeasured: np.ndarray,
           before: Measures) -> Measures:
    """A subscription measured before and not now keeps that time while its backlog has
    not shrunk, and the measure goes on (as long as it holds): those measures."""
    publish, source, row = subs.publish, subs.source, subs.row
    held = [topics[r] for r in row[unmeasured].tolist()]
    named = subs.names_of(subs.name_rank[unmeasured])
    found = before.find(held, named, hashes(held, named))
    j, i = unmeasured[found >= 0], found[found >= 0]
    t = publish[j]
    goes_on = (subs.messages[j] >= before.backlogs[i]) & (np.isnan(t) | (t > before.times[i]))
    j, i = j[goes_on], i[goes_on]
    publish[j], source[j] = before.times[i], ESTIMATED
    return before.taken(i)
