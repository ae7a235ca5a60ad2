"""What the driver remembers of each broker between cycles: its last good tables and, for a
few cycles after the broker came back, the topics it listed before it went away.

A broker whose fetch fails keeps its last good tables in use (its series stay, marked by
its source health). The hold-over is the other half: a restarted Apache Pulsar broker
loads a topic only when something asks for it (a client's lookup or reconnect, an admin
stats call: `BrokerService.getTopic` creates it on demand), so its first /metrics lists
only the topics that clients came back to. Without the hold-over the other topics' series
vanish for a cycle or more, and every alert's `for:` window on them starts over.

A broker has come back when its previous fetch failed, or when its process start time
(`process_start_time_seconds`) differs from its last good body's: a restart quicker than
a cycle. A held topic keeps the values of the broker's last body before it came back
(stale, as a down broker's are) until the broker lists it again, another broker lists it
(it moved with its bundle), or `HOLD_CYCLES` cycles have passed (deleted meanwhile, or
nothing touched it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline.tables import SourceTables

log = logging.getLogger(__name__)

# Cycles a restarted broker's unlisted topics are held: the first after the comeback and
# two more, time enough for an admin walk (when configured) to have loaded them all.
HOLD_CYCLES = 3


@dataclass(frozen=True)
class _Held:
    before: SourceTables  # the broker's tables from before it came back
    cycles_left: int


def started_at(tables: SourceTables) -> float | None:
    if tables.usage.num_rows == 0:
        return None
    value = tables.usage["started_at"][0].as_py()
    return value if isinstance(value, float) and value > 0 else None


def restarted(before: SourceTables, now: SourceTables) -> bool:
    was, is_ = started_at(before), started_at(now)
    return was is not None and is_ is not None and was != is_


def with_topics_of(fresh: SourceTables, before: SourceTables, topics: pa.Array) -> SourceTables:
    """`fresh` plus `before`'s rows of `topics` (and of their subscriptions)."""
    def rows(table: pa.Table) -> pa.Table:
        return table.filter(pc.is_in(table["topic"], topics))

    return replace(
        fresh,
        topics=pa.concat_tables([fresh.topics, rows(before.topics)]).combine_chunks(),
        subscriptions=pa.concat_tables(
            [fresh.subscriptions, rows(before.subscriptions)]).combine_chunks())


class LastGood:
    """Per broker URL: the tables the merge uses. `update` once per cycle."""

    def __init__(self) -> None:
        self._tables: dict[str, SourceTables] = {}
        self._failed: set[str] = set()  # whose latest fetch failed
        self._held: dict[str, _Held] = {}

    def update(self, fresh: Mapping[str, SourceTables], failed: Iterable[str]) -> None:
        """One cycle: the tables of the brokers fetched, and the URLs whose fetch failed
        (their last good tables stay in use)."""
        self._failed.update(failed)
        for url, tables in fresh.items():
            before = self._tables.get(url)
            if before is not None and (url in self._failed or restarted(before, tables)):
                self._held[url] = _Held(before, HOLD_CYCLES)
            self._tables[url] = tables
            self._failed.discard(url)
        holding = [u for u in self._held if u in fresh]
        if holding:  # every topic any broker lists now, built only while something is held
            listed = pa.concat_arrays([t.topics["topic"].combine_chunks()
                                       for t in fresh.values()])
            for url in holding:
                self._hold(url, fresh[url], listed)

    def _hold(self, url: str, tables: SourceTables, listed: pa.Array) -> None:
        held = self._held[url]
        before = held.before.topics["topic"]
        missing = pc.unique(before.filter(pc.invert(pc.is_in(before, listed))))
        if held.cycles_left == 0 or len(missing) == 0:
            del self._held[url]
            if len(missing):
                log.info("broker %s: %d topic(s) it listed before coming back are still "
                         "unlisted after %d cycles: no longer held", url, len(missing),
                         HOLD_CYCLES)
            return
        if held.cycles_left == HOLD_CYCLES:
            log.info("broker %s came back listing %d fewer topic(s): holding their last "
                     "values until it lists them again (at most %d cycles)", url,
                     len(missing), HOLD_CYCLES)
        self._tables[url] = with_topics_of(tables, held.before, missing)
        self._held[url] = _Held(held.before, held.cycles_left - 1)

    def tables(self, urls: Sequence[str]) -> tuple[tuple[str, SourceTables], ...]:
        """(url, tables) of every URL in `urls` that ever had a good fetch, in that order."""
        return tuple((u, self._tables[u]) for u in urls if u in self._tables)

