"""Two subscriptions of one topic at different ages on a real Apache Pulsar 4.0.8 broker:
each published with its own backlog age (PIP-492's metric, which 4.0.8 does not print).
The one holding the topic's oldest message has the broker's measure; the other is
estimated from the publish counters the exporter watched while it was produced."""

from __future__ import annotations

import time

import pulsar

from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.pulsar import Metrics

AGE = "pulsar_subscription_storage_backlog_age_seconds"
ESTIMATED = "pulsar_subscription_storage_backlog_age_estimated"
SLACK = 2.5  # an estimate: a cycle's spacing (the publish counters' resolution)
LAG = 3.5  # the broker's measure: its 2 s quota-check interval and whole seconds
GAP = 10  # seconds between the two batches


def test_two_subscriptions_of_one_topic_at_their_own_ages(apache_pulsar: ApachePulsar) -> None:
    broker = apache_pulsar
    namespace = broker.create_namespace("subages")
    broker.admin("POST", f"/admin/v2/namespaces/{namespace}/backlogQuota"
                 "?backlogQuotaType=message_age",
                 {"limitTime": 3600, "policy": "producer_request_hold"})
    topic = f"persistent://{namespace}/t"
    broker.create_subscription(topic, "old")
    config = one_broker(broker, check_interval="1s", admin=True,
                        exposition={"subscription_backlog_age": True})
    exporter = live_exporter(broker, "subages", config)
    try:
        for _ in range(2):
            exporter.cycle()
        broker.produce(topic, 10)
        first = time.time()
        while time.time() < first + GAP:
            exporter.cycle()
            time.sleep(0.5)
        with broker.client() as client:  # "young" starts at the end: only what follows
            client.subscribe(topic, "young", initial_position=pulsar.InitialPosition.Latest
                             ).close()
        broker.produce(topic, 10)
        second = time.time()

        def measured() -> Metrics | None:
            metrics = Metrics(exporter.cycle().body.decode())
            ages = {s: metrics.value(AGE, topic=topic, subscription=s) for s in ("old", "young")}
            return metrics if None not in ages.values() and metrics.value(
                ESTIMATED, topic=topic, subscription="old") == 0.0 else None

        metrics = poll(measured, "both subscriptions aged, the oldest measured by the broker",
                       timeout=30, interval=0.5)
        now = time.time()
    finally:
        exporter.close()
    old = metrics.value(AGE, topic=topic, subscription="old")
    young = metrics.value(AGE, topic=topic, subscription="young")
    print(f"old {old:.1f} s (true ≥ {now - first:.1f}), young {young:.1f} s "
          f"(true {now - second:.1f})")
    assert metrics.value(ESTIMATED, topic=topic, subscription="young") == 1.0
    assert abs(young - (now - second)) <= SLACK
    assert now - first - LAG <= old <= now - first and old > young + GAP / 2
    assert metrics.value("pulsar_storage_backlog_age_seconds", topic=topic) == old
