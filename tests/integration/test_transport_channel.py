"""The usage channel against a real pulsar-lite broker: exchange, broker loss, reconnection, close.

Needs the pulsar-lite binary; without it the harness raises PulsarLiteMissing and these
tests fail (they never skip). The back-off is pure and tested here too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.config.settings import MonitoringClass
from exporter.transport.channel import (
    Backoff,
    NotSent,
    SendFailure,
    Sent,
    UsageChannel,
)
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.decoder import decode
from exporter.transport.gate import Admitted, Own, PeerGate
from tests.harness.pulsar import PulsarLite, free_port, pulsar_lite_fixture
from tests.harness.wait import poll

pulsar_lite = pulsar_lite_fixture()
FAST = {"backoff_initial": 0.2, "backoff_max": 1.0}


def _topic() -> str:
    return f"non-persistent://public/default/usage-{uuid.uuid4().hex[:8]}"


def _collect(channel: UsageChannel, wanted: set[bytes], timeout: float = 10.0) -> list[bytes]:
    """Drain until every wanted payload has arrived; all drained."""
    seen: list[bytes] = []

    def drained() -> list[bytes]:
        seen.extend(channel.drain())
        return seen

    return poll(drained, f"{sorted(wanted)} received", timeout, interval=0.05,
                until=lambda got: wanted <= set(got))


def _ready(sender: UsageChannel, *receivers: UsageChannel, timeout: float = 10.0) -> None:
    """Probe until every receiver hears the sender, then empty all queues. Measured: a
    reader that has just connected can miss a message published within ~0.1 s (its flow
    permits are not at the broker yet, and a non-persistent topic drops what no consumer
    has room for) — harmless for reports a round apart, but it would make tests flaky."""
    probe = f"probe-{uuid.uuid4().hex}".encode()
    heard: dict[int, bool] = {}

    def everyone_heard() -> bool:
        assert sender.send(probe) == Sent()
        for index, receiver in enumerate(receivers):
            heard[index] = heard.get(index, False) or probe in receiver.drain()
        return len(heard) == len(receivers) and all(heard.values())

    poll(everyone_heard, "every receiver hears the sender", timeout, interval=0.1,
         show=lambda: f"heard: {heard}")

    def fenced() -> bool:
        """A last message every reader, the sender's own included, reads through: a
        reader gets one producer's messages in order, so no probe is still to come after
        it. Sent again if a reader missed it (a drop is gone for good, never late)."""
        fence = f"fence-{uuid.uuid4().hex}".encode()
        assert sender.send(fence) == Sent()
        pending = [sender, *receivers]
        deadline = time.monotonic() + 2.0
        while pending and time.monotonic() < deadline:
            pending = [c for c in pending if fence not in c.drain()]
            time.sleep(0.02)
        return not pending

    poll(fenced, "every channel reads past the probes", timeout, interval=0)


@pytest.fixture
def channels(pulsar_lite: PulsarLite) -> Iterator[Callable[..., UsageChannel]]:
    made: list[UsageChannel] = []

    def make(topic: str, participant: str, **options: object) -> UsageChannel:
        channel = UsageChannel(pulsar_lite.service_url, topic, participant,
                               **{**FAST, **options})  # type: ignore[arg-type]
        made.append(channel)
        assert channel.wait_connected(15), f"{participant} did not connect"
        return channel

    yield make
    for channel in made:
        channel.close()


def _report(participant: str, sequence: int, usage: float) -> WireReport:
    return WireReport(participant, sequence, time.time(), (
        Entry("tenant-00001-rg", MonitoringClass.PUBLISH, Rates(usage, usage * 1000),
              Rates(100.0, 1e6)),))


# --- exchange ---------------------------------------------------------------------------------


def test_two_channels_see_each_other_and_themselves(channels) -> None:
    topic = _topic()
    a, b = channels(topic, "a"), channels(topic, "b")
    _ready(a, b)
    _ready(b, a)
    assert a.send(b"from-a") == Sent()
    assert b.send(b"from-b") == Sent()
    # A reader sees every message on the topic, its own producer's included.
    assert set(_collect(a, {b"from-a", b"from-b"})) == {b"from-a", b"from-b"}
    assert set(_collect(b, {b"from-a", b"from-b"})) == {b"from-a", b"from-b"}


def test_reports_over_the_wire_pass_the_gate_and_the_echo_is_own(channels) -> None:
    topic = _topic()
    a, b = channels(topic, "a"), channels(topic, "b")
    _ready(b, a)
    gate = PeerGate("a", interval=1.0)
    mine, theirs = _report("a", 10, 1 / 3), _report("b", 20, 42.0)
    gate.sent(mine)
    assert a.send(encode(mine)) == Sent()
    assert b.send(encode(theirs)) == Sent()
    outcomes = []
    for payload in _collect(a, {encode(mine), encode(theirs)}):
        decoded = decode(payload)
        assert isinstance(decoded, WireReport)
        outcomes.append(gate.admit(decoded, time.time()))
    assert sorted(type(o).__name__ for o in outcomes) == ["Admitted", "Own"]
    admitted = next(o for o in outcomes if isinstance(o, Admitted))
    assert admitted.report.participant == "b"
    assert any(isinstance(o, Own) for o in outcomes)


def test_a_new_reader_starts_at_the_latest_message(channels) -> None:
    topic = _topic()
    a = channels(topic, "a")
    assert a.send(b"before") == Sent()
    late = channels(topic, "late")
    _ready(a, late)
    assert a.send(b"after") == Sent()
    got = _collect(late, {b"after"})
    assert b"after" in got and b"before" not in got


def test_drain_returns_oldest_first_up_to_the_limit(channels) -> None:
    topic = _topic()
    sender, receiver = channels(topic, "s"), channels(topic, "r")
    _ready(sender, receiver)
    payloads = [f"p{i}".encode() for i in range(5)]
    for payload in payloads:
        assert sender.send(payload) == Sent()
    poll(lambda: receiver.queued, "5 queued", 10, interval=0.05, until=lambda n: n == 5)
    assert receiver.drain(limit=2) == payloads[:2]
    assert receiver.drain() == payloads[2:]
    assert receiver.drain() == []


def test_the_queue_is_bounded_and_drops_are_counted(channels) -> None:
    topic = _topic()
    sender, receiver = channels(topic, "s"), channels(topic, "r", max_queued=5)
    _ready(sender, receiver)
    payloads = [f"p{i:02d}".encode() for i in range(12)]
    for payload in payloads:
        assert sender.send(payload) == Sent()
    poll(lambda: receiver.dropped, "7 dropped", 10, interval=0.05, until=lambda n: n == 7)
    assert receiver.drain() == payloads[-5:]  # the newest are kept


@pytest.mark.parametrize("payload", ["text", None, 42])
def test_a_payload_that_is_not_bytes_is_not_sent_and_the_link_stays(channels,
                                                                     payload: object) -> None:
    channel = channels(_topic(), "x")
    outcome = channel.send(payload)  # type: ignore[arg-type]
    assert isinstance(outcome, NotSent) and outcome.reason == SendFailure.ERROR
    assert channel.connected
    assert channel.send(b"fine") == Sent()


# --- no broker, lost broker, restarted broker -------------------------------------------------


def test_constructing_without_a_broker_does_not_fail() -> None:
    channel = UsageChannel(f"pulsar://127.0.0.1:{free_port()}", _topic(), "lonely", **FAST)
    try:
        outcome = channel.send(b"x")
        assert isinstance(outcome, NotSent) and outcome.reason == SendFailure.NOT_CONNECTED
        assert not channel.connected
        assert not channel.wait_connected(1.0)
    finally:
        channel.close()
    assert not channel.thread_alive


@pytest.mark.lite  # a broker of its own
def test_broker_loss_gives_not_sent_and_a_restart_reconnects(tmp_path: Path) -> None:
    broker = PulsarLite(tmp_path / "broker").start()
    topic = _topic()
    a = UsageChannel(broker.service_url, topic, "a", **FAST)
    b = UsageChannel(broker.service_url, topic, "b", **FAST)
    try:
        assert a.wait_connected(15) and b.wait_connected(15)
        _ready(a, b)
        assert a.send(b"before") == Sent()
        assert b"before" in _collect(b, {b"before"})

        broker.stop()
        refused = poll(lambda: a.send(b"while-down"), "a send refused, the broker down", 15,
                       interval=0.05, until=lambda outcome: isinstance(outcome, NotSent))
        assert isinstance(refused, NotSent)
        assert refused.reason in {SendFailure.NOT_CONNECTED, SendFailure.TIMEOUT}
        # Keep the broker down until both channels have torn their connection down (a
        # short outage can also be ridden out by pulsar-client's own reconnection).
        poll(lambda: (a.losses, b.losses), "both connections lost", 15, interval=0.05,
             until=lambda losses: min(losses) >= 1)
        assert not a.connected and not b.connected

        broker.start()  # same data dir and ports
        poll(lambda: a.connected and b.connected, "both reconnected", 30, interval=0.05,
             show=lambda: f"reconnects: {a.reconnects}, {b.reconnects}")
        assert a.reconnects == 1 and b.reconnects == 1
        _ready(a, b)
        assert a.send(b"after") == Sent()
        assert b"after" in _collect(b, {b"after"})
    finally:
        a.close()
        b.close()
        broker.stop()
    assert not a.thread_alive and not b.thread_alive


def test_close_is_idempotent_ends_the_thread_and_refuses_sends(channels) -> None:
    channel = channels(_topic(), "c")
    assert channel.thread_alive
    channel.close()
    channel.close()
    assert not channel.thread_alive
    assert channel.closed and not channel.connected
    outcome = channel.send(b"x")
    assert isinstance(outcome, NotSent) and outcome.reason == SendFailure.CLOSED


# --- the back-off (pure) ----------------------------------------------------------------------


def test_backoff_doubles_up_to_the_maximum_and_resets() -> None:
    """The bounds, with the jitter's draw at its top."""
    backoff = Backoff(0.5, 4.0, fraction=lambda: 1.0)
    assert backoff.due(0.0)
    waits = [backoff.failed(float(t)) for t in range(6)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert not backoff.due(5.0 + 3.9) and backoff.due(5.0 + 4.0)
    backoff.succeeded()
    assert backoff.due(0.0)
    backoff.lost(10.0)
    assert not backoff.due(10.4) and backoff.due(10.5)
    assert backoff.remaining(10.25) == pytest.approx(0.25)
    assert backoff.failed(10.5) == 0.5  # a loss starts the doubling afresh


def test_backoff_waits_a_uniform_draw_below_each_bound() -> None:
    """Full jitter: each wait is the draw times the bound (0.5, 1, 2, 4, 4 …), so exporters
    that lost their broker together spread their retries; the default draw is random."""
    draws = iter([0.25, 0.5, 0.0, 0.9, 0.1, 0.5])
    backoff = Backoff(0.5, 4.0, fraction=lambda: next(draws))
    assert [backoff.failed(0.0) for _ in range(5)] == [0.125, 0.5, 0.0, 3.6, 0.4]
    backoff.lost(10.0)  # within the initial bound again
    assert backoff.remaining(10.0) == 0.25
    waits = {Backoff(0.5, 4.0).failed(0.0) for _ in range(50)}
    assert len(waits) > 40 and all(0.0 <= w < 0.5 for w in waits)


@pytest.mark.parametrize(("initial", "maximum"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0),
                                                  (float("nan"), 1.0), (1.0, float("inf"))])
def test_backoff_rejects_bad_arguments(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError):
        Backoff(initial, maximum)
