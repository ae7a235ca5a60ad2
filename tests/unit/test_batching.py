"""A batched backlog read as messages for the age estimate, and the bytes per message of a
topic (`engine/backlog/sizes.py`): Pulsar counts the backlog in entries and the publish counter in
messages. Worked out for every topic at once; checked here against the per-topic rules
they replaced (`_reference`), on any values."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from exporter.engine.backlog.sizes import message_sizes, slowest_backlogs
from exporter.engine.columns import counts, floats, positions

F = pa.float64()


def _sizes(topics: list[dict], subscriptions: list[tuple[str, float | None]],
           ) -> tuple[list[float | None], list[float]]:
    table = pa.table({"topic": pa.array([t["topic"] for t in topics], pa.string()),
                      **{c: pa.array([t.get(c) for t in topics], F) for c in (
                          "msg_in_total", "bytes_in_total", "backlog_size_bytes")}})
    subs = pa.table({"topic": pa.array([t for t, _ in subscriptions], pa.string()),
                     "backlog_messages": pa.array([b for _, b in subscriptions], F)})
    slowest = slowest_backlogs(positions(subs["topic"], table["topic"]),
                               floats(subs["backlog_messages"], 0.0), table.num_rows)
    return message_sizes(table, slowest, counts(table["msg_in_total"])[0])


def _per_entry(subs: list[float], backlog_bytes: float | None, avg: float) -> float:
    """Messages per entry of one topic whose counters give `avg` bytes a message."""
    topic = {"topic": "t", "msg_in_total": 1000.0, "bytes_in_total": avg * 1000,
             "backlog_size_bytes": backlog_bytes}
    return _sizes([topic], [("t", b) for b in subs])[1][0]


def test_a_batched_backlog_is_scaled_by_its_bytes():
    # 4.0.8: 30 entries of 10 messages of 112.659 bytes each (backlogSize 33798 bytes)
    assert abs(_per_entry([30.0], 33797.7, 112.659) - 10.0) < 1e-9


def test_the_slowest_subscription_sets_the_factor_for_all():
    assert _per_entry([3.0, 30.0], 30 * 5 * 100.0, 100.0) == 5.0


def test_unbatched_or_unknown_is_one():
    assert _per_entry([30.0], 3000.0, 100.0) == 1.0  # one message per entry
    assert _per_entry([30.0], 2000.0, 100.0) == 1.0  # never below one
    assert _per_entry([30.0], None, 100.0) == 1.0  # pulsar-lite: no size
    assert _per_entry([0.0], 3000.0, 100.0) == 1.0  # no backlog
    assert _per_entry([], 3000.0, 100.0) == 1.0
    assert _per_entry([30.0], math.inf, 100.0) == 1.0  # was inf, and round() raised


def test_the_bytes_per_message_from_the_counters_else_the_backlog():
    topics = [{"topic": "counted", "msg_in_total": 4.0, "bytes_in_total": 400.0,
               "backlog_size_bytes": 9000.0},
              {"topic": "reloaded", "msg_in_total": 0.0, "bytes_in_total": 0.0,
               "backlog_size_bytes": 9000.0},  # counters restarted: the backlog's bytes
              {"topic": "idle"}]
    subs = [("counted", 30.0), ("reloaded", 10.0), ("reloaded", 30.0), ("idle", 5.0)]
    averages, _ = _sizes(topics, subs)
    assert np.array_equal(averages, [100.0, 300.0, np.nan], equal_nan=True)


def _reference(published_f: float | None, bytes_in: float | None,
               backlogs: list[float | None], backlog_bytes: float | None,
               ) -> tuple[float | None, float]:
    """The per-topic rules as they were (engine/decide.py until 2026-11-27)."""
    published = None if published_f is None or not -2.0**63 < published_f < 2.0**63 \
        else int(published_f)
    slowest = max((b or 0.0 for b in backlogs), default=0.0)
    if published and bytes_in:
        avg: float | None = bytes_in / published
    elif backlog_bytes and math.isfinite(backlog_bytes) and backlog_bytes > 0 and slowest > 0:
        avg = backlog_bytes / slowest
    else:
        avg = None
    if not (slowest > 0 and backlog_bytes and avg):
        return avg, 1.0
    return avg, max(1.0, backlog_bytes / avg / slowest)


_VALUES = st.none() | st.sampled_from([0.0, -1.0, 0.5, 1.0, 1e6, 2.0**63]) \
    | st.floats(-1e3, 1e12, allow_nan=False)


@given(published=_VALUES, bytes_in=_VALUES, backlog_bytes=_VALUES,
       backlogs=st.lists(st.none() | st.floats(-10, 1e9, allow_nan=False), max_size=3))
def test_the_columns_agree_with_the_per_topic_rules(published, bytes_in, backlog_bytes,
                                                    backlogs) -> None:
    """Finite values, as the pipeline hands over (pipeline/tables.py skips counts no long
    holds); a NaN average was unknown to the check either way (`backlog._usable`)."""
    topic = {"topic": "t", "msg_in_total": published, "bytes_in_total": bytes_in,
             "backlog_size_bytes": backlog_bytes}
    (avg,), (per_entry,) = _sizes([topic], [("t", b) for b in backlogs])
    want_avg, want_per_entry = _reference(published, bytes_in, backlogs, backlog_bytes)
    usable = want_avg if want_avg is not None and math.isfinite(want_avg) else None
    assert (avg if math.isfinite(avg) else None) == usable
    if math.isfinite(want_per_entry):
        assert per_entry == want_per_entry
