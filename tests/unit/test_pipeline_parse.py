"""The vectorised parse of broker bodies: real Apache Pulsar output, pulsar-lite's short
topic names, every quirk of concatenated expositions, malformed lines counted by reason,
and one broker's per-entity tables. Pure Arrow: no Spark here (scrape.py runs the same
functions inside Spark tasks; tests/integration/test_spark_cluster.py runs them there).

Expected values are read off the bodies by hand (the fixture's lines are quoted where
they are used), never computed by the code under test.
"""

# Body lines are real-format metric lines, longer than the line limit.
# ruff: noqa: E501

import math
import re
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.pipeline import parse, slices
from exporter.pipeline.aggregates import MalformedReason
from exporter.pipeline.labelsets import SeenSets
from exporter.pipeline.parse import BROKER_FAMILIES, FAMILIES, parse_text
from exporter.pipeline.pieces import whole_lines
from exporter.pipeline.tables import SourceTables, source_tables
from exporter.pulsarnames import METRIC_NAME
from tests.harness.fixtures import FIXTURES

FIXTURE = FIXTURES / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt"

# Quirks of real bodies (fixtures/SOURCES.md), one or more per line.
QUIRKS = r"""# HELP pulsar_in_messages_total help text, ignored
# TYPE pulsar_in_messages_total gauge
pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/a"} 10
# TYPE pulsar_in_messages_total gauge

pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/b",} 20
  # an indented comment
pulsar_in_bytes_total{cluster="c", namespace="t/n", topic="persistent://t/n/a"} 1.5E3
pulsar_rate_in{cluster="c",namespace="t/n",topic="persistent://t/n/a"} NaN
pulsar_rate_out{cluster="c",namespace="t/n",topic="persistent://t/n/a"} +Inf
pulsar_throughput_in{cluster="c",namespace="t/n",topic="persistent://t/n/a"} -Inf
pulsar_throughput_out{cluster="c",namespace="t/n",topic="persistent://t/n/a"} -Infinity
pulsar_storage_size{cluster="c",namespace="t/n",topic="persistent://t/n/a"} 4096 1675461651025
pulsar_subscription_back_log{cluster="c",namespace="t/n",topic="persistent://t/n/a",subscription="we \"quote\", and, commas={x}"} 7
pulsar_subscription_back_log{cluster="",namespace="t/n",topic="persistent://t/n/a",subscription="s2"} 3
pulsar_subscription_back_log{cluster="c",namespace="t/n",topic="persistent://t/n/a",subscription="back\\slash\nnewline"} 1
pulsar_producers_count{cluster="c",namespace="t/n",topic="non-persistent://t/n/np"} 2
pulsar_out_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/a",subscription="s2",consumer_name="c1",consumer_id="0"} 99
pulsar_msg_backlog{cluster="c",namespace="t/n",remote_cluster="local"} 100
pulsar_msg_backlog{cluster="c",namespace="t/n",remote_cluster="east"} 55
pulsar_msg_backlog{cluster="c"} 0
pulsar_consumers_count {cluster="c",namespace="t/n",topic="persistent://t/n/split",partition="2"} 1
pulsar_consumers_count{cluster="c",namespace="t/n",topic="persistent://t/n/q-partition-3",partition="3"} 1
pulsar_function_worker_start_up_time_ms{cluster="c",} 1234.0
jvm_gc_collection_seconds_count{cluster="c",gc="G1 Young Generation",} 42.0
"""

# Hand-written from a real pulsar-lite 0.2.0 body: `topic` is the
# SHORT name, `partition` -1 when not partitioned, timestamps in seconds.
PULSAR_LITE = r"""# TYPE pulsar_in_messages_total counter
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 5
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="0",topic="orders"} 3
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="1",topic="orders"} 4
pulsar_in_messages_total{cluster="pulsar-lite",namespace="tn/ns2",partition="-1",topic="with,comma"} 6
# TYPE pulsar_subscription_back_log gauge
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 4
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub\"q",topic="t1"} 5
pulsar_lite_subscription_acked_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 1
pulsar_broker_topics_count 4
"""

# Broken lines between good ones; each malformed line says why in the test below.
BROKEN = r"""pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/x"} 5
pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/y"
pulsar_in_messages_total{cluster="c" namespace="t/n"} 1
pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/z"} 1.0d
pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/z"} abc
this is not a sample
pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/w",topic="persistent://t/n/v"} 1
pulsar_in_messages_total{cluster="c",topic="short-without-namespace"} 1
pulsar_in_bytes_total{cluster="c",namespace="t/n",topic="persistent://t/n/x"} 50
""" + 'pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/\x01"} 1\n'



def _rows(text: str | bytes) -> list[dict]:
    """Every kept sample of a body, with its family's name (raw labels, as parsed)."""
    data = text.encode() if isinstance(text, str) else text
    rows = _labelled(parse_text(data))
    for row in rows:
        row["name"] = FAMILIES[row.pop("family")]
    return rows


def _labelled(parsed) -> list[dict]:
    """Each sample's family, value and the labels of its set."""
    labels = parsed.sets.take(parsed.samples["set"]).to_pylist()
    return [{**sample, **set_} for sample, set_ in zip(
        parsed.samples.select(["family", "value"]).to_pylist(), labels, strict=True)]


def _tables(text: str | bytes) -> SourceTables:
    data = text.encode() if isinstance(text, str) else text
    return source_tables([parse_text(data)])


def _by(table, *keys) -> dict:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r
            for r in table.to_pylist()}


def _counts(tables: SourceTables) -> dict[str, int]:
    return {k: v for k, v in tables.malformed.items() if v}


@pytest.fixture(scope="module")
def apache() -> SourceTables:
    return _tables(FIXTURE.read_bytes())


def test_apache_pulsar_fixture_parses_without_malformed_lines(apache):
    assert _counts(apache) == {}


def test_apache_pulsar_fixture_namespace_level_values(apache):
    # Lines of the fixture, e.g. `pulsar_storage_backlog_size{cluster="test",namespace="prop/ns-abc1"} 7800`
    (ns,) = apache.namespaces.to_pylist()
    assert ns["namespace"] == "prop/ns-abc1" and ns["cluster"] == "test"
    assert {k: ns[k] for k in (
        "backlog_size_bytes", "storage_size_bytes", "msg_in_total", "bytes_in_total",
        "msg_out_total", "bytes_out_total", "msg_backlog", "topics", "subscriptions",
        "producers", "consumers", "rate_in")} == {
        "backlog_size_bytes": 7800.0, "storage_size_bytes": 15600.0, "msg_in_total": 100.0,
        "bytes_in_total": 7800.0, "msg_out_total": 100.0, "bytes_out_total": 7800.0,
        "msg_backlog": 100.0,  # {…,remote_cluster="local"}
        "topics": 1.0, "subscriptions": 1.0, "producers": 1.0, "consumers": 1.0,
        "rate_in": 0.0,
    }
    # topic-level metrics are off in that broker: no topic, no subscription rows
    assert apache.topics.num_rows == 0 and apache.subscriptions.num_rows == 0


def test_apache_pulsar_fixture_keeps_only_entity_samples_of_the_needed_families():
    rows = _rows(FIXTURE.read_bytes())
    assert {r["name"] for r in rows} <= set(FAMILIES)
    # pulsar_ml_* families carry namespace="prop/ns-abc1/persistent": not read at all
    assert {r["namespace"] for r in rows if r["namespace"]} == {"prop/ns-abc1"}


def test_apache_pulsar_fixture_broker_usage(apache):
    (usage,) = apache.usage.to_pylist()
    # the load manager's five usage gauges are broker-wide (no namespace), all read
    assert set(BROKER_FAMILIES.values()) <= set(usage)
    assert all(usage[c] is not None for c in BROKER_FAMILIES.values())


def test_concatenated_expositions_and_label_quirks():
    tables = _tables(QUIRKS)
    assert _counts(tables) == {}
    topics = _by(tables.topics, "topic")
    a = topics["persistent://t/n/a"]
    assert a["msg_in_total"] == 10.0
    # trailing comma in the label set, after a second TYPE line for the family
    assert topics["persistent://t/n/b"]["msg_in_total"] == 20.0
    # spaces after commas, exponent notation
    assert a["bytes_in_total"] == 1500.0


def test_special_values_and_timestamps():
    a = _by(_tables(QUIRKS).topics, "topic")["persistent://t/n/a"]
    assert math.isnan(a["rate_in"])
    assert a["rate_out"] == math.inf
    assert a["throughput_in"] == -math.inf
    assert a["throughput_out"] == -math.inf  # Java's -Infinity
    assert a["storage_size_bytes"] == 4096.0  # a sample with a millisecond timestamp


def test_escaped_quotes_commas_empty_values_and_newlines_in_label_values():
    subs = _by(_tables(QUIRKS).subscriptions, "subscription")
    assert set(subs) == {'we "quote", and, commas={x}', "s2", "back\\slash\nnewline"}
    assert subs['we "quote", and, commas={x}']["backlog_messages"] == 7.0
    # cluster="" is the label absent, as in Prometheus
    assert [r["cluster"] for r in _rows(QUIRKS) if r["subscription"] == "s2"
            and r["name"] == "pulsar_subscription_back_log"] == [None]
    assert subs["s2"]["backlog_messages"] == 3.0
    assert subs["back\\slash\nnewline"]["backlog_messages"] == 1.0


def test_a_label_spelled_both_ways_in_one_set_is_read_from_its_opentelemetry_spelling():
    # otel.LABEL_ALIASES: `pulsar_topic` fills the `topic` column; printed beside `topic`
    # (whichever comes first), it is the one read, and empty it is the label absent.
    body = (
        'pulsar_msg_backlog{pulsar_topic="persistent://t/n/otel",topic="persistent://t/n/classic",cluster="c"} 1\n'
        'pulsar_msg_backlog{topic="persistent://t/n/classic",pulsar_topic="persistent://t/n/otel"} 2\n'
        'pulsar_msg_backlog{cluster="c",topic="persistent://t/n/classic",pulsar_topic=""} 3\n')
    assert [(r["value"], r["topic"], r["cluster"]) for r in _rows(body)] == [
        (1.0, "persistent://t/n/otel", "c"), (2.0, "persistent://t/n/otel", None),
        (3.0, None, "c")]


def test_series_that_are_not_entity_samples_are_left_out_uncounted():
    tables = _tables(QUIRKS)
    # per-consumer counters: the subscription-level one is what the exporter reads, and
    # the body has none for s2, so the out counter its topic sums stays unknown
    assert _by(tables.topics, "topic")["persistent://t/n/a"]["msg_out_total"] is None
    # remote_cluster="local" is the namespace's own backlog; "east" is replication;
    # `pulsar_msg_backlog{cluster="c"} 0` describes no entity
    assert [(n["namespace"], n["msg_backlog"]) for n in tables.namespaces.to_pylist()] == [
        ("t/n", 100.0)]
    assert _counts(tables) == {}


def test_topic_keys_apache_forms():
    topics = _by(_tables(QUIRKS).topics, "topic")
    assert "non-persistent://t/n/np" in topics  # the domain is kept
    # splitTopicAndPartitionIndexLabel=true: the base name and a partition label
    assert "persistent://t/n/split-partition-2" in topics
    # a name that already has the suffix is not suffixed twice
    assert "persistent://t/n/q-partition-3" in topics
    assert topics["non-persistent://t/n/np"]["namespace"] == "t/n"


def test_pulsar_lite_short_names_become_full_keys():
    tables = _tables(PULSAR_LITE)
    assert _counts(tables) == {}
    assert {t["topic"]: t["msg_in_total"] for t in tables.topics.to_pylist()} == {
        "persistent://public/default/t1": 5.0,
        "persistent://public/default/orders-partition-0": 3.0,
        "persistent://public/default/orders-partition-1": 4.0,
        "persistent://tn/ns2/with,comma": 6.0,
    }
    backlog = {s["subscription"]: (s["topic"], s["backlog_messages"])
               for s in tables.subscriptions.to_pylist()}
    assert backlog == {
        "sub-a": ("persistent://public/default/t1", 4.0),
        'sub"q': ("persistent://public/default/t1", 5.0),
    }
    # the topic's backlog is its subscriptions' sum where the broker prints none
    assert _by(tables.topics, "topic")["persistent://public/default/t1"]["msg_backlog"] == 9.0


def test_an_entity_printed_under_two_label_sets_is_one_row_of_their_largest_values():
    """A partition named in full and by `partition` label is one topic, and so is each of
    its subscriptions: one row each, every column the larger of the two printed."""
    full = 'topic="persistent://t/n/p-partition-1"'
    split = 'topic="persistent://t/n/p",partition="1"'
    body = "".join(
        f'pulsar_in_messages_total{{cluster="c",namespace="t/n",{labels}}} {msg_in}\n'
        f'pulsar_subscription_back_log{{cluster="c",namespace="t/n",{labels},'
        f'subscription="s"}} {backlog}\n'
        f'pulsar_subscription_consumers_count{{cluster="c",namespace="t/n",{labels},'
        f'subscription="s"}} {consumers}\n'
        for labels, msg_in, backlog, consumers in ((full, 7, 3, 9), (split, 5, 4, 1)))
    tables = _tables(body)
    topic = "persistent://t/n/p-partition-1"
    assert [(t["topic"], t["msg_in_total"]) for t in tables.topics.to_pylist()] == [(topic, 7.0)]
    assert [(s["topic"], s["subscription"], s["backlog_messages"], s["consumers"])
            for s in tables.subscriptions.to_pylist()] == [(topic, "s", 4.0, 9.0)]


def test_malformed_lines_are_counted_by_reason_and_the_rest_still_parse():
    tables = _tables(BROKEN)
    assert _counts(tables) == {
        # truncated line; missing comma between labels; `1.0d`; `abc`; prose; a label
        # value holding one of the parse's placeholders (U+0001)
        MalformedReason.SYNTAX.value: 6,
        MalformedReason.DUPLICATE_LABEL.value: 1,  # topic named twice
        MalformedReason.UNKEYED_TOPIC.value: 1,  # short topic name, no namespace
    }
    assert [(t["topic"], t["msg_in_total"], t["bytes_in_total"])
            for t in tables.topics.to_pylist()] == [("persistent://t/n/x", 5.0, 50.0)]


def test_lines_of_families_not_read_are_checked_for_shape_only():
    body = (
        'jvm_memory_bytes_used{area="heap",area="again"} 5\n'  # duplicate: not read, not checked
        "jvm_threads_current 12\n"
        "jvm_threads_current twelve\n"  # not a value: syntax
        "{broken\n"  # not a sample at all: syntax
    )
    assert _counts(_tables(body)) == {MalformedReason.SYNTAX.value: 2}


def test_a_body_cut_into_pieces_parses_as_the_whole():
    # a set naming a label twice and one that does not fit, each in two pieces
    bad = ('pulsar_msg_backlog{cluster="c",cluster="d",topic="persistent://t/n/a"} 1\n'
           'pulsar_rate_in{cluster="c",topic="persistent://t/n/a"=} 1\n')
    text = bad + QUIRKS + PULSAR_LITE + bad
    whole = _tables(text)
    assert whole.malformed[MalformedReason.DUPLICATE_LABEL.value] == 2
    assert whole.malformed[MalformedReason.SYNTAX.value] == 2
    data = text.encode()
    pieces = list(whole_lines([data[i:i + 7] for i in range(0, len(data), 7)], 200))
    assert len(pieces) > 5 and b"".join(pieces) == data
    seen = SeenSets()
    chained = [parse_text(p, seen) for p in pieces]
    # a set is cut in the first piece that prints it, and its row is the later pieces'
    assert sum(p.sets.num_rows for p in chained) < sum(
        parse_text(p).sets.num_rows for p in pieces)
    assert [p.base for p in chained] == list(np.cumsum(
        [0] + [p.sets.num_rows for p in chained[:-1]]))
    # ... and as a task parses them, each followed by the padding the parse reads into
    padded = list(whole_lines([data[i:i + 7] for i in range(0, len(data), 7)], 200,
                              slices.PADDING))
    assert [p[:-slices.PADDING] for p in padded] == pieces
    seen = SeenSets()
    in_place = [parse_text(p, seen, slices.PADDING) for p in padded]
    # pieces parsed each on its own, or as one body's, make the same tables as the whole
    for parts in ([parse_text(p) for p in pieces], chained, in_place):
        cut = source_tables(parts)
        for name in ("topics", "subscriptions", "namespaces"):
            assert _plain(getattr(cut, name)) == _plain(getattr(whole, name)), name
        assert cut.malformed == whole.malformed


def _plain(table) -> list[str]:
    """Rows as sorted reprs: NaN equals NaN, row order does not count."""
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


def test_crlf_line_ends_and_a_last_line_without_newline():
    body = ('pulsar_in_messages_total{namespace="t/n",topic="persistent://t/n/a"} 3\r\n'
            'pulsar_in_bytes_total{namespace="t/n",topic="persistent://t/n/a"} 4')
    tables = _tables(body)
    assert _counts(tables) == {}
    (a,) = tables.topics.to_pylist()
    assert (a["msg_in_total"], a["bytes_in_total"]) == (3.0, 4.0)


def test_bytes_that_are_not_utf8_spoil_their_line_only():
    body = (b'pulsar_in_messages_total{namespace="t/n",topic="persistent://t/n/\xff"} 1\n'
            b'pulsar_in_messages_total{namespace="t/n",topic="persistent://t/n/b"} 2\n')
    topics = _by(_tables(body).topics, "topic")
    assert topics["persistent://t/n/b"]["msg_in_total"] == 2.0
    assert topics["persistent://t/n/\ufffd"]["msg_in_total"] == 1.0


def test_crc32_matches_zlib_on_any_text():
    words = ["", "a", "persistent://public/default/t1", "ünïcödé-partition-3", "x" * 300]
    got = slices.crc32(pa.array(words, pa.string())).to_pylist()
    assert got == [zlib.crc32(w.encode()) for w in words]



@given(text=st.text(alphabet="ab{}\" =0123456789", max_size=60), data=st.data())
def test_views_are_the_slices_they_name(text, data):
    """Any slice length (inline up to 12 bytes, in parts above 4 and 8; a prefix and an
    offset beyond), any position up to the buffer's last byte, nulls where not present."""
    raw = slices.padded(np.frombuffer(text.encode(), np.uint8))
    cuts = data.draw(st.lists(st.tuples(st.integers(0, len(text)), st.integers(0, len(text)),
                                        st.booleans()), max_size=20))
    start = np.array([min(a, b) for a, b, _ in cuts], np.int64)
    end = np.array([max(a, b) for a, b, _ in cuts], np.int64)
    present = np.array([p for *_, p in cuts], bool)
    got = slices.views(raw, start, end, present).to_pylist()
    assert got == [text[a:b] if p else None for a, b, p in zip(start, end, present, strict=True)]


@given(text=st.text(alphabet="ab}} =", max_size=70), data=st.data())
def test_after_last_is_just_past_a_spans_last_byte(text, data):
    """Eight bytes a step: any span, short or spanning several words, at the buffer's start
    or its end, with the byte anywhere in it or nowhere."""
    raw = slices.padded(np.frombuffer(text.encode(), np.uint8))
    cuts = data.draw(st.lists(st.tuples(st.integers(0, len(text)), st.integers(0, len(text))),
                              max_size=20))
    start = np.array([min(a, b) for a, b in cuts], np.int64)
    end = np.array([max(a, b) for a, b in cuts], np.int64)
    got = slices.after_last(raw, end, start, ord("}")).tolist()
    assert got == [a + text[a:b].rindex("}") + 1 if "}" in text[a:b] else a
                   for a, b in zip(start.tolist(), end.tolist(), strict=True)]


def test_after_last_finds_a_lone_byte_at_every_position_of_every_short_span():
    """Every span of up to 24 bytes after 0 to 9 others, with one "}" at each of its
    positions or none: the word boundaries fall everywhere."""
    texts, start, end, want = [], [], [], []
    for lead in range(10):
        for length in range(25):
            for at in range(-1, length):
                span = "".join("}" if i == at else "a" for i in range(length))
                texts.append("}" * lead + span)  # a "}" before the span is not its own
                start.append(sum(map(len, texts[:-1])) + lead)
                end.append(start[-1] + length)
                want.append(start[-1] + at + 1 if at >= 0 else start[-1])
    raw = slices.padded(np.frombuffer("".join(texts).encode(), np.uint8))
    assert slices.after_last(raw, np.array(end), np.array(start), ord("}")).tolist() == want


def test_lines_over_padded_text_are_cut_in_place_and_others_from_a_padded_copy():
    text = b'pulsar_rate_in{topic="persistent://t/n/a"} 1\npulsar_rate_out 2\n'
    body = text + bytes(slices.PADDING)
    lines = slices.split_lines(body, slices.PADDING)
    assert lines.to_pylist() == [line + "\n" for line in text.decode().splitlines()]
    off, data = slices.buffers(lines)
    assert np.shares_memory(data, np.frombuffer(body, np.uint8))  # no copy
    assert len(data) == len(text) + slices.PADDING and not data[len(text):].any()
    # without padding (or with bytes after the text that are not zeros): a padded copy
    for unpadded in (slices.split_lines(text), slices.split_lines(text + b"x" * 16, 16)):
        off, data = slices.buffers(unpadded)
        assert bytes(data[:off[-1]]) == text and not data[off[-1]:].any()
        assert len(data) >= off[-1] + slices.PADDING
        assert not np.shares_memory(data, np.frombuffer(text, np.uint8))


@given(strings=st.lists(st.none() | st.text(max_size=5)), data=st.data())
def test_only_nulls_what_is_not_kept_and_keeps_the_rest(strings, data):
    """Whatever the array's offset (the validity bitmap counts from the buffers' start) and
    nulls in either input: kept strings stay, the others are null."""
    n = len(strings)
    skip = data.draw(st.integers(0, n))
    keep = data.draw(st.lists(st.none() | st.booleans(), min_size=n - skip, max_size=n - skip))
    array = pa.array(strings, pa.large_string()).slice(skip)
    got = slices.only(array, pa.array(keep, pa.bool_()).slice(0)).to_pylist()
    assert got == [s if k else None for s, k in zip(strings[skip:], keep, strict=True)]


# --- law: any label value and any finite or special value survives the text format ------

_LABEL_TEXT = st.text(
    alphabet=st.characters(exclude_characters="\x00\x01\x02\x03", exclude_categories=("Cs",)),
    max_size=12,
)
_VALUES = st.floats(allow_nan=False, width=64) | st.sampled_from([math.inf, -math.inf])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@given(pairs=st.lists(st.tuples(_LABEL_TEXT, _VALUES), min_size=1, max_size=40))
def test_label_values_and_sample_values_round_trip(pairs):
    lines = [
        f'pulsar_subscription_back_log{{namespace="t/n",topic="persistent://t/n/a",'
        f'subscription="{_escape(sub)}",sequence="{i}"}} {value!r}'
        for i, (sub, value) in enumerate(pairs)
    ]
    parsed = parse_text(("\n".join(lines) + "\n").encode())
    assert sum(parsed.malformed.values()) == 0
    rows = _labelled(parsed)
    assert len(rows) == len(pairs)
    got = sorted((r["subscription"] or "", r["value"]) for r in rows)
    # An empty label value is the label absent (None), compared here as "".
    assert got == sorted(pairs)


# --- law: checking a line piece by piece accepts what the whole-line grammar accepts -----

# The text format's sample line, whole: what `_cut`'s pieces (name, label set, value, what
# follows it) add up to. Python's `re` reads this RE2 syntax alike.
SAMPLE_LINE = re.compile(
    rf"[ \t]*{METRIC_NAME}(?:[ \t]*\{{{parse._LABEL_SET}\}}[ \t]*|[ \t]+)(?:{parse._VALUE})"
    r"(?:[ \t]+-?[0-9]+)?[ \t]*\r?\n?")
_SEEDS = [
    'pulsar_in_messages_total{cluster="c",namespace="t/n",topic="persistent://t/n/a"} 10\n',
    'pulsar_subscription_back_log{namespace="t/n",topic="persistent://t/n/a",subscription="s\\"}{ 1"} 7 1675461651025\r\n',
    'pulsar_rate_in {cluster="c", namespace="t/n",topic="a",} -Infinity\n',
    "process_start_time_seconds 1.7e9\n",
    '  pulsar_storage_size{topic="persistent://t/n/a"}\t+Inf \n',
    "pulsar_lb_cpu_usage{} NaN",
]
_EDITS = " \t{}\",=\\\r#09.eE+-In_:x}\x01"


@given(seed=st.sampled_from(_SEEDS), edits=st.lists(st.tuples(
    st.integers(0, 200), st.sampled_from(["insert", "delete", "double"]),
    st.sampled_from(_EDITS)), min_size=1, max_size=3))
def test_a_line_of_a_family_read_is_a_sample_exactly_when_the_grammar_says(seed, edits):
    line = seed
    for at, how, char in edits:
        at %= len(line) + 1
        line = {"insert": line[:at] + char + line[at:], "delete": line[:at] + line[at + 1:],
                "double": line[:at] + line[at:at + 3] + line[at:]}[how]
    line = line.replace("\n", "") + "\n"  # one line
    read = bool(re.match(parse._READ_FAMILY, line))
    if read:
        fits = bool(SAMPLE_LINE.fullmatch(line)) and not re.search("[\x00-\x03]", line)
    else:  # an edit to the name: a family not read, its shape checked only
        fits = bool(re.match(parse._COMMENT_OR_SAMPLE, line))
    parsed = parse_text(line.encode())
    assert parsed.malformed[MalformedReason.SYNTAX] == (0 if fits else 1), line
    # A fitting line of a family read is its sample, or left out for a label named twice.
    kept = parsed.samples.num_rows + parsed.malformed[MalformedReason.DUPLICATE_LABEL]
    assert kept == (1 if read and fits else 0), line
