"""Pulsar's own backlog quotas and PIP-323 metrics, against a real Apache Pulsar 4.0.8
standalone broker (tests/harness/apache_pulsar.py): our per-type resolution of Pulsar's
policies equals the limits the broker itself applies (its PIP-323 gauges), the exporter's
published backlog age agrees with the broker's, and the broker's eviction "gauge" beside
our eviction counter.

One check cycle runs without Spark: the broker side fetches the broker's /metrics body and
parses it with the pipeline's own parse (`source_tables`), the rest is `Exporter.cycle`.
Every test works in its own namespaces.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from exporter.config.settings import AdminSource, BacklogQuotas, PolicySource
from exporter.engine.backlog.quotas import resolve
from exporter.runtime.cycle import Exporter
from exporter.sources.admin import AdminFetched, AdminScraper
from exporter.sources.policies import PolicyCache
from exporter.sources.results import QuotaType
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.livebrokers import LiveBrokers
from tests.harness.pulsar import Metrics

PAYLOAD = 200
CHECK_INTERVAL = 2.0  # the harness's backlogQuotaCheckIntervalInSeconds
LIMIT = "pulsar_storage_backlog_quota_limit"
LIMIT_TIME = "pulsar_storage_backlog_quota_limit_time"
AGE = "pulsar_storage_backlog_age_seconds"
EVICTIONS = "pulsar_storage_backlog_quota_exceeded_evictions_total"


def _topic(namespace: str, name: str) -> str:
    return f"persistent://{namespace}/{name}"


def _rest(topic: str) -> str:
    return topic.replace("persistent://", "/admin/v2/persistent/", 1)


def _set_quota(broker: ApachePulsar, base: str, kind: str, quota: dict) -> None:
    broker.admin("POST", f"{base}/backlogQuota?backlogQuotaType={kind}", quota)


def _exporter(broker: ApachePulsar, quotas: dict, *, admin: bool = True) -> tuple[
        Exporter, LiveBrokers]:
    config = one_broker(broker, admin=admin, service_url=True, backlog_quotas=quotas)
    live = LiveBrokers(broker)
    return live_exporter(broker, "quotas", config, brokers=live), live


# --- Pulsar's policies, resolved per type ---------------------------------------------------


def test_pulsar_quotas_resolve_per_type_as_the_broker_applies_them(
        apache_pulsar: ApachePulsar) -> None:
    """The namespace sets only a time quota, one topic only a size quota: the broker applies
    both to that topic (its PIP-323 gauges), and so does our resolution; another topic has
    the namespace's time quota and the broker default's (unlimited) size. A size entry
    posted without `limitSize` reads back 0, and the broker applies 0: so do we."""
    namespace = apache_pulsar.create_namespace("per-type")
    both, other, zero = (_topic(namespace, n) for n in ("both", "other", "zero"))
    for topic in (both, other, zero):
        apache_pulsar.create_subscription(topic, "stalled")
        apache_pulsar.produce(topic, 5, PAYLOAD)
    _set_quota(apache_pulsar, f"/admin/v2/namespaces/{namespace}", "message_age",
               {"limitTime": 3600, "policy": "consumer_backlog_eviction"})
    size = 4 * 1024 * 1024
    _set_quota(apache_pulsar, _rest(both), "destination_storage",
               {"limitSize": size, "policy": "producer_exception"})
    _set_quota(apache_pulsar, _rest(zero), "destination_storage",
               {"limitTime": 50, "policy": "producer_exception"})

    metrics = poll(lambda: (m := apache_pulsar.metrics()) and m.value(LIMIT, topic=both) == size
                   and m.value(LIMIT, topic=zero) == 0 and m.value(LIMIT_TIME, topic=other)
                   == 3600 and m,
                   "the broker applies the topics' size and the namespace's time quota")
    topics = (both, other, zero)
    broker = {t: (metrics.value(LIMIT, topic=t), metrics.value(LIMIT_TIME, topic=t))
              for t in topics}
    assert broker == {both: (size, 3600), other: (-1, 3600), zero: (0, 3600)}

    # What 4.0.8 answers: the topic's own entries (applied=false, {} when it has none).
    # applied=true resolves per type only for a topic without entries; for one with any it
    # gives the topic's map whole, without the namespace's time quota the broker applies.
    # Hence applied=false and our own per-type resolution.
    assert apache_pulsar.admin("GET", f"{_rest(both)}/backlogQuotaMap") == {
        "destination_storage": {"limit": size, "limitSize": size, "limitTime": 0,
                                "policy": "producer_exception"}}
    applied = apache_pulsar.admin("GET", f"{_rest(both)}/backlogQuotaMap?applied=true")
    assert set(applied) == {"destination_storage"}
    assert apache_pulsar.admin("GET", f"{_rest(other)}/backlogQuotaMap") == {}
    assert apache_pulsar.admin("GET", f"{_rest(other)}/backlogQuotaMap?applied=true")[
        "message_age"]["limitTime"] == 3600

    outcome = AdminScraper(AdminSource(url=apache_pulsar.web_url),
                           policies=PolicyCache()).fetch()
    assert isinstance(outcome, AdminFetched), outcome
    pulsar = outcome.snapshot.quotas
    assert pulsar is not None
    ours = {}
    for topic in topics:
        r = resolve(topic, namespace, BacklogQuotas(source=PolicySource.PULSAR), pulsar)
        ours[topic] = (r.size.value if r.size.value is not None else -1,
                       r.time.value if r.time.value is not None else -1)
        assert r.limit(QuotaType.TIME).origin == "pulsar:namespace"
    assert ours == broker
    r = resolve(both, namespace, BacklogQuotas(source=PolicySource.PULSAR), pulsar)
    assert (r.size.origin, r.size.policy.value) == ("pulsar:topic", "producer_exception")
    assert r.time.policy.value == "consumer_backlog_eviction"


def test_check_reports_where_each_limit_came_from(apache_pulsar: ApachePulsar) -> None:
    """Through a whole cycle with `source: both`: a topic the YAML names nowhere has
    Pulsar's limits, one whose namespace the YAML names has the YAML's."""
    pulsar_ns = apache_pulsar.create_namespace("from-pulsar")
    yaml_ns = apache_pulsar.create_namespace("from-yaml")
    _set_quota(apache_pulsar, f"/admin/v2/namespaces/{pulsar_ns}", "message_age",
               {"limitTime": 3600, "policy": "producer_request_hold"})
    _set_quota(apache_pulsar, f"/admin/v2/namespaces/{yaml_ns}", "message_age",
               {"limitTime": 3600, "policy": "producer_request_hold"})
    topics = {ns: _topic(ns, "t") for ns in (pulsar_ns, yaml_ns)}
    for topic in topics.values():
        apache_pulsar.create_subscription(topic, "stalled")
        apache_pulsar.produce(topic, 5, PAYLOAD)
    exporter, _ = _exporter(apache_pulsar, {"namespaces": {yaml_ns: {"limit_size": "1MiB"}}})
    assert exporter.config.backlog_quotas.source is PolicySource.BOTH
    try:
        status = {t["topic"]: t for t in exporter.cycle().status["topics"]}
    finally:
        exporter.close()
    from_pulsar, from_yaml = status[topics[pulsar_ns]], status[topics[yaml_ns]]
    assert from_pulsar["limit_sources"] == {"size": "pulsar:default", "time": "pulsar:namespace"}
    assert (from_pulsar["limit_size_bytes"], from_pulsar["limit_time_seconds"]) == (None, 3600)
    assert from_yaml["limit_sources"] == {"size": "config:namespace", "time": "config:namespace"}
    assert (from_yaml["limit_size_bytes"], from_yaml["limit_time_seconds"]) == (1024 * 1024,
                                                                                  None)


# --- PIP-323 from the broker -----------------------------------------------------------------


def test_published_backlog_age_agrees_with_the_brokers(apache_pulsar: ApachePulsar) -> None:
    """A stalled subscription: the exporter's published age, from the broker's gauge
    (no admin source) and from the admin REST (admin source), within the broker's check
    interval of the broker's own gauge in the same cycle's body."""
    namespace = apache_pulsar.create_namespace("age")
    topic = _topic(namespace, "stalled")
    apache_pulsar.create_subscription(topic, "stalled")
    apache_pulsar.produce(topic, 10, PAYLOAD)
    poll(lambda: (apache_pulsar.metrics().value(AGE, topic=topic) or 0) >= 3,
         f"{topic}: the broker's backlog age is measured and past 3 s")
    for admin in (False, True):
        exporter, live = _exporter(apache_pulsar, {}, admin=admin)
        try:
            report = exporter.cycle()
        finally:
            exporter.close()
        ours = Metrics(report.body.decode()).value(AGE, topic=topic)
        theirs = Metrics(live.last_body).value(AGE, topic=topic)
        estimated = Metrics(report.body.decode()).value(
            "pulsar_storage_backlog_age_estimated", topic=topic)
        print(f"admin={admin}: ours {ours} s, the broker's {theirs} s")
        assert ours is not None and theirs is not None and theirs >= 3
        assert abs(ours - theirs) <= CHECK_INTERVAL + 1  # + the broker's whole seconds
        assert estimated == 0


def _type_of(body: str, family: str) -> str | None:
    found = re.search(rf"^# TYPE {family} (\S+)$", body, re.MULTILINE)
    return found and found.group(1)


def test_the_brokers_eviction_gauge_beside_our_counter(apache_pulsar: ApachePulsar) -> None:
    """The broker evicts one topic by its own time quota; the exporter evicts another by a
    YAML time quota Pulsar knows nothing of. Each counts only its own evictions, and on
    4.0.8 the broker's family is typed gauge where ours is a counter."""
    by_broker_ns = apache_pulsar.create_namespace("evicted-by-broker")
    by_us_ns = apache_pulsar.create_namespace("evicted-by-us")
    _set_quota(apache_pulsar, f"/admin/v2/namespaces/{by_broker_ns}", "message_age",
               {"limitTime": 2, "policy": "consumer_backlog_eviction"})
    by_broker, by_us = _topic(by_broker_ns, "t"), _topic(by_us_ns, "t")
    for topic in (by_broker, by_us):
        apache_pulsar.create_subscription(topic, "stalled")
        apache_pulsar.produce(topic, 10, PAYLOAD)
    poll(lambda: apache_pulsar.topic_stats(by_broker)["subscriptions"]["stalled"][
        "msgBacklog"] == 0, f"{by_broker}: the broker evicted it by time")

    exporter, live = _exporter(apache_pulsar, {
        "topics": {by_us: {"limit_time": "2s", "policy": "consumer_backlog_eviction"}},
        "enforce": True})
    try:
        report = poll(lambda: (r := exporter.cycle()) and (Metrics(r.body.decode()).value(
            EVICTIONS, topic=by_us, quota_type="time") or 0) >= 1 and r,
            f"{by_us}: the exporter evicts it by its YAML time quota", timeout=60)
    finally:
        exporter.close()
    ours, theirs = Metrics(report.body.decode()), Metrics(live.last_body)
    side_by_side = {t: (theirs.value(EVICTIONS, topic=t, quota_type="time"),
                        ours.value(EVICTIONS, topic=t, quota_type="time"))
                    for t in (by_broker, by_us)}
    print("(broker's, ours):", side_by_side)
    assert side_by_side[by_broker][0] >= 1 and side_by_side[by_broker][1] in (None, 0)
    assert side_by_side[by_us][0] in (None, 0) and side_by_side[by_us][1] == 1
    assert _type_of(live.last_body, EVICTIONS) == "gauge"
    assert _type_of(report.body.decode(), EVICTIONS) == "counter"
    # The broker's expiry runs on after its 204 (test_apache_pulsar_evictions.py).
    poll(lambda: apache_pulsar.topic_stats(by_us)["subscriptions"]["stalled"][
        "msgBacklog"] == 0, f"{by_us}: our eviction emptied its backlog")


# --- Pulsar's production defaults -------------------------------------------------------------

# The broker's shipped backlog-quota check (broker.conf): once a minute, time quotas
# estimated from ledger metadata rather than read from the oldest message (PIP-323).
PRODUCTION_CHECK = {"backlogQuotaCheckIntervalInSeconds": "60",
                    "preciseTimeBasedBacklogQuotaCheck": "false"}
CHECKS = "pulsar_storage_backlog_quota_check_duration_seconds_count"


@pytest.mark.apache  # a broker of its own, on the production check
def test_production_defaults_age_a_backlog_from_its_ledgers_close_once_a_minute(
        tmp_path: Path) -> None:
    """Every other test here runs the broker's check every 2 s, precise. On Pulsar's
    defaults the first check runs a whole interval after the broker service starts
    (BrokerService schedules `monitorBacklogQuota` at that fixed rate), and a time quota
    is judged from ledger metadata (`PersistentTopic.estimatedTimeBasedBacklogQuotaCheck`):
    a backlog in a closed ledger is as old as that ledger's close, and one in the open
    ledger has no age at all, so the broker neither reports nor evicts it. Two topics
    under a 10 s time quota: one left in its open ledger, one whose ledger an unload
    closed 5 s after its messages. Our published age is the broker's figure, either way we
    read it (its /metrics gauge; the admin REST's `oldestBacklogMessageAgeSeconds`)."""
    broker = ApachePulsar(tmp_path, heap="512m", direct_memory="512m",
                          resource_usage_transport=False, overrides=PRODUCTION_CHECK)
    broker.start()
    ready = time.monotonic()
    try:
        namespace = broker.create_namespace("defaults")
        _set_quota(broker, f"/admin/v2/namespaces/{namespace}", "message_age",
                   {"limitTime": 10, "policy": "consumer_backlog_eviction"})
        still_open, closed = _topic(namespace, "open"), _topic(namespace, "closed")
        for topic in (still_open, closed):
            broker.create_subscription(topic, "stalled")
            broker.produce(topic, 10, PAYLOAD)
        published = time.time()
        time.sleep(5)
        broker.admin("PUT", f"{_rest(closed)}/unload")
        closed_at = time.time()
        broker.topic_stats(closed)  # loaded again: its backlog now in a closed ledger
        early = broker.metrics()
        metrics = poll(lambda: (m := broker.metrics()) and (m.value(CHECKS) or 0) >= 1 and m,
                       "the broker's first scheduled backlog-quota check", timeout=80,
                       interval=1)
        checked, first_check = time.time(), time.monotonic() - ready
        ours = {}
        for admin in (False, True):
            exporter, _ = _exporter(broker, {}, admin=admin)
            try:
                report = exporter.cycle()
            finally:
                exporter.close()
            ours[admin] = {t["topic"]: t for t in report.status["topics"]}
        open_backlog = broker.topic_stats(still_open)["subscriptions"]["stalled"]["msgBacklog"]
    finally:
        broker.stop()
    theirs = {t: metrics.value(AGE, topic=t) for t in (still_open, closed)}
    print(f"first check {first_check:.1f} s after ready (start {broker.start_seconds:.1f} s), "
          f"{checked - published:.1f} s after the messages, {checked - closed_at:.1f} s "
          f"after the close; the broker's ages {theirs}; ours "
          f"{[(t['backlog_age_seconds'], t['backlog_age_source']) for t in ours[True].values()]}")
    assert early.value(CHECKS) == 0 and early.value(AGE, topic=still_open) == -1
    assert broker.start_seconds is not None and first_check >= 60 - broker.start_seconds - 1
    # The open ledger: no age, no eviction, though ~55 s past a 10 s quota.
    assert theirs[still_open] == -1 and open_backlog == 10
    assert metrics.value(EVICTIONS, topic=still_open, quota_type="time") == 0
    # The closed ledger: as old as its close, not as its messages; over the quota, evicted.
    assert theirs[closed] is not None
    assert abs(theirs[closed] - (checked - closed_at)) <= 1 + 1  # whole s, our poll's 1 s
    assert theirs[closed] <= checked - published - 4
    assert metrics.value(EVICTIONS, topic=closed, quota_type="time") == 1
    for admin, source in ((False, "broker"), (True, "admin")):  # neither says "precise"
        assert ours[admin][closed]["backlog_age_seconds"] == theirs[closed], ours[admin]
        assert ours[admin][closed]["backlog_age_source"] == source, ours[admin]
    assert ours[True][closed]["exceeded"] == ["time"]
