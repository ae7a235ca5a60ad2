"""Which broker's report of a topic counts, without copying the brokers' tables.

A topic is reported by one broker, but for a while by two: its bundle moved, or a broker
died and its last good tables are still in use while the new owner reports the topic
afresh. One report is kept (merge.py's rules, `dedup`), with that broker's subscriptions
of it (`owned`). At a million topics the brokers' tables are the largest thing the driver
holds, so the kept rows stay where they are: only a broker that loses a row has its chunk
copied (`kept`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def with_source(parts: Sequence[tuple[str, pa.Table]], sources: Sequence[str]) -> pa.Table:
    """The tables of every source stacked, not copied (one chunk each), with a `source`
    column: a code per row into `sources` (sorted), not the URL again on every row."""
    if not parts:
        raise ValueError("no tables")
    dictionary = pa.array(sources, pa.string())
    code = {s: i for i, s in enumerate(sources)}
    return pa.concat_tables(_alike([t.append_column("source", pa.DictionaryArray.from_arrays(
        pa.array(np.full(t.num_rows, code[s], np.int32)), dictionary)) for s, t in parts]))


def _alike(tables: list[pa.Table]) -> list[pa.Table]:
    """The tables, their columns of names as plain strings where some broker's are coded
    (packed.py) and another's are not: tables made apart (tests, a replay's)."""
    if len({t.schema for t in tables}) == 1:
        return tables
    def plain(t: pa.Table) -> pa.Table:
        for at, f in enumerate(t.schema):
            if f.name != "source" and pa.types.is_dictionary(f.type):
                t = t.set_column(at, f.name, t[f.name].cast(f.type.value_type))
        return t
    return [plain(t) for t in tables]


def kept(table: pa.Table, keep: np.ndarray | pa.ChunkedArray) -> pa.Table:
    """`table`'s rows where `keep`: the chunks (brokers) that lose no row are kept as they
    are, not copied. A broker's tables are the largest thing the driver holds, and nearly
    every topic is reported by one broker only."""
    mask = keep if isinstance(keep, np.ndarray) else keep.to_numpy()
    batches, at = [], 0
    for batch in table.to_batches():
        part = mask[at:at + batch.num_rows]
        at += batch.num_rows
        if part.all():
            batches.append(batch)
        elif part.any():
            batches.append(batch.filter(pa.array(part)))
    return pa.Table.from_batches(batches, schema=table.schema)


def dedup(topics: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(One report per topic, the (source, topic) of the reports dropped). Of a topic
    reported more than once: a classic body's before an OpenTelemetry one's, a fresh one's
    before a stale one's, then the largest msg_in_total, then the smaller source. Only the
    topics named twice are ranked, and only the brokers' chunks that lose a row copied.
    Those are found by the CRC-32 each task computed (`topic_hash`): sorting 8 bytes a
    topic, not hashing its name (a hash table of every name); names sharing a
    hash by chance are told apart by the ranking, which compares names."""
    hashes = pc.fill_null(topics["topic_hash"], -1).to_numpy()
    order = np.argsort(hashes, kind="stable")
    same = hashes[order[1:]] == hashes[order[:-1]]
    if not same.any():
        return topics, topics.select(["source", "topic"]).slice(0, 0)
    contested = np.unique(np.concatenate((order[1:][same], order[:-1][same])))
    rivals = topics.select(["topic", "otel_only", "stale", "msg_in_total"]).take(contested)
    rivals = rivals.append_column("source", topics["source"].take(contested).cast(pa.string()))
    order = pc.sort_indices(rivals, [("topic", "ascending", "at_end"),
                                     ("otel_only", "ascending", "at_end"),
                                     ("stale", "ascending", "at_end"),
                                     ("msg_in_total", "descending", "at_end"),
                                     ("source", "ascending", "at_end")]).to_numpy()
    name = rivals["topic"].take(order)
    later = pc.equal(name[1:], name[:-1]).to_numpy(zero_copy_only=False)  # no null names
    losers = contested[order[1:][later]]
    keep = np.ones(topics.num_rows, bool)
    keep[losers] = False
    return kept(topics, keep), topics.select(["source", "topic"]).take(losers)


def owned(subscriptions: pa.Table, dropped: pa.Table) -> pa.Table:
    """The subscriptions reported by the broker whose report of their topic was kept: all
    but those of a dropped (source, topic) report. A broker's topics table has a row for
    every topic its subscriptions name (tables.py derives it from them), so nothing else
    can lose its topic. All of a dead broker's topics are dropped while its last good
    tables stay in use: the pairs are compared in Arrow, never row by row in Python."""
    if dropped.num_rows == 0:
        return subscriptions
    candidates = np.flatnonzero(pc.is_in(subscriptions["topic"], dropped["topic"]).to_numpy())
    pairs = subscriptions.select(["source", "topic"]).take(candidates)
    lost = pc.is_in(_pair_keys(pairs), _pair_keys(dropped)).to_numpy(zero_copy_only=False)
    keep = np.ones(subscriptions.num_rows, bool)
    keep[candidates[lost]] = False
    return kept(subscriptions, keep)


def _pair_keys(table: pa.Table) -> pa.ChunkedArray:
    """(source, topic) as one string each: neither holds a NUL."""
    return pc.binary_join_element_wise(table["source"].cast(pa.string()),
                                       table["topic"].cast(pa.string()), "\0")


def by_source(column: pa.ChunkedArray, sources: pa.ChunkedArray,
              ) -> Iterator[tuple[pa.Array, str | None]]:
    """Each chunk of `column` and the one source URL of its rows (`with_source`'s codes),
    None where they have several, none or nulls, or where `sources` is chunked otherwise
    (the columns of one table are chunked alike, as the merge's are)."""
    if [len(c) for c in column.chunks] != [len(c) for c in sources.chunks]:
        return ((chunk, None) for chunk in column.chunks)
    return ((chunk, _one_source(source))
            for chunk, source in zip(column.chunks, sources.chunks, strict=True))


def chunks_by_source(column: pa.ChunkedArray, sources: pa.ChunkedArray,
                     ) -> dict[str, tuple[int, pa.Array]]:
    """Each source's one chunk of `column` and the row it starts at, of the chunks whose
    rows are all one source's (a table `with_source` stacked has one a broker). A source
    with rows in two chunks has none here."""
    own: dict[str, tuple[int, pa.Array]] = {}
    twice: set[str] = set()
    at = 0
    for chunk, name in by_source(column, sources):
        if name is not None:
            if name in own:
                twice.add(name)
            own[name] = (at, chunk)
        at += len(chunk)
    return {name: found for name, found in own.items() if name not in twice}


def _one_source(source: pa.Array) -> str | None:
    if not isinstance(source, pa.DictionaryArray) or not len(source) or source.null_count:
        return None
    codes = source.indices.to_numpy(zero_copy_only=False)
    if codes.min() != codes.max():
        return None
    return source.dictionary[int(codes[0])].as_py()


def coded_topics(subscriptions: pa.Table, topics: pa.Table) -> pa.Table:
    """`subscriptions` with each one's topic as a code into its broker's topic names: the
    dictionary of a broker's chunk is its chunk of `topics`' names, shared, not copied
    (model.SUBSCRIPTIONS). The rare chunk whose topics are not all there (rows of several
    brokers, a name its broker does not list) is coded over its own names."""
    own = chunks_by_source(topics["topic"], topics["source"])
    coded, column_type = [], pa.dictionary(pa.int32(), pa.string())
    for chunk, name in by_source(subscriptions["topic"], subscriptions["source"]):
        listed = own.get(name or "", (0, None))[1]
        if listed is not None and isinstance(chunk, pa.DictionaryArray) \
                and chunk.dictionary.equals(listed):  # coded so already (packed.py)
            coded.append(chunk.cast(column_type))
            continue
        chunk = chunk.cast(pa.string())
        rows = pc.index_in(chunk, listed) if listed is not None else None
        if rows is None or rows.null_count:
            encoded = pc.dictionary_encode(chunk)
            rows, listed = encoded.indices, encoded.dictionary
        coded.append(pa.DictionaryArray.from_arrays(rows.cast(pa.int32()), listed))
    column = pa.chunked_array(coded, column_type)
    return subscriptions.set_column(subscriptions.schema.get_field_index("topic"), "topic",
                                    column)
