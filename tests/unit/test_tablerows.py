"""TableRows (engine/backlog/tablerows.py) finds a topic by its str's hash among the kept names'
hashes: checked against a dict of topic → row over random cycles of finds and drops,
with the real hash and with one so weak that most names share theirs (the names must
tell them apart)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import exporter.engine.backlog.tablerows as tablerows
from exporter.engine.backlog.tablerows import TableRows

_TOPICS = [f"persistent://t/ns/topic-{i}" for i in range(40)]
_cycle = st.tuples(
    st.lists(st.sampled_from(_TOPICS), max_size=30),  # the cycle's topics (repeats too)
    st.integers(0, 2**30),  # which of them are seen: bits
    st.sampled_from(["rows", "topics"]),  # how the cycle's end drops the others
    st.booleans())  # as an Arrow column


def _weak(names: object) -> np.ndarray:
    """A hash most names share (by their length's parity)."""
    return np.fromiter((len(n) % 2 for n in names), np.int64)  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(st.lists(_cycle, min_size=1, max_size=8), st.booleans(), st.integers(1, 5))
def test_rows_are_those_a_dict_would_give(cycles, weak, batch) -> None:
    with mock.patch.object(tablerows, "_NAMES", batch), \
            mock.patch.object(tablerows, "_hashes", _weak if weak else tablerows._hashes):
        tables, model = TableRows(), {}
        for topics, bits, drop, arrow in cycles:
            seen = np.array([bool(bits >> k & 1) for k in range(len(topics))], bool)
            before = dict(model)
            seen_now = {t for t, s in zip(topics, seen.tolist(), strict=True) if s}
            rows, new = tables.find(pa.array(topics, pa.string()) if arrow else topics, seen)
            for topic, r in zip(topics, rows.tolist(), strict=True):
                if topic in model or topic in seen_now:
                    model.setdefault(topic, r)
                    assert r == model[topic] >= 0
                else:
                    assert r == -1
            born = seen_now - set(before)
            assert sorted(new) == sorted(model[t] for t in born)  # each new table once
            assert len(set(model.values())) == len(model) == len(tables)  # a row each
            assert tables.used <= len(model) + len(_TOPICS)
            assert all(tables.row(t) == r and t in tables for t, r in model.items())
            assert tables.names(np.array([*model.values(), -1])) == [*model, None]
            kept = [t for t, s in zip(topics, seen.tolist(), strict=True) if s or t in model]
            if drop == "rows":
                gone = tables.retain_rows(np.array([model[t] for t in kept] + [-1], np.int64))
            else:
                gone = tables.retain(kept)
            assert sorted(gone) == sorted(r for t, r in model.items() if t not in kept)
            model = {t: r for t, r in model.items() if t in kept}
            assert all(tables.row(t) == -1 for t in _TOPICS if t not in model)
            assert len(tables) == len(model)


def test_a_dropped_row_goes_to_the_next_new_topic() -> None:
    tables = TableRows()
    rows, _ = tables.find(["a", "b", "c"], np.ones(3, bool))
    assert tables.retain(["a", "c"]) == [int(rows[1])]
    (again,), new = tables.find(["d"], np.ones(1, bool))
    assert again == rows[1] and new == [again] and tables.used == 3
    assert tables.name("d") == "d" and tables.row("b") == -1 and "b" not in tables
