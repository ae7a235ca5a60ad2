"""A broker's tables as its task hands them to the driver (exporter/pipeline/packed.py): the
subscriptions' topics travel as rows of the topics table and come back as a dictionary over
the topics table's own names, never spelt twice."""

from __future__ import annotations

import pyarrow as pa

from exporter.pipeline.merge import merge
from exporter.pipeline.packed import decoded, encoded, from_ipc
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import SourceTables, source_tables


def tables(topics: int) -> SourceTables:
    lines = []
    for i in range(topics):
        labels = f'cluster="c",namespace="public/x",topic="persistent://public/x/t{i:04d}"'
        lines += [f"pulsar_in_messages_total{{{labels}}} {i}",
                  f'pulsar_subscription_back_log{{{labels},subscription="a"}} {i}',
                  f'pulsar_subscription_back_log{{{labels},subscription="b"}} 1']
    return source_tables([parse_text("\n".join(lines).encode() + b"\n")])


def test_subscriptions_carry_their_topics_as_rows_and_share_the_names_decoded() -> None:
    plain = tables(500)
    payloads = encoded(plain)
    sent = from_ipc(payloads["subscriptions"])
    assert "topic" not in sent.schema.names and sent["topic_row"].type == pa.int32()
    back = decoded(payloads, plain.malformed, plain.filtered)
    column = back.subscriptions["topic"]
    assert column.num_chunks == 1 and pa.types.is_dictionary(column.type)
    names = back.topics["topic"].chunk(0)
    # the dictionary is the topics table's names, their very buffers: no copy
    assert column.chunk(0).dictionary.buffers()[2].address == names.buffers()[2].address
    assert column.to_pylist() == plain.subscriptions["topic"].to_pylist()
    assert back.subscriptions.drop_columns(["topic"]).equals(
        plain.subscriptions.drop_columns(["topic"]))


def test_the_merge_reads_coded_and_plain_tables_alike() -> None:
    a, b = tables(300), tables(200)  # b's topics are a's first 200: contested
    plain = merge([("http://a", a), ("http://b", b)], {})
    packed = merge([(u, decoded(encoded(t), t.malformed, t.filtered))
                    for u, t in (("http://a", a), ("http://b", b))], {})
    mixed = merge([("http://a", a), ("http://b", decoded(encoded(b), b.malformed, 0))], {})
    for agg in (packed, mixed):
        assert agg.topics.to_pylist() == plain.topics.to_pylist()
        assert agg.subscriptions.to_pylist() == plain.subscriptions.to_pylist()
    assert len(plain.subscriptions) == 600  # each topic's two, once
