"""Topic filters (in the task's tables), the series cap (at publication) and the forgetting
of eviction counters, on bodies in pulsar-lite's shape; the same against a real Apache
Pulsar broker through Spark is tests/integration/test_apache_pulsar_filters.py."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest

from exporter.config.load import ConfigError, parse
from exporter.config.settings import TopicFilter
from exporter.exposition.build import Tallies
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import keep, source_tables
from exporter.record.replay import SimulatedEvictor
from exporter.runtime.cycle import Exporter
from tests.harness.pulsar import Metrics
from tests.unit.test_cycle import URL, Clock, NoAdmin, ScriptedBrokers


def body(backlogs: dict[str, int]) -> str:
    """One stalled subscription per topic of public/f, `backlog` messages of 1000 bytes."""
    lines = []
    for topic, backlog in backlogs.items():
        labels = f'cluster="c",namespace="public/f",partition="-1",topic="{topic}"'
        lines += [f"pulsar_in_messages_total{{{labels}}} 100",
                  f"pulsar_in_bytes_total{{{labels}}} 100000",
                  f'pulsar_subscription_back_log{{{labels},subscription="s"}} {backlog}']
    return "\n".join(lines) + "\n"


def full(topic: str) -> str:
    return f"persistent://public/f/{topic}"


@pytest.mark.parametrize(("rule", "kept"), [
    (TopicFilter(), {"orders", "audit-log", "orders-partition-0", None}),
    (TopicFilter(allow=("persistent://public/f/orders",)), {"orders", None}),  # anchored
    (TopicFilter(allow=(".*orders.*",)), {"orders", "orders-partition-0", None}),
    (TopicFilter(deny=(".*/audit-.*",)), {"orders", "orders-partition-0", None}),
    (TopicFilter(allow=(".*orders.*", ".*audit.*"), deny=(".*-partition-[0-9]+",)),
     {"orders", "audit-log", None}),
    (TopicFilter(deny=(".*",)), {None}),  # a row without a name is the merge's to report
])
def test_allow_then_deny_anchored_on_full_names(rule, kept):
    names = ["orders", "audit-log", "orders-partition-0", None]
    topics = pa.array([full(n) if n else None for n in names])
    mask = keep(topics, rule).to_pylist()
    assert {n for n, k in zip(names, mask, strict=True) if k} == kept


def test_the_tables_leave_filtered_topics_and_their_subscriptions_out():
    parsed = [parse_text(body({"orders": 5, "audit-log": 50, "payments": 1}).encode())]
    everything = source_tables(parsed)
    assert everything.filtered == 0 and everything.topics.num_rows == 3
    tables = source_tables(parsed, TopicFilter(deny=(".*/audit-.*",)))
    assert tables.filtered == 1
    assert set(tables.topics["topic"].to_pylist()) == {full("orders"), full("payments")}
    assert set(tables.subscriptions["topic"].to_pylist()) == {full("orders"), full("payments")}


def _exporter(bodies: list[str], **extra: object) -> tuple[Exporter, Clock]:
    config = parse({
        "cluster": "unit", "check_interval": "10s",
        "sources": {"brokers": [{"url": URL}], "service_url": "pulsar://127.0.0.1:1"},
        "backlog_quotas": {"namespaces": {"public/f": {
            "limit_size": "20000B", "policy": "consumer_backlog_eviction"}}},
        **extra,
    }, "filters.yaml")
    clock = Clock()
    brokers = ScriptedBrokers(bodies, config.filters.topics)
    return Exporter(config, brokers=brokers, admin_side=NoAdmin(),
                    evictor=SimulatedEvictor(), clock=clock), clock


def test_max_topics_publishes_those_over_quota_first_then_the_largest_backlogs():
    backlogs = {"a-small": 1, "b-over": 30, "c-mid": 10, "d-over": 25, "e-tiny": 0}
    exporter, _ = _exporter([body(backlogs)], filters={"max_topics": 3})
    m = Metrics(exporter.cycle().body.decode())
    published = {s.labels["topic"] for s in m.find("pulsar_storage_backlog_size")}
    assert published == {full("b-over"), full("d-over"), full("c-mid")}
    assert m.value("pulsar_quota_exporter_topics") == 5  # all checked
    assert m.value("pulsar_quota_exporter_topics_dropped", reason="max_topics") == 2
    assert m.value("pulsar_quota_exporter_topics_dropped", reason="filtered") == 0


def test_max_topics_lists_in_the_status_the_topics_metrics_publishes_and_counts_the_rest():
    """/api/v1/status and `check --format json` (one document) list the topics /metrics
    publishes under `filters.max_topics`, by name, and count the others; without the cap,
    every topic and no count, as before."""
    backlogs = {"a-small": 1, "b-over": 30, "c-mid": 10, "d-over": 25, "e-tiny": 0}
    exporter, _ = _exporter([body(backlogs)], filters={"max_topics": 3})
    status = exporter.cycle().status
    assert [t["topic"] for t in status["topics"]] == [full("b-over"), full("c-mid"),
                                                      full("d-over")]
    assert status["topics_dropped"] == 2
    assert json.loads(exporter.parts.state.current.status())["topics_dropped"] == 2
    exporter, _ = _exporter([body(backlogs)])
    status = exporter.cycle().status
    assert len(status["topics"]) == 5 and "topics_dropped" not in status


def test_under_max_topics_a_failed_check_publishes_again_the_topics_it_kept():
    """After a publication under the cap only the published topics' decisions are held
    (`build_topics.as_published`); a check that fails next (no broker data) publishes
    those again, series and status as they were."""
    backlogs = {"a-small": 1, "b-over": 30, "c-mid": 10, "d-over": 25, "e-tiny": 0}
    exporter, clock = _exporter([body(backlogs)], filters={"max_topics": 3})  # then none
    first = exporter.cycle()
    clock.now += 10
    again = exporter.cycle()  # the broker side raises: the last good decisions stay

    def sizes(report) -> dict[str, float]:
        return {s.labels["topic"]: s.value
                for s in Metrics(report.body.decode()).find("pulsar_storage_backlog_size")}

    assert sizes(again) == sizes(first) and len(sizes(first)) == 3
    assert again.status["topics"] == first.status["topics"]
    assert again.status["topics_dropped"] == 2
    assert Metrics(again.body.decode()).value("pulsar_quota_exporter_topics") == 5


def test_filtered_topics_are_counted_and_not_checked():
    exporter, _ = _exporter([body({"orders": 30, "audit-log": 50})],
                            filters={"topics": {"deny": [".*/audit-.*"]}})
    report = exporter.cycle()
    m = Metrics(report.body.decode())
    assert m.value("pulsar_quota_exporter_topics") == 1
    assert m.value("pulsar_quota_exporter_topics_dropped", reason="filtered") == 1
    assert m.find("pulsar_storage_backlog_size", topic=full("audit-log")) == []
    assert m.value("pulsar_storage_backlog_quota_would_evict_total", topic=full("orders"),
                   quota_type="size") == 1
    assert m.find("pulsar_storage_backlog_quota_would_evict_total", topic=full("audit-log")) \
        == []


def test_eviction_counters_go_after_forget_after_without_the_topic():
    exporter, clock = _exporter([body({"orders": 30, "gone": 30})] * 2
                                + [body({"orders": 30})] * 4,
                                exposition={"forget_after": "25s"})
    for _ in range(2):
        exporter.cycle()
        clock.now += 10
    seen = []
    for _ in range(4):  # "gone" last seen at t=10; forgotten once 25 s have passed
        m = Metrics(exporter.cycle().body.decode())
        seen.append(m.value("pulsar_storage_backlog_quota_would_evict_total",
                            topic=full("gone"), quota_type="size"))
        clock.now += 10
    assert seen == [2, 2, None, None]  # at t=20, 30: kept; t=40 (30 s unseen): gone
    assert m.value("pulsar_storage_backlog_quota_would_evict_total", topic=full("orders"),
                   quota_type="size") == 6


def test_forget_unseen_keeps_what_is_present_and_what_is_recent():
    t = Tallies(evictions=Counter({("ns", "a", "time"): 1, ("ns", "b", "size"): 2}),
                would_evict=Counter({("ns", "b", "time"): 3}))
    assert t.forget_unseen(["a", "b"], now=0.0, after=60) == 0
    assert t.forget_unseen(["a"], now=59.0, after=60) == 0
    assert t.forget_unseen(["a"], now=60.0, after=60) == 1
    assert set(t.evictions) == {("ns", "a", "time")} and not t.would_evict
    assert t.forget_unseen([], now=119.0, after=60) == 0  # "a" last seen at 60
    assert t.forget_unseen([], now=120.0, after=60) == 1
    assert not t.evictions and not t.counted_seen
    t.would_evict[("ns", "new", "time")] += 1  # counted before its first sighting here
    assert t.forget_unseen([], now=500.0, after=60) == 0
    assert t.counted_seen == {("ns", "new"): 500.0}


@pytest.mark.parametrize(("filters", "error"), [
    ({"topics": {"allow": ["(unclosed"]}},
     "filters.topics.allow[0]: not a regular expression: missing ), unterminated subpattern"),
    ({"topics": {"deny": ["a(?=b)"]}},
     "filters.topics.deny[0]: not supported by RE2 (no look-around or back-references)"),
    ({"topics": {"deny": "x"}}, "filters.topics.deny: expected a list"),
    ({"topics": {"block": ["x"]}}, "filters.topics.block: unknown key"),
    ({"max_topics": 0}, "filters.max_topics: must be at least 1, found 0"),
])
def test_filter_errors_name_the_key(filters, error):
    with pytest.raises(ConfigError) as caught:
        parse({"cluster": "c", "sources": {"brokers": [{"url": "http://b/metrics"}]},
               "filters": filters}, "f.yaml")
    assert any(e.startswith(f"f.yaml: {error}") for e in caught.value.errors), \
        caught.value.errors
