"""What Pulsar 4.0.8 does to producers under `producer_request_hold` and `producer_exception`,
and what the exporter says about the same topic (tests/harness/apache_pulsar.py).

The broker acts from its periodic check (`BrokerService.monitorBacklogQuota`, every 2 s in
the harness): `BacklogQuotaManager.handleExceededBacklogQuota` disconnects the topic's
producers under both policies; their reconnect (`ServerCnx.handleProducer`, through
`PersistentTopic.checkBacklogQuotaExceeded`) is then refused with the server error
`ProducerBlockedQuotaExceededError` (hold) or `ProducerBlockedQuotaExceededException`
(exception). The C++ client under the Python one keeps reconnecting a held producer, so its
sends wait until their send timeout; under `producer_exception` it fails the pending sends.
"""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.pulsar import Metrics

LIMIT_BYTES = 64 * 1024
PAYLOAD = 1024
MESSAGES = 200  # 200 KiB of backlog: three times the limit
SEND_TIMEOUT_MS = 3000


def _stalled_over_quota(broker: ApachePulsar, policy: str) -> str:
    """A namespace whose size quota (`policy`) a stalled subscription's backlog exceeds."""
    namespace = broker.create_namespace(policy.replace("_", "-"))
    broker.admin("POST", f"/admin/v2/namespaces/{namespace}/backlogQuota"
                         "?backlogQuotaType=destination_storage",
                 {"limitSize": LIMIT_BYTES, "limitTime": -1, "policy": policy})
    topic = f"persistent://{namespace}/t"
    broker.create_subscription(topic, "stalled")
    return topic


def _blocked_send(producer: pulsar.Producer, broker: ApachePulsar, topic: str) -> tuple[
        BaseException | None, float]:
    """Fill the backlog past the quota through `producer` (made before the broker's check
    found it exceeded), then send until a send fails: what it raised (None: none within
    30 s) and how long that send took. The broker checks every 2 s, so its check may come
    while the fill is still going (the limit is passed a third of the way in): the send that
    fails then is the one to report, and the backlog is already past the limit."""
    for i in range(MESSAGES):
        began = time.monotonic()
        try:
            producer.send(bytes([i % 256]) * PAYLOAD)
        except pulsar.PulsarException as exc:
            assert broker.topic_stats(topic)["backlogSize"] > LIMIT_BYTES, exc
            return exc, time.monotonic() - began
    poll(lambda: broker.topic_stats(topic)["backlogSize"] > LIMIT_BYTES,
         f"{topic}: backlog past the limit")
    # sends go through until the broker's next quota check disconnects the producer
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            producer.send(b"after")
        except pulsar.PulsarException as exc:
            return exc, time.monotonic() - began
        time.sleep(0.5)
    return None, 0.0


def _sends(producer: pulsar.Producer) -> bool:
    try:
        producer.send(b"cleared")
    except pulsar.PulsarException:
        return False
    return True


def _new_producer(broker: ApachePulsar, topic: str) -> BaseException | None:
    with broker.client() as client:
        try:
            client.create_producer(topic).close()
        except pulsar.PulsarException as exc:
            return exc
    return None


def _decision(broker: ApachePulsar, topic: str) -> tuple[dict, Metrics]:
    """The exporter's `check` view of `topic` (Pulsar's own quotas, read over admin REST),
    and its /metrics."""
    exporter = live_exporter(broker, "quotas", one_broker(broker, admin=True))
    try:
        report = exporter.cycle()
        views = {t["topic"]: t for t in report.status["topics"]}
        return views[topic], Metrics(report.body.decode())
    finally:
        exporter.close()


@pytest.mark.parametrize(("policy", "send_raises", "create_raises"), [
    ("producer_request_hold", pulsar.Timeout, pulsar.ProducerBlockedQuotaExceededError),
    ("producer_exception", pulsar.ProducerBlockedQuotaExceededException,
     pulsar.ProducerBlockedQuotaExceededException),
])
def test_what_the_broker_does_to_producers_and_what_we_say(
        apache_pulsar: ApachePulsar, policy: str, send_raises: type[BaseException],
        create_raises: type[BaseException]) -> None:
    """Under each policy a send on a connected producer, and a new producer, fail as the
    broker decides; the exporter, reading Pulsar's quota, says exceeded with that policy as
    the action and plans no eviction. Cleared, the topic takes the same producer back."""
    topic = _stalled_over_quota(apache_pulsar, policy)
    with apache_pulsar.client() as client:
        producer = client.create_producer(topic, batching_enabled=False,
                                          send_timeout_millis=SEND_TIMEOUT_MS)
        raised, seconds = _blocked_send(producer, apache_pulsar, topic)
        created = _new_producer(apache_pulsar, topic)
        decision, metrics = _decision(apache_pulsar, topic)
        print(f"{policy}: send raised {raised!r} after {seconds:.1f} s; a new producer: "
              f"{created!r}\nours: {decision}")
        assert isinstance(raised, send_raises), raised
        assert isinstance(created, create_raises), created
        assert decision["exceeded"] == ["size"]
        assert (decision["policy"], decision["action"]) == (policy, policy)
        assert decision["limit_sources"]["size"] == "pulsar:namespace"
        exceeded = metrics.find("pulsar_storage_backlog_quota_exceeded", topic=topic,
                                quota_type="size")
        assert [(s.value, s.labels["enforced_by"]) for s in exceeded] == [(1.0, "broker")]
        assert decision["evict"] is None
        assert decision["backlog_size_bytes"] > LIMIT_BYTES

        apache_pulsar.admin("POST", topic.replace("persistent://", "/admin/v2/persistent/", 1)
                            + "/subscription/stalled/skip_all")
        cleared = time.monotonic()
        # the client reconnects on its own back-off (the C++ client's grows up to a minute)
        poll(lambda: _sends(producer), f"{topic}: the producer sends again once cleared",
             timeout=120)
        print(f"{policy}: the producer sends again {time.monotonic() - cleared:.1f} s "
              "after the backlog was cleared")
    assert _new_producer(apache_pulsar, topic) is None
