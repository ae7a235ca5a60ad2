"""Evictions over the binary protocol (pulsar-client; works on pulsar-lite, which has no
admin API): attach to the subscription as a `Shared` consumer, then `seek(publish_time_ms)`
for a cut-off, or receive and individually acknowledge N messages for a skip (Shared forbids
cumulative acks).

Why the binary path looks before it leaps (measured on pulsar-lite 0.2):
- Subscribing creates missing topics *and* subscriptions, so a missing one cannot be detected
  by attaching, and attaching would leave a durable subscription behind that grows a backlog.
  Orders are made only for subscriptions the cycle saw, with the connected consumers the
  cycle's /metrics reported (`pulsar_subscription_consumers_count`); /metrics carries no
  subscription type, so connected consumers mean Skipped(consumer_connected), and an order
  whose count the broker did not report is Skipped too (it cannot be told safe).
- `seek(t)` moves the cursor backwards as readily as forwards (both Pulsar and pulsar-lite), so
  we first read the oldest unacknowledged message and seek only when it is older than the cut.
- pulsar-lite refuses a seek to a time after its newest message by dropping the connection, and
  the client then reports success; so we read the head again and, if it is still older than
  the cut, acknowledge the remaining old messages one by one (bounded by `budget`).
- A seek that ends in `ResultDisconnected` is "done, verify at the next refresh" (UNCONFIRMED).
- A size cut is bounded by the backlog now, not only the cycle's count (a consumer may have
  caught up since): the binary protocol has no stats call in pulsar-client, but the head's
  message id and `get_last_message_id()` give the entries between them when both are on one
  ledger (pulsar-lite keeps one per topic, measured: ledger 0, an entry per message unbatched).
  The cut is then at most that less what the cycle's cut would leave (`keep_messages`),
  `fresh_skip`; on several ledgers (Apache Pulsar, which has the admin path) the cycle's count
  stands. A batch is one entry, so with batching the bound under-counts: it cuts less, never more.
Pulsar's seek by time keeps a message published exactly at the cut (it resets to the entry after
the newest one with `publishTime < t`, PersistentMessageFinder), which is our contract too.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pulsar

from exporter.actions.orders import (
    Completion,
    EvictionFailed,
    EvictionFailure,
    EvictionMethod,
    EvictionOrder,
    EvictionResult,
    NothingToEvict,
    Performed,
    Skipped,
    lease_lost,
    unfenced,
)

log = logging.getLogger(__name__)
_CLIENT_LOG = logging.getLogger(__name__ + ".client")  # the C++ client's own chatter
_CLIENT_LOG.setLevel(logging.WARNING)
SUBSCRIBER_NAME = "pulsar-quota-exporter-evictor"


def _is_disconnect(exc: Exception) -> bool:
    return "Disconnected" in str(exc)


def _client_failure(exc: Exception) -> tuple[EvictionFailure, str]:
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, pulsar.Timeout):
        return EvictionFailure.TIMEOUT, detail
    if isinstance(exc, pulsar.ConsumerBusy):
        return EvictionFailure.CONSUMER_CONNECTED, detail
    if isinstance(exc, pulsar.AuthorizationError | pulsar.AuthenticationError):
        return EvictionFailure.FORBIDDEN, detail
    if isinstance(exc, pulsar.TopicNotFound | pulsar.SubscriptionNotFound):
        return EvictionFailure.NOT_FOUND, detail
    if isinstance(exc, pulsar.PulsarException):
        return EvictionFailure.BROKER_ERROR, detail
    return EvictionFailure.OTHER, detail


def fresh_skip(order: EvictionOrder, head: pulsar.MessageId,
               last: pulsar.MessageId) -> int | str:
    """How many messages a size order acknowledges, bounded by the backlog seen now (module
    docstring); a reason instead when the backlog is already within what the cut leaves."""
    assert order.messages is not None
    if (order.keep_messages is None or head.ledger_id() != last.ledger_id()
            or last.entry_id() < head.entry_id()):
        return order.messages  # no count of the backlog now: the cycle's stands
    backlog = last.entry_id() - head.entry_id() + 1
    cut = min(order.messages, backlog - order.keep_messages)
    if cut <= 0:
        return (f"the backlog is at most {backlog} entries now, within the "
                f"{order.keep_messages} the cycle's cut leaves (it ordered {order.messages} "
                "skipped)")
    return cut


class BinaryEvictor:
    """Evicts over the binary protocol, only on a subscription with no consumer connected
    (`EvictionOrder.consumers == 0`); otherwise Skipped (module docstring)."""

    def __init__(self, service_url: str, *, timeout: float = 5.0,
                 budget: float = 5.0, idle_wait: float = 1.0,
                 client_options: Mapping[str, Any] | None = None):
        """`client_options`: pulsar.Client's authentication and TLS (transport/client.py)."""
        self._url = service_url
        self._client_options = dict(client_options or {})
        self._timeout = timeout  # per broker operation
        self._budget = budget  # per order, for acknowledging message by message
        self._idle_wait = idle_wait  # no message within this: the backlog is exhausted

    def perform(self, orders: Sequence[EvictionOrder],
                fence: Callable[[], bool] = unfenced) -> tuple[EvictionResult, ...]:
        if not orders:
            return ()
        try:
            client = pulsar.Client(
                self._url, operation_timeout_seconds=max(1, math.ceil(self._timeout)),
                connection_timeout_ms=int(self._timeout * 1000), logger=_CLIENT_LOG,
                **self._client_options)
        except (ValueError, pulsar.PulsarException) as exc:
            return tuple(EvictionFailed(o, EvictionFailure.OTHER, f"service_url: {exc}")
                         for o in orders)
        try:
            return tuple(self._one(client, o) if fence() else lease_lost(o) for o in orders)
        finally:
            client.close()

    def _one(self, client: pulsar.Client, order: EvictionOrder) -> EvictionResult:
        if order.consumers is None:
            return Skipped(order, EvictionFailure.OTHER, "the broker reported no consumer count "
                           "for the subscription: cannot tell whether evicting is safe")
        if order.consumers:
            return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                           f"{order.consumers} consumer(s) connected")
        try:
            if order.messages is not None:
                return self._skip(client, order)
            return self._seek(client, order)
        except Exception as exc:
            reason, detail = _client_failure(exc)
            if reason is EvictionFailure.CONSUMER_CONNECTED:
                return Skipped(order, reason, detail)
            return EvictionFailed(order, reason, detail)

    @contextmanager
    def _attached(self, client: pulsar.Client, order: EvictionOrder,
                  queue: int) -> Iterator[pulsar.Consumer]:
        consumer = client.subscribe(order.topic, order.subscription,
                                    consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=queue, consumer_name=SUBSCRIBER_NAME)
        try:
            yield consumer
        finally:
            try:
                consumer.close()  # also flushes pending acknowledgements
            except pulsar.PulsarException as exc:
                log.warning("closing eviction consumer on %s: %s", order.topic, exc)

    def _receive(self, consumer: pulsar.Consumer, wait: float) -> pulsar.Message | None:
        try:
            return consumer.receive(timeout_millis=max(1, int(wait * 1000)))
        except pulsar.Timeout:
            return None

    def _drain(self, consumer: pulsar.Consumer, keep: Callable[[pulsar.Message], bool],
               limit: int | None) -> tuple[int, Completion]:
        """Acknowledge messages while `keep(message)`, at most `limit`, within the budget."""
        deadline = time.monotonic() + self._budget
        done = 0
        while limit is None or done < limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return done, Completion.PARTIAL
            message = self._receive(consumer, min(self._idle_wait, remaining))
            if message is None:
                return done, (Completion.CONFIRMED if time.monotonic() < deadline
                              else Completion.PARTIAL)
            if not keep(message):
                return done, Completion.CONFIRMED  # left unacknowledged: redelivered
            consumer.acknowledge(message)
            done += 1
        return done, Completion.CONFIRMED

    def _skip(self, client: pulsar.Client, order: EvictionOrder) -> EvictionResult:
        assert order.messages is not None
        with self._attached(client, order, queue=min(order.messages, 1000)) as consumer:
            last = consumer.get_last_message_id()
            head = self._receive(consumer, self._idle_wait)
            if head is None:
                return NothingToEvict(order, "no backlog")
            count = fresh_skip(order, head.message_id(), last)
            if isinstance(count, str):  # the head goes back unacknowledged on close
                return Skipped(order, EvictionFailure.STALE_SIZE, count)
            consumer.acknowledge(head)
            done, completion = self._drain(consumer, lambda _m: True, count - 1)
        return Performed(order, EvictionMethod.ACKNOWLEDGE, done + 1, completion)

    def _seek(self, client: pulsar.Client, order: EvictionOrder) -> EvictionResult:
        cut = order.cutoff_ms
        assert cut is not None
        with self._attached(client, order, queue=1) as consumer:
            head = self._receive(consumer, self._idle_wait)
            if head is None or head.publish_timestamp() >= cut:
                what = "no backlog" if head is None else "oldest message is not before the cut-off"
                return NothingToEvict(order, what)
            try:
                consumer.seek(cut)
            except pulsar.PulsarException as exc:
                if not _is_disconnect(exc):
                    raise
                return Performed(order, EvictionMethod.SEEK, None, Completion.UNCONFIRMED)
        with self._attached(client, order, queue=1) as consumer:  # verify: one message touched
            head = self._receive(consumer, self._idle_wait)
            if head is None or head.publish_timestamp() >= cut:
                return Performed(order, EvictionMethod.SEEK, None, Completion.CONFIRMED)
            consumer.acknowledge(head)
        # The seek did not take (pulsar-lite: a cut after its newest message): acknowledge.
        with self._attached(client, order, queue=100) as consumer:
            done, completion = self._drain(consumer, lambda m: m.publish_timestamp() < cut, None)
        return Performed(order, EvictionMethod.ACKNOWLEDGE, done + 1, completion)
