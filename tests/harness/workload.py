"""A workload over the official `pulsar` client, the same for every broker the tests run
(pulsar-lite and Apache Pulsar): produce, subscribe, consume. A broker harness mixes it in
and provides `service_url`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pulsar

_CLIENT_LOG = logging.getLogger("tests.harness.client")
_CLIENT_LOG.setLevel(logging.WARNING)


class Workload:
    service_url: str
    # Client operation timeout: a real broker's first lookups are slower than pulsar-lite's.
    client_timeout: int = 10
    # How long `consume_all` waits for one more message before it counts the backlog done.
    consume_idle: float = 1.0

    @contextlib.contextmanager
    def client(self) -> Iterator[pulsar.Client]:
        client = pulsar.Client(self.service_url, operation_timeout_seconds=self.client_timeout,
                               logger=_CLIENT_LOG)
        try:
            yield client
        finally:
            client.close()

    def produce(self, topic: str, count: int, size: int = 100, *, start: int = 0) -> None:
        """`count` messages of `size` bytes, one entry each (no batching: the broker's
        backlog counts and sizes are then per message); each payload begins with its index
        (from `start`) so tests can tell them apart."""
        with self.client() as client:
            producer = client.create_producer(topic, batching_enabled=False)
            try:
                for index in range(start, start + count):
                    producer.send(str(index).encode().ljust(size, b"."))
            finally:
                producer.close()

    def create_subscription(self, topic: str, subscription: str) -> None:
        """Subscribe then close: a durable subscription with no consumer keeps a backlog."""
        self.touch_subscription(topic, subscription)

    def touch_subscription(self, topic: str, subscription: str,
                           kind: pulsar.ConsumerType = pulsar.ConsumerType.Shared) -> None:
        """Attach and detach once (also makes a restarted broker load the subscription)."""
        with self.client() as client:
            client.subscribe(topic, subscription, consumer_type=kind,
                             initial_position=pulsar.InitialPosition.Earliest).close()

    @contextlib.contextmanager
    def consumer(self, topic: str, subscription: str,
                 kind: pulsar.ConsumerType = pulsar.ConsumerType.Exclusive,
                 receiver_queue_size: int = 1) -> Iterator[pulsar.Consumer]:
        """A connected consumer held open for the duration of the block."""
        with self.client() as client:
            consumer = client.subscribe(topic, subscription, consumer_type=kind,
                                        receiver_queue_size=receiver_queue_size)
            try:
                yield consumer
            finally:
                consumer.close()

    def consume_all(self, topic: str, subscription: str, idle: float | None = None) -> int:
        """Receive and acknowledge until nothing arrives for `idle` seconds (default
        `consume_idle`); returns the count."""
        wait_ms = int((self.consume_idle if idle is None else idle) * 1000)
        done = 0
        with self.consumer(topic, subscription, pulsar.ConsumerType.Shared, 100) as consumer:
            while True:
                try:
                    message = consumer.receive(timeout_millis=wait_ms)
                except pulsar.Timeout:
                    return done
                consumer.acknowledge(message)
                done += 1
