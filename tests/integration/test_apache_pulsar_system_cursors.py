"""What is not a subscriber's, on a real Apache Pulsar 4.0.8 broker (engine/systemtopics.py):
a compacted topic whose `__compaction` cursor holds a backlog over the quota keeps it (the
other subscriptions are cut); a topic with deduplication keeps deduplicating after its
subscriptions are cut; a namespace's `__change_events` topic is never over its quota.
"""

from __future__ import annotations

from exporter.runtime.cycle import CycleReport, Exporter
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.pulsar import Metrics

PAYLOAD = 200
FAILED = "pulsar_quota_exporter_evictions_failed_total"


def _exporter(broker: ApachePulsar, namespace: str, quota: dict, **options: object) -> Exporter:
    config = one_broker(broker, check_interval="1s", admin=True, service_url=True,
                        backlog_quotas={"enforce": True, "namespaces": {namespace: quota},
                                        "lock_topic": f"persistent://{namespace}/lock",
                                        **options})
    return live_exporter(broker, "system", config)


def _backlogs(broker: ApachePulsar, topic: str) -> dict[str, int]:
    return {name: sub["msgBacklog"]
            for name, sub in broker.topic_stats(topic)["subscriptions"].items()}


def _keyed(broker: ApachePulsar, topic: str, count: int, start: int = 0) -> None:
    with broker.client() as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(start, start + count):
            producer.send(str(i).encode().ljust(PAYLOAD, b"."), partition_key=f"k{i % 10}")
        producer.close()


def _cycles(exporter: Exporter, until, what: str) -> CycleReport:
    return poll(lambda: (r := exporter.cycle()) and until(r) and r, what, timeout=60,
                interval=0.5)


def _compacted(broker: ApachePulsar) -> tuple[str, str, float]:
    """A topic compacted once, then 60 more keyed messages: `__compaction` holds those 60,
    `stalled` (never read) all 110. Returns (namespace, topic, bytes per message)."""
    namespace = broker.create_namespace("compacted")
    topic = f"persistent://{namespace}/t"
    broker.create_subscription(topic, "stalled")
    _keyed(broker, topic, 50)
    rest = topic.replace("persistent://", "/admin/v2/persistent/")
    broker.admin("PUT", f"{rest}/compaction")
    poll(lambda: broker.admin("GET", f"{rest}/compaction")["status"] == "SUCCESS",
         "the compaction")
    _keyed(broker, topic, 60, start=50)
    # The compaction's status can say SUCCESS before its cursor's mark-delete lands
    # (`CompactorSubscription.acknowledgeMessage` moves it after the compacted ledger).
    poll(lambda: _backlogs(broker, topic), "the compaction cursor 60 behind",
         until=lambda b: b == {"stalled": 110, "__compaction": 60})
    per_message = broker.topic_stats(topic)["subscriptions"]["stalled"]["backlogSize"] / 110
    return namespace, topic, per_message


def test_the_compaction_cursor_keeps_its_backlog(apache_pulsar: ApachePulsar) -> None:
    namespace, topic, per_message = _compacted(apache_pulsar)
    # 90 % is 18.45 messages; the broker's rule, (int)((size − target) / size × entries),
    # leaves 19 of 110 (and of the compaction cursor's 60)
    limit = int(per_message * 20.5)
    exporter = _exporter(apache_pulsar, namespace, {"limit_size": limit,
                                                    "policy": "consumer_backlog_eviction"})
    try:
        report = _cycles(exporter, lambda r: Metrics(r.body.decode()).value(
            FAILED, reason="system_cursor"), "the compaction cursor held back, and counted")
        poll(lambda: _backlogs(apache_pulsar, topic)["stalled"] == 19, "the stalled cut")
        for _ in range(3):
            exporter.cycle()
    finally:
        exporter.close()
    (decision,) = [t for t in report.status["topics"] if t["topic"] == topic]
    assert "__compaction" in {e["subscription"] for e in decision["evict"]}  # decided, kept
    assert _backlogs(apache_pulsar, topic) == {"stalled": 19, "__compaction": 60}


def test_evict_system_cursors_cuts_it_as_the_broker_would(apache_pulsar: ApachePulsar) -> None:
    namespace, topic, per_message = _compacted(apache_pulsar)
    limit = int(per_message * 20.5)
    exporter = _exporter(apache_pulsar, namespace, {"limit_size": limit,
                                                    "policy": "consumer_backlog_eviction"},
                         evict_system_cursors=True)
    try:
        poll(lambda: exporter.cycle() and _backlogs(apache_pulsar, topic) == {
            "stalled": 19, "__compaction": 19}, "both cursors cut as the broker would",
             timeout=60,
             interval=0.5)
    finally:
        exporter.close()


def test_deduplication_survives_an_eviction(apache_pulsar: ApachePulsar) -> None:
    """Deduplication's `pulsar.dedup` cursor is no subscription: the cut moves `stalled`
    only, and the broker still drops a resent sequence id afterwards."""
    namespace = apache_pulsar.create_namespace("dedup")
    apache_pulsar.admin("POST", f"/admin/v2/namespaces/{namespace}/deduplication", True)
    topic = f"persistent://{namespace}/t"
    apache_pulsar.create_subscription(topic, "stalled")
    with apache_pulsar.client() as client:
        producer = client.create_producer(topic, producer_name="dedup-producer",
                                          batching_enabled=False)
        for seq in range(100):
            producer.send(b"x" * PAYLOAD, sequence_id=seq)
        per_message = apache_pulsar.topic_stats(topic)["subscriptions"]["stalled"][
            "backlogSize"] / 100
        exporter = _exporter(apache_pulsar, namespace, {
            "limit_size": int(per_message * 20.5), "policy": "consumer_backlog_eviction"})
        try:
            poll(lambda: exporter.cycle() and _backlogs(apache_pulsar, topic)["stalled"] == 19,
                 "the stalled cut")
        finally:
            exporter.close()
        rest = topic.replace("persistent://", "/admin/v2/persistent/")
        assert "pulsar.dedup" in apache_pulsar.admin("GET", f"{rest}/internalStats")["cursors"]
        assert set(_backlogs(apache_pulsar, topic)) == {"stalled"}
        producer.send(b"x" * PAYLOAD, sequence_id=50)  # already seen: dropped
        producer.send(b"y" * PAYLOAD, sequence_id=100)  # new
        producer.close()
    poll(lambda: _backlogs(apache_pulsar, topic)["stalled"] == 20, "one new message stored")


def test_change_events_is_never_over_the_namespace_quota(apache_pulsar: ApachePulsar) -> None:
    """A topic-level policy creates the namespace's `__change_events` topic; with the
    namespace's quota at 1 byte, the ordinary topic is over it and `__change_events` is
    not checked at all, unless `system_topics: true`."""
    namespace = apache_pulsar.create_namespace("events")
    topic, events = (f"persistent://{namespace}/{n}" for n in ("t", "__change_events"))
    apache_pulsar.create_subscription(topic, "stalled")
    apache_pulsar.produce(topic, 5, PAYLOAD)
    rest = topic.replace("persistent://", "/admin/v2/persistent/")
    apache_pulsar.admin("POST", f"{rest}/messageTTL?messageTTL=3600")
    quota = {"limit_size": 1, "policy": "producer_request_hold"}
    for checked in (False, True):
        exporter = _exporter(apache_pulsar, namespace, quota, system_topics=checked)
        try:
            report = _cycles(exporter, lambda r: {topic, events} <= {
                t["topic"] for t in r.status["topics"]}, "both topics seen")
        finally:
            exporter.close()
        metrics = Metrics(report.body.decode())
        assert metrics.value("pulsar_storage_backlog_quota_limit", topic=topic) == 1
        limit = metrics.value("pulsar_storage_backlog_quota_limit", topic=events)
        assert limit == (1 if checked else None), (checked, limit)
