"""Which row of the backlog-age store (engine/agetable.py) holds each topic's table, and the
name each table keeps.

A cycle's topics come as the pipeline's Arrow column: their names are made strs `_NAMES` at
a time, and only a new table's is kept (the cycle's names as strs all at once were 99 MB at
1M topics over the decide's start; tracemalloc). Whoever keeps a topic's name past the
cycle takes its table's (`name`, `names`): one str a topic across cycles, where each
cycle's tables spell every name afresh (a second copy of each was 78 bytes a topic at 100k
topics, tracemalloc). A dropped table's row goes to the next new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias, cast

import numpy as np
import pyarrow as pa

# A cycle's topic names: strs, or an Arrow column of them (the pipeline's, never null).
Names: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray
_NAMES = 1 << 16  # names made strs at once, from an Arrow column


class TableRows:
    """Topic → row, and row → the topic's name as its table keeps it."""

    def __init__(self) -> None:
        self._row: dict[str, int] = {}
        self._names: list[str | None] = []  # a row's topic, None for a free row
        self._free: list[int] = []  # rows of tables dropped, for new ones

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, topic: object) -> bool:
        return topic in self._row

    @property
    def used(self) -> int:
        """Rows given out so far, free ones included: the store's arrays cover them."""
        return len(self._names)

    def row(self, topic: str) -> int:
        """`topic`'s row, -1 without a table."""
        return self._row.get(topic, -1)

    def find(self, topics: Names, seen: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Each topic's row, a new one where `seen` and it has none, else -1; and the rows
        given to new tables (a topic twice in one call has one)."""
        get, rows, new = self._row.get, np.empty(len(topics), np.int64), []
        for at, part in _batches(topics):
            found = rows[at:at + len(part)]
            found[:] = np.fromiter((get(topic, -1) for topic in part), np.int64, len(part))
            for i in np.flatnonzero(seen[at:at + len(part)] & (found < 0)).tolist():
                topic = part[i]
                r = get(topic)
                if r is None:
                    r = self._free.pop() if self._free else len(self._names)
                    if r == len(self._names):
                        self._names.append(None)
                    self._row[topic], self._names[r] = r, topic
                    new.append(r)
                found[i] = r
        return rows, new

    def name(self, topic: str) -> str:
        """The str the table of `topic` keeps (equal to it; `topic` itself without one)."""
        r = self._row.get(topic)
        return topic if r is None else self._names[r] or topic

    def names(self, rows: np.ndarray) -> list[str | None]:
        """The name each row keeps (`find`'s rows), None for -1."""
        names = self._names
        return [names[r] if r >= 0 else None for r in rows.tolist()]

    def retain_rows(self, rows: np.ndarray) -> list[int]:
        """Keep only these rows' tables (-1 ignored); the rows dropped."""
        kept = np.zeros(len(self._names), bool)
        kept[rows[(rows >= 0) & (rows < kept.size)]] = True
        return self._dropped([r for r in np.flatnonzero(~kept).tolist()
                              if self._names[r] is not None])

    def retain(self, topics: Iterable[str]) -> list[int]:
        """Keep only these topics' tables; the rows dropped."""
        keep = set(topics)
        return self._dropped([r for topic, r in self._row.items() if topic not in keep])

    def _dropped(self, gone: list[int]) -> list[int]:
        for r in gone:
            del self._row[cast(str, self._names[r])]
            self._names[r] = None
            self._free.append(r)
        return gone


def _batches(topics: Names) -> Iterator[tuple[int, Sequence[str]]]:
    """(offset, names) `_NAMES` at a time, as strs."""
    for at in range(0, len(topics), _NAMES):
        part = topics[at:at + _NAMES]
        yield at, part.to_pylist() if isinstance(part, pa.Array | pa.ChunkedArray) else part
