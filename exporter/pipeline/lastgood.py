"""What the driver remembers of each broker between cycles: its last good tables and, for a
few cycles, the topics it listed before and lists no more while no other broker lists them.

A broker whose fetch fails keeps its last good tables in use (its series stay, marked by
its source health). The hold-over is the other half: Apache Pulsar loads a topic only when
something asks for it (a client's lookup or reconnect, an admin stats call:
`BrokerService.getTopic` creates it on demand), and lists it on /metrics only after its next
stats update (`statsUpdateFrequencyInSecs`, 60 s by default). So a topic whose bundle was
unloaded (an operator, the load manager's shedder, a broker going away) is listed by nobody
for a while, and a restarted broker's first /metrics lists only the topics clients came back
to. Without the hold-over their series vanish for a cycle or more, and every alert's `for:`
window on them starts over.

A topic a broker listed in its last good tables and lists no more (whether it restarted, its
fetch failed, or its bundle moved) keeps those values (stale, as a down broker's are) until
some broker lists it again, or `HOLD_CYCLES` cycles have passed (deleted meanwhile, or
nothing touched it). A deleted topic therefore lingers for those cycles: /metrics alone
cannot tell it from an unloaded one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline.packed import Packed, coded
from exporter.pipeline.tables import SourceTables

log = logging.getLogger(__name__)

# Cycles an unlisted topic is held: the first without it and two more, time enough for the
# new owner's stats update (every 60 s by default) and for an admin walk (when configured)
# to have loaded every topic.
HOLD_CYCLES = 3


def rows_of(tables: SourceTables, topics: pa.Array) -> SourceTables:
    """`tables`' topic and subscription rows of `topics` only (the rest as they are)."""
    def rows(table: pa.Table) -> pa.Table:
        return table.filter(pc.is_in(table["topic"], topics))

    return replace(tables, topics=rows(tables.topics), subscriptions=rows(tables.subscriptions))


def with_topics_of(fresh: SourceTables, before: SourceTables, topics: pa.Array) -> SourceTables:
    """`fresh` plus `before`'s rows of `topics` (and of their subscriptions)."""
    kept = rows_of(before, topics)
    return coded(replace(
        fresh,
        topics=pa.concat_tables([fresh.topics, kept.topics]).combine_chunks(),
        subscriptions=pa.concat_tables(
            [_named_topics(fresh.subscriptions), _named_topics(kept.subscriptions)],
        ).combine_chunks()))


def _named_topics(subscriptions: pa.Table) -> pa.Table:
    """The subscriptions' topics as names (packed.py codes them)."""
    at = subscriptions.schema.get_field_index("topic")
    return subscriptions.set_column(at, "topic", subscriptions["topic"].cast(pa.string()))


def _dropped_rows(before: Packed | None, now: SourceTables) -> SourceTables | None:
    """`before`'s rows of the topics `now` lists no more, if any (decoded only then)."""
    if before is None:
        return None
    was = before.topic_names()
    dropped = pc.unique(was.filter(pc.invert(pc.is_in(was, now.topics["topic"]))))
    return rows_of(before.unpacked(), dropped) if len(dropped) else None


def _listed(current: Mapping[str, SourceTables]) -> pa.Array:
    """Every topic the brokers fetched this cycle list (`current` not empty)."""
    return pa.concat_arrays([current[u].topics["topic"].combine_chunks() for u in sorted(current)])


# What `update` takes: a broker's URL and its tables fetched afresh, with the task's
# payloads they were decoded from (packed.py) where there are some.
Fresh = Mapping[str, SourceTables] | Iterable[tuple[str, SourceTables, Mapping[str, bytes]]]


class LastGood:
    """Per broker URL: its last good tables, packed (packed.py). `update` once per cycle."""

    def __init__(self) -> None:
        self._kept: dict[str, Packed] = {}
        self._held: dict[str, dict[str, int]] = {}  # url → topic → cycles it has been held

    def update(self, fresh: Fresh) -> dict[str, SourceTables]:
        """One cycle: the tables of the brokers fetched (a URL whose fetch failed is not
        among them and keeps its last good tables until it answers again); the tables the
        merge takes of each broker fetched: its own, with the rows it holds over added.

        `fresh` may be lazy, a broker decoded at a time: each broker's tables are packed
        as they come, its last ones decoded only for the rows of topics it lists no more,
        so the driver never holds two cycles of a fleet's tables, nor one decoded between
        cycles (docs/design.md, "The driver once every age table is full")."""
        current: dict[str, SourceTables] = {}
        unlisted: dict[str, SourceTables] = {}  # url → its last rows of topics it dropped
        items = ((url, tables, None) for url, tables in fresh.items()) \
            if isinstance(fresh, Mapping) else fresh
        for url, tables, payloads in items:
            current[url] = tables
            dropped = _dropped_rows(self._kept.get(url), tables)
            self._kept[url] = Packed.of(tables, payloads)
            if dropped is not None:
                unlisted[url] = dropped
        for url in current.keys() - unlisted.keys():
            self._held.pop(url, None)
        if not unlisted:
            return current
        # Every topic any broker lists now, before any of this cycle's holds is added.
        listed = _listed(current)
        for url, before in unlisted.items():
            was = pc.unique(before.topics["topic"])
            current[url] = self._hold(url, current[url], before,
                                      was.filter(pc.invert(pc.is_in(was, listed))))
        return current

    def _hold(self, url: str, tables: SourceTables, before: SourceTables,
              missing: pa.Array) -> SourceTables:
        """`tables` with `before`'s rows of the topics of `missing` still held added."""
        held_before = self._held.get(url, {})
        held = {t: held_before.get(t, 0) + 1 for t in missing.to_pylist()}
        expired = [t for t, n in held.items() if n > HOLD_CYCLES]
        if expired:
            log.info("broker %s: %d topic(s) it listed before are still unlisted after %d "
                     "cycles: no longer held", url, len(expired), HOLD_CYCLES)
        held = {t: n for t, n in held.items() if n <= HOLD_CYCLES}
        started = len([n for n in held.values() if n == 1])
        if started:
            log.info("broker %s lists %d topic(s) fewer and no broker lists them: holding "
                     "their last values until one does (at most %d cycles)", url, started,
                     HOLD_CYCLES)
        if not held:
            self._held.pop(url, None)
            return tables
        tables = with_topics_of(tables, before, pa.array(list(held), missing.type))
        self._kept[url], self._held[url] = Packed.of(tables), held
        return tables

    def _held_topics(self) -> set[str]:
        return set().union(*(held.keys() for held in self._held.values()))

    def held(self) -> int:
        """Topics held now: listed before, by no broker now (each counted once)."""
        return len(self._held_topics())

    def stale(self, current: Mapping[str, SourceTables]) -> frozenset[str]:
        """Topics in use that no broker listed afresh: held ones, and those of brokers
        whose fetch failed (`current`: `update`'s, the brokers fetched this cycle) listed
        by no other."""
        parts = [kept.topic_names() for u, kept in self._kept.items() if u not in current]
        if not parts:
            return frozenset(self._held_topics())
        old = pa.concat_arrays(parts)
        if current:
            old = old.filter(pc.invert(pc.is_in(old, _listed(current))))
        return frozenset(old.drop_null().to_pylist()) | self._held_topics()

    def tables(self, urls: Sequence[str], current: Mapping[str, SourceTables] | None = None,
               ) -> tuple[tuple[str, SourceTables], ...]:
        """(url, tables) of every URL in `urls` that ever had a good fetch, in that order:
        `current`'s (`update`'s) where given, else its last good ones, decoded."""
        current = current or {}
        return tuple((u, current[u] if u in current else self._kept[u].unpacked())
                     for u in urls if u in current or u in self._kept)
