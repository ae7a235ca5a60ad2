"""A subscription's name as the decisions hold it (`engine/columns.ranked`): one str per
distinct name, in Python's str order, and each row's index among them, which is both its
name and where it sorts (the tie-break of publishtimes.py and topicdecisions.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from exporter.engine.columns import ranked

# beyond ASCII too: Arrow compares UTF-8 bytes, whose order is that of code points
_NAMES = st.text(st.sampled_from("ab\u00e9\u4e2d\U0001f600"), max_size=3)


@given(st.lists(st.none() | _NAMES, max_size=30))
def test_each_row_indexes_its_name_and_the_indices_sort_as_python_sorts(values):
    words, rank = ranked(pa.array(values, pa.string()))
    assert rank.dtype == np.int32
    assert [words[r] for r in rank.tolist()] == values
    assert words[0] is None  # a null's, first
    assert words[1:] == sorted({v for v in values if v is not None})
    by_rank = sorted(range(len(values)), key=lambda i: (rank[i], i))
    assert by_rank == sorted(range(len(values)),
                             key=lambda i: (values[i] is not None, values[i] or "", i))


def test_a_name_repeated_is_one_str():
    words, rank = ranked(pa.array(["sub-b", "sub-a", "sub-b"]))
    assert words == [None, "sub-a", "sub-b"] and rank.tolist() == [2, 1, 2]
