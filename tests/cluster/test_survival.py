"""A broker of the real cluster dies (SIGKILL: no goodbye, its metadata session lingers until
it expires) under a running exporter, and comes back. Last in this folder by name; it
leaves both brokers running, as it found them."""

from __future__ import annotations

import time

from tests.cluster.helpers import backlogged, exporter_for, namespace, published, spread
from tests.harness.apache_cluster import ApacheCluster
from tests.harness.pulsar import Metrics
from tests.harness.wait import poll

# Pulsar's metadataStoreSessionTimeoutMillis (30 s, the harness keeps the default): the
# dead broker's bundles are free for the survivor only once its session has expired.
SESSION_TIMEOUT = 30.0


def test_a_broker_dies_its_topics_move_to_the_survivor_and_it_rejoins(
        apache_cluster: ApacheCluster) -> None:
    """Every cycle from the kill to the rejoin publishes every topic exactly once with the
    backlog the test made; the dead broker's source is down with reason `refused`; the
    survivor takes its topics (the exporter's admin walk through the survivor loads them
    once the session expires) and its fresh numbers win over the dead broker's last good
    ones; restarted on its ports, the broker is a member again and its source up."""
    ns = namespace(apache_cluster, "survival")
    topics = backlogged(apache_cluster, ns, 8)
    owners = spread(apache_cluster, list(topics))
    survivor, victim = apache_cluster.brokers
    theirs = sorted(t for t, o in owners.items() if o == victim.broker_id)
    assert theirs, owners
    exporter = exporter_for(apache_cluster)

    def sources(report) -> dict[str, dict]:
        return {s["url"]: s for s in report.status["sources"]}

    def once_each(report) -> dict[str, int]:
        seen = published(report, ns)
        assert all(len(e) == 1 for e in seen.values()), seen
        return {t: e[0]["backlog_messages"] for t, e in seen.items()}

    try:
        poll(lambda: once_each(exporter.cycle()) == topics, "every topic published once",
             timeout=90)
        victim.kill()
        killed = time.monotonic()
        down = exporter.cycle()
        assert once_each(down) == topics  # the dead broker's last good numbers stay
        dead = sources(down)[victim.metrics_url]
        assert not dead["up"] and "ConnectionRefusedError" in dead["error"], dead
        assert sources(down)[survivor.metrics_url]["up"]

        def moved() -> bool:
            report = exporter.cycle()
            assert once_each(report) == topics, "a topic vanished or doubled mid-move"
            assert not sources(report)[victim.metrics_url]["up"]
            listed = Metrics(survivor.metrics_text())
            return all(listed.find("pulsar_subscription_back_log", topic=t) for t in theirs)

        poll(moved, "the survivor serving the dead broker's topics",
             timeout=SESSION_TIMEOUT + 120, interval=2.0)
        print(f"survivor serves them {time.monotonic() - killed:.0f} s after the kill")
        assert {apache_cluster.owner(t) for t in topics} == {survivor.broker_id}

        victim.start()
        victim.wait_ready()
        apache_cluster.wait_members()
        back = poll(lambda: (r := exporter.cycle()) and sources(r)[victim.metrics_url]["up"]
                    and r, "the restarted broker's source up again")
        assert once_each(back) == topics
    finally:
        exporter.close()
        if not victim.running:  # leave the cluster as the other tests expect it
            victim.start()
            victim.wait_ready()
            apache_cluster.wait_members()
