"""Against a real Apache Pulsar standalone broker (tests/harness/apache_pulsar.py): the admin
REST scraper, the broker's own PIP-323 metrics and backlog quotas set over REST (evictions:
test_apache_pulsar_evictions.py).

Every test works in its own namespace, so the shared session broker carries no state from
one test to another. Numbers are compared with what the test itself produced.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pulsar

from exporter.config.settings import AdminSource
from exporter.sources.admin import AdminFetched, AdminScraper
from exporter.sources.results import TopicStats
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.fixtures import FIXTURES

METRICS_FIXTURE = FIXTURES / "apache-pulsar-4.0-metrics.txt"
# PIP-323's families as Apache Pulsar 4.0 exposes them on /metrics, with their TYPE lines.
PIP323_FAMILIES = {
    "pulsar_storage_backlog_age_seconds": "gauge",
    "pulsar_storage_backlog_quota_exceeded_evictions_total": "gauge",
    "pulsar_broker_storage_backlog_quota_exceeded_evictions_total": "gauge",
    "pulsar_storage_backlog_quota_check_duration_seconds": "histogram",
    "pulsar_storage_backlog_quota_limit": "gauge",
    "pulsar_storage_backlog_quota_limit_time": "gauge",
}
PAYLOAD = 200  # bytes per message; the broker adds its metadata to each entry


def _source(broker: ApachePulsar) -> AdminSource:
    return AdminSource(url=broker.web_url, timeout=10.0)


def _topic(namespace: str, name: str) -> str:
    return f"persistent://{namespace}/{name}"


def _sub(broker: ApachePulsar, topic: str, subscription: str) -> dict:
    return broker.topic_stats(topic)["subscriptions"][subscription]


def _scraped(broker: ApachePulsar, topic: str) -> TopicStats | None:
    outcome = AdminScraper(_source(broker)).fetch()
    assert isinstance(outcome, AdminFetched), outcome
    return next((t for t in outcome.snapshot.topics if t.topic == topic), None)


# --- admin REST scraper -----------------------------------------------------------------------


def test_admin_scraper_reads_backlogs_and_oldest_age(apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("scrape")
    topic = _topic(namespace, "orders")
    apache_pulsar.create_subscription(topic, "stalled")
    apache_pulsar.create_subscription(topic, "prompt")
    before = time.time()
    apache_pulsar.produce(topic, 30, PAYLOAD)
    assert apache_pulsar.consume_all(topic, "prompt") == 30

    # The age is measured by the broker's backlog-quota check (every 2 s here), -1 before.
    stats = poll(lambda: (s := _scraped(apache_pulsar, topic)) and
                 s.oldest_backlog_message_age_seconds is not None and s,
                 f"{topic}: oldestBacklogMessageAgeSeconds measured")
    subs = {s.name: s for s in stats.subscriptions}
    assert set(subs) == {"stalled", "prompt"}
    assert (subs["stalled"].msg_backlog, subs["prompt"].msg_backlog) == (30, 0)
    assert subs["stalled"].consumers == subs["prompt"].consumers == 0
    assert stats.msg_in_counter == 30
    raw = apache_pulsar.topic_stats(topic)
    assert stats.bytes_in_counter == raw["bytesInCounter"] >= 30 * PAYLOAD
    assert subs["stalled"].backlog_size == raw["subscriptions"]["stalled"]["backlogSize"] > 0
    assert stats.oldest_backlog_message_subscription == "stalled"
    assert 0 <= stats.oldest_backlog_message_age_seconds <= time.time() - before + 1


def test_admin_scraper_lists_bundles_with_their_owner(apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("bundles")
    apache_pulsar.produce(_topic(namespace, "t"), 1)  # loads one bundle on the broker
    outcome = AdminScraper(_source(apache_pulsar)).fetch()
    assert isinstance(outcome, AdminFetched) and outcome.item_errors == ()
    ours = [b for b in outcome.snapshot.bundles if b.namespace == namespace]
    boundaries = apache_pulsar.admin("GET", f"/admin/v2/namespaces/{namespace}/bundles")
    assert len(ours) == boundaries["numBundles"] == len(boundaries["boundaries"]) - 1
    brokers = apache_pulsar.admin("GET", f"/admin/v2/brokers/{apache_pulsar.cluster}")
    assert {b.broker for b in ours if b.broker is not None} <= set(brokers)
    assert any(b.broker is not None for b in ours)


# --- backlog quotas over REST ----------------------------------------------------------------


def test_backlog_quota_set_over_rest_is_read_back(apache_pulsar: ApachePulsar) -> None:
    namespace = apache_pulsar.create_namespace("quota")
    base = f"/admin/v2/namespaces/{namespace}"
    size = {"limitSize": 4 * 1024 * 1024, "policy": "producer_request_hold"}
    age = {"limitTime": 3600, "policy": "consumer_backlog_eviction"}
    apache_pulsar.admin("POST", f"{base}/backlogQuota?backlogQuotaType=destination_storage", size)
    apache_pulsar.admin("POST", f"{base}/backlogQuota?backlogQuotaType=message_age", age)
    # Read back whole: a limit left out comes back as 0 (not -1), and the deprecated `limit`
    # repeats `limitSize` (Pulsar's BacklogQuotaImpl).
    assert apache_pulsar.admin("GET", f"{base}/backlogQuotaMap") == {
        "destination_storage": {"limit": size["limitSize"], "limitSize": size["limitSize"],
                                "limitTime": 0, "policy": "producer_request_hold"},
        "message_age": {"limit": 0, "limitSize": 0, "limitTime": 3600,
                        "policy": "consumer_backlog_eviction"},
    }

    # A topic-level quota overrides the namespace's for that topic (topic policies live on a
    # system topic, so they are read back eventually).
    topic = _topic(namespace, "t")
    apache_pulsar.create_subscription(topic, "s")
    topic_path = topic.replace("persistent://", "/admin/v2/persistent/")
    apache_pulsar.admin("POST", f"{topic_path}/backlogQuota?backlogQuotaType=message_age",
                        {"limitTime": 600, "policy": "producer_exception"})
    topic_quotas = poll(
        lambda: apache_pulsar.admin("GET", f"{topic_path}/backlogQuotaMap"),
        f"{topic}: topic-level backlog quota readable")
    assert topic_quotas == {"message_age": {"limit": 0, "limitSize": 0, "limitTime": 600,
                                            "policy": "producer_exception"}}
    stats = poll(lambda: (s := apache_pulsar.topic_stats(topic))["backlogQuotaLimitTime"] == 600
                 and s, f"{topic}: stats carry the topic's time limit")
    assert stats["backlogQuotaLimitSize"] == size["limitSize"]  # still the namespace's


# --- the broker's own PIP-323 metrics ----------------------------------------------------------


def _family_types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def _series(metrics, name: str, topic: str, quota_type: str) -> float:
    return metrics.value(name, topic=topic, quota_type=quota_type) or 0.0


def test_broker_exposes_pip323_families_and_counts_its_evictions(
        apache_pulsar: ApachePulsar) -> None:
    """The broker evicts by time on one topic and keeps a backlog within a size quota on
    another. No broker-side size eviction here: with preciseTimeBasedBacklogQuotaCheck the
    broker's BacklogQuotaManager.dropBacklogForSizeLimit calls the blocking
    ManagedCursorImpl.skipEntries on the BookKeeper thread that must complete it, which
    stalls that thread (and admin calls on topics it serves) for 30 s per eviction."""
    aged_ns = apache_pulsar.create_namespace("pip323-age")
    kept_ns = apache_pulsar.create_namespace("pip323-kept")
    for namespace, kind, quota in (
            (aged_ns, "message_age", {"limitTime": 2, "policy": "consumer_backlog_eviction"}),
            (kept_ns, "destination_storage",
             {"limitSize": 10 * 1024 * 1024, "policy": "consumer_backlog_eviction"})):
        apache_pulsar.admin(
            "POST", f"/admin/v2/namespaces/{namespace}/backlogQuota?backlogQuotaType={kind}",
            quota)
    aged, kept = _topic(aged_ns, "aged"), _topic(kept_ns, "kept")
    for topic in (aged, kept):
        apache_pulsar.create_subscription(topic, "stalled")
        apache_pulsar.produce(topic, 40, PAYLOAD)

    evictions = "pulsar_storage_backlog_quota_exceeded_evictions_total"
    metrics = poll(lambda: (m := apache_pulsar.metrics())
                   and _series(m, evictions, aged, "time") >= 1
                   and (m.value("pulsar_storage_backlog_age_seconds", topic=kept) or 0) >= 3
                   and m, "the broker evicts by time and ages the kept backlog past 2 s",
                   timeout=60)
    types = _family_types(metrics.text)
    assert {name: types.get(name) for name in PIP323_FAMILIES} == PIP323_FAMILIES
    assert metrics.value("pulsar_storage_backlog_quota_limit_time", topic=aged) == 2
    assert metrics.value("pulsar_storage_backlog_quota_limit_time", topic=kept) == -1
    assert metrics.value("pulsar_storage_backlog_quota_limit", topic=kept) == 10 * 1024 * 1024
    assert _series(metrics, evictions, kept, "size") == _series(metrics, evictions, kept,
                                                                "time") == 0
    broker_wide = "pulsar_broker_storage_backlog_quota_exceeded_evictions_total"
    assert (metrics.value(broker_wide, quota_type="time") or 0) >= 1
    assert (metrics.value("pulsar_storage_backlog_quota_check_duration_seconds_count") or 0) > 0
    # The eviction itself, as the broker's stats see it; the kept backlog untouched.
    poll(lambda: _sub(apache_pulsar, aged, "stalled")["msgBacklog"] == 0,
         f"{aged}: everything older than 2 s expired")
    assert _sub(apache_pulsar, kept, "stalled")["msgBacklog"] == 40

    if os.environ.get("PQE_RECORD_FIXTURES"):  # tests/fixtures/SOURCES.md says how
        METRICS_FIXTURE.write_text(_trimmed(metrics.text, {aged, kept}))
    recorded = _family_types(METRICS_FIXTURE.read_text())
    assert {n: recorded.get(n) for n in PIP323_FAMILIES} == PIP323_FAMILIES


def _trimmed(text: str, topics: set[str]) -> str:
    """The body without the series of other topics and namespaces (system ones, other
    tests'); managed-ledger series name theirs `tenant/ns/persistent`."""
    namespaces = {t.split("://", 1)[1].rsplit("/", 1)[0] for t in topics}
    keep = []
    for line in text.splitlines():
        topic = re.search(r'topic="([^"]*)"', line)
        namespace = re.search(r'namespace="([^"]*?)(?:/persistent)?"', line)
        if (topic is None or topic.group(1) in topics) and (
                namespace is None or namespace.group(1) in namespaces):
            keep.append(line)
    return "\n".join(keep) + "\n"


def test_usage_reports_are_published_for_a_bound_resource_group(
        apache_pulsar: ApachePulsar) -> None:
    """The harness's ResourceUsageTopicTransportManager (PIP-82) publishes the broker's usage
    on non-persistent://pulsar/system/resource-usage once a group is bound; the report
    (ResourceUsageInfo, proto2) starts with the sender's service URL and names the group."""
    group = f"rg-{uuid.uuid4().hex[:8]}"
    namespace = apache_pulsar.create_namespace("rg")
    apache_pulsar.admin("PUT", f"/admin/v2/resourcegroups/{group}",
                        {"publishRateInMsgs": 100, "publishRateInBytes": 100_000,
                         "dispatchRateInMsgs": 100, "dispatchRateInBytes": 100_000})
    apache_pulsar.admin("POST", f"/admin/v2/namespaces/{namespace}/resourcegroup/{group}")
    try:
        with apache_pulsar.client() as client:
            reader = client.create_reader("non-persistent://pulsar/system/resource-usage",
                                          pulsar.MessageId.latest)
            apache_pulsar.produce(_topic(namespace, "t"), 5)

            def report_naming_group() -> bytes | None:
                try:
                    data = reader.read_next(timeout_millis=2000).data()
                except pulsar.Timeout:
                    return None
                return data if group.encode() in data else None

            report = poll(report_naming_group, f"a usage report naming {group}")
        assert apache_pulsar.service_url.encode() in report[:64]
    finally:
        apache_pulsar.admin("DELETE", f"/admin/v2/namespaces/{namespace}/resourcegroup")
        apache_pulsar.admin("DELETE", f"/admin/v2/resourcegroups/{group}")


def test_harness_figures(apache_pulsar: ApachePulsar) -> None:
    """What the session broker costs, in the test log (`pytest -rA` shows it)."""
    rss = apache_pulsar.rss_bytes()
    assert rss is not None and apache_pulsar.start_seconds is not None
    print(f"Apache Pulsar {Path(apache_pulsar.home).name}: started in "
          f"{apache_pulsar.start_seconds:.1f} s, {rss / 2**20:.0f} MiB resident")
