"""Topic filters, the series cap and forgetting, against a real Apache Pulsar 4.0.8 broker
through the real broker side (the Spark job, local): a denied topic is neither checked nor
exported nor summed into its namespace; a deleted topic's series end at the next cycle and
its eviction counters after `exposition.forget_after`; a departed subscription's series end
at the next cycle; `filters.max_topics` keeps the topics over a quota and counts the rest,
on /metrics and in /api/v1/status."""

from __future__ import annotations

import json
import time

import pytest

from exporter.config.load import parse
from exporter.runtime.cycle import Exporter
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import one_broker
from tests.harness.pulsar import Metrics

# The exporter here fetches and parses in Spark (no broker side injected).
pytestmark = [pytest.mark.timeout(600), pytest.mark.spark]

AGE = "pulsar_storage_backlog_age_seconds"
SIZE = "pulsar_storage_backlog_size"
WOULD_EVICT = "pulsar_storage_backlog_quota_would_evict_total"
DROPPED = "pulsar_quota_exporter_topics_dropped"
HOLDER = "pulsar_storage_backlog_oldest_subscription_info"


def _exporter(broker: ApachePulsar, namespace: str, **extra: object) -> Exporter:
    config = one_broker(
        broker,
        # a dry run: every topic here is over its quota and counted as would-evict
        backlog_quotas={"namespaces": {namespace: {
            "limit_time": "1s", "policy": "consumer_backlog_eviction"}}},
        spark={"master": "local[2]"},
        **extra)
    return Exporter(parse(config, "filters.yaml"))  # its broker side in Spark


def _cycle(exporter: Exporter) -> Metrics:
    return Metrics(exporter.cycle().body.decode())


def _until(exporter: Exporter, what: str, holds, timeout: float = 60) -> Metrics:
    """Cycles until `holds(metrics)`: the broker refreshes its own gauges every few seconds."""
    def probe() -> Metrics | None:
        m = _cycle(exporter)
        return m if holds(m) else None

    return poll(probe, what, timeout)


def test_a_denied_topic_is_not_checked_exported_or_summed(apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("filtered")
    kept, denied = f"persistent://{namespace}/orders", f"persistent://{namespace}/audit-log"
    for topic, count in ((kept, 5), (denied, 50)):
        apache_pulsar.create_subscription(topic, "stalled")
        apache_pulsar.produce(topic, count, 1000)
    exporter = _exporter(apache_pulsar, namespace,
                         filters={"topics": {"allow": [f"persistent://{namespace}/.*"],
                                             "deny": [".*/audit-.*"]}})
    try:
        m = _until(exporter, "the kept topic's backlog", lambda m: (m.value(
            SIZE, topic=kept) or 0) > 0 and (m.value(AGE, topic=kept) or 0) > 0)
        assert m.find(SIZE, topic=denied) == [] and m.find(AGE, topic=denied) == []
        assert m.find(WOULD_EVICT, topic=denied) == []
        # every other topic of the broker (other tests' namespaces) fails `allow`
        assert m.value(DROPPED, reason="filtered") >= 1
        assert m.value(DROPPED, reason="max_topics") == 0
        # the namespace's oldest backlog is the kept topic's, not the denied one's
        assert m.value("pulsar_namespace_backlog_age_max_seconds", namespace=namespace) == \
            m.value(AGE, topic=kept)
    finally:
        exporter.close()


def test_deleted_topics_and_departed_subscriptions_disappear(apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("forget")
    doomed, stays = f"persistent://{namespace}/doomed", f"persistent://{namespace}/stays"
    for topic in (doomed, stays):
        apache_pulsar.create_subscription(topic, "stalled")
    apache_pulsar.create_subscription(stays, "leaving")
    apache_pulsar.produce(doomed, 5, 200)
    apache_pulsar.produce(stays, 5, 200)
    apache_pulsar.consume_all(stays, "stalled")  # "leaving" now holds the older backlog
    apache_pulsar.produce(stays, 5, 200, start=5)
    forget_after = 6.0
    exporter = _exporter(apache_pulsar, namespace,
                         exposition={"forget_after": f"{forget_after}s"})
    try:
        _until(exporter, "both topics counted as would-evict, 'leaving' the holder",
               lambda m: all((m.value(WOULD_EVICT, topic=t, quota_type="time") or 0) >= 1
                             for t in (doomed, stays))
               and m.find(HOLDER, topic=stays, subscription="leaving") != [])
        apache_pulsar.admin("DELETE", f"/admin/v2/persistent/{namespace}/doomed?force=true")
        apache_pulsar.admin("DELETE", f"/admin/v2/persistent/{namespace}/stays/subscription/"
                                      "leaving?force=true")
        m = _until(exporter, "the deleted topic's gauges gone", lambda m: m.find(
            AGE, topic=doomed) == [] and m.find(SIZE, topic=doomed) == [])
        gone_at = time.monotonic()
        # the counter outlives the topic by forget_after, so a last increase is not lost
        assert (m.value(WOULD_EVICT, topic=doomed, quota_type="time") or 0) >= 1
        m = _until(exporter, "the departed subscription's series gone", lambda m: m.find(
            HOLDER, topic=stays, subscription="leaving") == [])
        assert m.find(HOLDER, topic=stays, subscription="stalled") != []
        m = _until(exporter, "the deleted topic's counters forgotten", lambda m: m.find(
            WOULD_EVICT, topic=doomed) == [], timeout=forget_after + 60)
        print(f"\ncounters forgotten {time.monotonic() - gone_at:.1f}s after the gauges "
              f"(forget_after {forget_after}s)")
        # when exactly is the unit tests' (an injected clock): test_filters.py
        assert (m.value(WOULD_EVICT, topic=stays, quota_type="time") or 0) >= 1
    finally:
        exporter.close()


def test_max_topics_keeps_the_topics_over_quota_and_counts_the_rest(
        apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("capped")
    over = f"persistent://{namespace}/over"
    apache_pulsar.create_subscription(over, "stalled")
    apache_pulsar.produce(over, 5, 200)
    exporter = _exporter(apache_pulsar, namespace, filters={"max_topics": 1})
    try:
        m = _until(exporter, "the topic over its quota published", lambda m: m.find(
            "pulsar_storage_backlog_quota_exceeded", topic=over, quota_type="time") != [])
        published = {s.labels["topic"] for s in m.find(SIZE)}
        assert published == {over}, published  # the only topic over a quota on this broker
        topics = m.value("pulsar_quota_exporter_topics")
        assert topics > 1  # other tests' topics: checked, not published
        assert m.value(DROPPED, reason="max_topics") == topics - 1
        status = json.loads(exporter.parts.state.current.status())  # /api/v1/status
        assert [t["topic"] for t in status["topics"]] == [over]
        assert status["topics_dropped"] == topics - 1
    finally:
        exporter.close()
