"""The admin REST client against `FakeAdminServer` (recorded Apache Pulsar JSON).

Expected values are read off the recorded fixtures (tests/fixtures/SOURCES.md lists them),
never computed by the code under test.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import AdminSource
from exporter.sources.admin import (
    AdminFetched,
    AdminScraper,
    bundles_from_json,
    partitioned_stats_from_json,
    topic_stats_from_json,
)
from exporter.sources.adminjson import MAX_AGE_SECONDS
from exporter.sources.brokers import FetchFailed, FetchFailure
from exporter.sources.results import ScrapeError, SourceKind
from tests.fakes.admin_server import (
    BOUNDARIES,
    PARTITIONED_STATS_DOCS,
    PARTITIONED_TOPIC,
    TOPIC,
    TOPIC_STATS_4_0,
    FakeAdminServer,
    Fault,
)
from tests.harness.fixtures import FIXTURES

STATS_4_0 = json.loads((FIXTURES / TOPIC_STATS_4_0).read_text())
PARTITIONED_DOCS = json.loads((FIXTURES / PARTITIONED_STATS_DOCS).read_text())
TOKEN = "replay-token"
STATS_PATH = "/admin/v2/persistent/public/default/Fibonacci/stats"


@pytest.fixture
def replay() -> Iterator[FakeAdminServer]:
    # A hang outlasts any client timeout here by far; stopping the server releases it.
    with FakeAdminServer(TOKEN, hang_seconds=60.0) as server:
        yield server


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def scraper_for(token_file: Path) -> Callable[..., AdminScraper]:
    # 10 s per request: a test not about timeouts must not hit one on a slow, loaded machine.
    def make(url: str, *, timeout: float = 10.0, token: Path | None = token_file,
             max_concurrency: int = 4) -> AdminScraper:
        source = AdminSource(url=url, token_file=str(token) if token else None, timeout=timeout)
        return AdminScraper(source, max_concurrency=max_concurrency, clock=Clock())

    return make


def counts(health) -> dict[ScrapeError, int]:
    return dict(health.errors)


def by_topic(snapshot) -> dict:
    return {t.topic: t for t in snapshot.topics}


# --- the recorded 4.0 output through the whole client -------------------------------------


def test_pulsar_4_0_topic_stats_convert(replay, scraper_for):
    result = scraper_for(replay.url).scrape()
    assert isinstance(result.outcome, AdminFetched) and result.outcome.item_errors == ()
    stats = by_topic(result.snapshot)[TOPIC]
    assert stats.backlog_size == 308599
    assert stats.msg_in_counter == 5501 and stats.bytes_in_counter == 373452
    assert STATS_4_0["oldestBacklogMessageAgeSeconds"] == -1
    assert stats.oldest_backlog_message_age_seconds is None  # -1 means "unknown"
    assert stats.oldest_backlog_message_subscription is None
    (sub,) = stats.subscriptions
    assert sub.name == "jobber" and sub.type == "Shared"
    assert sub.msg_backlog == 4533 and sub.backlog_size == 308599
    assert sub.unacked_messages == 532 and sub.consumers == 1


def test_health_after_a_clean_fetch(replay, scraper_for):
    result = scraper_for(replay.url).scrape()
    health = result.health
    assert health.up and health.kind is SourceKind.ADMIN and health.source == replay.url
    assert health.last_success == result.snapshot.fetched_at and health.last_error is None
    assert set(counts(health)) == set(ScrapeError) and not any(counts(health).values())


def test_bearer_token_is_sent_on_every_request(replay, scraper_for):
    scraper_for(replay.url).scrape()
    paths = {s.path for s in replay.seen}
    assert {"/admin/v2/tenants", STATS_PATH, "/admin/v2/namespaces/public/default/bundles",
            "/admin/v2/clusters"} <= paths
    assert {s.authorization for s in replay.seen} == {f"Bearer {TOKEN}"}


def test_no_token_file_sends_no_authorization(scraper_for):
    with FakeAdminServer(token=None) as open_replay:
        result = scraper_for(open_replay.url, token=None).scrape()
        assert result.health.up
        assert {s.authorization for s in open_replay.seen} == {None}


def test_proxies_from_the_environment_are_not_used(replay, scraper_for, monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens: a proxied call fails
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    result = scraper_for(replay.url).scrape()
    assert result.health.up and TOPIC in by_topic(result.snapshot)


def test_partitioned_docs_example_is_kept_whole_when_no_partitions_are_listed(replay,
                                                                               scraper_for):
    result = scraper_for(replay.url).scrape()
    stats = by_topic(result.snapshot)[PARTITIONED_TOPIC]
    assert PARTITIONED_DOCS["partitions"] == {}
    assert stats.backlog_size == 200921133 and stats.msg_in_counter == 252489
    assert stats.oldest_backlog_message_age_seconds is None  # field absent before 3.2
    (sub,) = stats.subscriptions
    assert (sub.name, sub.msg_backlog, sub.backlog_size, sub.type, sub.consumers) == (
        "test", 144318, None, None, 0)
    # its partitions, listed by the namespace listing, are not fetched one by one
    assert not [s for s in replay.seen if "-partition-" in s.path]
    assert not [t for t in result.snapshot.topics if "-partition-" in t.topic]
    (asked,) = [s for s in replay.seen if s.path.endswith("/partitioned-stats")]
    assert asked.query == "perPartition=true"


def test_partitions_are_kept_apart_when_the_broker_lists_them(replay, scraper_for):
    doc = copy.deepcopy(PARTITIONED_DOCS)
    parts = {}
    for i, age in enumerate((-1, 42)):
        part = copy.deepcopy(STATS_4_0)
        part["oldestBacklogMessageAgeSeconds"] = age
        part["oldestBacklogMessageSubscriptionName"] = "jobber"
        parts[f"{PARTITIONED_TOPIC}-partition-{i}"] = part
    doc["partitions"] = parts
    replay.set_route(
        "/admin/v2/persistent/my-tenant/my-namespace/my-topic/partitioned-stats", doc)
    topics = by_topic(scraper_for(replay.url).scrape().snapshot)
    assert PARTITIONED_TOPIC not in topics
    p0, p1 = topics[f"{PARTITIONED_TOPIC}-partition-0"], topics[f"{PARTITIONED_TOPIC}-partition-1"]
    assert p0.oldest_backlog_message_age_seconds is None
    assert p0.oldest_backlog_message_subscription is None
    assert p1.oldest_backlog_message_age_seconds == 42.0
    assert p1.oldest_backlog_message_subscription == "jobber"
    assert p1.subscriptions[0].msg_backlog == 4533


def test_bundles_and_their_owners(replay, scraper_for):
    snapshot = scraper_for(replay.url).scrape().snapshot
    owner = STATS_4_0["ownerBroker"]
    ranges = [f"{lo}_{hi}" for lo, hi in pairwise(BOUNDARIES)]
    got = {(b.namespace, b.bundle): b.broker for b in snapshot.bundles}
    assert got == {
        **{("public/default", r): owner for r in ranges},
        **{("my-tenant/my-namespace", r): None for r in ranges},
    }


def test_a_stats_redirect_to_the_owner_broker_is_followed_with_the_token(replay, scraper_for):
    with FakeAdminServer(TOKEN) as owner:
        replay.redirect(STATS_PATH, owner.url)
        result = scraper_for(replay.url).scrape()
        assert by_topic(result.snapshot)[TOPIC].backlog_size == 308599
        (seen,) = [s for s in owner.seen if s.path == STATS_PATH]
        assert seen.authorization == f"Bearer {TOKEN}"


def test_concurrency_is_bounded(replay, scraper_for):
    names = [f"persistent://public/default/t{i}" for i in range(12)]
    replay.set_route("/admin/v2/persistent/public/default", names)
    for name in names:
        replay.set_route(f"/admin/v2/persistent/public/default/{name.rsplit('/', 1)[1]}/stats",
                         STATS_4_0)
    replay.fail("/admin/v2/persistent/public/default/t", Fault.SLOW)
    result = scraper_for(replay.url, max_concurrency=3).scrape()
    assert set(names) <= set(by_topic(result.snapshot))
    assert 2 <= replay.max_in_flight <= 3


# --- configured namespaces (a role that may not list tenants) -------------------------------


def _walking(url: str, token: Path, *namespaces: str) -> AdminScraper:
    return AdminScraper(AdminSource(url=url, token_file=str(token), namespaces=namespaces),
                        clock=Clock())


def test_configured_namespaces_are_walked_without_listing_tenants(replay, token_file):
    result = _walking(replay.url, token_file, "public/default").scrape()
    assert isinstance(result.outcome, AdminFetched) and result.outcome.item_errors == ()
    assert set(by_topic(result.snapshot)) == {TOPIC}  # not my-tenant's
    assert {b.namespace for b in result.snapshot.bundles} == {"public/default"}
    paths = {s.path for s in replay.seen}
    assert STATS_PATH in paths
    assert not paths & {"/admin/v2/tenants", "/admin/v2/namespaces/public",
                        "/admin/v2/namespaces/my-tenant"}


def test_a_configured_namespace_that_fails_is_counted_and_the_others_used(replay, token_file):
    replay.fail("/admin/v2/persistent/my-tenant/my-namespace", Fault.ERROR_500)
    result = _walking(replay.url, token_file, "my-tenant/my-namespace",
                      "public/default").scrape()
    assert result.health.up and set(by_topic(result.snapshot)) == {TOPIC}
    assert set(c for c, n in counts(result.health).items() if n) == {ScrapeError.HTTP_ERROR}


def test_when_no_configured_namespace_answers_the_last_good_snapshot_stays(replay, token_file):
    """As a refused tenant list: an empty snapshot would read as "no topics"."""
    scraper = _walking(replay.url, token_file, "public/default")
    good = scraper.scrape().snapshot
    replay.fail("/admin/v2/persistent/public/default", Fault.ERROR_500)
    result = scraper.scrape()
    assert isinstance(result.outcome, FetchFailed)
    assert result.outcome.reason is ScrapeError.HTTP_ERROR
    assert "/admin/v2/persistent/public/default" in result.outcome.detail
    assert result.snapshot is good and not result.health.up


# --- failures ----------------------------------------------------------------------------


def test_wrong_token_is_auth_and_the_last_good_snapshot_stays(replay, scraper_for, token_file):
    scraper = scraper_for(replay.url)
    good = scraper.scrape().snapshot
    token_file.write_text("stolen-token")  # read again at every fetch
    result = scraper.scrape()
    assert isinstance(result.outcome, FetchFailed) and result.outcome.reason is ScrapeError.AUTH
    assert result.snapshot is good
    assert not result.health.up and result.health.last_error is ScrapeError.AUTH
    assert counts(result.health)[ScrapeError.AUTH] == 1
    assert result.health.last_success == good.fetched_at
    assert replay.seen[-1].authorization == "Bearer stolen-token"

    token_file.write_text(TOKEN)
    recovered = scraper.scrape()
    assert recovered.health.up and recovered.snapshot.fetched_at > good.fetched_at
    assert counts(recovered.health)[ScrapeError.AUTH] == 1


def test_unreadable_token_file_is_auth(replay, scraper_for, tmp_path):
    result = scraper_for(replay.url, token=tmp_path / "missing").scrape()
    assert result.outcome.reason is ScrapeError.AUTH and result.snapshot is None
    assert replay.seen == []


@pytest.mark.parametrize(("fault", "reason"), [
    (Fault.TRUNCATED, ScrapeError.MALFORMED),
    (Fault.ERROR_500, ScrapeError.HTTP_ERROR),
    (Fault.HANG, ScrapeError.TIMEOUT),
])
def test_a_failed_walk_is_classified(fault, reason, replay, scraper_for):
    replay.fail("/admin/v2/tenants", fault)
    started = time.monotonic()
    result = scraper_for(replay.url, timeout=1.0 if fault is Fault.HANG else 10.0).scrape()
    if fault is Fault.HANG:  # the client gave up before the server would have answered
        assert time.monotonic() - started < replay.hang_seconds
    assert isinstance(result.outcome, FetchFailed) and result.outcome.reason is reason
    assert not result.health.up and counts(result.health)[reason] == 1
    assert result.snapshot is None


def test_refused(scraper_for):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = scraper_for(f"http://127.0.0.1:{port}").scrape()
    assert result.outcome.reason is ScrapeError.REFUSED and not result.health.up


@pytest.mark.parametrize(("fault", "reason"), [
    (Fault.TRUNCATED, ScrapeError.MALFORMED),
    (Fault.ERROR_500, ScrapeError.HTTP_ERROR),
])
def test_one_broken_topic_is_left_out_and_counted(fault, reason, replay, scraper_for):
    replay.fail(STATS_PATH, fault)
    result = scraper_for(replay.url).scrape()
    assert result.health.up
    topics = by_topic(result.snapshot)
    assert TOPIC not in topics and PARTITIONED_TOPIC in topics
    assert counts(result.health)[reason] == 1 and sum(counts(result.health).values()) == 1
    assert result.health.last_error is reason and STATS_PATH in result.health.last_error_detail


def test_missing_required_field_is_counted_and_other_topics_still_used(replay, scraper_for):
    doc = copy.deepcopy(STATS_4_0)
    del doc["subscriptions"]["jobber"]["msgBacklog"]
    replay.set_route(STATS_PATH, doc)
    result = scraper_for(replay.url).scrape()
    assert result.health.up
    assert TOPIC not in by_topic(result.snapshot)
    assert PARTITIONED_TOPIC in by_topic(result.snapshot)
    assert counts(result.health)[ScrapeError.MISSING_FIELDS] == 1
    assert "msgBacklog" in result.health.last_error_detail


def test_failed_owner_lookup_leaves_bundles_unowned(replay, scraper_for):
    replay.fail("/admin/v2/clusters", Fault.ERROR_500)
    result = scraper_for(replay.url).scrape()
    assert result.health.up and len(result.snapshot.bundles) == 8
    assert {b.broker for b in result.snapshot.bundles} == {None}
    assert counts(result.health)[ScrapeError.HTTP_ERROR] == 1


# --- pure conversion ---------------------------------------------------------------------


@given(st.integers(min_value=-(2**40), max_value=MAX_AGE_SECONDS))
def test_backlog_age_is_known_only_when_not_negative(age):
    doc = dict(STATS_4_0, oldestBacklogMessageAgeSeconds=age,
               oldestBacklogMessageSubscriptionName="jobber")
    stats = topic_stats_from_json(TOPIC, doc)
    if age < 0:
        assert stats.oldest_backlog_message_age_seconds is None
        assert stats.oldest_backlog_message_subscription is None
    else:
        assert stats.oldest_backlog_message_age_seconds == float(age)
        assert stats.oldest_backlog_message_subscription == "jobber"


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda d: d.pop("subscriptions"), ScrapeError.MISSING_FIELDS),
    (lambda d: d["subscriptions"]["jobber"].pop("unackedMessages"), ScrapeError.MISSING_FIELDS),
    (lambda d: d["subscriptions"]["jobber"].pop("consumers"), ScrapeError.MISSING_FIELDS),
    (lambda d: d.update(backlogSize="lots"), ScrapeError.MALFORMED),
    (lambda d: d["subscriptions"]["jobber"].update(msgBacklog=True), ScrapeError.MALFORMED),
    (lambda d: d.update(subscriptions=[]), ScrapeError.MALFORMED),
])
def test_conversion_errors(mutate, reason):
    doc = copy.deepcopy(STATS_4_0)
    mutate(doc)
    with pytest.raises(FetchFailure) as err:
        topic_stats_from_json(TOPIC, doc)
    assert err.value.failure.reason is reason
    assert TOPIC in err.value.failure.detail


def test_optional_fields_may_be_absent():
    doc = copy.deepcopy(STATS_4_0)
    for key in ("backlogSize", "msgInCounter", "bytesInCounter",
                "oldestBacklogMessageAgeSeconds"):
        del doc[key]
    del doc["subscriptions"]["jobber"]["type"]
    stats = topic_stats_from_json(TOPIC, doc)
    assert (stats.backlog_size, stats.msg_in_counter, stats.bytes_in_counter,
            stats.oldest_backlog_message_age_seconds) == (None, None, None, None)
    assert stats.subscriptions[0].type is None


def test_partitioned_conversion_without_partitions_is_the_aggregate():
    (whole,) = partitioned_stats_from_json(PARTITIONED_TOPIC, PARTITIONED_DOCS)
    assert whole.topic == PARTITIONED_TOPIC and whole.backlog_size == 200921133


@given(st.lists(st.integers(min_value=0, max_value=2**32 - 1), min_size=2, max_size=20,
                unique=True))
def test_bundles_cover_consecutive_boundaries(points):
    bounds = [f"0x{p:08x}" for p in sorted(points)]
    bundles = bundles_from_json("t/ns", {"boundaries": bounds, "numBundles": len(bounds) - 1},
                                {f"t/ns/{bounds[0]}_{bounds[1]}": "b1"})
    assert len(bundles) == len(bounds) - 1
    assert [b.bundle.split("_")[0] for b in bundles] == bounds[:-1]
    assert [b.bundle.split("_")[1] for b in bundles] == bounds[1:]
    assert [b.broker for b in bundles] == ["b1"] + [None] * (len(bundles) - 1)
