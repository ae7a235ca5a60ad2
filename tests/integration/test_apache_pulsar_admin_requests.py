"""The admin side's requests per cycle on a real Apache Pulsar 4.0.8 broker, counted at a
proxy in front of its web port (engine/attention.py): after the first cycle, a topic's
stats are read only when it needs them, the listings that rarely change once a period, and
a topic's policies when first seen, while they exist, and when its broker applies limits
other than ours. The answers stay those of a walk reading everything."""

from __future__ import annotations

from collections import Counter

from exporter.runtime.cycle import CycleReport, Exporter
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.counting_proxy import CountingProxy, kind
from tests.harness.exporter_config import live_exporter, one_broker

PAYLOAD = 200
TOPICS = 12  # per namespace
LIMIT = "pulsar_storage_backlog_quota_limit"


def _exporter(broker: ApachePulsar, admin_url: str) -> Exporter:
    config = one_broker(broker, check_interval="1s", admin={"url": admin_url})
    return live_exporter(broker, "requests", config)


def _mine(report: CycleReport, namespaces: list[str]) -> dict[str, dict]:
    return {t["topic"]: t for t in report.status["topics"] if t["namespace"] in namespaces}


def _stats_read(requests: list[tuple[str, str]], namespaces: list[str]) -> set[str]:
    return {"persistent://" + p.split("/admin/v2/persistent/")[1].rsplit("/", 1)[0]
            for _, p in requests if kind(p) == "topic stats"
            and any(f"/persistent/{ns}/" in p for ns in namespaces)}


def test_a_steady_cycle_reads_stats_only_where_needed(apache_pulsar: ApachePulsar) -> None:
    broker = apache_pulsar
    namespaces = [broker.create_namespace("requests") for _ in range(2)]
    topics = [f"persistent://{ns}/t{i}" for ns in namespaces for i in range(TOPICS)]
    for topic in topics:
        broker.create_subscription(topic, "s")
    over = topics[0]
    broker.produce(over, 30, size=PAYLOAD)  # over its namespace's 2,000 B (below)
    for topic in topics[1:4]:
        broker.produce(topic, 2, size=PAYLOAD)  # within it
    # The quota comes after the messages: the broker's own check (every 2 s here) holds a
    # producer that is over it, and one caught mid-way would time out its sends.
    broker.admin("POST", f"/admin/v2/namespaces/{namespaces[0]}/backlogQuota"
                 "?backlogQuotaType=destination_storage",
                 {"limitSize": 10 * PAYLOAD, "policy": "producer_request_hold"})
    # The broker applies a namespace's policy to its loaded topics asynchronously; until a
    # topic prints the new limit, the exporter doubts it and reads its stats again
    # (engine/attention.py), which the steady cycle below must not need to.
    poll(lambda: all(broker.metrics().value(LIMIT, topic=t) == 10 * PAYLOAD
                     for t in topics[:TOPICS]),
         f"every topic of {namespaces[0]} printing its limit", timeout=60)
    with CountingProxy(broker.web_url) as proxy:
        exporter = _exporter(broker, proxy.url)
        try:
            first = exporter.cycle()
            read_first = _stats_read(proxy.requests, namespaces)
            proxy.take()
            poll(lambda: over in {t["topic"] for t in exporter.cycle().status["topics"]
                                  if t["exceeded"]}, "the topic over its quota decided")
            proxy.take()
            steady = exporter.cycle()
            requests = list(proxy.requests)
            counted = proxy.take()
        finally:
            exporter.close()
        # What the same cycle reads when it reads everything: a fresh exporter's first cycle.
        everything = _exporter(broker, broker.web_url)
        try:
            full = everything.cycle()
        finally:
            everything.close()

    assert read_first == set(topics)  # the first cycle (a one-shot `check`) reads every topic
    namespaces_now = [ns for tenant in broker.admin("GET", "/admin/v2/tenants")
                      for ns in broker.admin("GET", f"/admin/v2/namespaces/{tenant}")]
    print(f"steady cycle, {len(namespaces_now)} namespaces, 1 broker:", dict(counted))
    # In our namespaces, the topic over its quota only: its stats, and its policies (read
    # before anything acts on it). Other tests' topics may need attention too.
    assert _stats_read(requests, namespaces) == {over}
    assert [p for _, p in requests if kind(p) == "topic backlogQuotaMap"
            and any(f"/persistent/{ns}/" in p for ns in namespaces)] == [
        over.replace("persistent://", "/admin/v2/persistent/") + "/backlogQuotaMap"]
    per_topic = sum(n for k, n in counted.items() if k.startswith("topic "))
    assert counted - Counter({k: n for k, n in counted.items() if k.startswith("topic ")}) == \
        Counter({"/admin/v2/tenants": 1, "namespace topics": len(namespaces_now),
                 "namespace bundles": len(namespaces_now), "cluster brokers": 1,
                 "broker ownedNamespaces": 1})
    # brokers (1) + 2 × namespaces + the tenant and broker listings, + the per-topic reads
    assert sum(counted.values()) == 1 + 2 * len(namespaces_now) + 2 + per_topic

    ours, theirs = _mine(steady, namespaces), _mine(full, namespaces)
    assert set(topics) <= set(ours) & set(theirs)
    for topic in topics:
        for key in ("backlog_messages", "backlog_size_bytes", "exceeded", "limit_sources",
                    "quota_source", "action"):
            assert ours[topic][key] == theirs[topic][key], (topic, key)
    assert {t for t in topics if ours[t]["exceeded"]} == {over}
    assert first is not None


def test_a_topic_policy_set_later_is_read_because_the_broker_applies_it(
        apache_pulsar: ApachePulsar) -> None:
    """No walk re-reads every topic's map: the topic whose broker prints a limit other
    than the one resolved here has its map read, and is decided by it."""
    broker = apache_pulsar
    namespace = broker.create_namespace("later")
    topics = [f"persistent://{namespace}/t{i}" for i in range(TOPICS)]
    for topic in topics:
        broker.create_subscription(topic, "s")
    target = topics[5]
    broker.produce(target, 20, size=PAYLOAD)
    with CountingProxy(broker.web_url) as proxy:
        exporter = _exporter(broker, proxy.url)
        try:
            exporter.cycle()
            exporter.cycle()
            proxy.take()
            path = target.replace("persistent://", "/admin/v2/persistent/")
            broker.admin("POST", f"{path}/backlogQuota?backlogQuotaType=destination_storage",
                         {"limitSize": 5 * PAYLOAD, "policy": "producer_request_hold"})
            report = poll(lambda: (r := exporter.cycle()) and _mine(r, [namespace])[target][
                "exceeded"] and r, "the topic's own quota in force", timeout=60, interval=0.5)
            maps = [p for _, p in proxy.requests if kind(p) == "topic backlogQuotaMap"
                    and f"/{namespace}/" in p]
        finally:
            exporter.close()
    decision = _mine(report, [namespace])[target]
    assert decision["limit_sources"]["size"] == "pulsar:topic"
    assert set(maps) == {f"{path}/backlogQuotaMap"}, maps
