"""Each subscription's topic row (`engine/columns.positions`): its code where the merge
coded it over its own broker's topics (`pipeline/owners.coded_topics`), else a lookup among
every topic. The same rows as one lookup among every topic, whatever the chunks (a
broker's in one, in two, several brokers' in one) and wherever a subscription's topic is
(its own broker's chunk, another's, none)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from exporter.engine.columns import positions
from exporter.pipeline.owners import coded_topics

SOURCES = pa.array(["http://a:8080/metrics", "http://b:8080/metrics", "http://c:8080/metrics"])


def _column(rows: list, cuts: list[int], kind: pa.DataType | None = None) -> pa.ChunkedArray:
    """`rows` as a chunked column cut at `cuts`."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(rows)}), len(rows)]
    return pa.chunked_array([pa.array(rows[a:b], kind) for a, b in pairwise(bounds)],
                            kind)


def _sources(codes: list[int], cuts: list[int]) -> pa.ChunkedArray:
    column = _column(codes, cuts, pa.int32())
    return pa.chunked_array([pa.DictionaryArray.from_arrays(c, SOURCES) for c in column.chunks])


@st.composite
def tables(draw):
    topics = draw(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2)), max_size=40,
                           unique_by=lambda t: t[0]))
    topics.sort(key=lambda t: t[1])  # broker by broker, as the merge stacks them
    if draw(st.booleans()):  # or not: one broker's topics in two places
        topics = topics[1:] + topics[:1]
    names = [f"persistent://t/ns/topic-{n}" for n, _ in topics]
    subscriptions = draw(st.lists(st.tuples(st.integers(0, 35), st.integers(0, 2)),
                                  max_size=60))
    subscriptions.sort(key=lambda s: s[1])
    # chunks cut at each broker's boundary, as the merge's are, and anywhere else
    boundaries = [i for i in range(1, len(topics)) if topics[i][1] != topics[i - 1][1]]
    cuts = draw(st.lists(st.integers(0, 40), max_size=3))
    key_cuts = boundaries if draw(st.booleans()) else cuts
    sub_bounds = [i for i in range(1, len(subscriptions))
                  if subscriptions[i][1] != subscriptions[i - 1][1]]
    value_cuts = sub_bounds if draw(st.booleans()) else cuts
    return (_column([f"persistent://t/ns/topic-{n}" for n, _ in subscriptions], value_cuts,
                    pa.string()),
            _sources([s for _, s in subscriptions], value_cuts),
            _column(names, key_cuts, pa.string()), _sources([s for _, s in topics], key_cuts),
            {name: row for row, name in enumerate(names)})


@given(tables())
def test_a_subscriptions_topic_row_is_the_same_looked_up_by_broker_first(drawn):
    values, value_sources, keys, key_sources, row_of = drawn
    expected = [row_of.get(v, -1) for v in values.to_pylist()]
    coded = coded_topics(pa.table({"topic": values, "source": value_sources}),
                         pa.table({"topic": keys, "source": key_sources}))["topic"]
    assert coded.to_pylist() == values.to_pylist()
    assert positions(values, keys).tolist() == expected
    assert positions(values, keys, value_sources, key_sources).tolist() == expected
    assert positions(coded, keys, value_sources, key_sources).tolist() == expected
    # sources chunked otherwise than the values: every value looked up among all
    whole = pa.chunked_array([value_sources.combine_chunks()]) if len(values) else value_sources
    assert positions(coded, keys, whole, key_sources).tolist() == expected


def test_a_topic_of_another_broker_or_of_none_is_found_among_all():
    keys = _column(["x", "y", "z"], [2], pa.string())
    key_sources = _sources([0, 0, 1], [2])
    values = _column(["z", "x", "y", "w", "x"], [2, 4], pa.string())
    value_sources = _sources([1, 1, 0, 0, 2], [2, 4])
    coded = coded_topics(pa.table({"topic": values, "source": value_sources}),
                         pa.table({"topic": keys, "source": key_sources}))["topic"]
    for named in (values, coded):
        found = positions(named, keys, value_sources, key_sources)
        assert found.dtype == np.int32  # the decisions hold it as each subscription's row
        assert found.tolist() == [2, 0, 1, -1, 0]


def test_a_chunk_coded_over_its_brokers_topics_reads_its_codes_from_that_chunks_row():
    keys = _column(["x", "y", "z", "v"], [2], pa.string())
    key_sources = _sources([0, 0, 1, 1], [2])
    values = _column(["v", "z", "z", "x"], [3], pa.string())
    value_sources = _sources([1, 1, 1, 0], [3])
    coded = coded_topics(pa.table({"topic": values, "source": value_sources}),
                         pa.table({"topic": keys, "source": key_sources}))["topic"]
    assert [c.dictionary.to_pylist() for c in coded.chunks] == [["z", "v"], ["x", "y"]]
    assert positions(coded, keys, value_sources, key_sources).tolist() == [3, 2, 2, 0]
