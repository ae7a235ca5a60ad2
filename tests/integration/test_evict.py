"""Evictions against a real pulsar-lite broker (binary protocol) and a stand-in admin REST
(tests/harness/admin_standin.py) that records what the admin evictor asks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pulsar
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.actions.admin import AdminEvictor, fresh_cut
from exporter.actions.binary import BinaryEvictor
from exporter.actions.evict import Unconfigured, evictor_for
from exporter.actions.orders import (
    Completion,
    EvictionFailed,
    EvictionFailure,
    EvictionMethod,
    EvictionOrder,
    NothingToEvict,
    Performed,
    Skipped,
)
from exporter.config.settings import AdminSource, BrokerSource, Config, Sources
from tests.harness.admin_standin import AdminStandIn
from tests.harness.pulsar import PulsarLite, pulsar_lite_fixture

pulsar_lite = pulsar_lite_fixture()
SUBSCRIPTIONS = ("time", "size", "late-cut", "early-cut", "exclusive", "caught-up", "shrunk")


@dataclass(frozen=True)
class Workload:
    topic: str
    cut: float  # epoch seconds strictly between message 99's and message 100's publish times
    first_published: float


@pytest.fixture(scope="module")
def workload(pulsar_lite: PulsarLite) -> Workload:
    """200 messages in two batches of 100, 0.3 s apart, on stalled subscriptions."""
    topic = f"persistent://public/default/evict-{uuid.uuid4().hex[:8]}"
    for subscription in SUBSCRIPTIONS:
        pulsar_lite.create_subscription(topic, subscription)
    first = time.time()
    pulsar_lite.produce(topic, 100, size=200)
    end_first = time.time()
    time.sleep(0.3)
    start_second = time.time()
    pulsar_lite.produce(topic, 100, size=200, start=100)
    pulsar_lite.wait_for_metric(lambda m: all(
        m.subscription("pulsar_subscription_back_log", topic, s) == 200 for s in SUBSCRIPTIONS))
    return Workload(topic, (end_first + start_second) / 2, first)


def _evictor(broker: PulsarLite) -> BinaryEvictor:
    return BinaryEvictor(broker.service_url, timeout=3.0)


def _order(broker: PulsarLite, topic: str, subscription: str, quota_type: str,
           **cut: object) -> EvictionOrder:
    """An order as a cycle makes it: with the consumers the broker's /metrics reports."""
    seen = broker.metrics().subscription("pulsar_subscription_consumers_count", topic,
                                         subscription)
    return EvictionOrder(topic, subscription, quota_type, consumers=None if seen is None
                         else int(seen), **cut)  # type: ignore[arg-type]


def _head(broker: PulsarLite, topic: str, subscription: str) -> int:
    """Index of the oldest unacknowledged message (received, not acknowledged)."""
    with broker.consumer(topic, subscription, pulsar.ConsumerType.Shared) as consumer:
        return int(consumer.receive(timeout_millis=5000).data().split(b".")[0])


# --- real broker, binary protocol -------------------------------------------------------------


def test_time_order_seeks_the_real_cursor_to_the_cut(pulsar_lite: PulsarLite,
                                                     workload: Workload) -> None:
    order = _order(pulsar_lite, workload.topic, "time", "time", before_publish_time=workload.cut)
    (result,) = _evictor(pulsar_lite).perform([order])
    assert result == Performed(order, EvictionMethod.SEEK, None, Completion.CONFIRMED)
    pulsar_lite.wait_for_backlog(workload.topic, "time", 100)
    assert _head(pulsar_lite, workload.topic, "time") == 100


def test_size_order_skips_exactly_n_messages(pulsar_lite: PulsarLite, workload: Workload) -> None:
    order = _order(pulsar_lite, workload.topic, "size", "size", messages=50)
    (result,) = _evictor(pulsar_lite).perform([order])
    assert result == Performed(order, EvictionMethod.ACKNOWLEDGE, 50, Completion.CONFIRMED)
    pulsar_lite.wait_for_backlog(workload.topic, "size", 150)
    assert _head(pulsar_lite, workload.topic, "size") == 50


def _consume(broker: PulsarLite, topic: str, subscription: str, count: int) -> None:
    """A consumer catching up by `count` messages after the cycle, then gone."""
    with broker.consumer(topic, subscription, pulsar.ConsumerType.Shared) as consumer:
        for _ in range(count):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))


def test_size_order_is_bounded_by_the_backlog_now(pulsar_lite: PulsarLite,
                                                  workload: Workload) -> None:
    """The cycle saw 200 and ordered 50 skipped (leaving 150); a consumer then took 30. The
    cut is 170 − 150 = 20, not 50: the subscription ends where the cycle's cut meant it to."""
    order = _order(pulsar_lite, workload.topic, "caught-up", "size", messages=50,
                   keep_messages=150)
    _consume(pulsar_lite, workload.topic, "caught-up", 30)
    (result,) = _evictor(pulsar_lite).perform([order])
    assert result == Performed(order, EvictionMethod.ACKNOWLEDGE, 20, Completion.CONFIRMED)
    pulsar_lite.wait_for_backlog(workload.topic, "caught-up", 150)
    assert _head(pulsar_lite, workload.topic, "caught-up") == 50


def test_size_order_within_its_target_now_is_refused_as_stale(pulsar_lite: PulsarLite,
                                                              workload: Workload) -> None:
    order = _order(pulsar_lite, workload.topic, "shrunk", "size", messages=50,
                   keep_messages=150)
    _consume(pulsar_lite, workload.topic, "shrunk", 120)
    (result,) = _evictor(pulsar_lite).perform([order])
    assert isinstance(result, Skipped) and result.reason is EvictionFailure.STALE_SIZE
    assert "at most 80 entries now" in result.detail
    pulsar_lite.wait_for_backlog(workload.topic, "shrunk", 80)
    assert _head(pulsar_lite, workload.topic, "shrunk") == 120


def test_cut_after_the_newest_message_clears_the_backlog(pulsar_lite: PulsarLite,
                                                         workload: Workload) -> None:
    # pulsar-lite refuses a seek past its newest message; the evictor acknowledges instead.
    order = _order(pulsar_lite, workload.topic, "late-cut", "time",
                   before_publish_time=time.time() + 1)
    (result,) = _evictor(pulsar_lite).perform([order])
    assert result == Performed(order, EvictionMethod.ACKNOWLEDGE, 200, Completion.CONFIRMED)
    pulsar_lite.wait_for_backlog(workload.topic, "late-cut", 0)


def test_cut_before_the_oldest_message_never_moves_the_cursor(pulsar_lite: PulsarLite,
                                                              workload: Workload) -> None:
    order = _order(pulsar_lite, workload.topic, "early-cut", "time",
                          before_publish_time=workload.first_published - 60)
    (result,) = _evictor(pulsar_lite).perform([order])
    assert isinstance(result, NothingToEvict)
    assert _head(pulsar_lite, workload.topic, "early-cut") == 0


def test_connected_exclusive_consumer_is_skipped(pulsar_lite: PulsarLite,
                                                 workload: Workload) -> None:
    with pulsar_lite.consumer(workload.topic, "exclusive", pulsar.ConsumerType.Exclusive) as held:
        pulsar_lite.wait_for_metric(lambda m: m.subscription(
            "pulsar_subscription_consumers_count", workload.topic, "exclusive") == 1)
        orders = [_order(pulsar_lite, workload.topic, "exclusive", "time",
                                before_publish_time=workload.cut),
                  _order(pulsar_lite, workload.topic, "exclusive", "size", messages=10)]
        results = _evictor(pulsar_lite).perform(orders)
        assert [(type(r), r.reason) for r in results] == [
            (Skipped, EvictionFailure.CONSUMER_CONNECTED)] * 2
        assert held.receive(timeout_millis=5000).data().startswith(b"0.")  # cursor untouched


def test_missing_topic_is_skipped_and_not_created(pulsar_lite: PulsarLite,
                                                          workload: Workload) -> None:
    missing = f"persistent://public/default/never-{uuid.uuid4().hex[:8]}"
    results = _evictor(pulsar_lite).perform([
        _order(pulsar_lite, missing, "sub", "size", messages=5),
        _order(pulsar_lite, workload.topic, "no-such-subscription", "size", messages=5)])
    # Not in the broker's /metrics, so no consumer count: never attached to (which would
    # create both), skipped as not known to be safe.
    assert [(type(r), r.reason) for r in results] == [(Skipped, EvictionFailure.OTHER)] * 2
    # After a refresh that happened later than the attempt, neither was created.
    marker = f"persistent://public/default/marker-{uuid.uuid4().hex[:8]}"
    pulsar_lite.produce(marker, 1)
    metrics = pulsar_lite.wait_for_metric(
        lambda m: m if m.find("pulsar_storage_size", topic=marker.rsplit("/", 1)[1]) else None)
    assert not metrics.find("pulsar_storage_size", topic=missing.rsplit("/", 1)[1])
    assert not metrics.find("pulsar_subscription_back_log", subscription="no-such-subscription")


@pytest.mark.lite  # a broker of its own, stopped
def test_broker_down_fails_with_a_reason(tmp_path: Path) -> None:
    down = PulsarLite(tmp_path / "down").start()
    down.stop()
    order = EvictionOrder("persistent://public/default/t", "s", "time", before_publish_time=1e9,
                          consumers=0)
    (result,) = _evictor(down).perform([order])  # its operation timeout is 3 s
    assert type(result) is EvictionFailed, result
    assert result.reason in (EvictionFailure.TIMEOUT, EvictionFailure.BROKER_ERROR), result


# --- wiring and orders ------------------------------------------------------------


def test_evictor_for_picks_admin_then_binary_then_nothing() -> None:
    admin = Config("c", sources=Sources(admin=AdminSource("http://a"), service_url="pulsar://b"))
    binary = Config("c", sources=Sources(brokers=(BrokerSource("http://m"),),
                                         service_url="pulsar://b"))
    assert isinstance(evictor_for(admin), AdminEvictor)
    assert isinstance(evictor_for(binary), BinaryEvictor)
    nothing = evictor_for(Config("c"))
    assert isinstance(nothing, Unconfigured)
    order = EvictionOrder("persistent://t/n/x", "s", "size", messages=1)
    assert nothing.perform([order]) == (
        Skipped(order, EvictionFailure.NO_SERVICE_URL,
                "configure sources.service_url or sources.admin"),)


@pytest.mark.parametrize("kwargs", [
    {"topic": "non-persistent://t/n/x", "messages": 1},
    {"topic": "persistent://t/x", "messages": 1},
    {"quota_type": "bytes", "messages": 1},
    {"messages": 1, "before_publish_time": 5.0},
    {},
    {"messages": 0},
    {"messages": True},
    {"before_publish_time": float("nan")},
    {"subscription": "", "messages": 1},
])
def test_invalid_orders_are_rejected(kwargs: dict) -> None:
    args = {"topic": "persistent://t/n/x", "subscription": "s", "quota_type": "size", **kwargs}
    with pytest.raises(ValueError):
        EvictionOrder(**args)


@given(before=st.floats(min_value=1.0, max_value=4e9, allow_nan=False),
       offset=st.integers(min_value=-3, max_value=3))
def test_cutoff_ms_keeps_exactly_what_is_not_before_the_cut(before: float, offset: int) -> None:
    order = EvictionOrder("persistent://t/n/x", "s", "time", before_publish_time=before)
    cut = order.cutoff_ms
    assert cut is not None
    for publish_ms in (cut + offset, int(before * 1000) + offset):
        assert (publish_ms < cut) == (publish_ms < Fraction(before) * 1000)


# --- admin REST, against a stand-in that records ---------------------------------------------


def _stats(subscription: str, *, backlog: int = 200, kind: str = "Shared", consumers: int = 0,
           earliest: int | None = 1_700_000_000_000) -> dict:
    """A TopicStats document with Pulsar's field names (SubscriptionStats subset we read)."""
    sub: dict[str, object] = {
        "msgBacklog": backlog, "type": kind, "msgRateOut": 0.0, "unackedMessages": 0,
        "consumers": [{"consumerName": f"c{i}", "unackedMessages": 0} for i in range(consumers)],
    }
    if earliest is not None:
        sub["earliestMsgPublishTimeInBacklog"] = earliest
    return {"msgInCounter": 200, "backlogSize": 40000, "subscriptions": {subscription: sub}}


@pytest.fixture
def recorder() -> Iterator[AdminStandIn]:
    with AdminStandIn() as standin:
        yield standin


TOPIC = "persistent://my-tenant/my-ns/orders v2"
BASE = "/admin/v2/persistent/my-tenant/my-ns/orders%20v2"
STATS = f"{BASE}/stats?getEarliestTimeInBacklog=true&subscriptionBacklogSize=true"


def test_admin_time_order_expires_with_the_token(recorder: AdminStandIn,
                                                  tmp_path: Path) -> None:
    """The cut-off is 30.2 s ago on the evictor's clock: expire what is older than 31 s
    (rounded up, so nothing newer than the cut-off goes)."""
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    recorder.answer("GET", STATS, 200, _stats("sub/1", kind="Exclusive", consumers=1))
    recorder.answer("POST", f"{BASE}/subscription/sub%2F1/expireMessages/31")
    order = EvictionOrder(TOPIC, "sub/1", "time", before_publish_time=1_700_000_005.0)
    evictor = AdminEvictor(AdminSource(recorder.url, token_file=str(token)),
                           clock=lambda: 1_700_000_035.2)
    (result,) = evictor.perform([order])
    assert result == Performed(order, EvictionMethod.ADMIN_EXPIRE, None, Completion.STARTED)
    assert recorder.requests == [
        ("GET", STATS, "Bearer secret-token"),
        ("POST", f"{BASE}/subscription/sub%2F1/expireMessages/31", "Bearer secret-token"),
    ]


@pytest.mark.parametrize(("consumers", "expected"), [
    (2, (Skipped, EvictionFailure.CONSUMER_CONNECTED)),
    (0, (EvictionFailed, EvictionFailure.BROKER_ERROR))])
def test_admin_expiry_refused_by_the_broker(recorder: AdminStandIn, consumers: int,
                                            expected: tuple) -> None:
    """409: with consumers connected, PersistentSubscription.expireMessages' guard (backlog
    under 1,000 entries, oldest younger than 1.5 × s): retried next cycle; without, an
    expiry still running. Never a resetcursor."""
    recorder.answer("GET", STATS, 200, _stats("s", kind="Failover", consumers=consumers))
    recorder.answer("POST", f"{BASE}/subscription/s/expireMessages/10", 409,
                    {"reason": "Expire message by timestamp not issued on topic"})
    order = EvictionOrder(TOPIC, "s", "time", before_publish_time=1_700_000_005.0)
    (result,) = AdminEvictor(AdminSource(recorder.url), clock=lambda: 1_700_000_015.0).perform(
        [order])
    assert (type(result), result.reason) == expected
    assert [m for m, _, _ in recorder.requests] == ["GET", "POST"]


def test_admin_size_order_skips_and_follows_a_redirect(recorder: AdminStandIn) -> None:
    owner = f"{BASE}/subscription/s/skip/30?authoritative=true"
    recorder.answer("GET", STATS, 200, _stats("s", backlog=30, consumers=2))
    recorder.answer("POST", f"{BASE}/subscription/s/skip/30", 307, recorder.url + owner)
    recorder.answer("POST", owner, 204)
    order = EvictionOrder(TOPIC, "s", "size", messages=50)
    (result,) = AdminEvictor(AdminSource(recorder.url)).perform([order])
    assert result == Performed(order, EvictionMethod.ADMIN_SKIP, 30, Completion.CONFIRMED)
    assert [(m, p) for m, p, _ in recorder.requests][-2:] == [
        ("POST", f"{BASE}/subscription/s/skip/30"), ("POST", owner)]  # no more than it has


@pytest.mark.parametrize(("stats", "order_kwargs", "expected"), [
    (None, {"messages": 5}, (EvictionFailed, EvictionFailure.NOT_FOUND)),
    (_stats("other"), {"messages": 5}, (EvictionFailed, EvictionFailure.NOT_FOUND)),
    (_stats("s", backlog=0), {"messages": 5}, (Skipped, EvictionFailure.STALE_SIZE)),
    (_stats("s", earliest=1_700_000_000_000), {"before_publish_time": 1_700_000_000.0},
     (Skipped, EvictionFailure.STALE_TIME)),
    (_stats("s", backlog=0), {"before_publish_time": 1_700_000_000.0},
     (Skipped, EvictionFailure.STALE_TIME)),
    (_stats("s", backlog=200), {"messages": 5, "target_bytes": 40_000.0},
     (Skipped, EvictionFailure.STALE_SIZE)),  # the topic's 40,000 bytes: at the target
    ({"subscriptions": "garbage"}, {"messages": 5}, (EvictionFailed, EvictionFailure.OTHER)),
])
def test_admin_decides_before_posting(recorder: AdminStandIn, stats: dict | None,
                                      order_kwargs: dict, expected: tuple) -> None:
    if stats is not None:
        recorder.answer("GET", STATS, 200, stats)
    order = EvictionOrder(TOPIC, "s", "size", **order_kwargs)
    (result,) = AdminEvictor(AdminSource(recorder.url)).perform([order])
    assert (type(result), getattr(result, "reason", None)) == expected
    assert [m for m, _, _ in recorder.requests] == ["GET"]  # never reached a POST


@pytest.mark.parametrize(("status", "reason"), [
    (500, EvictionFailure.BROKER_ERROR), (412, EvictionFailure.BROKER_ERROR),
    (401, EvictionFailure.FORBIDDEN), (403, EvictionFailure.FORBIDDEN),
    (404, EvictionFailure.NOT_FOUND)])
def test_admin_post_errors_map_to_reasons(recorder: AdminStandIn, status: int,
                                          reason: EvictionFailure) -> None:
    recorder.answer("GET", STATS, 200, _stats("s", earliest=None))
    recorder.answer("POST", f"{BASE}/subscription/s/expireMessages/1", status,
                    {"reason": "Unable to expire"})
    order = EvictionOrder(TOPIC, "s", "time", before_publish_time=2e9)
    (result,) = AdminEvictor(AdminSource(recorder.url), clock=lambda: 2e9).perform([order])
    assert (type(result), result.reason) == (EvictionFailed, reason)


def test_admin_timeout_and_refusal_are_reasons(recorder: AdminStandIn) -> None:
    recorder.answer("GET", STATS, 200, _stats("s"), delay=2.0)  # would be Performed if waited for
    order = EvictionOrder(TOPIC, "s", "size", messages=1)
    (slow,) = AdminEvictor(AdminSource(recorder.url, timeout=0.3)).perform([order])
    (refused,) = AdminEvictor(AdminSource("http://127.0.0.1:9", timeout=0.3)).perform([order])
    assert (type(slow), slow.reason) == (EvictionFailed, EvictionFailure.TIMEOUT)
    assert (type(refused), refused.reason) == (EvictionFailed, EvictionFailure.BROKER_ERROR)


@pytest.mark.parametrize("content", [None, "  \n"], ids=["absent", "empty"])
def test_admin_unusable_token_file_is_other(recorder: AdminStandIn, tmp_path: Path,
                                            content: str | None) -> None:
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
    order = EvictionOrder(TOPIC, "s", "size", messages=1)
    (result,) = AdminEvictor(AdminSource(recorder.url, token_file=str(token))).perform([order])
    assert (type(result), result.reason) == (EvictionFailed, EvictionFailure.OTHER)
    assert "token_file" in result.detail
    assert recorder.requests == []


def test_admin_ignores_proxies_from_the_environment(recorder: AdminStandIn,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The admin URL is the cluster's own: a proxy meant for the outside must not carry the
    token, nor stand between the exporter and its brokers (the admin source, too)."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens: a proxied call fails
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    recorder.answer("GET", STATS, 200, _stats("s", backlog=30))
    recorder.answer("POST", f"{BASE}/subscription/s/skip/5", 204)
    order = EvictionOrder(TOPIC, "s", "size", messages=5)
    (result,) = AdminEvictor(AdminSource(recorder.url)).perform([order])
    assert result == Performed(order, EvictionMethod.ADMIN_SKIP, 5, Completion.CONFIRMED)


# --- the size cut made again from the broker's stats (actions/admin.py fresh_cut) ---------------


def _size(messages: int, target: float | None = None,
          limit: float | None = None) -> EvictionOrder:
    return EvictionOrder(TOPIC, "s", "size", messages=messages, target_bytes=target,
                         limit_bytes=limit)


@pytest.mark.parametrize(("order", "backlog", "size", "expected"), [
    (_size(38), 60, 12_000.0, 38),  # no target: the cycle's cut, at most the backlog
    (_size(80), 60, 12_000.0, 60),
    # BacklogQuotaManager: (int)((12000 − 4590) / 12000 × 60) = (int)37.05 = 37, though
    # the cycle (ceil, to reach the target) said 38: never more than the broker would
    (_size(38, 4590.0, 5100.0), 60, 12_000.0, 37),
    # a consumer caught up since the cycle: 40 left, (int)((8000 − 4590) / 8000 × 40) = 17
    (_size(38, 4590.0, 5100.0), 40, 8_000.0, 17),
    # within the limit now, though over the target: the broker would not evict at all
    (_size(38, 4590.0, 5100.0), 24, 4_900.0, "within the limit"),
    (_size(38, 4590.0), 20, 4_000.0, "within the target"),  # under the target now
    (_size(38, 4590.0), 0, 0.0, "no backlog"),
    (_size(38, 4590.0), 1, 4_600.0, "would skip nothing"),  # (int)(0.002 × 1) = 0
    (_size(38, 4590.0), 60, None, 38),  # no size in the stats: the cycle's cut
])
def test_the_size_cut_is_made_again_from_the_brokers_stats(
        order: EvictionOrder, backlog: int, size: float | None, expected: int | str) -> None:
    got = fresh_cut(order, backlog, size)
    if isinstance(expected, str):
        assert isinstance(got, str) and expected in got, got
    else:
        assert got == expected


def test_a_backlog_that_shrank_since_the_cycle_is_cut_from_the_fresh_stats(
        recorder: AdminStandIn) -> None:
    """The cycle saw 60 messages (12,000 B) and ordered 38 skipped; the stats now say 40
    messages, 8,000 B for the subscription (its own `backlogSize`): 17 are skipped."""
    stats = _stats("s", backlog=40)
    stats["subscriptions"]["s"]["backlogSize"] = 8_000
    recorder.answer("GET", STATS, 200, stats)
    recorder.answer("POST", f"{BASE}/subscription/s/skip/17", 204)
    order = _size(38, 4590.0)
    (result,) = AdminEvictor(AdminSource(recorder.url)).perform([order])
    assert result == Performed(order, EvictionMethod.ADMIN_SKIP, 17, Completion.CONFIRMED)
