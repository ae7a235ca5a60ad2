"""Which row of the backlog-age store (engine/backlog/agetable.py) holds each topic's table, and the
name each table keeps.

A cycle's topics come as the pipeline's Arrow column: their names are made strs `_NAMES` at
a time, and only a new table's is kept (the cycle's names as strs all at once were a
large share of the decide's peak). Whoever keeps a topic's name past the cycle takes its
table's (`name`, `names`): one str a topic across cycles, not a second copy each cycle's
tables would spell afresh. A dropped table's row goes to the next new one.

A topic is found by its str's hash (CPython keeps it in the str) among the kept names'
hashes, sorted, 12 bytes a table; the names themselves tell a collision apart. A dict of
the names to their rows held more and found no faster (docs/design.md, "The driver once
every age table is full").
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

# A cycle's topic names: strs, or an Arrow column of them (the pipeline's, never null).
Names: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray
_NAMES = 1 << 16  # names made strs at once, from an Arrow column


class TableRows:
    """Topic → row, and row → the topic's name as its table keeps it."""

    def __init__(self) -> None:
        self._names: list[str | None] = []  # a row's topic, None for a free row
        self._free: list[int] = []  # rows of tables dropped, for new ones
        self._keys = np.zeros(0, np.int64)  # each kept name's hash, ascending
        self._rows = np.zeros(0, np.int32)  # the row of each of `_keys`

    def __len__(self) -> int:
        return self._keys.size

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and self.row(topic) >= 0

    @property
    def used(self) -> int:
        """Rows given out so far, free ones included: the store's arrays cover them."""
        return len(self._names)

    def row(self, topic: str) -> int:
        """`topic`'s row, -1 without a table."""
        return int(self._found([topic], _hashes([topic]))[0])

    def find(self, topics: Names, seen: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Each topic's row, a new one where `seen` and it has none, else -1 (a topic
        twice has one row, seen once or twice); and the rows given to new tables."""
        rows, new = np.empty(len(topics), np.int64), list[int]()
        for at, part in _batches(topics):
            keys = _hashes(part)
            found = rows[at:at + len(part)]
            found[:] = self._found(part, keys)
            born: dict[str, int] = {}  # this batch's new tables: found again within it
            for i in np.flatnonzero(seen[at:at + len(part)] & (found < 0)).tolist():
                topic = part[i]
                r = born.get(topic)
                if r is None:
                    r = born[topic] = self._free.pop() if self._free else len(self._names)
                    if r == len(self._names):
                        self._names.append(None)
                    self._names[r] = topic
                found[i] = r
            if born:
                self._index(_hashes(list(born)), np.fromiter(born.values(), np.int32, len(born)))
                new += born.values()
        if new and (missed := np.flatnonzero(rows < 0)).size:  # some where not seen
            rows[missed] = self._found(*_named(topics, missed))
        return rows, new

    def name(self, topic: str) -> str:
        """The str the table of `topic` keeps (equal to it; `topic` itself without one)."""
        r = self.row(topic)
        return topic if r < 0 else self._names[r] or topic

    def names(self, rows: np.ndarray) -> list[str | None]:
        """The name each row keeps (`find`'s rows), None for -1."""
        names = self._names
        return [names[r] if r >= 0 else None for r in rows.tolist()]

    def retain_rows(self, rows: np.ndarray) -> list[int]:
        """Keep only these rows' tables (-1 ignored); the rows dropped."""
        kept = np.zeros(len(self._names), bool)
        kept[rows[(rows >= 0) & (rows < kept.size)]] = True
        kept[self._free] = True  # no table to drop
        return self._dropped(np.flatnonzero(~kept))

    def retain(self, topics: Iterable[str]) -> list[int]:
        """Keep only these topics' tables; the rows dropped."""
        keep = set(topics)
        return self._dropped(np.array([r for r, topic in enumerate(self._names)
                                       if topic is not None and topic not in keep], np.int64))

    def _found(self, topics: Sequence[str], keys: np.ndarray) -> np.ndarray:
        """Each topic's row (`keys`: their hashes), -1 without a table."""
        rows = np.full(keys.size, -1, np.int64)
        if not self._keys.size:
            return rows
        order = np.argsort(keys)  # sorted, the search keeps to the cache
        lo = np.empty_like(order)
        lo[order] = np.searchsorted(self._keys, keys[order])
        lo = np.minimum(lo, self._keys.size - 1)
        hit = np.flatnonzero(self._keys[lo] == keys)
        candidates = self._rows[lo[hit]].tolist()
        names = self._names
        same = np.fromiter(map(operator.eq, (names[r] for r in candidates),
                               (topics[i] for i in hit.tolist())), bool, hit.size)
        rows[hit[same]] = np.asarray(candidates, np.int64)[same]
        for k in hit[~same].tolist():  # a hash shared: the names after it decide
            at = int(lo[k]) + 1
            while at < self._keys.size and self._keys[at] == keys[k]:
                if names[r := int(self._rows[at])] == topics[k]:
                    rows[k] = r
                    break
                at += 1
        return rows

    def _index(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Add these rows' keys, keeping `_keys` sorted (one pass: no sort of the kept)."""
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(self._keys, keys[order])
        self._keys = np.insert(self._keys, at, keys[order])
        self._rows = np.insert(self._rows, at, rows[order])

    def _dropped(self, gone: np.ndarray) -> list[int]:
        if not gone.size:
            return []
        dead = np.zeros(len(self._names), bool)
        dead[gone] = True
        alive = ~dead[self._rows]
        self._keys, self._rows = self._keys[alive], self._rows[alive]
        dropped = gone.tolist()
        for r in dropped:
            self._names[r] = None
        self._free += dropped
        return dropped


def _hashes(names: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(hash, names), np.int64, len(names))


def _named(topics: Names, at: np.ndarray) -> tuple[list[str], np.ndarray]:
    """These topics as strs, and their hashes."""
    if isinstance(topics, pa.Array | pa.ChunkedArray):
        names = topics.take(at).to_pylist()
    else:
        names = [topics[i] for i in at.tolist()]
    return names, _hashes(names)


def _batches(topics: Names) -> Iterator[tuple[int, Sequence[str]]]:
    """(offset, names) `_NAMES` at a time, as strs."""
    for at in range(0, len(topics), _NAMES):
        part = topics[at:at + _NAMES]
        yield at, part.to_pylist() if isinstance(part, pa.Array | pa.ChunkedArray) else part
