"""Apache Pulsar 4.0.8's OpenTelemetry exposition (PIP-264; the session broker runs with it,
tests/conftest.py) read by our parse into the same topic entities as its classic /metrics.

The broker prints both at once, from the same broker methods, so what we read from one must
equal what we read from the other: backlog age, quota limits and backlog size of every test
topic, partitions keyed alike. And with both expositions listed as broker sources, a topic
counts once (pipeline/merge.py), also on a broker whose classic exposition has topic-level
series off, where only OpenTelemetry has per-topic ages (its own broker here).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from exporter.pipeline.merge import merge
from exporter.pipeline.parse import FAMILIES, parse_text
from exporter.pipeline.tables import SourceTables, source_tables
from tests.harness.apache_pulsar import STANDALONE_OVERRIDES, ApachePulsar, poll
from tests.harness.fixtures import FIXTURES
from tests.harness.pulsar import Metrics

# Besides the session's broker, a module fixture starts an Apache Pulsar of its own.
pytestmark = pytest.mark.apache

OTEL_FIXTURE = FIXTURES / "apache-pulsar-4.0.8-otel-metrics.txt"
CLASSIC_FIXTURE = FIXTURES / "apache-pulsar-4.0.8-otel-classic-metrics.txt"
AGE = "pulsar_broker_topic_storage_backlog_age_seconds"
LIMIT_SIZE = "pulsar_broker_topic_storage_backlog_quota_limit_size_bytes"
LIMIT_TIME = "pulsar_broker_topic_storage_backlog_quota_limit_time_seconds"
EVICTIONS = "pulsar_broker_topic_storage_backlog_quota_eviction_count_total"
BACKLOG_SIZE = "pulsar_broker_topic_storage_backlog_size_bytes"
# The OpenTelemetry backlog families and their TYPE lines, as 4.0.8 prints them.
OTEL_FAMILIES = {AGE: "gauge", LIMIT_SIZE: "gauge", LIMIT_TIME: "gauge", EVICTIONS: "counter",
                 BACKLOG_SIZE: "gauge"}
# The classic families our parse reads, and the broker's eviction gauge beside them.
CLASSIC_FAMILIES = {f for f in FAMILIES if not f.startswith("pulsar_broker_topic_")} | {
    "pulsar_storage_backlog_quota_exceeded_evictions_total"}
COLUMNS = ("backlog_age_seconds", "backlog_quota_limit_bytes", "backlog_quota_limit_seconds",
           "backlog_size_bytes")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Scenario:
    aged: str  # time quota 2 s, consumer_backlog_eviction: evicted by the broker
    kept: str  # size quota 10 MiB + time quota 1 h: 40 messages kept
    parted: str  # the same namespace, partitioned in 2: 20 messages per partition
    namespaces: tuple[str, str]

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.aged, self.kept, f"{self.parted}-partition-0",
                f"{self.parted}-partition-1")


def _quota(broker: ApachePulsar, namespace: str, kind: str, quota: dict) -> None:
    broker.admin("POST", f"/admin/v2/namespaces/{namespace}/backlogQuota"
                         f"?backlogQuotaType={kind}", quota)


@pytest.fixture(scope="module")
def scenario(apache_pulsar: ApachePulsar) -> Scenario:
    aged_ns = apache_pulsar.create_namespace("otel-age")
    kept_ns = apache_pulsar.create_namespace("otel-kept")
    _quota(apache_pulsar, aged_ns, "message_age",
           {"limitTime": 2, "policy": "consumer_backlog_eviction"})
    _quota(apache_pulsar, kept_ns, "destination_storage",
           {"limitSize": 10 * MIB, "policy": "consumer_backlog_eviction"})
    _quota(apache_pulsar, kept_ns, "message_age",
           {"limitTime": 3600, "policy": "consumer_backlog_eviction"})
    s = Scenario(f"persistent://{aged_ns}/aged", f"persistent://{kept_ns}/kept",
                 f"persistent://{kept_ns}/parted", (aged_ns, kept_ns))
    apache_pulsar.admin("PUT", f"/admin/v2/persistent/{kept_ns}/parted/partitions", 2)
    for topic in (s.aged, s.kept, s.parted):
        apache_pulsar.create_subscription(topic, "stalled")
        apache_pulsar.produce(topic, 40, 200)
    # The broker's own view, read without our parse: it has evicted `aged` by time and aged
    # the kept backlog past 3 s (backlog-quota checks every 2 s).
    poll(lambda: (m := apache_pulsar.otel_metrics())
         and (m.value(EVICTIONS, pulsar_topic=s.aged, pulsar_backlog_quota_type="time")
              or 0) >= 1
         and (m.value(AGE, pulsar_topic=s.kept) or 0) >= 3,
         "the broker evicts `aged` by time and ages `kept` past 3 s", timeout=60)
    return s


def _tables(text: str) -> SourceTables:
    return source_tables([parse_text(text.encode())])


def _rows(tables: SourceTables, topics: tuple[str, ...]) -> dict[str, dict]:
    return {r["topic"]: {c: r[c] for c in ("namespace", "cluster", *COLUMNS)}
            for r in tables.topics.to_pylist() if r["topic"] in topics}


def test_otel_backlog_series_as_the_broker_prints_them(apache_pulsar: ApachePulsar,
                                                       scenario: Scenario) -> None:
    """Names, TYPE lines and labels of the OpenTelemetry backlog families, read with the
    tests' own small parser; the eviction counter beside the classic eviction gauge."""
    text = apache_pulsar.otel_metrics_text()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert {name: types.get(name) for name in OTEL_FAMILIES} == OTEL_FAMILIES
    otel = Metrics(text)
    kept_ns = scenario.namespaces[1]
    (partition,) = otel.find(AGE, pulsar_topic=scenario.parted, pulsar_partition_index="1")
    assert {k: v for k, v in partition.labels.items() if k.startswith(("pulsar_", "otel_"))} \
        == {"otel_scope_name": "org.apache.pulsar.broker", "pulsar_cluster": "standalone",
            "pulsar_domain": "persistent", "pulsar_tenant": "public",
            "pulsar_namespace": kept_ns, "pulsar_topic": scenario.parted,
            "pulsar_partition_index": "1"}
    assert "process_command_args" in partition.labels  # every resource attribute, per sample
    (kept,) = otel.find(AGE, pulsar_topic=scenario.kept)
    assert "pulsar_partition_index" not in kept.labels
    assert otel.find(AGE, pulsar_topic=f"{scenario.parted}-partition-1") == []
    classic = apache_pulsar.metrics()
    for topic in (scenario.aged, scenario.kept):
        for quota_type in ("size", "time"):
            assert otel.value(EVICTIONS, pulsar_topic=topic,
                              pulsar_backlog_quota_type=quota_type) == classic.value(
                "pulsar_storage_backlog_quota_exceeded_evictions_total", topic=topic,
                quota_type=quota_type)
    assert (otel.value(EVICTIONS, pulsar_topic=scenario.aged,
                       pulsar_backlog_quota_type="time") or 0) >= 1


CHECK_SECONDS = float(STANDALONE_OVERRIDES["backlogQuotaCheckIntervalInSeconds"])


def _agree(otel: dict, classic: dict) -> bool:
    """Every topic's limits and backlog size equal, and its age as far as one backlog-quota
    check apart: each exposition prints the age of the broker's last check, and a check may
    fall between the two fetches (under load, between every pair: the classic body alone
    can take longer to write than the 2 s between checks)."""
    if set(otel) != set(classic):
        return False
    for topic, row in otel.items():
        other = classic[topic]
        if {k: v for k, v in row.items() if k != "backlog_age_seconds"} != \
                {k: v for k, v in other.items() if k != "backlog_age_seconds"}:
            return False
        ages = (row["backlog_age_seconds"], other["backlog_age_seconds"])
        if ages[0] != ages[1] and (min(ages) < 0 or abs(ages[0] - ages[1]) > CHECK_SECONDS):
            return False  # -1 (not measured) only ever equals -1
    return True


def test_otel_entities_equal_the_classic_ones(apache_pulsar: ApachePulsar,
                                              scenario: Scenario) -> None:
    """Both expositions fetched back to back, each through our parse, until they agree
    (`_agree`): every test topic's limits and backlog size equal, its age within one of the
    broker's backlog-quota checks, partitions keyed `-partition-N` in both."""
    bodies: dict[str, str] = {}

    def both_rows() -> tuple[dict, dict]:
        bodies["otel"] = apache_pulsar.otel_metrics_text()
        bodies["classic"] = apache_pulsar.metrics_text()
        return (_rows(_tables(bodies["otel"]), scenario.topics),
                _rows(_tables(bodies["classic"]), scenario.topics))

    rows, _ = poll(both_rows, "the entities of both expositions agree (OpenTelemetry's, "
                   "classic)", until=lambda pair: _agree(*pair))
    otel_text, classic_text = bodies["otel"], bodies["classic"]
    assert set(rows) == set(scenario.topics)
    aged, kept = rows[scenario.aged], rows[scenario.kept]
    assert (aged["backlog_quota_limit_seconds"], aged["backlog_quota_limit_bytes"]) == (2, -1)
    assert aged["backlog_size_bytes"] == 0  # evicted
    assert (kept["backlog_quota_limit_bytes"], kept["backlog_quota_limit_seconds"]) == (
        10 * MIB, 3600)
    assert kept["backlog_age_seconds"] >= 3
    stats = apache_pulsar.topic_stats(scenario.kept)
    assert kept["backlog_size_bytes"] == stats["backlogSize"] > 40 * 200
    for index in (0, 1):
        partition = rows[f"{scenario.parted}-partition-{index}"]
        assert partition["namespace"] == scenario.namespaces[1]
        assert partition["backlog_quota_limit_bytes"] == 10 * MIB
        assert partition["backlog_size_bytes"] > 20 * 200
    assert _tables(otel_text).malformed == dict.fromkeys(
        ("syntax", "duplicate_label", "unkeyed_topic", "not_a_count"), 0)
    assert _tables(otel_text).usage["otel_only"].to_pylist() == [True]

    if os.environ.get("PQE_RECORD_FIXTURES"):  # tests/fixtures/SOURCES.md says how
        OTEL_FIXTURE.write_text(_trimmed(otel_text, scenario.namespaces, "pulsar_namespace",
                                         set(OTEL_FAMILIES)))
        CLASSIC_FIXTURE.write_text(_trimmed(classic_text, scenario.namespaces, "namespace",
                                            CLASSIC_FAMILIES))
    recorded = dict(re.findall(r"^# TYPE (\S+) (\S+)$", OTEL_FIXTURE.read_text(), re.MULTILINE))
    assert {name: recorded.get(name) for name in OTEL_FAMILIES} == OTEL_FAMILIES


def _trimmed(text: str, namespaces: tuple[str, ...], label: str, families: set[str]) -> str:
    """The samples of `families` whose `label` names one of `namespaces` (the test's
    topics, their namespaces' system topic), with the HELP and TYPE lines of their families
    and OpenTelemetry's target_info. Lines are kept whole, in the body's order."""
    keep_families: set[str] = {"target_info"}
    samples: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", line)
        value = re.search(rf'[{{,]{label}="([^"]*)"', line)
        if (match is None or value is None or value.group(1) not in namespaces
                or match.group(1) not in families):
            continue
        name = match.group(1)
        samples.add(line)
        keep_families |= {name, re.sub(r"_(bucket|count|sum|created|total)$", "", name)}
    kept = []
    for line in text.splitlines():
        comment = re.match(r"# (?:HELP|TYPE) (\S+)", line)
        if (comment and comment.group(1) in keep_families) or line in samples or (
                line.startswith("target_info")):
            kept.append(line)
    return "\n".join(kept) + "\n"


def _merged(*bodies: tuple[str, str]):
    return merge([(url, _tables(text)) for url, text in bodies], {})


def test_both_expositions_listed_count_each_topic_once(apache_pulsar: ApachePulsar,
                                                       scenario: Scenario) -> None:
    """The OpenTelemetry endpoint listed as one more broker URL beside /metrics: the cycle's
    tables are the classic body's alone, every topic once, one broker."""
    otel_text = apache_pulsar.otel_metrics_text()  # first: topics never unload here, so
    classic_text = apache_pulsar.metrics_text()  # the classic body has all of its topics
    both = _merged((apache_pulsar.metrics_url, classic_text),
                   (apache_pulsar.otel_metrics_url, otel_text))
    alone = _merged((apache_pulsar.metrics_url, classic_text))
    otel_topics = set(_tables(otel_text).topics["topic"].to_pylist())
    assert set(scenario.topics) <= otel_topics <= set(alone.topics["topic"].to_pylist())
    for name in ("topics", "subscriptions", "namespaces", "brokers", "bundles"):
        # values: `source` codes point into each merge's own list of sources
        assert getattr(both, name).to_pylist() == getattr(alone, name).to_pylist(), name
    assert both.brokers["source"].to_pylist() == [apache_pulsar.metrics_url]
    assert set(both.malformed["source"].to_pylist()) == {apache_pulsar.metrics_url,
                                                         apache_pulsar.otel_metrics_url}


@pytest.fixture(scope="module")
def namespace_level_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApachePulsar]:
    """A broker of its own whose classic exposition has topic-level series off."""
    broker = ApachePulsar(tmp_path_factory.mktemp("apache-pulsar-otel"), otel=True,
                          resource_usage_transport=False,
                          overrides={"exposeTopicLevelMetricsInPrometheus": "false"})
    with broker:
        yield broker


def test_otel_gives_topic_ages_where_classic_has_namespace_series_only(
        namespace_level_broker: ApachePulsar) -> None:
    """Topic-level series off: the classic body has the namespace's series only, the
    OpenTelemetry body still has the topic's. Both listed: the topic's age and backlog size
    come from OpenTelemetry, while namespaces, bundles and brokers stay the classic body's
    alone (the topic is not counted a second time)."""
    broker = namespace_level_broker
    namespace = broker.create_namespace("otel-ns-level")
    topic = f"persistent://{namespace}/stalled"
    broker.create_subscription(topic, "s")
    broker.produce(topic, 30, 200)

    def seen() -> tuple[str, str] | None:
        otel_text, classic_text = broker.otel_metrics_text(), broker.metrics_text()
        otel, classic = Metrics(otel_text), Metrics(classic_text)
        ready = ((otel.value(AGE, pulsar_topic=topic) or 0) >= 1
                 and classic.value("pulsar_msg_backlog", namespace=namespace,
                                   remote_cluster="local") == 30)
        return (otel_text, classic_text) if ready else None

    otel_text, classic_text = poll(seen, f"{topic}: aged in OpenTelemetry, 30 in backlog",
                                   timeout=60)
    assert topic not in classic_text  # namespace-level series only
    both = _merged((broker.metrics_url, classic_text), (broker.otel_metrics_url, otel_text))
    alone = _merged((broker.metrics_url, classic_text))
    assert topic not in alone.topics["topic"].to_pylist()
    (row,) = [r for r in both.topics.to_pylist() if r["topic"] == topic]
    otel = Metrics(otel_text)
    assert (row["source"], row["namespace"]) == (broker.otel_metrics_url, namespace)
    assert row["backlog_age_seconds"] == otel.value(AGE, pulsar_topic=topic) >= 1
    assert row["backlog_size_bytes"] == otel.value(BACKLOG_SIZE, pulsar_topic=topic) > 30 * 200
    assert row["msg_in_total"] is None  # OpenTelemetry's backlog series only
    for name in ("namespaces", "brokers", "bundles", "subscriptions"):
        assert getattr(both, name).to_pylist() == getattr(alone, name).to_pylist(), name
    (ns_row,) = [r for r in both.namespaces.to_pylist() if r["namespace"] == namespace]
    assert ns_row["msg_backlog"] == 30
    assert ns_row["topics"] == Metrics(classic_text).value(
        "pulsar_topics_count", namespace=namespace)
