"""A broker's tables as zstd-compressed Arrow IPC: how its task hands them to the driver,
and how the driver keeps them between cycles.

Tasks hand their tables back as IPC payloads (scrape.py): a few byte strings a broker,
which the JVM passes on without converting a sample. The driver decodes them for the
merge, and used to keep the decoded tables until the next cycle, as the last good tables
of each broker (lastgood.py): at 1M topics ~530 MB of Arrow buffers held between cycles
and through the decide, for the one use of a broker whose next fetch fails. It now keeps
the payloads its task sent (on the bench's bodies an eighth of the decoded size); a broker's
tables are decoded again only when they are used: its fetch failed, or it lists fewer topics
than before. The one column every cycle compares, its topic names, is decoded alone from
the payload when compared (`topic_names`: 0.6 ms a broker of 10k topics); kept decoded, it
held the driver 42 MB higher between cycles at 1M topics, and 27-57 MB at the peaks
(tests.bench.steady, side by side).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from exporter.pipeline.tables import SourceTables

TABLES = ("subscriptions", "topics", "namespaces", "usage")  # a task's tables, by name


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
    """Each of TABLES as `ipc` encodes it."""
    return {name: ipc(getattr(tables, name)) for name in TABLES}


def decoded(payloads: Mapping[str, bytes], malformed: Mapping[str, int],
            filtered: int) -> SourceTables:
    """A broker's tables from its payloads (`encoded`'s, or a task's parts)."""
    return SourceTables(**{name: from_ipc(payloads[name]) for name in TABLES},
                        malformed=malformed, filtered=filtered)


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
