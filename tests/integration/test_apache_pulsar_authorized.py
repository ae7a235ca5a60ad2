"""Least privilege on a real Apache Pulsar 4.0.8 with `authenticationEnabled` and
`authorizationEnabled` (token roles, `PulsarAuthorizationProvider`): what a role granted
only `produce` (read-only mode) and one granted `consume` (enforcement) can do.

- A `produce` role with `sources.admin.namespaces` walks its namespaces (it may not list
  tenants), sees the topics' stats and precise backlog age, holds the enforcer lease on a
  lock topic in that namespace, and cannot evict: each eviction is counted `forbidden`
  and the backlog stays whole.
- A `consume` role, with `produce` on a namespace of its own for the lock topic, evicts.
- A role without `produce` on the lock topic's namespace stands by and evicts nothing.

HTTP statuses seen (4.0.8, `{"reason": …}` bodies), for a role with `produce` or `consume`
on the namespace: GET /admin/v2/tenants 401, /admin/v2/namespaces/{tenant} 401,
/admin/v2/brokers/{cluster} 401, /admin/v2/brokers/configuration/runtime 401,
/admin/v2/resourcegroups 401, a namespace's or topic's backlogQuotaMap 403, a namespace's
policies 403; its topic listings, topic stats and bundles 200. POST …/skip/{n},
…/expireMessages/{s} and …/resetcursor/{ms} without `consume`: 401. A role with no grant:
the topic listing 403, the topic's stats 401, bundles 403. Without a token at all, every
/admin call is 401 (Jetty's page, not `{"reason": …}`). Over the binary protocol, an
Exclusive producer without `produce` and a subscription without `consume` are refused
with `AuthorizationError` (the Python client's `pulsar.AuthorizationError`).

Each test works in its own namespaces; /metrics is read as the superuser (LiveBrokers):
its authentication is test_apache_pulsar_secured.py's subject, not this file's.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.actions.binary import BinaryEvictor
from exporter.actions.orders import (
    EvictionFailed,
    EvictionFailure,
    EvictionOrder,
    LeaseState,
    Performed,
)
from exporter.config.load import parse
from exporter.config.settings import AdminSource
from exporter.runtime.cycle import CycleReport, Exporter
from exporter.sources.admin import AdminFetched, AdminScraper
from exporter.sources.brokers import FetchFailed
from exporter.sources.policies import PolicyCache
from exporter.sources.results import ScrapeError
from exporter.transport.client import client_options
from tests.harness.apache_pulsar import poll
from tests.harness.exporter_config import live_exporter, one_broker
from tests.harness.pulsar import Metrics
from tests.harness.secured_pulsar import SecuredPulsar, token

# The broker (SecuredPulsar) is an Apache Pulsar standalone with certificates made by openssl.
pytestmark = [pytest.mark.apache, pytest.mark.tools]

PAYLOAD = 200
MESSAGES = 100
LIMIT = 8000  # bytes: the backlog of 100 messages of 200 bytes is ~2.6 times this
FAILED = "pulsar_quota_exporter_evictions_failed_total"
EVICTIONS = "pulsar_storage_backlog_quota_exceeded_evictions_total"
ENFORCER = "pulsar_quota_exporter_enforcer"


@pytest.fixture(scope="module")
def authorized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredPulsar]:
    broker = SecuredPulsar(tmp_path_factory.mktemp("authorized-pulsar"),
                           overrides={"authorizationEnabled": "true"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _token_file(broker: SecuredPulsar, directory: Path, role: str) -> Path:
    path = directory / f"{role}.token"
    path.write_text(token(broker.key, role) + "\n")
    return path


def _grant(broker: SecuredPulsar, namespace: str, role: str, *actions: str) -> None:
    """As the superuser; a grant replaces the role's actions on the namespace."""
    broker.admin("POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", list(actions))


def _backlogged(broker: SecuredPulsar, prefix: str) -> tuple[str, str]:
    """A namespace and a topic in it whose durable subscription holds MESSAGES messages."""
    namespace = broker.create_namespace(prefix)
    topic = f"persistent://{namespace}/t"
    broker.create_subscription(topic, "stalled")
    broker.produce(topic, MESSAGES, PAYLOAD)
    return namespace, topic


def _backlog(broker: SecuredPulsar, topic: str) -> int:
    return broker.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"]


def _exporter(broker: SecuredPulsar, credentials: Path, namespace: str, lock: str,
              name: str) -> Exporter:
    """One role for everything the exporter asks the broker: the admin walk, evictions
    (admin REST) and the lease (binary protocol)."""
    config = one_broker(
        broker, check_interval="1s",
        admin={"url": broker.web_url, "token_file": str(credentials), "namespaces": [namespace]},
        service_url=True, sources={"service_token_file": str(credentials)},
        backlog_quotas={"enforce": True, "lock_topic": lock, "namespaces": {
            namespace: {"limit_size": LIMIT, "policy": "consumer_backlog_eviction"}}},
        resource_group_engine={"participant": name})
    return live_exporter(broker, name, config)


def _state(metrics: Metrics) -> str | None:
    held = [s.labels["state"] for s in metrics.find(ENFORCER) if s.value == 1]
    return held[0] if len(held) == 1 else None


def _metrics(report: CycleReport) -> Metrics:
    return Metrics(report.body.decode())


def _status(report: CycleReport, topic: str) -> dict:
    return {t["topic"]: t for t in report.status["topics"]}[topic]


def _binary_evictor(broker: SecuredPulsar, credentials: Path) -> BinaryEvictor:
    sources = parse({"cluster": broker.cluster, "sources": {
        "brokers": [{"url": broker.metrics_url}], "service_url": broker.service_url,
        "service_token_file": str(credentials)}}, "binary.yaml").sources
    assert sources.service_url is not None
    return BinaryEvictor(sources.service_url, timeout=10.0, client_options=client_options(sources))


def _refusals(errors: tuple[FetchFailed, ...]) -> dict[str, int]:
    """Refused path (namespaces and topics written NS, T) → HTTP status."""
    out = {}
    for e in errors:
        found = re.fullmatch(r"GET (\S+): HTTP (\d+) .*", e.detail)
        assert found and e.reason is ScrapeError.AUTH, e
        out[found.group(1)] = int(found.group(2))
    return out


def test_a_produce_role_walks_its_namespaces_not_the_tenants(
        authorized: SecuredPulsar, tmp_path: Path) -> None:
    """`produce` on a namespace lists its topics and reads their stats (with the precise
    backlog age) and bundles; policies, bundle owners and the broker's default quota are
    refused, each counted `auth` and left out. Without `namespaces` the tenant list is
    refused and the whole fetch fails; a role with no grant fails at the topic listing.
    The broker's /metrics (`authenticateMetricsEndpoint`) admits the role: it only
    authenticates."""
    namespace, topic = _backlogged(authorized, "read-only-walk")
    _grant(authorized, namespace, "reader", "produce")
    reader = str(_token_file(authorized, tmp_path, "reader"))
    poll(lambda: authorized.topic_stats(topic)["oldestBacklogMessageAgeSeconds"] >= 0,
         "the broker's quota check measuring the backlog age")

    walked = AdminScraper(AdminSource(authorized.web_url, token_file=reader,
                                      namespaces=(namespace,)), policies=PolicyCache()).fetch()
    assert isinstance(walked, AdminFetched), walked
    (stats,) = walked.snapshot.topics
    assert stats.topic == topic and stats.oldest_backlog_message_age_seconds is not None
    assert [s.msg_backlog for s in stats.subscriptions] == [MESSAGES]
    assert walked.snapshot.bundles and {b.broker for b in walked.snapshot.bundles} == {None}
    rest = topic.replace("persistent://", "/admin/v2/persistent/")
    assert _refusals(walked.item_errors) == {
        f"/admin/v2/brokers/{authorized.cluster}": 401,  # bundle owners: superuser
        "/admin/v2/brokers/configuration/runtime": 401,  # the broker's default quota
        f"/admin/v2/namespaces/{namespace}/backlogQuotaMap": 403,  # tenant admin
        f"{rest}/backlogQuotaMap": 403}
    scraper = AdminScraper(AdminSource(authorized.web_url, token_file=reader,
                                       namespaces=(namespace,)), policies=PolicyCache())
    counted = [dict(scraper.scrape().health.errors).get(ScrapeError.AUTH) for _ in range(3)]
    assert counted == [4, 4, 4]  # each refusal counted once, not at every walk

    metrics = urllib.request.Request(authorized.metrics_url, headers={
        "Authorization": f"Bearer {token(authorized.key, 'reader')}"})
    with urllib.request.urlopen(metrics, timeout=30) as answer:  # authentication only
        assert answer.status == 200 and b"pulsar_topics_count" in answer.read()

    everything = AdminScraper(AdminSource(authorized.web_url, token_file=reader)).fetch()
    assert isinstance(everything, FetchFailed) and everything.reason is ScrapeError.AUTH
    assert everything.detail.startswith("GET /admin/v2/tenants: HTTP 401"), everything

    stranger = str(_token_file(authorized, tmp_path, "stranger"))
    refused = AdminScraper(AdminSource(authorized.web_url, token_file=stranger,
                                       namespaces=(namespace,))).fetch()
    assert isinstance(refused, FetchFailed) and refused.reason is ScrapeError.AUTH
    assert refused.detail.startswith(f"GET /admin/v2/persistent/{namespace}: HTTP 403"), refused


def test_a_produce_role_holds_the_lease_and_its_evictions_are_forbidden(
        authorized: SecuredPulsar, tmp_path: Path) -> None:
    """The read-only role with `enforce: true`: it sees the backlog over the quota (admin
    source up, refused policy reads counted `auth`, the age precise from the admin REST),
    holds the lease (its lock topic is in the namespace it may produce to), and every
    eviction is refused by the broker and counted `forbidden`; the backlog stays whole.
    Over the binary protocol the same role cannot subscribe: `forbidden` too."""
    namespace, topic = _backlogged(authorized, "read-only")
    _grant(authorized, namespace, "reader", "produce")
    reader = _token_file(authorized, tmp_path, "reader")
    exporter = _exporter(authorized, reader, namespace, f"persistent://{namespace}/lock",
                         "reader")
    try:
        # the age is the admin REST's once the broker's quota check has measured it (2 s)
        report = poll(lambda: (r := exporter.cycle()) and (_metrics(r).value(
            FAILED, reason="forbidden") or 0) >= 2 and _status(r, topic)[
            "backlog_age_source"] == "admin" and r,
            "refused evictions and the admin REST's age", timeout=60, interval=0.5)
    finally:
        exporter.close()
    metrics = _metrics(report)
    assert _state(metrics) == LeaseState.HOLDING
    assert metrics.value("pulsar_quota_exporter_source_up", kind="admin") == 1
    admin_errors = {s.labels["reason"]: s.value for s in metrics.find(
        "pulsar_quota_exporter_source_scrape_errors_total", source=authorized.web_url)}
    assert admin_errors.pop("auth") >= 4 and not any(admin_errors.values()), admin_errors
    assert (metrics.value("pulsar_storage_backlog_size", topic=topic) or 0) > LIMIT
    assert metrics.value("pulsar_storage_backlog_quota_exceeded", topic=topic,
                         quota_type="size") == 1
    failed = {s.labels["reason"]: s.value for s in metrics.find(FAILED) if s.value}
    assert set(failed) == {"forbidden"}, failed
    assert metrics.value(EVICTIONS, topic=topic, quota_type="size") in (None, 0)
    assert _backlog(authorized, topic) == MESSAGES

    (binary,) = _binary_evictor(authorized, reader).perform(
        [EvictionOrder(topic, "stalled", "size", messages=10, consumers=0)])
    assert isinstance(binary, EvictionFailed), binary
    assert binary.reason is EvictionFailure.FORBIDDEN and "AuthorizationError" in \
        binary.detail, binary
    assert _backlog(authorized, topic) == MESSAGES


def test_a_consume_role_evicts(authorized: SecuredPulsar, tmp_path: Path) -> None:
    """`consume` on the watched namespace and `produce` on another that holds only the lock
    topic (so it cannot publish to the topics it watches): it holds the lease and cuts the
    backlog to the quota, over the admin REST and over the binary protocol alike."""
    namespace, topic = _backlogged(authorized, "enforced")
    locks = authorized.create_namespace("enforcer-locks")
    _grant(authorized, namespace, "enforcer", "consume")
    _grant(authorized, locks, "enforcer", "produce")
    enforcer = _token_file(authorized, tmp_path, "enforcer")
    exporter = _exporter(authorized, enforcer, namespace, f"persistent://{locks}/lock",
                         "enforcer")
    try:
        report = poll(lambda: (r := exporter.cycle()) and (_metrics(r).value(
            EVICTIONS, topic=topic, quota_type="size") or 0) >= 1 and r,
            "the size eviction", timeout=60, interval=0.5)
    finally:
        exporter.close()
    metrics = _metrics(report)
    assert _state(metrics) == LeaseState.HOLDING
    assert not any(s.value for s in metrics.find(FAILED)), metrics.find(FAILED)
    left = _backlog(authorized, topic)
    print(f"backlog {MESSAGES} -> {left} messages of {PAYLOAD} B, limit {LIMIT} B")
    assert 0 < left < MESSAGES and left * PAYLOAD <= LIMIT

    (binary,) = _binary_evictor(authorized, enforcer).perform(
        [EvictionOrder(topic, "stalled", "size", messages=5, consumers=0)])
    assert isinstance(binary, Performed) and binary.messages == 5, binary
    poll(lambda: _backlog(authorized, topic) == left - 5, "the binary protocol's skip")


def test_without_produce_on_the_lock_namespace_it_stands_by(
        authorized: SecuredPulsar, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`consume` alone, the lock topic in the same namespace: the broker refuses its
    exclusive producer (`AuthorizationError`), so the instance decides and exports but
    stands by, cycle after cycle, and the backlog stays whole."""
    namespace, topic = _backlogged(authorized, "locked-out")
    _grant(authorized, namespace, "consumer", "consume")
    consumer = _token_file(authorized, tmp_path, "consumer")
    lock = f"persistent://{namespace}/lock"
    exporter = _exporter(authorized, consumer, namespace, lock,
                         "consumer")
    try:
        report = poll(lambda: (r := exporter.cycle()) and r.decisions is not None and any(
            d.topic == topic for d in r.decisions.topics) and r,
            "deciding on the topic", timeout=60, interval=0.5)
        for _ in range(3):
            report = exporter.cycle()
        assert exporter.lease is not None and exporter.lease.acquired == 0
    finally:
        exporter.close()
    metrics = _metrics(report)
    assert _state(metrics) == LeaseState.STANDING_BY
    assert metrics.value("pulsar_storage_backlog_quota_exceeded", topic=topic,
                         quota_type="size") == 1
    assert metrics.value(EVICTIONS, topic=topic, quota_type="size") in (None, 0)
    assert not any(s.value for s in metrics.find(FAILED)), metrics.find(FAILED)
    assert _backlog(authorized, topic) == MESSAGES
    refusals = [r.getMessage() for r in caplog.records if r.name == "exporter.actions.lease"]
    assert refusals == [f"standing by: this role may not hold the enforcer lease on {lock} "
                        "(it needs produce on that namespace)"]  # said once, over 4+ cycles
