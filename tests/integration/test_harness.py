"""The pulsar-lite harness itself: start, real /metrics, restart with the same data dir."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from tests.harness.pulsar import Metrics, PulsarLite, PulsarLiteMissing, pulsar_lite_fixture

pulsar_lite = pulsar_lite_fixture()


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_missing_binary_raises_instead_of_skipping(tmp_path: Path) -> None:
    broker = PulsarLite(tmp_path, binary=tmp_path / "no-such-pulsar-lite")
    with pytest.raises(PulsarLiteMissing):
        broker.start()
    assert not broker.running


def test_listens_on_loopback_ports_it_chose(pulsar_lite: PulsarLite) -> None:
    assert pulsar_lite.running
    assert pulsar_lite.broker_port != pulsar_lite.metrics_port
    assert pulsar_lite.service_url == f"pulsar://127.0.0.1:{pulsar_lite.broker_port}"
    with socket.create_connection(("127.0.0.1", pulsar_lite.broker_port), timeout=2):
        pass
    assert f'addr = "127.0.0.1:{pulsar_lite.metrics_port}"' in pulsar_lite.config_path.read_text()


def test_metrics_show_a_produced_topic_and_its_backlog(pulsar_lite: PulsarLite) -> None:
    topic = _topic("harness")
    namespace, short = "public/default", topic.rsplit("/", 1)[1]
    pulsar_lite.create_subscription(topic, "stalled")
    pulsar_lite.produce(topic, 12, size=64)

    # Counters are live; the backlog gauge follows at the next refresh.
    pulsar_lite.wait_for_metric(
        lambda m: m.value("pulsar_in_messages_total", namespace=namespace, topic=short) == 12)
    pulsar_lite.wait_for_backlog(topic, "stalled", 12)
    metrics = pulsar_lite.metrics()
    backlog = metrics.find("pulsar_subscription_back_log", topic=short)
    assert [s.labels for s in backlog] == [{
        "cluster": "pulsar-lite", "namespace": namespace, "partition": "-1",
        "subscription": "stalled", "topic": short}]
    assert metrics.subscription("pulsar_subscription_consumers_count", topic, "stalled") == 0


def test_consume_all_empties_the_backlog(pulsar_lite: PulsarLite) -> None:
    topic = _topic("drain")
    pulsar_lite.create_subscription(topic, "reader")
    pulsar_lite.produce(topic, 7)
    assert pulsar_lite.consume_all(topic, "reader", idle=0.5) == 7
    pulsar_lite.wait_for_metric(
        lambda m: m.subscription("pulsar_subscription_back_log", topic, "reader") == 0
        and m.subscription("pulsar_lite_subscription_acked_messages_total", topic, "reader") == 7)


def test_wait_for_metric_raises_with_the_series_it_saw(pulsar_lite: PulsarLite) -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match="not met within"):
        pulsar_lite.wait_for_metric(lambda m: m.value("no_such_metric") == 1, timeout=0.5)
    assert time.monotonic() - started < 5


def test_metrics_parser_reads_labels_and_values() -> None:
    body = ('# TYPE x gauge\nx{a="1",b="q\\"uote"} 2.5\ny 3\n'
            'pulsar_subscription_back_log{namespace="t/n",topic="x",subscription="s"} 7\n')
    metrics = Metrics(body)
    assert metrics.value("x", a="1") == 2.5
    assert metrics.find("x")[0].labels["b"] == 'q\\"uote'
    assert metrics.value("y") == 3
    assert metrics.subscription("pulsar_subscription_back_log", "persistent://t/n/x", "s") == 7


@pytest.mark.lite  # a broker of its own
def test_restart_keeps_backlog_and_acknowledgements(tmp_path: Path) -> None:
    topic = _topic("restart")
    with PulsarLite(tmp_path / "broker") as broker:
        ports = (broker.broker_port, broker.metrics_port)
        broker.create_subscription(topic, "kept")
        broker.produce(topic, 30)
        with broker.consumer(topic, "kept", pulsar.ConsumerType.Shared, 10) as consumer:
            for _ in range(10):
                consumer.acknowledge(consumer.receive(timeout_millis=5000))
        broker.wait_for_backlog(topic, "kept", 20)

        broker.restart()
        assert (broker.broker_port, broker.metrics_port) == ports
        # pulsar-lite loads subscriptions lazily after a restart: attach once to see it again.
        broker.touch_subscription(topic, "kept")
        broker.wait_for_backlog(topic, "kept", 20)
        with broker.consumer(topic, "kept", pulsar.ConsumerType.Shared) as consumer:
            assert consumer.receive(timeout_millis=5000).data().startswith(b"10.")
    assert not broker.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", ports[0]), timeout=1).close()
