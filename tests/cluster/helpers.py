"""What the cluster tests share: namespaces of their own spread over both brokers on purpose,
topics with known backlogs, producers at a known rate, and an in-process exporter over every
broker (`pipeline.scrape.in_process`: the streamed fetch, redirects followed, and the parse a
Spark task runs)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pulsar

from exporter.config.load import parse
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.runtime.cycle import CycleReport, Exporter
from tests.harness.apache_cluster import CLUSTER, ApacheCluster, ClusterBroker, while_moving
from tests.harness.pulsar import Metrics
from tests.harness.wait import poll

PAYLOAD = 200


def namespace(cluster: ApacheCluster, prefix: str, bundles: int = 8) -> str:
    ns = f"public/{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.any_broker().admin("PUT", f"/admin/v2/namespaces/{ns}",
                               {"bundles": {"numBundles": bundles}})
    return ns


def backlogged(cluster: ApacheCluster, ns: str, count: int) -> dict[str, int]:
    """`count` topics, topic i with a durable subscription `i + 3` messages behind."""
    topics = {f"persistent://{ns}/t{i:02d}": i + 3 for i in range(count)}
    broker = cluster.any_broker()
    for topic, messages in topics.items():
        broker.create_subscription(topic, "stalled")
        broker.produce(topic, messages, PAYLOAD)
    return topics


def spread(cluster: ApacheCluster, topics: list[str]) -> dict[str, str]:
    """Move the bundles holding `topics` onto the brokers in turn (unload with a
    `destinationBroker`, then a lookup loads each topic there); the owner of every topic."""
    bundles: dict[str, list[str]] = {}
    for topic in topics:
        bundles.setdefault(cluster.bundle_of(topic), []).append(topic)
    assert len(bundles) >= 2, f"all of {topics} hash to one bundle: {bundles}"
    for i, (bundle, held) in enumerate(sorted(bundles.items())):
        target = cluster.brokers[i % len(cluster.brokers)].broker_id
        unload(cluster, held[0], bundle, target)
    owners = {t: cluster.owner(t) for t in topics}
    assert set(owners.values()) == {b.broker_id for b in cluster.brokers}, owners
    return owners


def unload(cluster: ApacheCluster, topic: str, bundle: str,
           destination: str | None = None) -> None:
    """Unload `bundle` (the one holding `topic`), asked of its owner: a non-owner answers
    with a 307 whose Location drops `destinationBroker` (seen on 4.0.8).

    With a `destination`, unloaded again until a lookup finds the bundle there: the
    `destinationBroker` is a hint the race can beat. Seen on 4.0.8: the namespace's
    `__change_events` readers reconnected within 100 ms of the unload, both brokers tried to
    acquire the bundle 6 ms apart, and the old owner won it back."""
    ns = topic.split("://", 1)[1].rsplit("/", 1)[0]
    query = f"?destinationBroker={destination}" if destination else ""

    def moved() -> bool:
        # Asked again, of the owner found again, while the bundle is changing hands.
        while_moving(lambda: cluster.broker_named(cluster.owner(topic)).admin(
            "PUT", f"/admin/v2/namespaces/{ns}/{bundle}/unload{query}", timeout=60),
            f"{bundle} of {ns} unloaded")
        return destination is None or cluster.owner(topic) == destination

    poll(moved, f"{bundle} of {ns} unloaded to {destination or 'any broker'}", timeout=120,
         interval=1.0)


def exporter_for(cluster: ApacheCluster, *, admin_from: int = 0, quotas: dict | None = None,
                 brokers: list[str] | None = None) -> Exporter:
    """An exporter over every broker's /metrics (the URL an operator types), the admin REST
    and binary protocol of broker `admin_from` only."""
    via = cluster.brokers[admin_from]
    sources = {"brokers": [{"url": u, "timeout": "10s"} for u in
                           (brokers or [b.metrics_url for b in cluster.brokers])],
               "admin": {"url": via.web_url, "timeout": "10s"},
               "service_url": via.service_url}
    config = parse({"cluster": CLUSTER, "check_interval": "5s", "sources": sources,
                    "backlog_quotas": quotas or {}}, "cluster.yaml")
    brokers_ = config.sources.brokers
    return Exporter(config, brokers=BrokerScrape(brokers_, in_process(brokers_)))


def load_exporter(cluster: ApacheCluster, load_manager: dict, file: str) -> Exporter:
    """An exporter over every broker's /metrics and broker 1's admin REST, its load verdicts
    made with `load_manager` (the shedder the cluster's brokers run, and its settings)."""
    config = parse({"cluster": CLUSTER, "check_interval": "5s",
                    "sources": {"brokers": [{"url": b.metrics_url} for b in cluster.brokers],
                                "admin": {"url": cluster.brokers[0].web_url}},
                    "load_manager": load_manager}, file)
    brokers = config.sources.brokers
    return Exporter(config, brokers=BrokerScrape(brokers, in_process(brokers)))


def traffic_on(cluster: ApacheCluster, broker: ClusterBroker, prefix: str,
               names: Iterable[str]) -> tuple[str, dict[str, str], dict[str, str]]:
    """A fresh namespace of 4 bundles with a subscribed topic of each name, each in a bundle
    of its own, all owned by `broker`: (the namespace, each name's topic, each name's
    bundle)."""
    ns = namespace(cluster, prefix, bundles=4)
    topics = {name: f"persistent://{ns}/{name}" for name in names}
    for topic in topics.values():
        broker.create_subscription(topic, "s")
    bundles = {name: cluster.bundle_of(topic) for name, topic in topics.items()}
    assert len(set(bundles.values())) == len(bundles), f"topics share a bundle: {bundles}"
    for name, topic in topics.items():
        if cluster.owner(topic) != broker.broker_id:
            unload(cluster, topic, bundles[name], broker.broker_id)
    assert {cluster.owner(t) for t in topics.values()} == {broker.broker_id}
    return ns, topics, bundles


def published(report: CycleReport, ns: str) -> dict[str, list[dict]]:
    """Per topic of `ns`, every entry of the cycle's status (a topic counted twice has two).
    The namespace's system topic (`__change_events`, topic policies) is left out here."""
    seen: dict[str, list[dict]] = {}
    for entry in report.status["topics"]:
        if entry["namespace"] == ns and not entry["topic"].rsplit("/", 1)[1].startswith("__"):
            seen.setdefault(entry["topic"], []).append(entry)
    return seen


def series(report: CycleReport, name: str, topic: str, **labels: str) -> list[float]:
    return [s.value for s in Metrics(report.body.decode()).find(name, topic=topic, **labels)]


def produce_at(broker: ClusterBroker, topic: str, rate: float, stop: threading.Event,
               size: int = 100, timeouts: list[float] | None = None) -> None:
    """`rate` messages a second (paced on the clock, not by sleeps adding up) until `stop`.

    A send that times out goes on as an application's would: the client reconnects and the
    pace restarts from then (no burst to catch up). Its time (monotonic) lands in `timeouts`.
    A loaded 2-core CI once stalled a broker past the client's 30 s send timeout and
    keep-alive, and the producing thread died with it."""
    with broker.client() as client:
        producer = client.create_producer(topic, batching_enabled=False)
        began, sent = time.monotonic(), 0
        while not stop.is_set():
            try:
                producer.send(b"x" * size)
            except pulsar.Timeout:
                if timeouts is not None:
                    timeouts.append(time.monotonic())
                began, sent = time.monotonic(), 0
                continue
            sent += 1
            stop.wait(max(0.0, began + sent / rate - time.monotonic()))


def one_topic_per_broker(cluster: ApacheCluster, prefix: str) -> tuple[str, dict[str, str]]:
    """A fresh namespace of 8 bundles with 8 subscribed topics spread over the brokers, and
    for each broker id one topic it owns."""
    ns = namespace(cluster, prefix, bundles=8)
    topics = [f"persistent://{ns}/t{i}" for i in range(8)]
    for topic in topics:
        cluster.brokers[0].create_subscription(topic, "s")
    owners = spread(cluster, topics)
    return ns, {b.broker_id: next(t for t in topics if owners[t] == b.broker_id)
                for b in cluster.brokers}


@dataclass(frozen=True)
class Unload:
    """A bundle the leader's shedder picked. `destination` is the broker its placement chose:
    the source itself when the leader then kept the bundle where it was."""

    at: float  # epoch seconds, from the log line's timestamp
    bundle: str  # the hash range
    source: str
    destination: str


_BUNDLE = r"(\S+)/(0x[0-9a-f]+_0x[0-9a-f]+)"


def leader_unloads(leader: ClusterBroker, ns: str, shedder: str = "UniformLoadShedder",
                   ) -> list[Unload]:
    """The bundles of `ns` that `leader`'s `shedder` picked, oldest first: one line per bundle
    in `ModularLoadManagerImpl.doLoadShedding`, whether it then unloaded the bundle or kept
    it because placement chose the bundle's owner (CI saw four shedding runs in a row kept
    so; which broker placement picks is not what this test compares)."""
    unload_line = re.compile(r"^(\S+) .*\[" + shedder + r"\] Unloading bundle: " + _BUNDLE
                             + r" from broker (\S+) to dest broker (\S+)$")
    # The same pick, skipped: placement (`LeastLongTermMessageRate`) chose the bundle's owner.
    kept_line = re.compile(r"^(\S+) .*\[" + shedder + r"\] The destination broker (\S+) is "
                           r"the same as the current owner broker for Bundle " + _BUNDLE + "$")
    assert leader.process is not None
    found = []
    for line in leader.process.log().splitlines():
        if match := unload_line.match(line):
            at, bundle_ns, bundle, source, destination = match.groups()
        elif match := kept_line.match(line):
            at, source, bundle_ns, bundle = match.groups()
            destination = source
        else:
            continue
        if bundle_ns == ns:
            found.append(Unload(datetime.strptime(at, "%Y-%m-%dT%H:%M:%S,%f%z").timestamp(),
                                bundle, source, destination))
    return found
