"""The in-plan parse of broker bodies: real Apache Pulsar output, pulsar-lite's short topic
names, every quirk of concatenated expositions, and malformed lines counted per source.

Expected values are read off the bodies by hand (the fixture's lines are quoted where
they are used), never computed by the code under test.
"""

# Body lines are real-format metric lines, longer than the line limit.
# ruff: noqa: E501

import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.config import Spark
from exporter.pipeline.model import Level, MalformedReason
from exporter.pipeline.parse import BROKER_FAMILIES, FAMILIES, parse
from exporter.pipeline.session import get_session
from exporter.sources.model import BrokerBody

FIXTURE = Path("/work/shared/fixtures/apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt")
if not FIXTURE.exists():  # a fresh clone has shared/ beside the repository
    FIXTURE = (Path(__file__).resolve().parents[3] / "shared" / "fixtures"
               / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt")

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

# Hand-written from notes/pulsar-lite.md (and a real pulsar-lite 0.2.0 body): `topic` is the
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


@pytest.fixture(scope="module")
def spark():
    return get_session(Spark(master="local[2]"))


def _body(tmp: Path, source: str, text: str) -> BrokerBody:
    path = tmp / (source.replace("/", "_").replace(":", "_") + ".txt")
    path.write_text(text, encoding="utf-8")
    return BrokerBody(source=source, path=str(path), size_bytes=len(text), fetched_at=0.0)


@pytest.fixture(scope="module")
def rows(spark, tmp_path_factory):
    """All four bodies parsed by one plan (one scan per body)."""
    tmp = tmp_path_factory.mktemp("bodies")
    bodies = [
        BrokerBody("http://apache:8080/metrics", str(FIXTURE), FIXTURE.stat().st_size, 0.0),
        _body(tmp, "http://quirks/metrics", QUIRKS),
        _body(tmp, "http://lite/metrics", PULSAR_LITE),
        _body(tmp, "http://broken/metrics", BROKEN),
    ]
    return [r.asDict() for r in parse(spark, bodies).collect()]


def _samples(rows, source):
    return [r for r in rows if r["source"] == source and r["reason"] is None]


def _one(rows, source, **match):
    found = [r for r in _samples(rows, source) if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


def _reasons(rows, source):
    return Counter(r["reason"] for r in rows if r["source"] == source and r["reason"])


APACHE = "http://apache:8080/metrics"


def test_apache_pulsar_fixture_parses_without_malformed_lines(rows):
    assert _reasons(rows, APACHE) == Counter()


def test_apache_pulsar_fixture_namespace_level_values(rows):
    ns = "prop/ns-abc1"
    # Lines of the fixture, e.g. `pulsar_storage_backlog_size{cluster="test",namespace="prop/ns-abc1"} 7800`
    expected = {
        "pulsar_storage_backlog_size": 7800.0,
        "pulsar_storage_size": 15600.0,
        "pulsar_in_messages_total": 100.0,
        "pulsar_in_bytes_total": 7800.0,
        "pulsar_out_messages_total": 100.0,
        "pulsar_out_bytes_total": 7800.0,
        "pulsar_msg_backlog": 100.0,  # {…,remote_cluster="local"}
        "pulsar_topics_count": 1.0,
        "pulsar_subscriptions_count": 1.0,
        "pulsar_producers_count": 1.0,
        "pulsar_consumers_count": 1.0,
        "pulsar_rate_in": 0.0,
    }
    for name, value in expected.items():
        row = _one(rows, APACHE, name=name, namespace=ns)
        assert row["value"] == value, name
        assert row["level"] == Level.NAMESPACE.value
        assert row["topic"] is None
        assert row["cluster"] == "test"


def test_apache_pulsar_fixture_keeps_only_entity_samples_of_the_needed_families(rows):
    samples = _samples(rows, APACHE)
    assert {r["name"] for r in samples} <= FAMILIES
    # Broker-wide defaults (`pulsar_storage_size{cluster="test"} 0`) describe no entity.
    assert all(r["level"] is not None for r in samples)
    # pulsar_ml_* families carry namespace="prop/ns-abc1/persistent": not needed, not kept.
    entity = [r for r in samples if r["level"] != Level.BROKER.value]
    assert {r["namespace"] for r in entity} == {"prop/ns-abc1"}
    # the load manager's usage gauges are broker-wide (no namespace), and all five are kept
    assert {r["name"] for r in samples if r["level"] == Level.BROKER.value} == set(BROKER_FAMILIES)


def test_concatenated_expositions_and_label_quirks(rows):
    src = "http://quirks/metrics"
    assert _reasons(rows, src) == Counter()
    a = "persistent://t/n/a"
    assert _one(rows, src, name="pulsar_in_messages_total", topic=a)["value"] == 10.0
    # trailing comma in the label set, after a second TYPE line for the family
    assert _one(rows, src, name="pulsar_in_messages_total",
                topic="persistent://t/n/b")["value"] == 20.0
    # spaces after commas, exponent notation
    assert _one(rows, src, name="pulsar_in_bytes_total", topic=a)["value"] == 1500.0


def test_special_values_and_timestamps(rows):
    src = "http://quirks/metrics"
    a = "persistent://t/n/a"
    assert math.isnan(_one(rows, src, name="pulsar_rate_in", topic=a)["value"])
    assert _one(rows, src, name="pulsar_rate_out", topic=a)["value"] == math.inf
    assert _one(rows, src, name="pulsar_throughput_in", topic=a)["value"] == -math.inf
    assert _one(rows, src, name="pulsar_throughput_out", topic=a)["value"] == -math.inf
    storage = _one(rows, src, name="pulsar_storage_size", topic=a)
    assert storage["value"] == 4096.0
    assert storage["timestamp_ms"] == 1675461651025
    assert _one(rows, src, name="pulsar_in_bytes_total", topic=a)["timestamp_ms"] is None


def test_escaped_quotes_commas_empty_values_and_newlines_in_label_values(rows):
    src = "http://quirks/metrics"
    subs = {r["subscription"]: r for r in _samples(rows, src)
            if r["name"] == "pulsar_subscription_back_log"}
    assert set(subs) == {'we "quote", and, commas={x}', "s2", "back\\slash\nnewline"}
    assert subs['we "quote", and, commas={x}']["value"] == 7.0
    assert subs['we "quote", and, commas={x}']["level"] == Level.SUBSCRIPTION.value
    assert subs["s2"]["cluster"] is None  # cluster="" is the label absent, as in Prometheus
    assert subs["s2"]["value"] == 3.0


def test_series_that_are_not_entity_samples_are_left_out_uncounted(rows):
    src = "http://quirks/metrics"
    names = [(r["name"], r["subscription"], r["namespace"], r["topic"])
             for r in _samples(rows, src)]
    # per-consumer counters: the subscription-level one is what the exporter reads
    assert ("pulsar_out_messages_total", "s2", "t/n", "persistent://t/n/a") not in names
    backlog = [r for r in _samples(rows, src) if r["name"] == "pulsar_msg_backlog"]
    # remote_cluster="local" is the namespace's own backlog; "east" is replication
    assert [(r["level"], r["value"]) for r in backlog] == [(Level.NAMESPACE.value, 100.0)]
    assert all(r["name"] in FAMILIES for r in _samples(rows, src))


def test_topic_keys_apache_forms(rows):
    src = "http://quirks/metrics"
    topics = {r["topic"] for r in _samples(rows, src) if r["topic"]}
    assert "non-persistent://t/n/np" in topics  # the domain is kept
    # splitTopicAndPartitionIndexLabel=true: the base name and a partition label
    assert "persistent://t/n/split-partition-2" in topics
    # a name that already has the suffix is not suffixed twice
    assert "persistent://t/n/q-partition-3" in topics
    assert _one(rows, src, topic="non-persistent://t/n/np")["namespace"] == "t/n"


def test_pulsar_lite_short_names_become_full_keys(rows):
    src = "http://lite/metrics"
    assert _reasons(rows, src) == Counter()
    in_msgs = {r["topic"]: r["value"] for r in _samples(rows, src)
               if r["name"] == "pulsar_in_messages_total"}
    assert in_msgs == {
        "persistent://public/default/t1": 5.0,
        "persistent://public/default/orders-partition-0": 3.0,
        "persistent://public/default/orders-partition-1": 4.0,
        "persistent://tn/ns2/with,comma": 6.0,
    }
    backlog = {r["subscription"]: (r["topic"], r["namespace"], r["value"])
               for r in _samples(rows, src) if r["name"] == "pulsar_subscription_back_log"}
    assert backlog == {
        "sub-a": ("persistent://public/default/t1", "public/default", 4.0),
        'sub"q': ("persistent://public/default/t1", "public/default", 5.0),
    }


def test_malformed_lines_are_counted_per_source_and_the_rest_still_parse(rows):
    src = "http://broken/metrics"
    assert _reasons(rows, src) == Counter({
        # truncated line; missing comma between labels; `1.0d`; `abc`; prose; a label
        # value holding one of the parse's separators (U+0001)
        MalformedReason.SYNTAX.value: 6,
        MalformedReason.DUPLICATE_LABEL.value: 1,  # topic named twice
        MalformedReason.UNKEYED_TOPIC.value: 1,  # short topic name, no namespace
    })
    good = {(r["name"], r["topic"]): r["value"] for r in _samples(rows, src)}
    assert good == {
        ("pulsar_in_messages_total", "persistent://t/n/x"): 5.0,
        ("pulsar_in_bytes_total", "persistent://t/n/x"): 50.0,
    }
    # Other bodies of the same plan are unaffected.
    assert _reasons(rows, "http://quirks/metrics") == Counter()


# --- law: any label value and any finite or special value survives the text format ------

_LABEL_TEXT = st.text(
    alphabet=st.characters(exclude_characters="\x00\x01\x02\x03", exclude_categories=("Cs",)),
    max_size=12,
)
_VALUES = st.floats(allow_nan=False, width=64) | st.sampled_from([math.inf, -math.inf])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=8, deadline=None)
@given(pairs=st.lists(st.tuples(_LABEL_TEXT, _VALUES), min_size=1, max_size=40))
def test_label_values_and_sample_values_round_trip(spark, tmp_path_factory, pairs):
    lines = [
        f'pulsar_subscription_back_log{{namespace="t/n",topic="persistent://t/n/a",'
        f'subscription="{_escape(sub)}",sequence="{i}"}} {value!r}'
        for i, (sub, value) in enumerate(pairs)
    ]
    body = _body(tmp_path_factory.mktemp("law"), "http://law/metrics", "\n".join(lines) + "\n")
    parsed = [r.asDict() for r in parse(spark, [body]).collect()]
    assert all(r["reason"] is None for r in parsed)
    assert len(parsed) == len(pairs)
    got = sorted((r["subscription"] or "", r["value"]) for r in parsed)
    # An empty label value is the label absent (None), compared here as "".
    assert got == sorted(pairs)
