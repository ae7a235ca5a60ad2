"""One enforcer at a time, on a real Apache Pulsar 4.0.8 broker (actions/lease.py): of two
enforcing instances only the holder of the lock topic's exclusive producer evicts; a paused
holder, fenced while it slept, evicts nothing when it wakes; a SIGKILLed holder is replaced
within a cycle of the standby's.

The broker runs with `keepAliveIntervalSeconds=5` (tests/harness/apache_pulsar.py), so a
hung client's producer goes after two intervals, ~10 s (30 s intervals by default).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from exporter.actions.orders import LeaseState
from exporter.runtime.cycle import Exporter
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.exporter_process import ExporterProcess
from tests.harness.pulsar import Metrics

PAYLOAD = 200
MESSAGES = 100
LIMIT = 8000  # bytes: the backlog of 100 messages of 200 bytes is ~2.6 times this
EVICTIONS = "pulsar_storage_backlog_quota_exceeded_evictions_total"
ENFORCER = "pulsar_quota_exporter_enforcer"


def _config(broker: ApachePulsar, topic: str, lock: str, name: str) -> dict:
    return one_broker(broker, check_interval="1s", admin=True, service_url=True,
                      backlog_quotas={"enforce": True, "lock_topic": lock, "topics": {
                          topic: {"limit_size": LIMIT, "policy": "consumer_backlog_eviction"}}},
                      resource_group_engine={"participant": name},
                      spark={"master": "local[1]"})


def _in_process(broker: ApachePulsar, topic: str, lock: str, name: str) -> Exporter:
    """An exporter in this process, its broker side read without Spark."""
    return live_exporter(broker, name, _config(broker, topic, lock, name))


def _state(body: bytes | Metrics) -> str | None:
    metrics = body if isinstance(body, Metrics) else Metrics(body.decode())
    held = [s.labels["state"] for s in metrics.find(ENFORCER) if s.value == 1]
    return held[0] if len(held) == 1 else None


def _backlog(broker: ApachePulsar, topic: str) -> int:
    return broker.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"]


def _backlogged_topic(broker: ApachePulsar, prefix: str) -> tuple[str, str]:
    ns = broker.create_namespace(prefix)
    topic = f"persistent://{ns}/t"
    broker.create_subscription(topic, "stalled")
    broker.produce(topic, MESSAGES, PAYLOAD)
    return topic, f"persistent://{ns}/enforcer-lock"


def test_two_enforcing_instances_evict_as_one(apache_pulsar: ApachePulsar) -> None:
    """Both decide on the same backlog; the holder cuts it once, the other stands by and
    never calls the broker: the backlog ends where one instance leaves it."""
    topic, lock = _backlogged_topic(apache_pulsar, "two-enforcers")
    size = apache_pulsar.topic_stats(topic)["subscriptions"]["stalled"]["backlogSize"]
    first = _in_process(apache_pulsar, topic, lock, "first")
    second = _in_process(apache_pulsar, topic, lock, "second")
    try:
        def both() -> tuple | None:
            a, b = first.cycle(), second.cycle()
            return (a, b) if a.decisions is not None and a.decisions.topics else None

        a, b = poll(both, "both instances deciding on the topic", timeout=30, interval=0.5)
        (decision,) = [d for d in a.decisions.topics if d.topic == topic]
        (cut,) = decision.plan.size
        # The holder skips what the broker's rule gives on its stats at the cut (those
        # before any cut): (int)((size − 0.9 × limit) / size × entries)
        skipped = min(cut.skip_messages, int((size - 0.9 * LIMIT) / size * MESSAGES))
        print(f"one cut: skip {skipped} of {MESSAGES} (the cycle said {cut.skip_messages}; "
              f"{size} B over a {LIMIT} B limit)")
        assert _state(a.body) == LeaseState.HOLDING and _state(b.body) == "standing_by"
        assert first.lease is not None and second.lease is not None
        for _ in range(5):  # more cycles of each, each on its own view of the backlog
            first.cycle(), second.cycle()
        left = _backlog(apache_pulsar, topic)
        print(f"backlog {MESSAGES} -> {left} messages")
        assert left == MESSAGES - skipped
        assert Metrics(first.cycle().body.decode()).value(EVICTIONS, topic=topic,
                                                         quota_type="size") == 1
        theirs = Metrics(second.cycle().body.decode())
        assert theirs.value(EVICTIONS, topic=topic, quota_type="size") in (None, 0)
        assert not any(s.value for s in theirs.find("pulsar_quota_exporter_evictions_failed_total"))
        assert (first.lease.acquired, second.lease.acquired) == (1, 0)

        first.close()  # a clean stop lets go at once
        poll(lambda: _state(second.cycle().body) == LeaseState.HOLDING,
             "the standby taking the lease after the holder stopped", timeout=10, interval=0.5)
        assert second.lease.acquired == 1
    finally:
        first.close()
        second.close()


@pytest.mark.spark  # the exporter process runs its cycles on Spark
def test_a_paused_holder_is_fenced_and_a_killed_one_replaced(
        apache_pulsar: ApachePulsar, tmp_path: Path) -> None:
    """An exporter process holds the lease and cuts the backlog. SIGSTOP: an in-process
    standby takes over once the broker gives up on the hung connection, and cuts the
    backlog produced since; SIGCONT: the woken holder's claim fails (ProducerFenced), it
    stands by and its eviction counter does not move. The standby stops cleanly, the
    process takes the lease back; SIGKILL: a new standby takes it within a cycle."""
    topic, lock = _backlogged_topic(apache_pulsar, "handover")
    holder = ExporterProcess(tmp_path, _config(apache_pulsar, topic, lock, "holder"),
                             name="holder")
    standby = _in_process(apache_pulsar, topic, lock, "standby")
    successor = _in_process(apache_pulsar, topic, lock, "successor")
    try:
        holder.start()
        holder.wait_ready(120)
        poll(lambda: (m := holder.scrape()) and _state(m) == LeaseState.HOLDING
             and (m.value(EVICTIONS, topic=topic, quota_type="size") or 0) >= 1,
             "the process holding the lease and cutting the backlog", timeout=60, interval=0.5)
        cuts_before = holder.scrape().value(EVICTIONS, topic=topic, quota_type="size")
        assert _state(standby.cycle().body) == "standing_by"

        holder.signal(signal.SIGSTOP, group=True)
        paused = time.monotonic()
        poll(lambda: _state(standby.cycle().body) == LeaseState.HOLDING,
             "the standby taking over from the paused holder", timeout=60, interval=0.5)
        print(f"hand-over from a paused holder: {time.monotonic() - paused:.1f} s")
        apache_pulsar.produce(topic, MESSAGES, PAYLOAD, start=MESSAGES)  # over the limit again
        poll(lambda: standby.cycle() is not None
             and _backlog(apache_pulsar, topic) * PAYLOAD < LIMIT * 1.5,
             "the new holder's cut", timeout=30, interval=0.5)

        holder.signal(signal.SIGCONT, group=True)
        fenced = poll(lambda: (m := holder.scrape()) and _state(m) == "standing_by" and m,
                      "the woken holder finding itself fenced", timeout=30, interval=0.5)
        assert fenced.value("pulsar_quota_exporter_enforcer_lost_total") == 1
        time.sleep(3)  # its cycles go on, standing by
        assert holder.scrape().value(EVICTIONS, topic=topic, quota_type="size") == cuts_before
        assert "lost the enforcer lease" in holder.log()

        standby.close()  # a clean stop lets go at once
        poll(lambda: _state(holder.scrape()) == LeaseState.HOLDING,
             "the process taking the lease back", timeout=30, interval=0.5)
        assert _state(successor.cycle().body) == "standing_by"
        holder.signal(signal.SIGKILL, group=True)  # no goodbye
        killed = time.monotonic()
        poll(lambda: _state(successor.cycle().body) == LeaseState.HOLDING,
             "a standby taking over from the killed holder", timeout=30, interval=0.2)
        took = time.monotonic() - killed
        print(f"hand-over after SIGKILL: {took:.2f} s")
        assert took < 5  # the broker drops a dead process's producer with its connection
    finally:
        if holder.running:
            holder.signal(signal.SIGCONT, group=True)
        holder.stop()
        standby.close()
        successor.close()
