"""Pulsar's backlog-quota policies over the admin REST (sources/policies.py): the JSON as
Apache Pulsar 4.0 answers it, the broker default as BacklogQuotaManager builds it, and the
per-namespace cache against `FakeAdminServer`."""

from __future__ import annotations

import contextlib
import urllib.error
from collections.abc import Iterator

import pytest

from exporter.config.settings import AdminSource, RetentionPolicy
from exporter.sources.admin import AdminFetched, AdminScraper
from exporter.sources.brokers import FetchFailure
from exporter.sources.policies import PolicyCache, broker_default_from_json, quota_map_from_json
from exporter.sources.results import QuotaType, ScrapeError, TypedQuota
from tests.fakes.admin_server import TOPIC, FakeAdminServer, Fault

SIZE, TIME = QuotaType.SIZE, QuotaType.TIME
HOLD, EVICT, EXCEPTION = (RetentionPolicy.PRODUCER_REQUEST_HOLD,
                          RetentionPolicy.CONSUMER_BACKLOG_EVICTION,
                          RetentionPolicy.PRODUCER_EXCEPTION)
# What Apache Pulsar 4.0.8 reads back after set-backlog-quota of 4 MiB (size, hold) and
# 3600 s (time, eviction) on a namespace (tests/integration/test_apache_pulsar.py checks it
# on the real broker): a left-out limit comes back as 0, `limit` repeats `limitSize`.
NAMESPACE_MAP = {
    "destination_storage": {"limit": 4194304, "limitSize": 4194304, "limitTime": 0,
                            "policy": "producer_request_hold"},
    "message_age": {"limit": 0, "limitSize": 0, "limitTime": 3600,
                    "policy": "consumer_backlog_eviction"},
}
TOPIC_MAP = {"message_age": {"limit": 0, "limitSize": 0, "limitTime": 600,
                             "policy": "producer_exception"}}
RUNTIME = {"backlogQuotaDefaultLimitGB": "-1.0", "backlogQuotaDefaultLimitBytes": "-1",
           "backlogQuotaDefaultLimitSecond": "-1",
           "backlogQuotaDefaultRetentionPolicy": "producer_request_hold",
           "clusterName": "replay"}
NS_PATH = "/admin/v2/namespaces/public/default/backlogQuotaMap"
TOPIC_PATH = "/admin/v2/persistent/public/default/Fibonacci/backlogQuotaMap"
PARENT_PATH = "/admin/v2/persistent/my-tenant/my-namespace/my-topic/backlogQuotaMap"
RUNTIME_PATH = "/admin/v2/brokers/configuration/runtime"


# --- JSON (pure) -------------------------------------------------------------------------


def test_each_type_reads_only_its_own_limit() -> None:
    assert quota_map_from_json(NAMESPACE_MAP, "ns") == {
        SIZE: TypedQuota(4194304, HOLD), TIME: TypedQuota(3600, EVICT)}
    assert quota_map_from_json(TOPIC_MAP, "t") == {TIME: TypedQuota(600, EXCEPTION)}
    assert quota_map_from_json({}, "t") == {}
    # pre-2.x brokers: only the deprecated `limit`
    assert quota_map_from_json({"destination_storage": {"limit": 10, "policy":
                                "producer_exception"}}, "t") == {SIZE: TypedQuota(10, EXCEPTION)}


@pytest.mark.parametrize("doc", [[], {"message_age": 5},
                                 {"message_age": {"limitTime": "1h"}},
                                 {"message_age": {"limitTime": 1, "policy": "drop_all"}}])
def test_malformed_maps_are_refused(doc: object) -> None:
    with pytest.raises(FetchFailure) as caught:
        quota_map_from_json(doc, "t")
    assert caught.value.failure.reason is ScrapeError.MALFORMED


def test_the_broker_default_is_built_as_backlog_quota_manager_builds_it() -> None:
    assert broker_default_from_json(RUNTIME) == {SIZE: TypedQuota(-1, HOLD),
                                                 TIME: TypedQuota(-1, HOLD)}
    shipped = {**RUNTIME, "backlogQuotaDefaultLimitGB": "10",
               "backlogQuotaDefaultLimitBytes": "5", "backlogQuotaDefaultLimitSecond": "60",
               "backlogQuotaDefaultRetentionPolicy": "consumer_backlog_eviction"}
    # the deprecated GB setting wins when > 0
    assert broker_default_from_json(shipped) == {SIZE: TypedQuota(10 * 2**30, EVICT),
                                                 TIME: TypedQuota(60, EVICT)}
    assert broker_default_from_json({**shipped, "backlogQuotaDefaultLimitGB": "0"})[SIZE] == \
        TypedQuota(5, EVICT)


# --- the cache (pure: `each` and `get` stand in for the walk) -------------------------------


def each(fn, items):
    out = []
    for item in items:
        with contextlib.suppress(FetchFailure):
            out.append(fn(item))
    return out


def test_topic_policies_disabled_means_none() -> None:
    def get(path: str) -> object:
        if path.endswith("/t/backlogQuotaMap"):
            error = urllib.error.HTTPError(path, 405, "Topic level policies is disabled",
                                           None, None)
            raise FetchFailure(ScrapeError.HTTP_ERROR, "405") from error
        return RUNTIME if path == RUNTIME_PATH else NAMESPACE_MAP

    quotas = PolicyCache().read(each, get, ["a/b"], ["persistent://a/b/t"], 0.0)
    assert quotas.topics == {} and quotas.namespaces["a/b"][TIME] == TypedQuota(3600, EVICT)


# --- through the admin walk, against the replay -------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def replay() -> Iterator[FakeAdminServer]:
    with FakeAdminServer(None) as server:
        server.set_route(NS_PATH, NAMESPACE_MAP)
        server.set_route(TOPIC_PATH, TOPIC_MAP)
        server.set_route(PARENT_PATH, {})
        server.set_route("/admin/v2/namespaces/my-tenant/my-namespace/backlogQuotaMap", {})
        server.set_route(RUNTIME_PATH, RUNTIME)
        yield server


def _quota_paths(replay: FakeAdminServer) -> list[str]:
    paths = [s.path for s in replay.seen if s.path.endswith("backlogQuotaMap")
             or s.path == RUNTIME_PATH]
    replay.seen.clear()
    return sorted(paths)


def test_the_walk_reads_policies_once_per_period(replay: FakeAdminServer) -> None:
    clock = Clock()
    scraper = AdminScraper(AdminSource(url=replay.url, timeout=2.0), clock=clock,
                           policies=PolicyCache(refresh_seconds=60))
    first = scraper.fetch()
    assert isinstance(first, AdminFetched) and first.item_errors == ()
    quotas = first.snapshot.quotas
    assert quotas.namespaces == {"public/default": {SIZE: TypedQuota(4194304, HOLD),
                                                    TIME: TypedQuota(3600, EVICT)}}
    # a partitioned topic's policies are read on its own name, not its partitions'
    assert quotas.topics == {TOPIC: {TIME: TypedQuota(600, EXCEPTION)}}
    assert quotas.default == {SIZE: TypedQuota(-1, HOLD), TIME: TypedQuota(-1, HOLD)}
    assert _quota_paths(replay) == sorted([
        NS_PATH, TOPIC_PATH, PARENT_PATH, RUNTIME_PATH,
        "/admin/v2/namespaces/my-tenant/my-namespace/backlogQuotaMap"])

    # Within the period nothing is read again, and the cached policies are kept.
    replay.set_route(TOPIC_PATH, {})
    clock.now += 59
    again = scraper.fetch()
    assert _quota_paths(replay) == []
    assert again.snapshot.quotas == quotas

    # Past it, everything is; a failed namespace read keeps its cached entries.
    replay.fail(NS_PATH, Fault.ERROR_500)
    clock.now += 2
    later = scraper.fetch()
    assert NS_PATH in _quota_paths(replay)
    assert later.snapshot.quotas.topics == {}  # the topic's quota was removed meanwhile
    assert later.snapshot.quotas.namespaces == quotas.namespaces
    assert [f.reason for f in later.item_errors] == [ScrapeError.HTTP_ERROR]


def test_without_a_cache_no_policy_is_read(replay: FakeAdminServer) -> None:
    outcome = AdminScraper(AdminSource(url=replay.url, timeout=2.0)).fetch()
    assert isinstance(outcome, AdminFetched) and outcome.snapshot.quotas is None
    assert _quota_paths(replay) == []


def test_a_failed_listing_forgets_nothing() -> None:
    def get(path: str) -> object:
        return RUNTIME if path == RUNTIME_PATH else NAMESPACE_MAP

    cache = PolicyCache(refresh_seconds=60)
    cache.read(each, get, ["a/b"], [], 0.0)
    assert set(cache.read(each, get, [], [], 100.0, complete=False).namespaces) == {"a/b"}
    assert cache.read(each, get, [], [], 200.0).namespaces == {}
