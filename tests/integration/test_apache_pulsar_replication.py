"""Geo-replication between two real Apache Pulsar 4.0.8 clusters (a standalone each, `c1` and
`c2`, each knowing the other, `geo/ns` replicated both ways): the `replication_dispatch`
class of a resource group (Pulsar master's `ReplicationDispatch`) measured from what the
4.0.8 broker prints of its replicators, `pulsar_replication_{rate,throughput}_out` per
remote cluster, against the replicator's own cumulative counters over the admin REST
(`ReplicatorStats.msgOutCount`, `bytesOutCount`: what master's `ResourceGroupService`
charges the class with). 4.0.8 itself has no replication class: this is our measure of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.pulsar import Metrics

# Two Apache Pulsar standalones of its own, replicating.
pytestmark = pytest.mark.apache

NAMESPACE = "geo/ns"
RATE = 40  # messages per second published on c1
LIMIT = 20  # the group's replication quota, messages per second


@pytest.fixture(scope="module")
def geo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApachePulsar, ApachePulsar]]:
    """Two clusters, small heaps, no usage transport (not needed here: faster start)."""
    brokers = [ApachePulsar(Path(tmp_path_factory.mktemp(name)), heap="512m",
                            direct_memory="512m", resource_usage_transport=False,
                            overrides={"clusterName": name}) for name in ("c1", "c2")]
    try:
        for broker in brokers:
            broker.start()
        for here, there in (brokers, brokers[::-1]):
            here.admin("PUT", f"/admin/v2/clusters/{there.cluster}",
                       {"serviceUrl": there.web_url, "brokerServiceUrl": there.service_url})
            here.admin("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["c1", "c2"]})
            here.admin("PUT", f"/admin/v2/namespaces/{NAMESPACE}")
            here.admin("POST", f"/admin/v2/namespaces/{NAMESPACE}/replication", ["c1", "c2"])
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            broker.stop()


def _publish(broker: ApachePulsar, topic: str, stop: threading.Event) -> None:
    with broker.client() as client:
        producer = client.create_producer(topic, batching_enabled=False)
        next_at = time.monotonic()
        while not stop.is_set():
            producer.send(b"x" * 100)
            next_at += 1 / RATE
            stop.wait(max(0.0, next_at - time.monotonic()))


def _sent(broker: ApachePulsar, topic: str) -> tuple[float, int, int]:
    """(when, messages, bytes) the topic's replicator to c2 has sent, by its own counters."""
    stats = broker.topic_stats(topic)["replication"]["c2"]
    return time.monotonic(), stats["msgOutCount"], stats["bytesOutCount"]


def test_replication_usage_is_what_the_replicators_sent(
        geo: tuple[ApachePulsar, ApachePulsar]) -> None:
    c1, _ = geo
    topic = f"persistent://{NAMESPACE}/pay"
    config = one_broker(c1, cluster="c1", resource_groups={"geo": {
        "replication_dispatch": {"messages_per_second": LIMIT}, "namespaces": [NAMESPACE]}})
    exporter = live_exporter(c1, "replication", config)
    stop = threading.Event()
    producer = threading.Thread(target=_publish, args=(c1, topic, stop))
    producer.start()
    try:
        poll(lambda: _sent(c1, topic)[1], "the replicator to c2 sending", timeout=60,
             ignore=(KeyError, OSError))
        time.sleep(4)  # two stats periods: the printed rates are the steady ones
        exporter.cycle()  # the usage counters' baseline
        before = _sent(c1, topic)
        reports = []
        for _ in range(6):
            time.sleep(2.5)
            reports.append(exporter.cycle())
        after = _sent(c1, topic)
    finally:
        stop.set()
        producer.join()
        exporter.close()
    seconds = after[0] - before[0]
    sent_messages, sent_bytes = (after[1] - before[1]) / seconds, (after[2] - before[2]) / seconds
    views = [next(g for g in r.status["resource_groups"] if g["resource_group"] == "geo"
                  and g["monitoring_class"] == "replication_dispatch") for r in reports]
    messages = [v["usage"]["messages_per_second"] for v in views]
    byte_rates = [v["usage"]["bytes_per_second"] for v in views]
    print(f"replicator counters: {sent_messages:.1f} msg/s, {sent_bytes:.0f} B/s; "
          f"ours per cycle: {messages} msg/s, {byte_rates} B/s")
    assert sent_messages == pytest.approx(RATE, rel=0.25)  # the workload did replicate
    assert sum(messages) / len(messages) == pytest.approx(sent_messages, rel=0.2)
    assert sum(byte_rates) / len(byte_rates) == pytest.approx(sent_bytes, rel=0.2)
    last = Metrics(reports[-1].body.decode())
    ratio = last.value("pulsar_resource_group_utilization_ratio", resource_group="geo",
                       monitoring_class="replication_dispatch", resource="messages")
    assert ratio == pytest.approx(messages[-1] / LIMIT, rel=1e-3)
    publish = next(g for g in reports[-1].status["resource_groups"]
                   if g["resource_group"] == "geo" and g["monitoring_class"] == "publish")
    assert publish["usage"]["messages_per_second"] == pytest.approx(RATE, rel=0.3)
