"""PIP-82's wire format on a real broker: the brokers' own `ResourceUsageInfo` reports read
off `non-persistent://pulsar/system/resource-usage`, beside our own report exchange on its
own topic, one Apache Pulsar 4.0.8 standalone carrying both (its usage transport publishes
every 2 s: tests/harness/apache_pulsar.py)."""

from __future__ import annotations

import threading
import time
import uuid

from exporter.config.settings import BROKER_USAGE_TOPIC, USAGE_TOPIC
from exporter.runtime.cycle import Exporter
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.pulsar import Metrics

RATE = 40  # messages per second produced into the group
SECONDS = 6


def _exporter(broker: ApachePulsar, group: str, namespace: str) -> Exporter:
    config = one_broker(
        broker, admin=True, service_url=True,
        resource_groups={group: {"publish": {"messages_per_second": 1000},
                                 "namespaces": [namespace]}},
        resource_group_engine={"participant": "it-exporter", "report_interval": "2s",
                               "stale_after": "30s"})
    return live_exporter(broker, "resource-usage", config, participate=True)


def _produce(broker: ApachePulsar, topic: str, stop: threading.Event, sent: list[int]) -> None:
    """About RATE messages a second until `stop`; `sent[0]` counts those the broker took."""
    with broker.client() as client:
        producer = client.create_producer(topic, batching_enabled=False)
        while not stop.is_set():
            producer.send(b"x" * 100)
            sent[0] += 1
            time.sleep(1 / RATE)


def _brokers_own(broker: ApachePulsar, group: str, unit: str) -> float | None:
    return broker.metrics().value(f"pulsar_resource_group_remote_usage_{unit}_used_total",
                                  ResourceGroup=group, MonitoringClass="Publish")


def _settled(broker: ApachePulsar, group: str) -> tuple[float, float] | None:
    """The broker's own remote-usage counters once unchanged over three report rounds."""
    first = (_brokers_own(broker, group, "messages"), _brokers_own(broker, group, "bytes"))
    time.sleep(6.5)
    again = (_brokers_own(broker, group, "messages"), _brokers_own(broker, group, "bytes"))
    return again if first == again and first[0] else None  # type: ignore[return-value]


def test_the_brokers_reports_read_beside_ours(apache_pulsar: ApachePulsar) -> None:
    """The group's usage as the broker reported it equals what the broker counted from the
    same reports (its pulsar_resource_group_remote_usage_*_used); no report of either kind
    is refused by the other's reader."""
    group = f"rg-{uuid.uuid4().hex[:8]}"
    namespace = apache_pulsar.create_namespace("rg-usage")
    exporter = _exporter(apache_pulsar, group, namespace)
    created = False
    try:
        assert exporter.broker_reports is not None and exporter.exchange is not None
        assert exporter.broker_reports.channel.topic == BROKER_USAGE_TOPIC
        assert exporter.exchange.channel.topic == USAGE_TOPIC
        assert exporter.broker_reports.channel.wait_connected(30)
        assert exporter.exchange.channel.wait_connected(30)
        # The group exists on the broker only now, so all its reports reach our reader.
        apache_pulsar.admin("PUT", f"/admin/v2/resourcegroups/{group}",
                            {"publishRateInMsgs": 1000, "publishRateInBytes": -1,
                             "dispatchRateInMsgs": -1, "dispatchRateInBytes": -1})
        created = True
        apache_pulsar.admin("POST", f"/admin/v2/namespaces/{namespace}/resourcegroup/{group}")
        stop, sent = threading.Event(), [0]
        started = time.time()
        producer = threading.Thread(target=_produce, args=(
            apache_pulsar, f"persistent://{namespace}/t", stop, sent))
        producer.start()
        try:
            for _ in range(SECONDS // 2):
                time.sleep(2)
                exporter.exchange_round()
                exporter.cycle()
        finally:
            stop.set()
            producer.join()
        messages, size = poll(lambda: _settled(apache_pulsar, group),
                              "the broker's own remote-usage counters settle", timeout=60,
                              interval=0)
        exporter.exchange_round()
        ours = Metrics(exporter.cycle().body.decode())
    finally:
        exporter.close()
        if created:  # a failure above stays the one reported
            apache_pulsar.admin("DELETE", f"/admin/v2/namespaces/{namespace}/resourcegroup")
            apache_pulsar.admin("DELETE", f"/admin/v2/resourcegroups/{group}")
    labels = {"resource_group": group, "monitoring_class": "publish",
              "broker": apache_pulsar.service_url}
    read = ours.value("pulsar_resource_group_broker_reported_messages_total", **labels)
    print(f"{group}: the broker counted {messages:.0f} messages, {size:.0f} bytes from its "
          f"reports; we read {read} messages from the same reports")
    assert read == messages
    assert ours.value("pulsar_resource_group_broker_reported_bytes_total", **labels) == size
    # The broker's reports count no message it was not sent (however long the rounds took).
    assert 0 < messages <= sent[0]
    last = ours.value("pulsar_quota_exporter_broker_last_report_timestamp_seconds",
                      broker=apache_pulsar.service_url)
    assert last is not None and last >= started  # a report of this test's traffic
    assert (ours.value("pulsar_quota_exporter_broker_reports_received_total") or 0) >= SECONDS / 2
    refused = ours.find("pulsar_quota_exporter_broker_reports_rejected_total")
    assert refused and all(s.value == 0 for s in refused)
    # Our own exchange ran on its own topic beside them: it sent, and refused nothing.
    assert (ours.value("pulsar_quota_exporter_usage_reports_sent_total") or 0) >= 1
    rejected = ours.find("pulsar_quota_exporter_usage_reports_rejected_total")
    assert rejected and all(s.value == 0 for s in rejected)
