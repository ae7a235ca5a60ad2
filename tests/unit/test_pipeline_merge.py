"""Per-entity Aggregates from broker bodies, merged across brokers on the driver: the
Apache Pulsar fixture's namespace values and load-manager usage, pulsar-lite's derived
topic values, a topic reported by two brokers, namespace-level fallback, resource-group
binding precedence, topics placed in bundles by Pulsar's CRC-32 rule, and the totals of a
synthetic body. Pure Arrow, as on the driver: no Spark here.

Expected values are read off the bodies by hand, or come from the synthetic generator's
own formulas (tests/harness/synthetic.py), never from the code under test.
"""

# Body lines are real-format metric lines, longer than the line limit.
# ruff: noqa: E501

from dataclasses import replace

import pyarrow as pa
import pytest

from exporter.config.settings import LoadManager, ResourceGroup, SheddingStrategy
from exporter.engine.load.loadbalance import Resource, ShedOutcome
from exporter.engine.load.loadview import Judged, Unjudged, UsageGap, evaluate_load
from exporter.pipeline import slices
from exporter.pipeline.aggregates import (
    FULL_BUNDLE,
    SCHEMAS,
    SOURCE_SUBSCRIPTIONS,
    Aggregates,
    MalformedReason,
)
from exporter.pipeline.merge import bindings, bundle_ranges, in_range, merge
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import SourceTables, source_tables
from exporter.sources.results import BundleOwnership
from tests.harness.fixtures import FIXTURES
from tests.harness.synthetic import BodySpec, body_text, expected_totals

FIXTURE = FIXTURES / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt"

# pulsar-lite: short names, no topic-level out counters, backlog or out rates.
LITE = r"""# TYPE pulsar_in_messages_total counter
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 5
pulsar_in_bytes_total{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 130
pulsar_storage_size{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 130
pulsar_producers_count{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 1
pulsar_consumers_count{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 2
pulsar_rate_in{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 1.5
pulsar_throughput_in{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="t1"} 45
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 4
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub\"q",topic="t1"} 5
pulsar_subscription_unacked_messages{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 4
pulsar_out_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 1
pulsar_out_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub\"q",topic="t1"} 0
pulsar_out_bytes_total{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 25
pulsar_subscription_msg_rate_out{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 0.25
pulsar_subscription_msg_rate_out{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub\"q",topic="t1"} 0.5
pulsar_subscription_last_acked_timestamp{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 1795385538.5
pulsar_subscription_last_acked_timestamp{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub\"q",topic="t1"} 0
pulsar_subscription_consumers_count{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="sub-a",topic="t1"} 1
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="0",topic="orders"} 3
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="1",topic="orders"} 4
pulsar_broker_topics_count 3
"""

# Two Apache Pulsar brokers of one cluster. `moved` is reported by both (it moved during the
# cycle): A's report has the larger in-counter and wins, with A's subscription only.
# A has topic-level metrics on; B has them off for acme/other (namespace-level only).
BROKER_A = r"""pulsar_in_messages_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved"} 100
pulsar_in_bytes_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved"} 1000
pulsar_msg_backlog{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved"} 9
pulsar_subscription_back_log{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved",subscription="s"} 9
pulsar_out_messages_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved",subscription="s"} 91
pulsar_out_bytes_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved",subscription="s"} 910
pulsar_subscription_last_acked_timestamp{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved",subscription="s"} 1675461651025
pulsar_producers_count{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved"} 1
pulsar_in_messages_total{cluster="prod",namespace="acme/other",topic="persistent://acme/other/t"} 10
pulsar_in_bytes_total{cluster="prod",namespace="acme/other",topic="persistent://acme/other/t"} 100
pulsar_in_messages_total{cluster="prod",namespace="beta/x",topic="persistent://beta/x/t"} 1
pulsar_topics_count{cluster="prod",namespace="acme/critical"} 1
pulsar_topics_count{cluster="prod"} 0
"""
BROKER_B = r"""pulsar_in_messages_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved"} 40
pulsar_in_bytes_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved"} 400
pulsar_subscription_back_log{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved",subscription="s"} 2
pulsar_out_messages_total{cluster="prod",namespace="acme/critical",topic="persistent://acme/critical/moved",subscription="s"} 38
pulsar_topics_count{cluster="prod",namespace="acme/other"} 2
pulsar_in_messages_total{cluster="prod",namespace="acme/other"} 1000
pulsar_in_bytes_total{cluster="prod",namespace="acme/other"} 10000
pulsar_out_messages_total{cluster="prod",namespace="acme/other"} 500
pulsar_out_bytes_total{cluster="prod",namespace="acme/other"} 5000
pulsar_producers_count{cluster="prod",namespace="acme/other"} 3
pulsar_consumers_count{cluster="prod",namespace="acme/other"} 4
pulsar_storage_size{cluster="prod"} 0
broken line
"""

GROUPS = {
    "tenant-wide": ResourceGroup("tenant-wide", tenants=("acme",)),
    "special": ResourceGroup("special", namespaces=("acme/critical",)),
    "idle": ResourceGroup("idle", namespaces=("nobody/here",)),
}


def _tables(text: str | bytes) -> SourceTables:
    """One body as its Spark task hands it over."""
    return source_tables([parse_text(text.encode() if isinstance(text, str) else text)])


def _by(table, *keys):
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r
            for r in table.to_pylist()}


@pytest.fixture(scope="module")
def single():
    """The Apache Pulsar fixture and a pulsar-lite body, one cycle."""
    return merge([("http://apache/metrics", _tables(FIXTURE.read_bytes())),
                  ("http://lite/metrics", _tables(LITE))], {})


@pytest.fixture(scope="module")
def fleet():
    """Two brokers of one cluster, resource groups configured."""
    return merge([("http://broker-a/metrics", _tables(BROKER_A)),
                  ("http://broker-b/metrics", _tables(BROKER_B))], GROUPS)


def test_tables_have_the_documented_schemas(single, fleet):
    for agg in (single, fleet):
        for name, schema in SCHEMAS.items():
            assert getattr(agg, name).schema.equals(schema), name


def test_apache_pulsar_fixture_namespace_values(single):
    ns = _by(single.namespaces, "namespace")["prop/ns-abc1"]
    # `pulsar_storage_backlog_size{cluster="test",namespace="prop/ns-abc1"} 7800` etc.
    assert ns["backlog_size_bytes"] == 7800
    assert ns["storage_size_bytes"] == 15600
    assert ns["msg_in_total"] == 100
    assert ns["bytes_in_total"] == 7800
    assert ns["msg_out_total"] == 100
    assert ns["bytes_out_total"] == 7800
    assert ns["msg_backlog"] == 100
    assert ns["topics"] == 1
    assert (ns["producers"], ns["consumers"], ns["subscriptions"]) == (1, 1, 1)
    assert (ns["rate_in"], ns["rate_out"], ns["throughput_in"], ns["throughput_out"]) == (
        0, 0, 0, 0)
    # topic-level metrics were off on that broker: no topic rows from it
    assert not [r for r in single.topics.to_pylist() if r["source"] == "http://apache/metrics"]


def test_apache_pulsar_fixture_broker_row_and_no_malformed_lines(single):
    broker = _by(single.brokers, "source")["http://apache/metrics"]
    assert broker["cluster"] == "test"
    assert broker["topics"] == 1
    assert broker["sessions"] == 2  # 1 producer + 1 consumer
    malformed = _by(single.malformed, "source", "reason")
    for reason in MalformedReason:
        assert malformed["http://apache/metrics", reason.value]["lines"] == 0


def test_pulsar_lite_topics_have_full_keys_and_derived_values(single):
    topics = _by(single.topics, "topic")
    assert set(topics) == {
        "persistent://public/default/t1",
        "persistent://public/default/orders-partition-0",
        "persistent://public/default/orders-partition-1",
    }
    t1 = topics["persistent://public/default/t1"]
    assert t1["namespace"] == "public/default"
    assert t1["msg_in_total"] == 5 and t1["bytes_in_total"] == 130
    assert t1["backlog_size_bytes"] is None  # pulsar-lite does not report it
    assert topics["persistent://public/default/orders-partition-1"]["msg_in_total"] == 4
    # The columns only the merge's sums read, as the broker's task hands them over:
    t1 = _by(_tables(LITE).topics, "topic")["persistent://public/default/t1"]
    assert t1["storage_size_bytes"] == 130
    # No topic-level series: derived from the subscriptions as Apache Pulsar does.
    assert t1["msg_backlog"] == 4 + 5
    assert t1["msg_out_total"] == 1 + 0
    assert t1["bytes_out_total"] == 25
    assert t1["rate_out"] == 0.25 + 0.5
    assert t1["subscriptions"] == 2
    assert t1["consumers"] == 2  # the topic-level series wins over the subscriptions' sum


def test_pulsar_lite_subscriptions(single):
    subs = _by(single.subscriptions, "topic", "subscription")
    a = subs["persistent://public/default/t1", "sub-a"]
    assert a["backlog_messages"] == 4 and a["consumers"] == 1
    assert subs["persistent://public/default/t1", 'sub"q']["consumers"] is None  # not printed
    # The task hands over only the columns the driver reads: the subscriptions' out
    # counters and rates went into their topic's row (above), and stay in the task.
    task = _tables(LITE).subscriptions
    assert task.schema == SOURCE_SUBSCRIPTIONS
    assert task.column_names == ["topic", "subscription", "backlog_messages", "consumers",
                                 "backlog_age_seconds"]


def test_pulsar_lite_namespace_sums_its_topics(single):
    ns = _by(single.namespaces, "namespace")["public/default"]
    assert ns["topics"] == 3
    assert ns["msg_in_total"] == 5 + 3 + 4
    assert ns["msg_backlog"] == 9
    assert ns["backlog_size_bytes"] is None


def test_a_topic_on_two_brokers_is_counted_once(fleet):
    moved = [r for r in fleet.topics.to_pylist()
             if r["topic"] == "persistent://acme/critical/moved"]
    assert len(moved) == 1
    assert moved[0]["source"] == "http://broker-a/metrics"  # 100 > 40 messages in
    assert moved[0]["msg_in_total"] == 100
    subs = [r for r in fleet.subscriptions.to_pylist()
            if r["topic"] == "persistent://acme/critical/moved"]
    assert [(r["source"], r["backlog_messages"]) for r in subs] == [
        ("http://broker-a/metrics", 9)]
    ns = _by(fleet.namespaces, "namespace")["acme/critical"]
    assert ns["msg_in_total"] == 100
    assert ns["topics"] == 1


def _buffer(column: pa.ChunkedArray, chunk: int) -> int:
    return column.chunk(chunk).buffers()[1].address


def test_merged_rows_share_the_brokers_buffers_unless_a_broker_loses_one():
    """What the driver holds at a million topics: the merge keeps each broker's
    topics and subscriptions where they are, broker by broker, and copies only the chunk
    of a broker whose report of a topic lost to another's."""
    a, b, lite = _tables(BROKER_A), _tables(BROKER_B), _tables(LITE)
    alone = merge([("http://lite/metrics", lite), ("http://broker-a/metrics", a)], {})
    for name in ("topics", "subscriptions"):
        merged, given = getattr(alone, name), (getattr(lite, name), getattr(a, name))
        assert merged.num_rows == sum(t.num_rows for t in given), name
        column = {"topics": "msg_in_total", "subscriptions": "backlog_messages"}[name]
        for i, table in enumerate(given):
            assert _buffer(merged[column], i) == _buffer(table[column], 0)
        assert merged["topic"].to_pylist() == [t for g in given for t in g["topic"].to_pylist()]
    # A is stale (fresh sources: those with malformed counts): its `moved` loses to B's
    tables = [("http://broker-a/metrics", a), ("http://broker-b/metrics", b),
              ("http://lite/metrics", lite)]
    moved = merge(tables, {}, malformed={u: t.malformed for u, t in tables[1:]}).topics
    assert moved.num_rows == a.topics.num_rows - 1 + b.topics.num_rows + lite.topics.num_rows
    copied, *shared = (_buffer(moved["msg_in_total"], i) for i in range(3))
    assert copied != _buffer(a.topics["msg_in_total"], 0)
    assert shared == [_buffer(t.topics["msg_in_total"], 0) for t in (b, lite)]


def test_a_subscriptions_topic_is_a_code_into_its_brokers_topic_names():
    """The subscriptions name their topics by codes into their broker's chunk of topic
    names, the same buffers, not by the names again; a chunk naming a topic its broker
    does not list is coded over its own names. Either way each reads as its name."""
    a, lite = _tables(BROKER_A), _tables(LITE)
    agg = merge([("http://lite/metrics", lite), ("http://broker-a/metrics", a)], {})
    topic = agg.subscriptions["topic"]
    for i, table in enumerate((lite, a)):
        assert topic.chunk(i).dictionary.buffers()[2].address \
            == agg.topics["topic"].chunk(i).buffers()[2].address
        assert topic.chunk(i).to_pylist() == table.subscriptions["topic"].to_pylist()
    # A's subscription of a topic A does not list (no task makes one: its topics table is
    # derived from its subscriptions), with another of a topic it lists
    stray = pa.concat_tables([a.subscriptions, a.subscriptions.set_column(
        0, "topic", pa.array(["persistent://acme/critical/elsewhere"] * a.subscriptions.num_rows))])
    agg = merge([("http://broker-a/metrics", replace(a, subscriptions=stray))], {})
    assert agg.subscriptions["topic"].to_pylist() == stray["topic"].to_pylist()
    assert agg.subscriptions.schema.equals(SCHEMAS["subscriptions"])


def test_a_topic_without_a_namespace_is_in_no_namespace_or_bundle_sum():
    """A topic name holding no namespace, without a `namespace` label: listed, but summed
    nowhere (the one case the merge filters its topics for; a broker labels every topic)."""
    body = (b'pulsar_in_messages_total{topic="persistent://t"} 4\n'
            b'pulsar_in_messages_total{namespace="public/x",topic="persistent://public/x/t"} 6\n')
    agg = merge([("http://lite/metrics", source_tables([parse_text(body)]))], {})
    assert sorted(agg.topics["topic"].to_pylist()) == ["persistent://public/x/t",
                                                       "persistent://t"]
    assert agg.namespaces.select(["namespace", "topics", "msg_in_total"]).to_pylist() == [
        {"namespace": "public/x", "topics": 1, "msg_in_total": 6.0}]
    assert agg.bundles.select(["namespace", "bundle", "topics"]).to_pylist() == [
        {"namespace": "public/x", "bundle": FULL_BUNDLE, "topics": 1}]


def test_topics_sharing_a_hash_by_chance_are_both_kept():
    """Reports named twice are found by their CRC-32; a collision is no duplicate."""
    a, lite = _tables(BROKER_A), _tables(LITE)
    i = lite.topics.schema.get_field_index("topic_hash")
    colliding = lite.topics.set_column(
        i, "topic_hash", pa.array([a.topics["topic_hash"][0].as_py()] * lite.topics.num_rows))
    agg = merge([("http://broker-a/metrics", a),
                 ("http://lite/metrics", replace(lite, topics=colliding))], {})
    names = agg.topics["topic"].to_pylist()
    assert sorted(names) == sorted(a.topics["topic"].to_pylist()
                                   + lite.topics["topic"].to_pylist())
    assert agg.subscriptions.num_rows == a.subscriptions.num_rows + lite.subscriptions.num_rows


def test_a_fresh_report_of_a_topic_beats_a_stale_one_with_larger_counters():
    """Broker A died (its tables are stale: no malformed counts this cycle); B loaded the
    topic since, its counters restarted below A's. B's report is the one that counts."""
    a, b = _tables(BROKER_A), _tables(BROKER_B)
    tables = [("http://broker-a/metrics", a), ("http://broker-b/metrics", b)]
    agg = merge(tables, {}, malformed={"http://broker-b/metrics": b.malformed})
    (moved,) = [r for r in agg.topics.to_pylist()
                if r["topic"] == "persistent://acme/critical/moved"]
    assert (moved["source"], moved["msg_in_total"]) == ("http://broker-b/metrics", 40)
    subs = [(r["source"], r["backlog_messages"]) for r in agg.subscriptions.to_pylist()
            if r["topic"] == "persistent://acme/critical/moved"]
    assert subs == [("http://broker-b/metrics", 2)]
    # both stale: the largest counter again (A's 100)
    both = merge(tables, {}, malformed={})
    (moved,) = [r for r in both.topics.to_pylist()
                if r["topic"] == "persistent://acme/critical/moved"]
    assert moved["source"] == "http://broker-a/metrics"


def test_namespace_level_series_fill_in_for_a_broker_without_topic_metrics(fleet):
    ns = _by(fleet.namespaces, "namespace")["acme/other"]
    # A's topic (10 in) + B's namespace-level series (1000 in, 2 topics)
    assert ns["msg_in_total"] == 10 + 1000
    assert ns["bytes_in_total"] == 100 + 10000
    assert ns["topics"] == 1 + 2
    assert ns["msg_out_total"] == 500  # A's topic reported none


def test_brokers_table(fleet):
    brokers = _by(fleet.brokers, "source")
    assert set(brokers) == {"http://broker-a/metrics", "http://broker-b/metrics"}
    a, b = brokers["http://broker-a/metrics"], brokers["http://broker-b/metrics"]
    assert a["topics"] == 3  # moved, acme/other/t, beta/x/t
    assert b["topics"] == 2  # lost `moved`; acme/other's 2 from pulsar_topics_count
    assert b["sessions"] == 3 + 4
    assert a["cluster"] == b["cluster"] == "prod"


def test_malformed_lines_counted_per_source(fleet):
    malformed = _by(fleet.malformed, "source", "reason")
    assert malformed["http://broker-b/metrics", MalformedReason.SYNTAX.value]["lines"] == 1
    assert malformed["http://broker-a/metrics", MalformedReason.SYNTAX.value]["lines"] == 0


def test_stale_tables_count_no_malformed_lines_again():
    b = _tables(BROKER_B)
    agg = merge([("http://broker-b/metrics", b)], {}, malformed={})
    assert agg.topics.num_rows == 1  # the stale tables are used...
    assert sum(agg.malformed["lines"].to_pylist()) == 0  # ...their skipped lines not recounted


def test_resource_group_usage_namespace_binding_beats_tenant(fleet):
    groups = _by(fleet.resource_groups, "resource_group", "monitoring_class")
    assert len(groups) == 3 * len(GROUPS)
    # acme/critical is bound by name to `special`, not to its tenant's group
    special = groups["special", "publish"]
    assert (special["messages_total"], special["bytes_total"]) == (100, 1000)
    assert (special["namespaces"], special["topics"]) == (1, 1)
    assert groups["special", "dispatch"]["messages_total"] == 91  # A's subscription only
    assert groups["special", "dispatch"]["bytes_total"] == 910
    # the rest of tenant acme: acme/other (beta/x is bound to nothing)
    wide = groups["tenant-wide", "publish"]
    assert (wide["messages_total"], wide["bytes_total"]) == (1010, 10100)
    assert groups["tenant-wide", "dispatch"]["messages_total"] == 500
    idle = groups["idle", "publish"]
    assert (idle["messages_total"], idle["namespaces"]) == (0, 0)


# Apache Pulsar 4.0.8's replication series (TopicStats and NamespaceStatsAggregator print
# `pulsar_replication_*` per remote cluster; names and labels read off the 4.0.8 broker jar)
# on a geo-replicated topic of cluster c1 with two remote clusters, one partitioned topic
# whose partitions are bound as their parent, and a namespace-level broker.
GEO = r"""pulsar_in_messages_total{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay"} 100
pulsar_in_bytes_total{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay"} 1000
pulsar_replication_rate_out{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay",remote_cluster="c2"} 10.5
pulsar_replication_rate_out{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay",remote_cluster="c3"} 2.5
pulsar_replication_throughput_out{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay",remote_cluster="c2"} 1050
pulsar_replication_throughput_out{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay",remote_cluster="c3"} 250
pulsar_replication_backlog{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay",remote_cluster="c2"} 7
pulsar_msg_backlog{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/pay",remote_cluster="local"} 3
pulsar_in_messages_total{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/orders-partition-0"} 20
pulsar_in_messages_total{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/orders-partition-1"} 30
pulsar_replication_rate_out{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/orders-partition-1",remote_cluster="c2"} 4
pulsar_in_messages_total{cluster="c1",namespace="geo/ns",topic="persistent://geo/ns/rest"} 5
"""


def test_replication_rates_are_summed_over_remote_clusters():
    tables = _tables(GEO)
    agg = merge([("http://c1/metrics", tables)], {})
    topics = _by(tables.topics, "topic")
    pay = topics["persistent://geo/ns/pay"]
    assert (pay["replication_rate_out"], pay["replication_throughput_out"]) == (13.0, 1300.0)
    assert pay["msg_backlog"] == 3  # the local backlog, not a remote cluster's
    assert topics["persistent://geo/ns/rest"]["replication_rate_out"] is None
    ns = _by(agg.namespaces, "namespace")["geo/ns"]
    assert (ns["replication_rate_out"], ns["replication_throughput_out"]) == (17.0, 1300.0)


def test_a_topic_binding_moves_the_topic_out_of_its_namespaces_group():
    groups = {"wide": ResourceGroup("wide", namespaces=("geo/ns",)),
              "pay": ResourceGroup("pay", topics=("persistent://geo/ns/pay",
                                                  "persistent://geo/ns/orders"))}
    agg = merge([("http://c1/metrics", _tables(GEO))], groups)
    rows = _by(agg.resource_groups, "resource_group", "monitoring_class")
    assert rows["pay", "publish"]["messages_total"] == 100 + 20 + 30  # partitions: their parent's
    assert rows["pay", "publish"]["bytes_total"] == 1000
    assert rows["wide", "publish"]["messages_total"] == 5  # only `rest` stays
    assert (rows["pay", "publish"]["topics"], rows["wide", "publish"]["topics"]) == (3, 1)
    assert rows["wide", "publish"]["namespaces"] == 1 and rows["pay", "publish"]["namespaces"] == 0
    replication = rows["pay", "replication_dispatch"]
    assert (replication["messages_per_second"], replication["bytes_per_second"]) == (17.0, 1300.0)
    assert replication["messages_total"] is None
    assert rows["wide", "replication_dispatch"]["messages_per_second"] == 0.0
    # a topic bound to its namespace's own group counts once
    same = merge([("http://c1/metrics", _tables(GEO))],
                 {"wide": ResourceGroup("wide", namespaces=("geo/ns",),
                                        topics=("persistent://geo/ns/pay",))})
    assert _by(same.resource_groups, "resource_group", "monitoring_class")[
        "wide", "publish"]["messages_total"] == 155


def test_bindings_precedence_is_deterministic():
    by_ns, by_tenant, by_topic = bindings([
        ResourceGroup("b", tenants=("t",), namespaces=("t/x",), topics=("persistent://t/x/y",)),
        ResourceGroup("a", tenants=("t",), topics=("persistent://t/x/y",)),
    ])
    assert by_ns == {"t/x": "b"}
    assert by_tenant == {"t": "a"}  # named twice: the first group by name
    assert by_topic == {"persistent://t/x/y": "a"}


def test_no_broker_data_at_all():
    agg = merge([], {"g": ResourceGroup("g", tenants=("t",))})
    assert agg.topics.num_rows == 0 and agg.brokers.num_rows == 0
    counted = [{"resource_group": "g", "monitoring_class": c, "messages_total": 0.0,
                "bytes_total": 0.0, "messages_per_second": None, "bytes_per_second": None,
                "namespaces": 0, "topics": 0} for c in ("dispatch", "publish")]
    rated = {**counted[0], "monitoring_class": "replication_dispatch", "messages_total": None,
             "bytes_total": None, "messages_per_second": 0.0, "bytes_per_second": 0.0}
    assert agg.resource_groups.to_pylist() == [*counted, rated]
    assert isinstance(Aggregates.empty(), Aggregates)


def test_synthetic_body_totals():
    spec = BodySpec(topics=60, namespaces=7)
    agg = merge([("http://synthetic/metrics", _tables(body_text(spec)))], {})
    want = expected_totals(spec)
    namespaces = agg.namespaces.to_pylist()
    assert len(namespaces) == 7
    assert sum(r["topics"] for r in namespaces) == want["topics"]
    assert sum(r["msg_in_total"] for r in namespaces) == want["msg_in_total"]
    assert sum(r["msg_backlog"] for r in namespaces) == want["msg_backlog"]
    assert sum(r["msg_out_total"] for r in namespaces) == want["msg_out_total"]
    assert agg.topics.num_rows == 60 and agg.subscriptions.num_rows == 120
    assert sum(r["lines"] for r in agg.malformed.to_pylist()) == 0


# --- load: broker usage gauges and bundles --------------------------------------------------

def crc32_reference(data: bytes) -> int:
    """Bitwise CRC-32 (IEEE 802.3: reflected polynomial 0xEDB88320, initial value and final
    xor 0xFFFFFFFF), the CRC java.util.zip.CRC32 and Guava's Hashing.crc32() compute, which
    Apache Pulsar hashes topic names with. Written out here so the expected bundles come
    from the definition, not from the code under test."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32_reference_matches_the_catalogue_check_value():
    # CRC-32/ISO-HDLC in the CRC catalogue: check = 0xCBF43926 for "123456789"
    assert crc32_reference(b"123456789") == 0xCBF43926


def test_apache_pulsar_fixture_broker_usage(single):
    broker = _by(single.brokers, "source")["http://apache/metrics"]
    # pulsar_lb_*_usage{cluster="test", broker="localhost", metric="loadBalancing"} lines
    assert broker["cpu_percent"] == 4.397256e-5
    assert broker["memory_percent"] == 85.546875
    assert broker["direct_memory_percent"] == 1.953125
    assert broker["bandwidth_in_percent"] == 0.0
    assert broker["bandwidth_out_percent"] == 0.0


def test_a_body_without_lb_gauges_has_null_usage(single, fleet):
    rows = [_by(single.brokers, "source")["http://lite/metrics"],
            *fleet.brokers.to_pylist()]
    for row in rows:
        for column in ("cpu_percent", "memory_percent", "direct_memory_percent",
                       "bandwidth_in_percent", "bandwidth_out_percent"):
            assert row[column] is None, (row["source"], column)


def test_fixture_verdicts_end_to_end(single):
    result = evaluate_load(single, None, LoadManager())
    apache = result.broker("apache:80")
    assert isinstance(apache, Judged)
    # Pulsar 4.0 weighs cpu, direct memory (weight 0 by default) and bandwidth, not memory:
    # memory 85.546875 % is the highest usage observed, cpu 4.397256e-5 % the weighted one.
    assert apache.load.max_usage() == (Resource.MEMORY, 85.546875)
    assert apache.verdict.resource is Resource.CPU
    # ThresholdShedder (the default) with one judged broker: its usage is the average.
    assert not apache.verdict.overloaded
    # OverloadShedder, direct memory weighed 50: 1.953125 × 50 = 97.65625 % ≥ 85 %,
    # share 0.9765625 − 0.85 + 0.05; the lite broker makes two alive brokers.
    cfg = LoadManager(load_shedding_strategy=SheddingStrategy.OVERLOAD,
                      direct_memory_resource_weight=50.0)
    apache = evaluate_load(single, None, cfg).broker("apache:80")
    assert apache.verdict.resource is Resource.DIRECT_MEMORY
    assert apache.verdict.shed_fraction == pytest.approx(0.9765625 - 0.85 + 0.05)
    # its only bundle is prop/ns-abc1 as a whole: Pulsar never sheds a sole bundle
    assert [b.name for b in apache.load.bundles] == ["prop/ns-abc1/0x00000000_0xffffffff"]
    assert apache.verdict.outcome is ShedOutcome.SOLE_BUNDLE
    lite = result.broker("lite:80")
    assert isinstance(lite, Unjudged) and lite.gap is UsageGap.NOT_REPORTED


def test_without_boundaries_a_namespace_is_one_bundle(single, fleet):
    shares = {(r["source"], r["namespace"], r["bundle"]): r for r in fleet.bundles.to_pylist()}
    full = FULL_BUNDLE
    assert set(shares) == {
        ("http://broker-a/metrics", "acme/critical", full),
        ("http://broker-a/metrics", "acme/other", full),
        ("http://broker-a/metrics", "beta/x", full),
        ("http://broker-b/metrics", "acme/other", full),  # namespace-level series only
    }
    b_other = shares["http://broker-b/metrics", "acme/other", full]
    assert b_other["topics"] == 2  # its pulsar_topics_count
    assert (b_other["producers"], b_other["consumers"]) == (3, 4)
    lite = _by(single.bundles, "source")["http://lite/metrics"]
    assert (lite["namespace"], lite["bundle"], lite["topics"]) == ("public/default", full, 3)
    assert lite["rate_in"] == 1.5 and lite["rate_out"] == 0.75


# Eight topics of shop/orders (two of them partitions) on one broker, one of shop/misc.
_ORDERS = [f"persistent://shop/orders/t{i}" for i in range(6)] + [
    "persistent://shop/orders/p-partition-0", "persistent://shop/orders/p-partition-1"]
_HASHES = {t: crc32_reference(t.encode("utf-8")) for t in _ORDERS}
# The third-smallest hash is a boundary: a topic hashing exactly onto a boundary belongs to
# the bundle starting there (ranges are [lower, upper)).
_CUT = sorted(_HASHES.values())[2]
_LOW, _HIGH = f"0x00000000_0x{_CUT:08x}", f"0x{_CUT:08x}_0xffffffff"


def _bundled_body() -> str:
    lines = []
    for i, topic in enumerate(_ORDERS):
        labels = f'cluster="prod",namespace="shop/orders",topic="{topic}"'
        lines += [f"pulsar_in_messages_total{{{labels}}} {i}",
                  f"pulsar_producers_count{{{labels}}} 1",
                  f"pulsar_rate_in{{{labels}}} {10 * (i + 1)}"]
    lines.append('pulsar_in_messages_total{cluster="prod",namespace="shop/misc",'
                 'topic="persistent://shop/misc/x"} 1')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def bundled():
    owners = [BundleOwnership("shop/orders", _LOW, "shop:8080"),
              BundleOwnership("shop/orders", _HIGH, "shop:8080"),
              BundleOwnership("shop/misc", "0x00000000_0x80000000", "shop:8080"),
              BundleOwnership("shop/misc", "0x70000000_0xffffffff", "shop:8080")]  # overlap
    return merge([("http://shop:8080/metrics", _tables(_bundled_body()))], {}, bundles=owners)


def test_topics_land_in_the_bundle_holding_their_crc32(bundled):
    shares = {(r["namespace"], r["bundle"]): r for r in bundled.bundles.to_pylist()}
    low = [t for t in _ORDERS if _HASHES[t] < _CUT]
    assert len(low) == 2  # the hashes are distinct, so exactly two are below the third
    assert shares["shop/orders", _LOW]["topics"] == 2
    assert shares["shop/orders", _HIGH]["topics"] == len(_ORDERS) - 2
    rate = {t: 10 * (i + 1) for i, t in enumerate(_ORDERS)}
    assert shares["shop/orders", _LOW]["rate_in"] == sum(rate[t] for t in low)
    assert shares["shop/orders", _HIGH]["producers"] == len(_ORDERS) - 2
    # shop/misc's listed ranges overlap: ignored, the namespace is one bundle
    assert shares["shop/misc", FULL_BUNDLE]["topics"] == 1
    assert len(shares) == 3
    broker = _by(bundled.brokers, "source")["http://shop:8080/metrics"]
    assert broker["topics"] == len(_ORDERS) + 1
    assert broker["rate_in"] == sum(rate.values())


def test_topic_hash_and_range_ends():
    hashes = slices.crc32(pa.array(["123456789", "persistent://shop/orders/t1"]))
    assert hashes.to_pylist() == [0xCBF43926, crc32_reference(b"persistent://shop/orders/t1")]
    # the range ending at 0xffffffff includes it; any other upper end is excluded
    assert [in_range(k, lo, hi) for k, lo, hi in [
        (0xFFFFFFFF, 0x80000000, 0xFFFFFFFF), (0x80000000, 0x00000000, 0x80000000),
        (0x80000000, 0x80000000, 0xFFFFFFFF), (0xFFFFFFFE, 0x00000000, 0xFFFFFFFE),
    ]] == [True, False, True, False]


def test_bundle_ranges_keep_only_consistent_listings():
    listed = bundle_ranges([
        BundleOwnership("a/x", "0x80000000_0xffffffff", None),
        BundleOwnership("a/x", "0x00000000_0x80000000", "b:8080"),
        BundleOwnership("a/overlap", "0x00000000_0x80000000", None),
        BundleOwnership("a/overlap", "0x7fffffff_0xffffffff", None),
        BundleOwnership("a/garbage", "0x00000000_0x80000000", None),
        BundleOwnership("a/garbage", "lower_upper", None),
    ])
    assert listed == {"a/x": [(0, 0x80000000, "0x00000000_0x80000000"),
                              (0x80000000, 0xFFFFFFFF, "0x80000000_0xffffffff")]}
