"""Topics owned by two real Apache Pulsar 4.0.8 brokers (tests/harness/apache_cluster.py):
the cluster itself, every topic counted once whichever broker owns it, bundles moved between
cycles, and evictions of a topic the admin URL's broker does not own.

The exporter runs in process (helpers.py); one test runs the installed command with Spark as
an operator would. Every test works in namespaces of its own, spread over both brokers on
purpose (`helpers.spread`), so tests share the cluster safely.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from exporter.actions.admin import AdminEvictor
from exporter.actions.binary import BinaryEvictor
from exporter.actions.orders import EvictionOrder, Performed
from exporter.config.settings import AdminSource
from exporter.runtime.cycle import CycleReport
from tests.cluster.helpers import (
    PAYLOAD,
    backlogged,
    exporter_for,
    namespace,
    published,
    series,
    spread,
    unload,
)
from tests.harness.apache_cluster import CLUSTER, ApacheCluster
from tests.harness.counting_proxy import CountingProxy
from tests.harness.wait import poll

BACKLOG = "pulsar_storage_backlog_size"
WOULD_EVICT = "pulsar_storage_backlog_quota_would_evict_total"
CHECK_SLACK = 2.0  # the brokers' backlogQuotaCheckIntervalInSeconds (test harness)


# --- the cluster ---------------------------------------------------------------------------


def test_the_cluster_runs_two_brokers_on_one_bookie(apache_cluster: ApacheCluster) -> None:
    """Both brokers are members, one leads the load manager, the bookie is registered, and
    each broker answers the /metrics an operator types with Pulsar's 302 to /metrics/."""
    ids = {b.broker_id for b in apache_cluster.brokers}
    admin = apache_cluster.any_broker()
    assert set(admin.admin("GET", f"/admin/v2/brokers/{CLUSTER}")) == ids
    assert apache_cluster.leader() in ids
    assert len(admin.admin("GET", "/admin/v2/bookies/all")["bookies"]) == 1
    for broker in apache_cluster.brokers:
        request = urllib.request.Request(broker.metrics_url)
        opener = urllib.request.build_opener(_NoRedirect())
        try:
            opener.open(request, timeout=10)
            raise AssertionError(f"{broker.metrics_url} answered without a redirect")
        except urllib.error.HTTPError as answer:
            assert answer.code == 302
            assert answer.headers["Location"].endswith("/metrics/")
    rss = apache_cluster.rss_bytes()
    print(f"cluster: started in {apache_cluster.start_seconds:.1f} s, "
          f"{rss / 2**30:.2f} GiB resident (ZooKeeper, bookie, 2 brokers)")
    assert apache_cluster.start_seconds is not None and apache_cluster.start_seconds < 240
    assert 0 < rss < 4 * 2**30  # the heaps are capped: 128 MiB + 256 MiB + 2 × 512 MiB


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


# --- owners and moves ----------------------------------------------------------------------


def test_every_topic_is_counted_once_and_survives_every_bundle_moving(
        apache_cluster: ApacheCluster) -> None:
    """Twelve topics on both brokers: each published once with its own backlog. Then every
    bundle of the namespace is unloaded between two cycles: no topic vanishes or doubles,
    backlog ages go on, and the would-evict counter (a time quota of 1 s, dry run) keeps
    counting where it was."""
    ns = namespace(apache_cluster, "owners")
    topics = backlogged(apache_cluster, ns, 12)
    owners = spread(apache_cluster, list(topics))
    exporter = exporter_for(apache_cluster, quotas={"namespaces": {
        ns: {"limit_time": "1s", "policy": "consumer_backlog_eviction"}}})
    try:
        def all_aged() -> CycleReport | None:
            report = exporter.cycle()
            seen = published(report, ns)
            aged = all(len(e) == 1 and e[0]["backlog_age_seconds"] is not None
                       and len(c := series(report, WOULD_EVICT, t, quota_type="time")) == 1
                       and c[0] >= 1
                       for t, e in seen.items())
            return report if set(seen) == set(topics) and aged else None

        before = poll(all_aged, "every topic once, aged, its first would-evict counted",
                      timeout=90, show=lambda: {t: [(x["backlog_age_seconds"],
                                                     x["backlog_age_source"]) for x in e]
                                                for t, e in published(exporter.cycle(),
                                                                      ns).items()})
        seen = published(before, ns)
        assert {t: e[0]["backlog_messages"] for t, e in seen.items()} == topics
        for topic, messages in topics.items():
            assert series(before, BACKLOG, topic) == [seen[topic][0]["backlog_size_bytes"]]
            assert seen[topic][0]["backlog_size_bytes"] >= messages * PAYLOAD
        counted = {t: series(before, WOULD_EVICT, t, quota_type="time") for t in topics}

        bundles = {apache_cluster.bundle_of(t): t for t in topics}
        for bundle, topic in sorted(bundles.items()):
            unload(apache_cluster, topic, bundle)

        moved_at = time.monotonic()
        for _ in range(3):  # the cycles right after the move, and two more
            after = exporter.cycle()
            moved = published(after, ns)
            assert set(moved) == set(topics), set(topics) ^ set(moved)
            assert all(len(e) == 1 for e in moved.values()), moved
            assert {t: e[0]["backlog_messages"] for t, e in moved.items()} == topics
            for topic in topics:
                age_then = seen[topic][0]["backlog_age_seconds"]
                age_now = moved[topic][0]["backlog_age_seconds"]
                # Precise ages are the broker's, measured every backlogQuotaCheckIntervalInSeconds
                # (2 s) in whole seconds: one may read up to that much below the last.
                assert age_now is not None and age_now >= age_then - CHECK_SLACK, (
                    topic, age_then, age_now, moved[topic][0]["backlog_age_source"])
                now = series(after, WOULD_EVICT, topic, quota_type="time")
                assert len(now) == 1 and now[0] >= counted[topic][0], (topic, now)
        # The ages went on: some seconds later each has grown by them, less the broker's
        # check interval and its whole-second rounding.
        time.sleep(max(0.0, moved_at + 3 * CHECK_SLACK - time.monotonic()))
        last = published(exporter.cycle(), ns)
        grown = time.monotonic() - moved_at
        ages = {t: (seen[t][0]["backlog_age_seconds"], last[t][0]["backlog_age_seconds"])
                for t in topics}
        print(f"ages before the move and {grown:.1f} s after:", ages)
        assert all(now >= then + grown - CHECK_SLACK - 1 for then, now in ages.values()), ages
        new_owners = {t: apache_cluster.owner(t) for t in topics}
        print("owners before:", sorted(set(owners.values())), "moved:",
              sum(owners[t] != new_owners[t] for t in topics), "of", len(topics))
    finally:
        exporter.close()


def test_evictions_of_a_topic_the_admin_urls_broker_does_not_own(
        apache_cluster: ApacheCluster) -> None:
    """Broker 1's admin URL answers for broker 2's topic with a 307 to the owner (seen by a
    proxy in front of broker 1), which the evictor follows with its POST; the binary
    protocol through broker 1's service URL finds the owner by lookup. Each cut is checked
    against the owner's own stats. The admin URL names broker 1 (its proxy) as `localhost`,
    the 307 the owner as 127.0.0.1: the evictor follows it because the cluster's own broker
    listing names that host."""
    ns = namespace(apache_cluster, "evict-elsewhere")
    topics = backlogged(apache_cluster, ns, 12)
    owners = spread(apache_cluster, list(topics))
    first, second = apache_cluster.brokers
    theirs = sorted(t for t, o in owners.items() if o == second.broker_id)
    assert len(theirs) >= 2, owners
    by_admin, by_binary = theirs[0], theirs[1]

    def backlog(topic: str) -> int:
        return second.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"]

    with CountingProxy(first.web_url) as proxy:
        admin = AdminSource(url=proxy.url.replace("127.0.0.1", "localhost"), timeout=10.0)
        (result,) = AdminEvictor(admin).perform(
            [EvictionOrder(by_admin, "stalled", "size", messages=2)])
    assert isinstance(result, Performed), result
    assert backlog(by_admin) == topics[by_admin] - 2
    # What broker 1 answered the evictor's POST: a 307 to the same path on the owner
    # (PulsarWebResource's redirect; its `authoritative` query varies with the lookup).
    skip = "/admin/v2/" + by_admin.replace("://", "/") + "/subscription/stalled/skip/2"
    posts = [(status, location and urlsplit(location)._replace(query="").geturl())
             for method, path, status, location in proxy.answers if method == "POST"]
    assert posts == [(307, second.web_url + skip)], proxy.answers

    (result,) = BinaryEvictor(first.service_url, timeout=10.0).perform(
        [EvictionOrder(by_binary, "stalled", "time", before_publish_time=time.time(),
                       consumers=0)])
    assert isinstance(result, Performed), result
    poll(lambda: backlog(by_binary) == 0, f"{by_binary}: evicted through broker 1")
    assert {t: apache_cluster.owner(t) for t in (by_admin, by_binary)} == {
        by_admin: second.broker_id, by_binary: second.broker_id}  # nothing moved


@pytest.mark.spark  # `check` runs a cycle with Spark
def test_check_once_with_spark_reads_every_broker_at_the_url_an_operator_types(
        apache_cluster: ApacheCluster, tmp_path: Path) -> None:
    """The installed command, Spark and all, against both brokers' `/metrics` (302 →
    `/metrics/`): both sources up, every topic once."""
    ns = namespace(apache_cluster, "cli")
    topics = backlogged(apache_cluster, ns, 6)
    spread(apache_cluster, list(topics))
    config = tmp_path / "cluster.yaml"
    config.write_text(json.dumps({
        "cluster": CLUSTER,
        "sources": {"brokers": [{"url": b.metrics_url} for b in apache_cluster.brokers],
                    "admin": {"url": apache_cluster.brokers[0].web_url}},
        "spark": {"master": "local[2]"}}))
    done = subprocess.run([str(Path(sys.executable).with_name("pulsar-quota-exporter")),
                           "check", "--config.file", str(config), "--once", "--format", "json"],
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads(done.stdout)
    assert [(s["url"], s["up"]) for s in status["sources"] if s["kind"] == "broker"] == [
        (b.metrics_url, True) for b in apache_cluster.brokers]
    mine = [t for t in status["topics"] if t["namespace"] == ns
            and not t["topic"].endswith("/__change_events")]  # the namespace's system topic
    assert sorted(t["topic"] for t in mine) == sorted(topics)
    assert {t["topic"]: t["backlog_messages"] for t in mine} == topics
