"""The Pulsar side of the usage exchange: one producer and one reader on a non-persistent topic.

A background daemon thread owns the connection: it connects (lazily — constructing never
touches the network, so it cannot fail when the broker is down), reads every payload on
the topic into a bounded queue, notices a lost connection and rebuilds client, producer
and reader after an exponential back-off. The caller only ever waits for one send
(at most `send_timeout`); while disconnected, `send` answers `NotSent` at once.

Why rebuild instead of relying on pulsar-client's own reconnection: its retries run
every few hundred milliseconds with an error log line each, outside our control; a
torn-down client is silent and the back-off (and its counters) are ours. Nothing is lost
by it: a non-persistent topic keeps no history, and the reader starts at
`MessageId.latest` so a new reader never replays old reports (PIP-82 accepts missed
reports as undercounting).

A channel's reader also receives the channel's own publications (a reader sees every
message on the topic); `drain` returns them with the rest and `gate.PeerGate` recognises
them as `Own`. Filtering them here would mean trusting a producer property, which is no
better than trusting the report's participant id, and the gate checks that properly.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pulsar

_LOG = logging.getLogger(__name__)
# pulsar-client logs every failed connection attempt at ERROR; our own log says when the
# channel loses or regains the broker. Lower this logger's level to see the client's lines.
CLIENT_LOG = logging.getLogger("exporter.transport.pulsar_client")
CLIENT_LOG.setLevel(logging.CRITICAL)


class SendFailure(StrEnum):
    """Why a payload was not sent (`NotSent.reason`), a closed set to count by."""

    CLOSED = "closed"  # close() was called
    NOT_CONNECTED = "not_connected"  # no live connection; the channel is reconnecting
    TIMEOUT = "timeout"  # the broker did not acknowledge within send_timeout
    TOO_LARGE = "too_large"  # rejected by the client as over the broker's message size
    ERROR = "error"  # anything else (detail says what)


@dataclass(frozen=True)
class Sent:
    pass


@dataclass(frozen=True)
class NotSent:
    reason: str  # a SendFailure value
    detail: str = ""


SendOutcome = Sent | NotSent
SENT = Sent()


class Backoff:
    """Exponential back-off between connection attempts with full jitter: the first attempt
    at once; after a loss or a failure a wait drawn uniformly below a bound that starts at
    `initial` and doubles per failure up to `maximum`, reset by a success. The jitter keeps
    a fleet of exporters that lost their broker together from all knocking again at once
    (AWS' "full jitter"). Pure: times are passed in, and so is the draw (`fraction`, in
    [0, 1))."""

    def __init__(self, initial: float, maximum: float,
                 fraction: Callable[[], float] = random.random):
        if not (math.isfinite(initial) and initial > 0):
            raise ValueError(f"backoff_initial must be finite and > 0, got {initial!r}")
        if not (math.isfinite(maximum) and maximum >= initial):
            raise ValueError(f"backoff_max must be finite and ≥ backoff_initial, got {maximum!r}")
        self.initial = initial
        self.maximum = maximum
        self.delay = initial  # the bound of the next wait
        self.next_attempt = -math.inf
        self._fraction = fraction

    def due(self, now: float) -> bool:
        return now >= self.next_attempt

    def remaining(self, now: float) -> float:
        return max(0.0, self.next_attempt - now)

    def lost(self, now: float) -> None:
        """A working connection went away: retry within the initial delay."""
        self.delay = self.initial
        self.next_attempt = now + self._fraction() * self.initial

    def failed(self, now: float) -> float:
        """An attempt failed: wait within the current bound (then double it). Returns the
        wait."""
        wait = self._fraction() * self.delay
        self.next_attempt = now + wait
        self.delay = min(self.delay * 2, self.maximum)
        return wait

    def succeeded(self) -> None:
        self.delay = self.initial
        self.next_attempt = -math.inf


@dataclass
class _Link:
    client: pulsar.Client
    producer: pulsar.Producer | None  # None on a read-only channel
    reader: pulsar.Reader
    broken: str | None = None  # set by send() on failure; the thread tears the link down


def _alive(link: _Link) -> bool:
    try:
        return (link.broken is None and link.reader.is_connected()
                and (link.producer is None or link.producer.is_connected()))
    except Exception:  # a closed producer or reader
        return False


class UsageChannel:
    """Publish this participant's payloads and collect everyone's (see the module docstring)."""

    def __init__(
        self,
        service_url: str,
        topic: str,
        participant: str,
        *,
        compression: pulsar.CompressionType = pulsar.CompressionType.LZ4,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_queued: int = 10_000,
        send_timeout: float = 2.0,
        operation_timeout: float = 3.0,
        poll_interval: float = 0.2,
        read_only: bool = False,
        client_options: Mapping[str, Any] | None = None,
    ):
        if max_queued < 1:
            raise ValueError(f"max_queued must be ≥ 1, got {max_queued}")
        self.service_url = service_url
        self.topic = topic
        self.participant = participant
        self.read_only = read_only  # a reader only (another party's topic): send refuses
        self._client_options = dict(client_options or {})  # authentication, TLS (client.py)
        self.losses = 0  # live connections found lost and torn down
        self.reconnects = 0  # connections re-established after a loss
        self.connect_failures = 0  # attempts that failed
        self.dropped = 0  # received payloads dropped because the queue was full
        self._compression = compression
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._clock = clock
        self._max_queued = max_queued
        self._send_timeout_ms = max(1, int(send_timeout * 1000))
        self._operation_timeout = max(1, math.ceil(operation_timeout))
        self._poll_ms = max(1, int(poll_interval * 1000))
        self._queue: deque[bytes] = deque()
        self._queue_lock = threading.Lock()
        self._link_lock = threading.Lock()  # held while sending and while swapping the link
        self._link: _Link | None = None
        self._ever_connected = False
        self._connecting = False
        self._up = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"usage-channel-{participant}", daemon=True)
        self._thread.start()

    # --- caller side ----------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        link = self._link
        return link is not None and _alive(link)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    @property
    def queued(self) -> int:
        """Payloads received and not yet drained."""
        return len(self._queue)

    @property
    def thread_alive(self) -> bool:
        return self._thread.is_alive()

    def wait_connected(self, timeout: float) -> bool:
        """Block up to `timeout` seconds for a live connection (start-up, tests)."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            if self.connected:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._up.wait(min(left, 0.1))
        return False

    def send(self, payload: bytes) -> SendOutcome:
        """Publish one payload and wait for the broker's acknowledgement. Never raises."""
        if self._stop.is_set():
            return NotSent(SendFailure.CLOSED)
        if self.read_only:
            return NotSent(SendFailure.ERROR, "read-only channel")
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            return NotSent(SendFailure.ERROR, f"payload must be bytes, not "
                                              f"{type(payload).__name__}")
        with self._link_lock:
            link = self._link
            if link is None or not _alive(link):
                if link is not None and link.broken is None:
                    link.broken = "connection lost"
                self._wake.set()
                return NotSent(SendFailure.NOT_CONNECTED, self._reconnect_status())
            try:
                assert link.producer is not None  # read-only channels returned above
                link.producer.send(bytes(payload))
            except pulsar.MessageTooBig as exc:
                return NotSent(SendFailure.TOO_LARGE, str(exc))
            except pulsar.Timeout as exc:
                link.broken = f"send timed out: {exc}"
                self._wake.set()
                return NotSent(SendFailure.TIMEOUT, str(exc))
            except Exception as exc:
                link.broken = f"send failed: {type(exc).__name__}: {exc}"
                self._wake.set()
                return NotSent(SendFailure.ERROR, f"{type(exc).__name__}: {exc}")
            return SENT

    def _reconnect_status(self) -> str:
        if self._connecting:
            return "connecting"
        return f"reconnecting, next attempt in {self._backoff.remaining(self._clock()):.1f} s"

    def drain(self, limit: int = 10_000) -> list[bytes]:
        """Payloads received since the last drain, oldest first, at most `limit`."""
        with self._queue_lock:
            count = min(max(0, limit), len(self._queue))
            return [self._queue.popleft() for _ in range(count)]

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread and close the connection. Idempotent. Waits at most `timeout`
        (a connection attempt in progress finishes first: up to operation_timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> UsageChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the connection thread ----------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                link = self._link
                if link is None:
                    self._maybe_connect()
                elif not _alive(link):
                    self._teardown(link.broken or "broker connection lost")
                else:
                    self._read(link)
        finally:
            if self._link is not None:
                self._teardown(None)

    def _maybe_connect(self) -> None:
        now = self._clock()
        if not self._backoff.due(now):
            self._wake.wait(min(self._backoff.remaining(now), 0.25))
            self._wake.clear()
            return
        self._connecting = True
        try:
            link = self._connect()
        except Exception as exc:
            self._connecting = False
            self.connect_failures += 1
            wait = self._backoff.failed(self._clock())
            log = _LOG.warning if self.connect_failures == 1 or wait >= self._backoff.maximum \
                else _LOG.debug
            log("usage channel %s: cannot connect to %s (%s); retrying in %.1f s",
                self.participant, self.service_url, exc, wait)
            return
        with self._link_lock:
            self._link = link
        self._connecting = False
        if self._stop.is_set():
            return
        self._backoff.succeeded()
        if self._ever_connected:
            self.reconnects += 1
            _LOG.warning("usage channel %s: reconnected to %s", self.participant, self.service_url)
        else:
            _LOG.info("usage channel %s: connected to %s, topic %s", self.participant,
                      self.service_url, self.topic)
        self._ever_connected = True
        self._up.set()

    def _connect(self) -> _Link:
        client = pulsar.Client(
            self.service_url,
            operation_timeout_seconds=self._operation_timeout,
            connection_timeout_ms=self._operation_timeout * 1000,
            logger=CLIENT_LOG,
            **self._client_options,
        )
        try:
            producer = None if self.read_only else client.create_producer(
                self.topic,
                compression_type=self._compression,
                send_timeout_millis=self._send_timeout_ms,
                batching_enabled=False,  # one report, one message
                block_if_queue_full=False,
            )
            reader = client.create_reader(self.topic, pulsar.MessageId.latest)
        except BaseException:
            client.close()
            raise
        return _Link(client, producer, reader)

    def _read(self, link: _Link) -> None:
        try:
            message = link.reader.read_next(timeout_millis=self._poll_ms)
        except pulsar.Timeout:
            return
        except Exception as exc:
            link.broken = f"read failed: {type(exc).__name__}: {exc}"
            return
        payload = message.data()
        with self._queue_lock:
            if len(self._queue) >= self._max_queued:
                self._queue.popleft()  # the newest reports matter most
                self.dropped += 1
            self._queue.append(payload)

    def _teardown(self, reason: str | None) -> None:
        with self._link_lock:
            link, self._link = self._link, None
        self._up.clear()
        if link is None:
            return
        if reason is not None:
            self.losses += 1
            _LOG.warning("usage channel %s: %s; reconnecting with back-off", self.participant,
                         reason)
            self._backoff.lost(self._clock())
        try:
            link.client.close()
        except Exception as exc:  # closing a client whose broker is gone may complain
            _LOG.debug("usage channel %s: closing the old client: %s", self.participant, exc)
