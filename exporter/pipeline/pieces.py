"""A body's chunks re-cut into pieces that end at a line end, so that Spark's task parses
each piece on its own (pipeline/scrape.py, pipeline/parse.py) while the rest is still
arriving: the fetch (sources/brokers.py) yields chunks as they come off the socket."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np


def whole_lines(pieces: Iterable[bytes], piece_bytes: int, padding: int = 0,
                ) -> Iterator[memoryview]:
    """The stream re-cut into pieces of about `piece_bytes` that end at a line end (the
    last one wherever the stream ends), so that each can be parsed on its own, each
    followed by `padding` zero bytes that are not its text (the parse reads words past a
    text's end: so it needs no padded copy, pipeline/slices.py). Chunks are held as they
    came and copied once a piece into a numpy array, whose allocator asks the kernel for
    huge pages: a big body's joins fault in 2 MB pages, not 4 KB ones, which nearly halves
    the join (docs/design.md, "The driver once every age table is full")."""
    held: list[bytes] = []
    size = 0
    for data in pieces:
        size += len(data)
        if size >= piece_bytes and (cut := data.rfind(b"\n") + 1):
            held.append(data[:cut])
            yield _joined(held, padding)
            held, size = [data[cut:]], len(data) - cut
        else:
            held.append(data)
    if size:
        yield _joined(held, padding)


def _joined(chunks: list[bytes], padding: int) -> memoryview:
    """The chunks end to end, then `padding` zero bytes."""
    return np.concatenate([*(np.frombuffer(c, np.uint8) for c in chunks),
                           np.zeros(padding, np.uint8)]).data
