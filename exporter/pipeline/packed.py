"""A broker's tables as zstd-compressed Arrow IPC: how its task hands them to the driver,
and how the driver keeps them between cycles.

Tasks hand their tables back as IPC payloads (scrape.py): a few byte strings a broker,
which the JVM passes on without converting a sample. The driver decodes them for the
merge, and used to keep the decoded tables until the next cycle, as the last good tables
of each broker (lastgood.py): a fleet's Arrow buffers held between cycles and through the
decide, for the one use of a broker whose next fetch fails. It now keeps the payloads its
task sent, a fraction of the decoded size; a broker's tables are decoded again only when
they are used: its fetch failed, or it lists fewer topics than before. The one column every
cycle compares, its topic names, is decoded alone from the payload when compared
(`topic_names`), cheaply, where keeping it decoded held the driver higher
(`tests.bench.steady`; docs/design.md, "The driver once every age table is full").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline.tables import SourceTables

TABLES = ("subscriptions", "topics", "namespaces", "usage")  # a task's tables, by name
_TOPIC_ROW = "topic_row"  # a subscription's topic as a payload carries it: its row in topics
_TOPIC_CODES = pa.dictionary(pa.int32(), pa.string())


def ipc(table: pa.Table) -> bytes:
    """Arrow IPC, zstd-compressed: the payloads pass through the JVM (task results, then
    the collect), whose heap is the driver's; topic names and sparse columns shrink
    several times over."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()


def encoded(tables: SourceTables) -> dict[str, bytes]:
    """Each of TABLES as `ipc` encodes it, the subscriptions' topics as `_TOPIC_ROW`s."""
    coded = replace(tables, subscriptions=_topic_rows(tables.subscriptions, tables.topics))
    return {name: ipc(getattr(coded, name)) for name in TABLES}


def decoded(payloads: Mapping[str, bytes], malformed: Mapping[str, int],
            filtered: int) -> SourceTables:
    """A broker's tables from its payloads (`encoded`'s, or a task's parts): the
    subscriptions' topics a dictionary column over the topics table's names."""
    tables = {name: from_ipc(payloads[name]) for name in TABLES}
    tables["subscriptions"] = _named(tables["subscriptions"], tables["topics"])
    return SourceTables(**tables, malformed=malformed, filtered=filtered)


def coded(tables: SourceTables) -> SourceTables:
    """`tables` with their subscriptions' topics coded as `decoded` codes them: for tables
    put together on the driver (lastgood.py's held rows)."""
    return replace(tables, subscriptions=_named(
        _topic_rows(tables.subscriptions, tables.topics), tables.topics))


def _topic_rows(subscriptions: pa.Table, topics: pa.Table) -> pa.Table:
    """Each subscription's topic as its row in `topics` (int32, `_TOPIC_ROW`), not its name
    again: a broker's topics table lists every topic its subscriptions name (tables.py
    derives it from them), so where one does not, the names stay."""
    at = subscriptions.schema.get_field_index("topic")
    rows = pc.index_in(subscriptions["topic"].cast(pa.string()), topics["topic"])
    if rows.null_count:
        return subscriptions
    return subscriptions.set_column(at, _TOPIC_ROW, rows.cast(pa.int32()))


def _named(subscriptions: pa.Table, topics: pa.Table) -> pa.Table:
    """`_topic_rows` undone, without copying a name: the topic column is a dictionary over
    the topics table's own names, the code the merge gives it anyway (owners.coded_topics).
    The names spelt again raised the driver's peak in the job and in the merge
    (docs/design.md, "The driver once every age table is full")."""
    if _TOPIC_ROW not in subscriptions.schema.names:
        return subscriptions
    at = subscriptions.schema.get_field_index(_TOPIC_ROW)
    names = topics["topic"].cast(pa.string())  # one chunk, as a stream's one batch reads
    names = names.chunk(0) if names.num_chunks == 1 else names.combine_chunks()
    column = pa.chunked_array(
        [pa.DictionaryArray.from_arrays(rows, names)
         for rows in subscriptions[_TOPIC_ROW].chunks], _TOPIC_CODES)
    return subscriptions.set_column(at, "topic", column)


@dataclass(frozen=True)
class Packed:
    """One broker's tables as kept between cycles."""

    payloads: Mapping[str, bytes]  # each of TABLES as `ipc` encodes it
    malformed: Mapping[str, int]
    filtered: int

    @classmethod
    def of(cls, tables: SourceTables, payloads: Mapping[str, bytes] | None = None) -> Packed:
        """`tables` packed, from the payloads they were decoded from if given (encoded
        here if not: a replay's tables, or a broker's with rows held over)."""
        if payloads is None:
            payloads = encoded(tables)
        return cls({name: payloads[name] for name in TABLES}, tables.malformed,
                   tables.filtered)

    def topic_names(self) -> pa.Array:
        """The topics table's topic names, its other columns left compressed."""
        payload = self.payloads["topics"]
        field = pa.ipc.open_stream(payload).schema.get_field_index("topic")
        options = pa.ipc.IpcReadOptions(included_fields=[field])
        return pa.ipc.open_stream(payload, options=options).read_all()["topic"].combine_chunks()

    def unpacked(self) -> SourceTables:
        return decoded(self.payloads, self.malformed, self.filtered)
