"""Apache Pulsar's OpenTelemetry backlog series (pipeline/otel.py) parsed into the classic
topic columns, on bodies a real 4.0.8 broker printed at one moment
(tests/fixtures/SOURCES.md), and the merge of a broker's two expositions. Pure Arrow, no
Spark.

Expected values are read off the fixtures by hand (the lines are quoted where used),
never computed by the code under test.
"""

# Body lines are real-format metric lines, longer than the line limit.
# ruff: noqa: E501

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from exporter.pipeline import slices
from exporter.pipeline.merge import merge
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import SourceTables, source_tables
from tests.harness.fixtures import FIXTURES

OTEL = FIXTURES / "apache-pulsar-4.0.8-otel-metrics.txt"
CLASSIC = FIXTURES / "apache-pulsar-4.0.8-otel-classic-metrics.txt"
AGED = "persistent://public/otel-age-58d8de9b/aged"
KEPT = "persistent://public/otel-kept-dfcea9ec/kept"
PARTED = "persistent://public/otel-kept-dfcea9ec/parted"
COLUMNS = ("namespace", "cluster", "backlog_age_seconds", "backlog_quota_limit_bytes",
           "backlog_quota_limit_seconds", "backlog_size_bytes")
CLASSIC_URL, OTEL_URL = "http://broker-1:8080/metrics/", "http://broker-1:9464/metrics"


def _tables(data: bytes) -> SourceTables:
    return source_tables([parse_text(data)])


def _topics(tables_or_table, columns=COLUMNS) -> dict[str, dict]:
    table = getattr(tables_or_table, "topics", tables_or_table)
    return {r["topic"]: {c: r[c] for c in columns} for r in table.to_pylist()}


@pytest.fixture(scope="module")
def otel() -> SourceTables:
    return _tables(OTEL.read_bytes())


@pytest.fixture(scope="module")
def classic() -> SourceTables:
    return _tables(CLASSIC.read_bytes())


def test_otel_fixture_parses_without_malformed_lines(otel):
    assert otel.malformed == {"syntax": 0, "duplicate_label": 0, "unkeyed_topic": 0,
                              "not_a_count": 0}
    assert otel.usage["otel_only"].to_pylist() == [True]


def test_otel_backlog_series_fill_the_classic_topic_columns(otel):
    rows = _topics(otel)
    assert set(rows) == {AGED, KEPT, f"{PARTED}-partition-0", f"{PARTED}-partition-1",
                         "persistent://public/otel-age-58d8de9b/__change_events",
                         "persistent://public/otel-kept-dfcea9ec/__change_events"}
    # pulsar_broker_topic_storage_backlog_age_seconds{…,pulsar_topic=".../kept",…} 3.0
    # …_backlog_quota_limit_size_bytes{…} 1.048576E7, …_limit_time_seconds{…} 3600.0,
    # …_backlog_size_bytes{…} 9400.0 (every label: pulsar_cluster="standalone", …)
    assert rows[KEPT] == {"namespace": "public/otel-kept-dfcea9ec", "cluster": "standalone",
                          "backlog_age_seconds": 3.0, "backlog_quota_limit_bytes": 10485760.0,
                          "backlog_quota_limit_seconds": 3600.0, "backlog_size_bytes": 9400.0}
    # aged: evicted by time (eviction_count_total{pulsar_backlog_quota_type="time"} 1.0),
    # its age as of the last backlog-quota check (4.0); no size quota: -1.0
    assert rows[AGED] == {"namespace": "public/otel-age-58d8de9b", "cluster": "standalone",
                          "backlog_age_seconds": 4.0, "backlog_quota_limit_bytes": -1.0,
                          "backlog_quota_limit_seconds": 2.0, "backlog_size_bytes": 0.0}
    # Nothing else of the topic comes from these families.
    (kept,) = [r for r in otel.topics.to_pylist() if r["topic"] == KEPT]
    assert kept["msg_in_total"] is None and kept["storage_size_bytes"] is None
    assert otel.subscriptions.num_rows == 0 and otel.namespaces.num_rows == 0


def test_otel_partitions_are_keyed_as_pulsar_names_them(otel):
    # pulsar_topic="persistent://…/parted",pulsar_partition_index="0" (and "1"): the
    # partitioned topic's name plus the index, TopicName's `-partition-N`
    rows = _topics(otel)
    assert PARTED not in rows
    for index in (0, 1):
        assert rows[f"{PARTED}-partition-{index}"] == {
            "namespace": "public/otel-kept-dfcea9ec", "cluster": "standalone",
            "backlog_age_seconds": 3.0, "backlog_quota_limit_bytes": 10485760.0,
            "backlog_quota_limit_seconds": 3600.0, "backlog_size_bytes": 4700.0}


def test_otel_entities_equal_the_classic_ones_printed_at_the_same_moment(otel, classic):
    assert _topics(otel) == _topics(classic)
    # …and the classic body has them under its own names, e.g.
    # pulsar_storage_backlog_size{…,topic=".../parted-partition-1"} 4700
    assert _topics(classic)[f"{PARTED}-partition-1"]["backlog_size_bytes"] == 4700.0


def test_one_body_with_both_expositions_gives_each_topic_once(classic):
    both = _tables(CLASSIC.read_bytes() + OTEL.read_bytes())
    assert both.topics.equals(classic.topics)
    assert both.subscriptions.equals(classic.subscriptions)
    assert both.usage["otel_only"].to_pylist() == [False]


def test_long_otel_label_names_are_matched_byte_for_byte():
    """`pulsar_partition_index` is 22 bytes: a name agreeing in length and in its first and
    last 8 bytes but not in between is another label, not the partition."""
    line = ('pulsar_broker_topic_storage_backlog_size_bytes{pulsar_namespace="t/n",'
            'pulsar_topic="persistent://t/n/p",{label}="3"} 5.0\n')
    impostor = "pulsar_pXXXXXXon_index"
    assert (len(impostor), impostor[:8], impostor[-8:]) == (
        len("pulsar_partition_index"), "pulsar_p", "on_index")
    assert set(_topics(_tables(line.replace("{label}", impostor).encode()))) == {
        "persistent://t/n/p"}
    assert set(_topics(_tables(line.replace("{label}", "pulsar_partition_index").encode()))) == {
        "persistent://t/n/p-partition-3"}


def test_middle_bytes_of_slices():
    data = slices.padded(np.frombuffer(b"0123456789abcdefXYZ", np.uint8))
    start, end = np.array([0, 0, 0, 3]), np.array([19, 8, 12, 19])
    middle = slices.middle(data, start, end)
    assert middle[0] == slices.middle_of(b"0123456789abcdefXYZ") == int.from_bytes(b"89abcdef", "little")
    assert middle[1] == 0  # 8 bytes: nothing past them
    assert middle[2] == int.from_bytes(b"89ab", "little")  # zero-padded
    assert middle[3] == int.from_bytes(b"bcdefXYZ", "little")


# --- a broker's two expositions, both listed as broker sources --------------------------------
def test_both_expositions_listed_count_each_topic_once(classic, otel):
    both = merge([(CLASSIC_URL, classic), (OTEL_URL, otel)], {})
    alone = merge([(CLASSIC_URL, classic)], {})
    for name in ("topics", "subscriptions", "namespaces", "brokers", "bundles"):
        # values: `source` codes point into each merge's own list of sources
        assert getattr(both, name).to_pylist() == getattr(alone, name).to_pylist(), name
    assert set(both.topics["source"].to_pylist()) == {CLASSIC_URL}
    assert both.brokers["source"].to_pylist() == [CLASSIC_URL]
    assert set(both.malformed["source"].to_pylist()) == {CLASSIC_URL, OTEL_URL}
    # kept's subscription stays (the classic report's): pulsar_subscription_back_log 40
    (stalled,) = [r for r in both.subscriptions.to_pylist() if r["topic"] == KEPT]
    assert (stalled["subscription"], stalled["backlog_messages"]) == ("stalled", 40.0)


def test_the_classic_report_wins_whatever_the_source_order(classic, otel):
    """The OpenTelemetry endpoint's URL sorts first here ("http://a…" < "http://b…"),
    which would win a tie; the classic report wins all the same."""
    both = merge([("http://b:8080/metrics/", classic), ("http://a:9464/metrics", otel)], {})
    assert set(both.topics["source"].to_pylist()) == {"http://b:8080/metrics/"}
    assert both.brokers["source"].to_pylist() == ["http://b:8080/metrics/"]


def test_a_classic_report_wins_even_over_a_larger_otel_in_counter(classic, otel):
    """The rank is the body's kind first: should an OpenTelemetry report ever carry an
    in-counter (a larger one, read later), it still loses, or the topic would lose its
    subscriptions (an OpenTelemetry body has none)."""
    topics = otel.topics
    i = topics.schema.get_field_index("msg_in_total")
    counted = replace(otel, topics=topics.set_column(
        i, "msg_in_total", pa.array([1e9] * topics.num_rows, pa.float64())))
    both = merge([(CLASSIC_URL, classic), (OTEL_URL, counted)], {})
    assert set(both.topics["source"].to_pylist()) == {CLASSIC_URL}
    assert KEPT in both.subscriptions["topic"].to_pylist()


# A broker whose classic exposition has topic-level series off prints its namespaces only
# (NamespaceStatsAggregator); these lines are in that format, with the kept namespace's
# values of the classic fixture summed by hand: 4 topics, backlog 9400 + 4700 + 4700.
NAMESPACE_LEVEL = b"""# TYPE pulsar_topics_count gauge
pulsar_topics_count{cluster="standalone",namespace="public/otel-kept-dfcea9ec"} 4
# TYPE pulsar_storage_backlog_size gauge
pulsar_storage_backlog_size{cluster="standalone",namespace="public/otel-kept-dfcea9ec"} 18800
# TYPE pulsar_msg_backlog gauge
pulsar_msg_backlog{cluster="standalone",namespace="public/otel-kept-dfcea9ec",remote_cluster="local"} 80
"""


def test_otel_topics_beside_namespace_level_series_are_not_counted_twice(otel):
    both = merge([(CLASSIC_URL, _tables(NAMESPACE_LEVEL)), (OTEL_URL, otel)], {})
    (ns,) = [r for r in both.namespaces.to_pylist() if r["namespace"] == "public/otel-kept-dfcea9ec"]
    assert (ns["topics"], ns["backlog_size_bytes"], ns["msg_backlog"]) == (4, 18800.0, 80.0)
    assert both.brokers.select(["source", "topics"]).to_pylist() == [
        {"source": CLASSIC_URL, "topics": 4}]
    assert set(both.bundles["source"].to_pylist()) == {CLASSIC_URL}
    # …while the topics' ages and limits are there, from OpenTelemetry
    rows = _topics(both.topics, ("source", "backlog_age_seconds", "backlog_quota_limit_bytes"))
    assert rows[KEPT] == {"source": OTEL_URL, "backlog_age_seconds": 3.0,
                          "backlog_quota_limit_bytes": 10485760.0}


def test_otel_alone_gives_topics_and_no_broker(otel):
    alone = merge([(OTEL_URL, otel)], {})
    without_cluster = [c for c in COLUMNS if c != "cluster"]
    assert _topics(alone.topics, without_cluster) == _topics(otel, without_cluster)
    assert alone.brokers.num_rows == 0 and alone.namespaces.num_rows == 0
    assert alone.bundles.num_rows == 0
    assert set(alone.malformed["source"].to_pylist()) == {OTEL_URL}
