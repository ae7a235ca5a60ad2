"""Per-entity Aggregates from broker bodies: the Apache Pulsar fixture's namespace values,
pulsar-lite's derived topic values, a topic reported by two brokers, namespace-level
fallback, resource-group binding precedence, and the totals of a synthetic body.

Expected values are read off the bodies by hand, or come from the synthetic generator's
own formulas (tests/bench/synthetic.py), never from the code under test.
"""

# Body lines are real-format metric lines, longer than the line limit.
# ruff: noqa: E501

from pathlib import Path

import pytest

from exporter.config import ResourceGroup, Spark
from exporter.pipeline.aggregate import aggregate, bindings
from exporter.pipeline.model import SCHEMAS, Aggregates, MalformedReason
from exporter.pipeline.session import get_session
from exporter.sources.model import BrokerBody
from tests.bench.synthetic import BodySpec, expected_totals, write_body

FIXTURE = Path("/work/shared/fixtures/apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt")
if not FIXTURE.exists():
    FIXTURE = (Path(__file__).resolve().parents[3] / "shared" / "fixtures"
               / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt")

# pulsar-lite: short names, no topic-level out counters, backlog or out rates; its
# subscription timestamps are in seconds (0 = never).
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


@pytest.fixture(scope="module")
def spark():
    return get_session(Spark(master="local[2]"))


def _body(tmp: Path, source: str, text: str) -> BrokerBody:
    path = tmp / (source.split("//")[1].split("/")[0] + ".txt")
    path.write_text(text, encoding="utf-8")
    return BrokerBody(source=source, path=str(path), size_bytes=len(text), fetched_at=0.0)


def _by(table, *keys):
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r
            for r in table.to_pylist()}


@pytest.fixture(scope="module")
def single(spark, tmp_path_factory):
    """The Apache Pulsar fixture and a pulsar-lite body, one cycle."""
    tmp = tmp_path_factory.mktemp("single")
    bodies = [
        BrokerBody("http://apache/metrics", str(FIXTURE), FIXTURE.stat().st_size, 0.0),
        _body(tmp, "http://lite/metrics", LITE),
    ]
    return aggregate(spark, bodies, {})


@pytest.fixture(scope="module")
def fleet(spark, tmp_path_factory):
    """Two brokers of one cluster, resource groups configured, one spool file gone."""
    tmp = tmp_path_factory.mktemp("fleet")
    bodies = [
        _body(tmp, "http://broker-a/metrics", BROKER_A),
        _body(tmp, "http://broker-b/metrics", BROKER_B),
        BrokerBody("http://broker-c/metrics", str(tmp / "gone.txt"), 0, 0.0),
    ]
    return aggregate(spark, bodies, GROUPS)


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
    assert t1["storage_size_bytes"] == 130
    assert t1["backlog_size_bytes"] is None  # pulsar-lite does not report it
    # No topic-level series: derived from the subscriptions as Apache Pulsar does.
    assert t1["msg_backlog"] == 4 + 5
    assert t1["msg_out_total"] == 1 + 0
    assert t1["bytes_out_total"] == 25
    assert t1["rate_out"] == 0.25 + 0.5
    assert t1["subscriptions"] == 2
    assert t1["consumers"] == 2  # the topic-level series wins over the subscriptions' sum
    assert topics["persistent://public/default/orders-partition-1"]["msg_in_total"] == 4


def test_pulsar_lite_subscriptions(single):
    subs = _by(single.subscriptions, "topic", "subscription")
    a = subs["persistent://public/default/t1", "sub-a"]
    assert a["backlog_messages"] == 4 and a["unacked_messages"] == 4
    assert a["msg_out_total"] == 1 and a["bytes_out_total"] == 25
    assert a["consumers"] == 1
    assert a["last_acked_seconds"] == 1795385538.5  # pulsar-lite reports seconds
    q = subs["persistent://public/default/t1", 'sub"q']
    assert q["last_acked_seconds"] is None  # 0 means never
    assert q["unacked_messages"] is None  # not reported


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
    # Apache Pulsar reports milliseconds: 1675461651025 ms
    assert subs[0]["last_acked_seconds"] == 1675461651.025
    ns = _by(fleet.namespaces, "namespace")["acme/critical"]
    assert ns["msg_in_total"] == 100
    assert ns["topics"] == 1


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


def test_malformed_lines_counted_and_a_missing_body_named(fleet):
    malformed = _by(fleet.malformed, "source", "reason")
    assert malformed["http://broker-b/metrics", MalformedReason.SYNTAX.value]["lines"] == 1
    assert malformed["http://broker-a/metrics", MalformedReason.SYNTAX.value]["lines"] == 0
    assert fleet.unreadable == ("http://broker-c/metrics",)


def test_resource_group_usage_namespace_binding_beats_tenant(fleet):
    groups = _by(fleet.resource_groups, "resource_group", "monitoring_class")
    assert len(groups) == 2 * len(GROUPS)
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


def test_bindings_precedence_is_deterministic():
    by_ns, by_tenant = bindings([
        ResourceGroup("b", tenants=("t",), namespaces=("t/x",)),
        ResourceGroup("a", tenants=("t",)),
    ])
    assert by_ns == {"t/x": "b"}
    assert by_tenant == {"t": "a"}  # named twice: the first group by name


def test_no_readable_body(spark, tmp_path):
    agg = aggregate(spark, [BrokerBody("http://x/metrics", str(tmp_path / "none"), 0, 0.0)],
                    {"g": ResourceGroup("g", tenants=("t",))})
    assert agg.unreadable == ("http://x/metrics",)
    assert agg.topics.num_rows == 0 and agg.brokers.num_rows == 0
    assert agg.resource_groups.to_pylist() == [
        {"resource_group": "g", "monitoring_class": c, "messages_total": 0.0,
         "bytes_total": 0.0, "namespaces": 0, "topics": 0} for c in ("dispatch", "publish")]
    assert isinstance(Aggregates.empty(), Aggregates)


def test_synthetic_body_totals(spark, tmp_path):
    spec = BodySpec(topics=60, namespaces=7)
    write_body(tmp_path / "synthetic.txt", spec)
    agg = aggregate(spark, [BrokerBody("http://synthetic/metrics",
                                       str(tmp_path / "synthetic.txt"), 0, 0.0)], {})
    want = expected_totals(spec)
    namespaces = agg.namespaces.to_pylist()
    assert len(namespaces) == 7
    assert sum(r["topics"] for r in namespaces) == want["topics"]
    assert sum(r["msg_in_total"] for r in namespaces) == want["msg_in_total"]
    assert sum(r["msg_backlog"] for r in namespaces) == want["msg_backlog"]
    assert sum(r["msg_out_total"] for r in namespaces) == want["msg_out_total"]
    assert agg.topics.num_rows == 60 and agg.subscriptions.num_rows == 120
    assert sum(r["lines"] for r in agg.malformed.to_pylist()) == 0
