"""From the pipeline's Arrow columns to the Python values the engine's per-entity loops
read (engine/decide.py), kept as small as the decisions that hold them allow."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline.aggregates import LONG_BOUND
from exporter.pipeline.owners import by_source, chunks_by_source

_REPEATED = frozenset({"namespace", "subscription"})  # few distinct values, many rows


def rows_of(table: pa.Table, names: tuple[str, ...]) -> list[list]:
    """The named columns as Python lists, for the engine's loops over entities."""
    return [shared(table.column(n)) if n in _REPEATED else table.column(n).to_pylist()
            for n in names]


def shared(column: pa.ChunkedArray) -> list[str | None]:
    """The column's values with one str object per distinct value. `to_pylist` makes one a
    row, and the decisions hold them until the next cycle: at a million topics, a million
    copies of a few namespace names, as many of each subscription's name."""
    distinct: dict[str, str] = {}
    values: list[str | None] = []
    for chunk in column.chunks:
        values += _words(pc.dictionary_encode(chunk), distinct)
    return values


def ranked(array: pa.Array) -> tuple[list[str | None], np.ndarray]:
    """One array's distinct values in Python's str order (UTF-8's byte order is that of
    code points), None first (for a null), and each row's value as an index into them
    (int32), from one dictionary encoding. The index is also where the value sorts, and
    the decisions hold it in place of a list of a str pointer a row (4 bytes, not 8)."""
    encoded = pc.dictionary_encode(array)
    order = pc.sort_indices(encoded.dictionary)  # sorted position -> dictionary code
    rank = np.empty(len(order), np.int32)
    rank[order.to_numpy()] = np.arange(1, len(order) + 1, dtype=np.int32)
    rank = np.append(rank, np.int32(0))  # a null's
    indices = encoded.indices.fill_null(len(rank) - 1).to_numpy(zero_copy_only=False)
    return [None, *encoded.dictionary.take(order).to_pylist()], rank[indices]


def _words(encoded: pa.DictionaryArray, distinct: dict[str, str]) -> list[str | None]:
    words: list[str | None] = [distinct.setdefault(w, w) for w in encoded.dictionary.to_pylist()]
    words.append(None)  # where the value is null
    indices = encoded.indices.fill_null(len(words) - 1).to_numpy(zero_copy_only=False)
    return np.array(words, dtype=object)[indices].tolist()


def counts(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A message counter as int64, and where it is one: not where no long holds it
    (null, NaN, beyond ±2^63: malformed, not a count)."""
    values = floats(column, 0.0)
    with np.errstate(invalid="ignore"):
        fits = np.abs(values) < LONG_BOUND
    fits &= np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
    return np.where(fits, values, 0.0).astype(np.int64), fits


def floats(column: pa.ChunkedArray | pa.Array, null: float) -> np.ndarray:
    """A column as float64, `null` where null."""
    return np.asarray(pc.fill_null(column, null).to_numpy(zero_copy_only=False), np.float64)


def positions(values: pa.ChunkedArray, keys: pa.ChunkedArray,
              value_sources: pa.ChunkedArray | None = None,
              key_sources: pa.ChunkedArray | None = None) -> np.ndarray:
    """Each value's row among `keys` (unique: an entity table's; int32), -1 where none: each
    subscription's topic row, worked out once a cycle for every use of it. With the
    tables' `source` columns, a chunk of values coded over its own broker's chunk of keys
    (pipeline/owners.coded_topics: the merge found them there) is its codes, and only the
    other values are looked up among every key: one lookup among all builds a hash table of
    every name, out of cache (docs/design.md, "The driver once every age table is
    full")."""
    if value_sources is None or key_sources is None:
        return _rows(values, keys)
    own = chunks_by_source(keys, key_sources)
    found, at = np.full(len(values), -1, np.int32), 0
    for chunk, name in by_source(values, value_sources):
        first, listed = own.get(name or "", (0, None))
        if listed is not None and isinstance(chunk, pa.DictionaryArray) \
                and chunk.dictionary.equals(listed):
            codes = pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False)
            found[at:at + len(chunk)] = np.where(codes >= 0, codes + first, -1)
        at += len(chunk)
    missing = np.flatnonzero(found < 0)
    if len(missing):
        found[missing] = _rows(values.take(missing), keys)
    return found


def _rows(values: pa.Array | pa.ChunkedArray, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.index_in(values, keys), -1)
                      .to_numpy(zero_copy_only=False), np.int32)
