"""Bytes per message and messages per backlog entry, for every topic at once.

The backlog check needs both for every topic, every cycle (engine/decide.py): they come
from the topic's counters and its slowest subscription's backlog, so they are worked out
over the pipeline's columns in one pass, not topic by topic in Python, where the
per-topic `max` alone was a large share of a decide (docs/design.md, "The driver's peak
and the engine at 1M topics").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from exporter.engine.columns import floats


def slowest_backlogs(at: np.ndarray, backlogs: np.ndarray, topics: int) -> np.ndarray:
    """Per topic row, the largest backlog of its subscriptions (0 without any, or with
    none above 0). `at`: each subscription's topic row (-1: none); `backlogs`: theirs."""
    slowest = np.zeros(topics + 1)  # and a last row, of the subscriptions of no topic
    np.maximum.at(slowest, at, backlogs)
    return slowest[:topics]


def message_sizes(topics: pa.Table, slowest: np.ndarray, published: np.ndarray,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per topic row: bytes per message (NaN where unknown) and messages per backlog entry.

    Bytes per message: the topic's counters', else its slowest subscription's backlog bytes
    (`pulsar_storage_backlog_size`) over its backlog. A broker that loads a topic again
    (after a restart, or with its bundle) starts its counters at 0: without the second, an
    idle topic's backlog size, and its size quota, would be unknown until something is
    published again, where Pulsar itself checks its backlog size.

    Messages per entry, for the age table. Pulsar's backlog counts entries
    (`ManagedCursor.getNumberOfEntriesInBacklog`: a batch is one entry) while
    `msgInCounter` counts messages, so a batched topic's backlog read as messages looks
    `batch size` times too young. Bytes agree on both sides (measured on 4.0.8: a backlog
    of 100 entries of 10 messages, `backlogSize` = `bytesInCounter` = 112659), so the
    slowest subscription's backlog bytes over the topic's average message size give its
    backlog in messages. Exact for uniform message sizes; 1 where the broker prints no
    backlog size (pulsar-lite counts messages), and never below 1. `published`: each
    topic's message counter (`columns.counts`: 0 where it is no count)."""
    bytes_in = floats(topics["bytes_in_total"], 0.0)
    backlog_bytes = floats(topics["backlog_size_bytes"], 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        from_backlog = np.where(np.isfinite(backlog_bytes) & (backlog_bytes > 0) & (slowest > 0),
                                backlog_bytes / slowest, np.nan)
        average = np.where((published != 0) & (bytes_in != 0), bytes_in / published,
                           from_backlog)
        per_entry = backlog_bytes / average / slowest
    per_entry = np.where(np.isfinite(per_entry) & (per_entry > 1.0) & (slowest > 0)
                         & (backlog_bytes != 0), per_entry, 1.0)
    return average, per_entry
