"""Batching and the backlog-age estimate, on a real Apache Pulsar 4.0.8.

Pulsar's subscription backlog counts entries (a batch is one) while its publish counter
counts messages. The estimate (engine/backlog/agetable.py), used where no source reports the age,
must not read a batched backlog as `batch size` times younger than it is. The broker's own
age is hidden from the exporter here (its PIP-323 lines dropped: the view of a broker older
than 3.2 without an admin source) and compared with the admin REST's precise age."""

from __future__ import annotations

import time

from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import BrokerData, source_tables
from tests.harness.apache_pulsar import ApachePulsar
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.livebrokers import LiveBrokers

BATCH = 10
BURSTS, PER_BURST, GAP = 3, 100, 4.0  # seconds between bursts


class WithoutBrokerAge(LiveBrokers):
    """The real broker's /metrics without `pulsar_storage_backlog_age_seconds`."""

    def run(self) -> BrokerData:
        data = super().run()
        kept = "\n".join(line for line in self.last_body.splitlines()
                         if "backlog_age_seconds" not in line)
        tables = source_tables([parse_text(kept.encode())])
        return BrokerData(((self.broker.metrics_url, tables),), data.health,
                          {self.broker.metrics_url: tables.malformed})


def _burst(broker: ApachePulsar, topic: str) -> None:
    with broker.client() as client:
        producer = client.create_producer(topic, batching_enabled=True,
                                          batching_max_messages=BATCH,
                                          batching_max_publish_delay_ms=1000)
        for _ in range(PER_BURST):
            producer.send_async(b"b" * 100, None)
        producer.flush()
        producer.close()


def test_a_batched_backlog_is_not_read_as_younger(apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("batched")
    topic = f"persistent://{namespace}/t"
    apache_pulsar.create_subscription(topic, "stalled")
    exporter = live_exporter(apache_pulsar, "batching",
                             one_broker(apache_pulsar, check_interval="1s"),
                             brokers=WithoutBrokerAge(apache_pulsar))
    try:
        exporter.cycle()
        first = time.time()
        for burst in range(BURSTS):
            _burst(apache_pulsar, topic)
            until = first + (burst + 1) * GAP
            while time.time() < until:  # the age table learns when the counter moved
                exporter.cycle()
                time.sleep(0.5)
        decision = {t["topic"]: t for t in exporter.cycle().status["topics"]}[topic]
        precise = apache_pulsar.topic_stats(topic)["oldestBacklogMessageAgeSeconds"]
        entries = apache_pulsar.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"]
    finally:
        exporter.close()
    ours = decision["backlog_age_seconds"]
    print(f"{BURSTS * PER_BURST} messages in {entries} entries: the broker says the oldest "
          f"is {precise} s old, our estimate {ours} s ({decision['backlog_age_source']})")
    assert entries == BURSTS * PER_BURST // BATCH  # the broker counts entries
    assert decision["backlog_age_source"] == "estimated"
    # Read as messages the backlog would be 30 of 300: the last burst, ~GAP s old, not
    # ~BURSTS * GAP. The table learns each second, the broker's age is in whole seconds.
    assert abs(ours - precise) <= 2.5, (ours, precise)
