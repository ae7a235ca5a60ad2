"""The whole check cycle against a real pulsar-lite broker: backlog age, time- and size-quota
evictions that move the real cursor (and dry runs that do not), and a broker restart that the
exporter rides out."""

from __future__ import annotations

import dataclasses
import re
import time
import urllib.request

import pulsar
import pytest

from exporter.config.load import parse
from exporter.config.settings import BacklogQuota, RetentionPolicy
from exporter.demo.embedded import EmbeddedBroker
from exporter.engine.backlog.check import EVICTION_TARGET
from exporter.pipeline.lastgood import HOLD_CYCLES
from exporter.runtime.cycle import Exporter
from tests.harness.wait import poll

# pulsar-lite started by each test, and the exporter in this process with Spark.
pytestmark = [pytest.mark.lite, pytest.mark.spark]

TOPIC = "persistent://public/live/stalled"


def _config(broker: EmbeddedBroker, *, enforce: bool, limit_time: str = "8s"):
    return parse({
        "cluster": "live",
        "check_interval": "5s",
        "sources": {"brokers": [{"url": broker.metrics_url, "timeout": "3s"}],
                    "service_url": broker.service_url},
        "backlog_quotas": {
            "namespaces": {"public/live": {"limit_time": limit_time,
                                           "policy": "consumer_backlog_eviction"}},
            "enforce": enforce,
        },
        "spark": {"master": "local[2]"},
    }, "live-test")


def _sample(body: bytes, name: str, **labels: str) -> float | None:
    for line in body.decode().splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _broker_backlog(broker: EmbeddedBroker, subscription: str) -> float | None:
    import urllib.request

    text = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("pulsar_subscription_back_log{") and \
                f'subscription="{subscription}"' in line and 'topic="stalled"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def _wait_backlog(broker: EmbeddedBroker, messages: int, timeout: float = 20.0) -> None:
    """Until the broker's own gauge (refreshed about every 5 s) shows `messages` of backlog
    on the stalled subscription; an absent series counts as 0."""
    poll(lambda: _broker_backlog(broker, "stalled-sub"), f"a backlog of {messages} on the broker",
         timeout, until=lambda backlog: (backlog or 0) == messages)


@pytest.fixture()
def broker():
    with EmbeddedBroker.start_new() as b:
        yield b


def _stall(broker: EmbeddedBroker, messages: int) -> None:
    client = pulsar.Client(broker.service_url)
    try:
        client.subscribe(TOPIC, "stalled-sub", consumer_type=pulsar.ConsumerType.Shared).close()
        producer = client.create_producer(TOPIC)
        for i in range(messages):
            producer.send(f"m{i}".encode() * 10)
    finally:
        client.close()


def test_backlog_age_grows_with_wall_time_and_time_eviction_moves_the_cursor(broker):
    _stall(broker, 40)
    _wait_backlog(broker, 40)
    exporter = Exporter(_config(broker, enforce=True))
    try:
        first = exporter.cycle()
        stalled_at = time.time()
        age1 = _sample(first.body, "pulsar_storage_backlog_age_seconds", topic=TOPIC)
        time.sleep(3)
        second = exporter.cycle()
        age2 = _sample(second.body, "pulsar_storage_backlog_age_seconds", topic=TOPIC)
        # One sighting of the published counter says nothing of when the backlog began:
        # unknown. From the second on, the messages (all published before the first cycle)
        # are at least as old as that first sighting: a lower bound that grows with wall
        # time, never beyond the truth.
        assert age1 is None
        assert age2 is not None and age2 >= 3  # the cycles are at least the 3 s sleep apart
        assert age2 <= time.time() - stalled_at + 60
        # Past the 8 s limit, enforcement evicts and counts with quota_type="time".
        time.sleep(max(0.0, 9 - (time.time() - stalled_at)))
        report = exporter.cycle()
        evicted = _sample(report.body, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                          topic=TOPIC, quota_type="time")
        assert evicted == 1, report.status
        _wait_backlog(broker, 0)
        later = exporter.cycle()
        assert _sample(later.body, "pulsar_storage_backlog_age_seconds", topic=TOPIC) == 0
    finally:
        exporter.close()


def test_dry_run_moves_nothing_and_counts_would_evict(broker):
    _stall(broker, 10)
    _wait_backlog(broker, 10)
    exporter = Exporter(_config(broker, enforce=False, limit_time="1s"))
    try:
        exporter.cycle()
        time.sleep(2)
        report = exporter.cycle()
        assert _sample(report.body, "pulsar_storage_backlog_quota_would_evict_total",
                       topic=TOPIC, quota_type="time") >= 1
        assert _sample(report.body, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                       topic=TOPIC, quota_type="time") == 0  # exists at 0, never rises
        time.sleep(6)  # one gauge refresh
        assert _broker_backlog(broker, "stalled-sub") == 10
    finally:
        exporter.close()


def test_broker_restart_keeps_last_metrics_marks_source_down_and_recovers(broker):
    _stall(broker, 5)
    _wait_backlog(broker, 5)
    exporter = Exporter(_config(broker, enforce=False, limit_time="1h"))
    try:
        good = exporter.cycle()
        assert _sample(good.body, "pulsar_quota_exporter_source_up") == 1
        broker.stop()
        down = exporter.cycle()
        assert _sample(down.body, "pulsar_quota_exporter_source_up") == 0
        refused = _sample(down.body, "pulsar_quota_exporter_source_scrape_errors_total",
                          reason="refused")
        assert refused == 1
        # the last good body is still in use: the topic's series are still there
        assert _sample(down.body, "pulsar_storage_backlog_quota_limit_time", topic=TOPIC) == 3600
        assert re.search(rb"pulsar_quota_exporter_source_staleness_seconds\{[^}]*\} ",
                         down.body)
        broker.restart()  # stopped already: started on the same ports, retried
        # pulsar-lite loads topics lazily after a restart: attach once so it reports it again
        _stall(broker, 0)
        _wait_backlog(broker, 5)
        up = exporter.cycle()
        assert _sample(up.body, "pulsar_quota_exporter_source_up") == 1
        assert _sample(up.body, "pulsar_storage_backlog_quota_limit_time", topic=TOPIC) == 3600
    finally:
        exporter.close()


def test_a_restart_between_cycles_holds_the_topics_the_broker_has_not_reloaded(broker):
    """Stopped and started between two cycles (the exporter never sees it down): pulsar-lite
    reloads a topic only when a client comes back to it, so its /metrics lacks the stalled
    topic. The exporter holds its last values for HOLD_CYCLES cycles (its process start time
    changed), then lets it go; a client's return brings it back fresh."""
    _stall(broker, 5)
    _wait_backlog(broker, 5)
    exporter = Exporter(_config(broker, enforce=False, limit_time="1h"))

    def backlog(report) -> float | None:
        return next((t["backlog_messages"] for t in report.status["topics"]
                     if t["topic"] == TOPIC), None)

    try:
        assert backlog(exporter.cycle()) == 5
        broker.restart()  # same ports, retried while the old listener lingers
        assert _broker_backlog(broker, "stalled-sub") is None  # not reloaded: nobody asked
        for _ in range(HOLD_CYCLES):
            held = exporter.cycle()
            assert _sample(held.body, "pulsar_quota_exporter_source_up") == 1
            assert backlog(held) == 5
            assert _sample(held.body, "pulsar_storage_backlog_quota_limit_time",
                           topic=TOPIC) == 3600
        assert _broker_backlog(broker, "stalled-sub") is None
        assert backlog(exporter.cycle()) is None  # still unlisted: no longer held
        _stall(broker, 0)  # a client comes back: the broker loads the topic
        _wait_backlog(broker, 5)
        assert backlog(exporter.cycle()) == 5
    finally:
        exporter.close()


# --- size quota through the cycle ---------------------------------------------------------------

SIZE_MESSAGES, SIZE_PAYLOAD, SIZE_LIMIT = 40, 200, 2500  # 8000 bytes of backlog, 2500 allowed


def _size_config(broker: EmbeddedBroker, *, enforce: bool):
    """The module's config with a size-only quota (the time limit far away)."""
    config = _config(broker, enforce=enforce, limit_time="1h")
    quota = BacklogQuota(limit_size=SIZE_LIMIT, limit_time=3600.0,
                         policy=RetentionPolicy.CONSUMER_BACKLOG_EVICTION)
    quotas = dataclasses.replace(config.backlog_quotas, namespaces={"public/live": quota})
    return dataclasses.replace(config, backlog_quotas=quotas)


def _stall_sized(broker: EmbeddedBroker) -> float:
    """The stalled subscription behind SIZE_MESSAGES payloads of SIZE_PAYLOAD bytes, one entry
    each; returns the bytes per message by the broker's own counters (what a size quota on
    pulsar-lite is measured in)."""
    _stall(broker, 0)
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(SIZE_MESSAGES):
            producer.send(str(i).encode().ljust(SIZE_PAYLOAD, b"."))
    finally:
        client.close()
    _wait_backlog(broker, SIZE_MESSAGES)
    text = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    counters = {name: _sample(text.encode(), name, topic="stalled")
                for name in ("pulsar_in_bytes_total", "pulsar_in_messages_total")}
    assert counters["pulsar_in_messages_total"] == SIZE_MESSAGES, counters
    return counters["pulsar_in_bytes_total"] / SIZE_MESSAGES


def test_size_eviction_through_the_cycle_moves_the_cursor_down_to_ninety_percent(broker):
    per_message = _stall_sized(broker)
    assert SIZE_MESSAGES * per_message > SIZE_LIMIT  # the workload is over its quota
    exporter = Exporter(_size_config(broker, enforce=True))
    try:
        report = exporter.cycle()
        evicted = _sample(report.body, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                          topic=TOPIC, quota_type="size")
        assert evicted == 1, report.status
        # The broker's own gauge: cut by BacklogQuotaManager's count, (int)((backlog −
        # target) / backlog × entries), which leaves less than one message over 90 % of the
        # limit, and within the limit.
        target = float(EVICTION_TARGET) * SIZE_LIMIT
        backlog = SIZE_MESSAGES * per_message
        left = SIZE_MESSAGES - int((backlog - target) / backlog * SIZE_MESSAGES)
        _wait_backlog(broker, left)
        assert target < left * per_message + per_message and left * per_message < SIZE_LIMIT
        # Within its quota now: the next cycles evict nothing more.
        later = exporter.cycle()
        assert _sample(later.body, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                       topic=TOPIC, quota_type="size") == 1
        assert _sample(later.body, "pulsar_storage_backlog_quota_exceeded",
                       topic=TOPIC, quota_type="size", enforced_by="exporter") == 0
        assert _sample(later.body, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                       topic=TOPIC, quota_type="time") in (None, 0)
    finally:
        exporter.close()


def test_size_dry_run_moves_nothing_and_counts_would_evict(broker):
    _stall_sized(broker)
    exporter = Exporter(_size_config(broker, enforce=False))
    try:
        exporter.cycle()
        report = exporter.cycle()
        assert _sample(report.body, "pulsar_storage_backlog_quota_would_evict_total",
                       topic=TOPIC, quota_type="size") == 2  # once per check
        assert _sample(report.body, "pulsar_storage_backlog_quota_exceeded",
                       topic=TOPIC, quota_type="size", enforced_by="none") == 1  # dry run
        assert _sample(report.body, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                       topic=TOPIC, quota_type="size") == 0  # exists at 0, never rises
        time.sleep(6)  # one gauge refresh
        assert _broker_backlog(broker, "stalled-sub") == SIZE_MESSAGES
    finally:
        exporter.close()
