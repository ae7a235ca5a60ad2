"""Evictions through the admin REST (exporter/actions/admin.py) on a real Apache Pulsar 4.0.8
standalone broker, as its BacklogQuotaManager evicts: size toward 90 % of the limit with
`skip` (the count made again from the broker's stats just before), time with
`expireMessages` at the precise rule's cut-off; a slow consumer that stays connected is
evicted for every subscription type, and is not disconnected.

Every test works in its own namespace. Batches of messages are published seconds apart:
`expireMessages` takes whole seconds, so a cut-off between two batches needs room.
"""

from __future__ import annotations

import time
from collections import Counter

import pulsar
import pytest

from exporter.actions.admin import AdminEvictor
from exporter.actions.orders import (
    Completion,
    EvictionFailed,
    EvictionFailure,
    EvictionMethod,
    EvictionOrder,
    Performed,
    Skipped,
)
from exporter.actions.plan import Enforcement, orders_for
from exporter.catalogue import EVICTION_FAILURE_REASONS
from exporter.config.settings import AdminSource, BacklogQuota, BacklogQuotas, RetentionPolicy
from exporter.engine.backlog.check import (
    EVICTION_TARGET,
    SubscriptionBacklog,
    TimeSource,
    TopicBacklogState,
    TopicDecision,
    check,
)
from exporter.engine.backlog.topicdecisions import TopicDecisions
from exporter.engine.decide import Decisions
from tests.harness.apache_pulsar import ApachePulsar, poll

PAYLOAD = 200  # bytes per message; the broker adds its metadata to each entry
GAP = 4.0  # seconds between the old batch and the new one
EVICT = RetentionPolicy.CONSUMER_BACKLOG_EVICTION
TYPES = [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover,
         pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared]


def _source(broker: ApachePulsar) -> AdminSource:
    return AdminSource(url=broker.web_url, timeout=10.0)


def _sub(broker: ApachePulsar, topic: str, subscription: str) -> dict:
    return broker.topic_stats(topic)["subscriptions"][subscription]


def _state(broker: ApachePulsar, topic: str, namespace: str) -> TopicBacklogState:
    """The engine's input from the broker's own stats (precise publish times, PIP-323)."""
    stats = broker.topic_stats(topic)
    subs = tuple(
        SubscriptionBacklog(
            name, sub["msgBacklog"], sub["backlogSize"],
            sub["earliestMsgPublishTimeInBacklog"] / 1000
            if sub.get("earliestMsgPublishTimeInBacklog", 0) > 0 else None,
            TimeSource.ADMIN)
        for name, sub in sorted(stats["subscriptions"].items()))
    return TopicBacklogState(topic, namespace, subs)


def _orders(decision: TopicDecision, subscription: str) -> list[EvictionOrder]:
    """The engine's plan for one subscription, as the check loop turns it into orders."""
    decisions = Decisions(time.time(), TopicDecisions.of((decision,)), {}, ())
    return [o for o in orders_for(decisions) if o.subscription == subscription]


def _two_batches(broker: ApachePulsar, topic: str) -> float:
    """40 messages, GAP seconds, then 20 more; returns a cut-off (epoch seconds) 3 s after
    the first batch. `expireMessages/{s}` drops what is older than `now − s`, s rounded
    up: that boundary lies within the second before the cut, so the first batch goes and
    the second stays. With consumers connected the broker expires only when the oldest
    message is older than 1.5 × s (PersistentSubscription.expireMessages); a cut 3 s in
    meets that for any `now` from 4 to 7 s after the first batch."""
    broker.produce(topic, 40, PAYLOAD)
    first_done = time.time()
    time.sleep(GAP)
    broker.produce(topic, 20, PAYLOAD, start=40)
    return first_done + 3.0


@pytest.fixture
def stalled(apache_pulsar: ApachePulsar) -> tuple[str, str, float]:
    """(namespace, topic, cut) with subscriptions that nobody reads."""
    namespace = apache_pulsar.create_namespace("evict")
    topic = f"persistent://{namespace}/orders"
    for subscription in ("by-size", "by-time", "other"):
        apache_pulsar.create_subscription(topic, subscription)
    cut = _two_batches(apache_pulsar, topic)
    assert _sub(apache_pulsar, topic, "by-time")["msgBacklog"] == 60
    return namespace, topic, cut


def test_size_goes_down_to_ninety_percent_of_the_limit(
        apache_pulsar: ApachePulsar, stalled: tuple[str, str, float]) -> None:
    namespace, topic, _ = stalled
    per_message = _sub(apache_pulsar, topic, "by-size")["backlogSize"] / 60
    limit = int(per_message * 25.5)  # room for 25 messages; 90 % of it for 22
    quotas = BacklogQuotas(topics={topic: BacklogQuota(limit_size=limit, policy=EVICT)})
    decision = check(_state(apache_pulsar, topic, namespace), quotas, time.time())
    orders = _orders(decision, "by-size")
    # The broker's own rule, which the plan follows: (int)((backlog − target) / backlog ×
    # entries) = (int) 37.05 = 37, which leaves the backlog just over the target, under the limit
    assert [o.messages for o in orders] == [37]
    assert [o.keep_messages for o in orders] == [23]  # what the binary path bounds by
    results = AdminEvictor(_source(apache_pulsar)).perform(orders)
    assert [(type(r), r.method, r.messages) for r in results] == [
        (Performed, EvictionMethod.ADMIN_SKIP, 37)]
    after = _sub(apache_pulsar, topic, "by-size")
    assert after["msgBacklog"] == 23
    assert limit * EVICTION_TARGET < after["backlogSize"] < limit
    assert _sub(apache_pulsar, topic, "other")["msgBacklog"] == 60  # others untouched
    with apache_pulsar.consumer(topic, "by-size") as consumer:
        assert consumer.receive(timeout_millis=10_000).data().startswith(b"37.")


def test_a_backlog_that_shrank_since_the_cycle_is_cut_from_the_brokers_stats(
        apache_pulsar: ApachePulsar, stalled: tuple[str, str, float]) -> None:
    """The cycle saw 60 messages and ordered 37 skipped; before the cut a consumer
    acknowledged 20 of them. The cut is made again from the broker's stats (as its
    BacklogQuotaManager would cut now), not the cycle's 37; and once the backlog is within
    the target, the order is refused as stale and the backlog left alone."""
    namespace, topic, _ = stalled
    before = _sub(apache_pulsar, topic, "by-size")
    per_message = before["backlogSize"] / 60
    limit = int(per_message * 25.5)
    quotas = BacklogQuotas(topics={topic: BacklogQuota(limit_size=limit, policy=EVICT)})
    orders = _orders(check(_state(apache_pulsar, topic, namespace), quotas, time.time()),
                     "by-size")
    assert [o.messages for o in orders] == [37]
    with apache_pulsar.consumer(topic, "by-size") as consumer:
        for _ in range(20):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    poll(lambda: _sub(apache_pulsar, topic, "by-size")["msgBacklog"] == 40, "40 left")
    fresh = _sub(apache_pulsar, topic, "by-size")
    target = float(EVICTION_TARGET) * limit
    expected = int((fresh["backlogSize"] - target) / fresh["backlogSize"] * 40)
    assert 0 < expected < 37, expected  # the cycle's count would cut more

    (result,) = AdminEvictor(_source(apache_pulsar)).perform(orders)
    assert (type(result), result.messages) == (Performed, expected), result
    assert _sub(apache_pulsar, topic, "by-size")["msgBacklog"] == 40 - expected
    print(f"cycle's cut 37 of 60; {expected} of 40 cut from the broker's stats")

    (refused,) = AdminEvictor(_source(apache_pulsar)).perform(orders)  # the same order again
    assert isinstance(refused, Skipped) and refused.reason is EvictionFailure.STALE_SIZE, refused
    assert _sub(apache_pulsar, topic, "by-size")["msgBacklog"] == 40 - expected


def test_time_expires_what_is_older_than_the_cut(
        apache_pulsar: ApachePulsar, stalled: tuple[str, str, float]) -> None:
    namespace, topic, cut = stalled
    limit_time = 30.0
    quotas = BacklogQuotas(namespaces={namespace: BacklogQuota(limit_time=limit_time,
                                                               policy=EVICT)})
    # The engine is pure: "now" is chosen so that its cut-off (now − 0.9 × limit) is `cut`.
    decision = check(_state(apache_pulsar, topic, namespace), quotas,
                     cut + limit_time * float(EVICTION_TARGET))
    orders = _orders(decision, "by-time")
    assert len(orders) == 1 and abs(orders[0].before_publish_time - cut) < 1e-6

    results = AdminEvictor(_source(apache_pulsar)).perform(orders)
    assert [(type(r), r.method, r.completion) for r in results] == [
        (Performed, EvictionMethod.ADMIN_EXPIRE, Completion.STARTED)]
    poll(lambda: _sub(apache_pulsar, topic, "by-time")["msgBacklog"] == 20,
         "the broker's expiry, running on after the 204")
    assert _sub(apache_pulsar, topic, "by-time")["earliestMsgPublishTimeInBacklog"] >= cut * 1000
    assert _sub(apache_pulsar, topic, "other")["msgBacklog"] == 60
    # Once more: nothing is older than the cut any more, so nothing is done, and that
    # is counted as stale.
    again = AdminEvictor(_source(apache_pulsar)).perform(orders)
    assert [(type(r), r.reason) for r in again] == [(Skipped, EvictionFailure.STALE_TIME)]


def test_a_connected_consumer_near_its_oldest_message_meets_the_brokers_409(
        apache_pulsar: ApachePulsar) -> None:
    """Pulsar's guard, which the cuts above keep clear of: with a consumer connected and
    fewer than 1,000 entries in the backlog, `PersistentSubscription.expireMessages(s)`
    issues nothing unless the oldest message is older than 1.5 × s
    (`PersistentTopic.isOldestMessageExpired`, MESSAGE_EXPIRY_THRESHOLD), and the admin
    REST answers 409 (`PersistentTopicsBase`: "not issued … subscription almost catch up").
    A time quota just under the oldest message's age puts the engine's cut (0.9 × the
    limit ago) half a second after that message: s = 3 for an age of ~3 s. The order is
    skipped as `consumer_connected` and counted once by that reason; nothing moves, and
    the consumer stays."""
    namespace = apache_pulsar.create_namespace("evict-guard")
    topic = f"persistent://{namespace}/young"
    with apache_pulsar.client() as client:
        client.subscribe(topic, "slow", receiver_queue_size=1)
        apache_pulsar.produce(topic, 20, PAYLOAD)
        time.sleep(3.0)
        sub = _sub(apache_pulsar, topic, "slow")
        oldest = sub["earliestMsgPublishTimeInBacklog"] / 1000
        now = time.time()
        limit_time = (now - oldest - 0.5) / float(EVICTION_TARGET)  # cut = oldest + 0.5 s
        quotas = BacklogQuotas(topics={topic: BacklogQuota(limit_time=limit_time,
                                                           policy=EVICT)})
        decision = check(_state(apache_pulsar, topic, namespace), quotas, now)
        decisions = Decisions(now, TopicDecisions.of((decision,)), {}, ())
        evictor = AdminEvictor(_source(apache_pulsar))
        broker_consumers = {(topic, "slow"): len(sub["consumers"])}
        acted = Enforcement().act(decisions, enforce=True, evictor=evictor,
                                  consumers=lambda topics: broker_consumers)
        after = _sub(apache_pulsar, topic, "slow")
    assert broker_consumers == {(topic, "slow"): 1}
    assert (acted.evictions, acted.failures) == (
        frozenset(), (EvictionFailure.CONSUMER_CONNECTED.value,)), acted
    assert after["msgBacklog"] == 20
    assert after["consumers"][0]["connectedSince"] == sub["consumers"][0]["connectedSince"]


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: k.name)
def test_a_slow_connected_consumer_is_evicted_and_stays_connected(
        apache_pulsar: ApachePulsar, kind: pulsar.ConsumerType) -> None:
    """A consumer that is connected but reads nothing (a receiver queue of 1, never
    acknowledging) holds a backlog over both quotas. Skip cuts it as the broker would (to
    just over 90 % of the size limit), expiry cuts what is older than the time quota's
    cut-off; its connection stays (same `connectedSince`), and what it reads next is the
    first message left."""
    namespace = apache_pulsar.create_namespace(f"slow-{kind.name.lower()}")
    size_topic, time_topic = (f"persistent://{namespace}/{n}" for n in ("size", "time"))
    with apache_pulsar.client() as client:
        consumers = [client.subscribe(t, "slow", consumer_type=kind, receiver_queue_size=1)
                     for t in (size_topic, time_topic)]
        apache_pulsar.produce(size_topic, 60, PAYLOAD)
        cut = _two_batches(apache_pulsar, time_topic)
        connected = [_sub(apache_pulsar, t, "slow")["consumers"][0]["connectedSince"]
                     for t in (size_topic, time_topic)]

        per_message = _sub(apache_pulsar, size_topic, "slow")["backlogSize"] / 60
        limit = int(per_message * 25.5)
        quotas = BacklogQuotas(topics={
            size_topic: BacklogQuota(limit_size=limit, policy=EVICT),
            time_topic: BacklogQuota(limit_time=30.0, policy=EVICT)})
        orders = (_orders(check(_state(apache_pulsar, size_topic, namespace), quotas,
                                time.time()), "slow")
                  + _orders(check(_state(apache_pulsar, time_topic, namespace), quotas,
                                  cut + 27.0), "slow"))
        results = AdminEvictor(_source(apache_pulsar)).perform(orders)
        assert [(type(r), r.method) for r in results] == [
            (Performed, EvictionMethod.ADMIN_SKIP), (Performed, EvictionMethod.ADMIN_EXPIRE)]
        poll(lambda: _sub(apache_pulsar, time_topic, "slow")["msgBacklog"] == 20,
             f"{kind.name}: the expiry of the 40 old messages")
        size_left = _sub(apache_pulsar, size_topic, "slow")
        print(f"{kind.name}: size backlog 60 -> {size_left['msgBacklog']}, time backlog 60 -> 20")
        assert size_left["msgBacklog"] == 23  # the broker's rule: (int)37.05 skipped
        assert [_sub(apache_pulsar, t, "slow")["consumers"][0]["connectedSince"]
                for t in (size_topic, time_topic)] == connected

        # It reads on from what is left: the first message it had prefetched (queue of 1),
        # then the first one after the cut, and acknowledges as usual.
        for consumer, first_left in zip(consumers, (37, 40), strict=True):
            seen = []
            for _ in range(3):
                message = consumer.receive(timeout_millis=10_000)
                seen.append(int(message.data().split(b".", 1)[0]))
                consumer.acknowledge(message)
            assert first_left in seen, (kind.name, seen)
            assert max(seen) <= first_left + 2, (kind.name, seen)
        for consumer in consumers:
            consumer.close()


def test_what_it_could_not_do_is_counted_by_reason(
        apache_pulsar: ApachePulsar, stalled: tuple[str, str, float]) -> None:
    namespace, topic, cut = stalled
    orders = [
        EvictionOrder(f"persistent://{namespace}/never-created", "s", "time",
                      before_publish_time=cut),
        EvictionOrder(topic, "never-subscribed", "size", messages=5),
        EvictionOrder(f"persistent://no-such-tenant/ns/{topic.rsplit('/', 1)[1]}", "s", "size",
                      messages=5),
    ]
    results = AdminEvictor(_source(apache_pulsar)).perform(orders)
    assert [type(r) for r in results] == [EvictionFailed] * 3
    by_reason = Counter(r.reason.value for r in results if isinstance(r, EvictionFailed))
    assert by_reason == {EvictionFailure.NOT_FOUND.value: 3}
    assert set(by_reason) <= set(EVICTION_FAILURE_REASONS)
