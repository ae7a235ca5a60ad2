"""What the admin REST reads each cycle (engine/attention.py): a topic's stats only when it
needs them, listings that rarely change on a period, a topic's policies only while it has
some, and the topics no broker listed afresh (pipeline/lastgood.py `stale`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from exporter.config.settings import (
    AdminSource,
    BacklogQuota,
    BacklogQuotas,
    PolicySource,
    RetentionPolicy,
    TopicFilter,
)
from exporter.engine.attention import stats_wanted
from exporter.engine.backlog.check import SubscriptionBacklog, TimeSource, TopicBacklogState, check
from exporter.engine.backlog.quotas import disagrees, resolve
from exporter.engine.decide import Decisions
from exporter.pipeline.lastgood import LastGood
from exporter.sources.admin import AdminFetched, AdminScraper
from exporter.sources.policies import PolicyCache
from exporter.sources.results import PulsarQuotas, QuotaType, TypedQuota
from tests.fakes.admin_server import PARTITIONED_TOPIC, TOPIC, FakeAdminServer
from tests.unit.test_lastgood import A, B, tables
from tests.unit.test_sources_policies import Clock

NOW = 10_000.0
NS = "public/default"
HOUR = BacklogQuota(limit_time=3600, policy=RetentionPolicy.CONSUMER_BACKLOG_EVICTION)


def decided(topic: str, backlog: int, age: float | None, source: TimeSource,
            quota: BacklogQuota = HOUR) -> object:
    publish = None if age is None else NOW - age
    state = TopicBacklogState(topic, NS, (SubscriptionBacklog("s", backlog, None, publish,
                                                              source),))
    return check(state, BacklogQuotas(namespaces={NS: quota}), NOW)


def decisions(*topics, doubted: frozenset[str] = frozenset()) -> Decisions:
    return Decisions(NOW, tuple(topics), {}, (), doubted=doubted)


def test_only_topics_that_need_their_stats_are_wanted() -> None:
    last = decisions(
        decided("persistent://public/default/over", 5, 7200, TimeSource.BROKER),
        decided("persistent://public/default/measured", 5, 60, TimeSource.BROKER),
        decided("persistent://public/default/estimated", 5, 60, TimeSource.ESTIMATED),
        decided("persistent://public/default/bound", 5, 60, TimeSource.LOWER_BOUND),
        decided("persistent://public/default/unknown", 5, None, TimeSource.ESTIMATED),
        decided("persistent://public/default/empty", 0, None, TimeSource.ESTIMATED),
        decided("persistent://public/default/no-limit", 5, 60, TimeSource.ESTIMATED,
                BacklogQuota()),
        decided("persistent://public/default/doubted", 0, None, TimeSource.ESTIMATED),
        doubted=frozenset({"persistent://public/default/doubted"}))
    listed = [d.topic for d in last.topics] + [
        "persistent://public/default/unloaded", "persistent://public/default/skipped-1"]
    rule = TopicFilter(deny=(r".*/skipped-[0-9]+",))
    # our own topics are never decided, nor wanted: pulsar-lite names them without domain
    ours = ("persistent://public/default/lock", "non-persistent://public/default/usage")
    wanted = stats_wanted(last, [*listed, "persistent://public/default/lock",
                                 "persistent://public/default/usage"], rule=rule,
                          ours=ours, stale={"persistent://public/default/held"})
    assert wanted == {f"persistent://public/default/{t}" for t in (
        "over", "estimated", "bound", "unknown", "doubted", "unloaded", "held")}
    assert stats_wanted(last, listed, rule=TopicFilter(), ours=(), stale=()) >= {
        "persistent://public/default/skipped-1"}
    assert "persistent://public/default/lock" in stats_wanted(
        last, [*listed, "persistent://public/default/lock"], rule=rule, ours=(), stale=())


def test_a_disagreement_is_only_with_pulsars_own_limits() -> None:
    pulsar = PulsarQuotas(namespaces={NS: {QuotaType.SIZE: TypedQuota(1024),
                                           QuotaType.TIME: TypedQuota(-1)}})
    quotas = BacklogQuotas(source=PolicySource.PULSAR)
    ours = resolve("persistent://public/default/t", NS, quotas, pulsar)
    assert not disagrees(ours, 1024.0, -1.0)  # the broker prints -1 for no limit
    assert not disagrees(ours, None, None)  # not printed: nothing to compare
    assert disagrees(ours, 512.0, -1.0)  # a topic-level 512 B set since we read its map
    assert disagrees(ours, 1024.0, 60.0)
    yaml = resolve("persistent://public/default/t", NS, dataclasses.replace(
        quotas, source=PolicySource.BOTH, namespaces={NS: BacklogQuota(limit_size=5)}), pulsar)
    assert not disagrees(yaml, 1024.0, -1.0)  # the YAML overrides Pulsar here only


def test_stale_topics_are_held_ones_and_those_of_a_broker_down() -> None:
    last = LastGood()
    current = last.update({A: tables(100.0, t1=5, t2=7), B: tables(100.0, t3=1, t4=2)})
    assert last.stale(current) == frozenset()
    current = last.update({A: tables(100.0, t1=5), B: tables(100.0, t3=1, t4=2)})
    held = last.stale(current)
    assert {t.rsplit("/", 1)[1] for t in held} == {"t2"} and last.held() == 1
    current = last.update({A: tables(100.0, t1=5, t4=2)})  # B down; its t4 moved to A
    assert {t.rsplit("/", 1)[1] for t in last.stale(current)} == {"t2", "t3"}
    assert last.held() == 1  # t3 is a down broker's: stale, not held


# --- through the walk, against the replay ---------------------------------------------------


@pytest.fixture
def replay() -> Iterator[FakeAdminServer]:
    with FakeAdminServer(None) as server:
        yield server


def _paths(replay: FakeAdminServer) -> list[str]:
    paths = sorted(s.path for s in replay.seen)
    replay.seen.clear()
    return paths


@pytest.mark.parametrize("picked", [set(), {TOPIC}, {f"{PARTITIONED_TOPIC}-partition-0"}])
def test_stats_are_read_only_for_the_topics_chosen(replay, picked) -> None:
    """The walk still lists namespaces, topics and bundles, but reads no other topic's
    stats (a partition chosen: its partitioned topic's one call)."""
    listed: list[str] = []

    def choose(topics):
        listed.extend(topics)
        return picked

    scraper = AdminScraper(AdminSource(url=replay.url, timeout=5.0), clock=Clock())
    outcome = scraper.fetch(choose)
    assert isinstance(outcome, AdminFetched) and outcome.item_errors == ()
    assert TOPIC in listed and f"{PARTITIONED_TOPIC}-partition-0" in listed
    asked = {p for p in _paths(replay) if p.endswith(("/stats", "/partitioned-stats"))}
    expected = {"/admin/v2/persistent/public/default/Fibonacci/stats"} if TOPIC in picked \
        else set()
    if any(t.startswith(PARTITIONED_TOPIC) for t in picked):
        expected.add("/admin/v2/persistent/my-tenant/my-namespace/my-topic/partitioned-stats")
    assert asked == expected
    assert {t.topic for t in outcome.snapshot.topics} & {TOPIC} == picked & {TOPIC}
    assert {b.namespace for b in outcome.snapshot.bundles} == {NS, "my-tenant/my-namespace"}


def test_listings_that_rarely_change_are_read_once_a_period(replay) -> None:
    clock = Clock()
    scraper = AdminScraper(AdminSource(url=replay.url, timeout=5.0), clock=clock)
    scraper.fetch()
    first = _paths(replay)
    rare = {"/admin/v2/namespaces/public", "/admin/v2/namespaces/my-tenant",
            "/admin/v2/persistent/public/default/partitioned",
            "/admin/v2/persistent/my-tenant/my-namespace/partitioned", "/admin/v2/clusters"}
    assert rare <= set(first)
    clock.now += 59
    scraper.fetch(lambda topics: ())
    steady = _paths(replay)
    assert not rare & set(steady)
    # Every walk: the tenants (proving access), each namespace's topics and bundles, each
    # cluster's brokers and each broker's bundles; no topic's stats.
    assert "/admin/v2/tenants" in steady
    assert not [p for p in steady if p.endswith(("/stats", "/partitioned-stats"))]
    clock.now += 2
    scraper.fetch(lambda topics: ())
    assert rare <= set(_paths(replay))


def test_a_topics_map_is_read_again_only_while_it_has_entries_or_when_chosen() -> None:
    reads: list[str] = []
    maps = {"persistent://a/b/with": {"message_age": {"limitTime": 60}},
            "persistent://a/b/without": {}}

    def get(path: str) -> object:
        reads.append(path)
        for topic, doc in maps.items():
            if path == f"/admin/v2/persistent/{topic.partition('://')[2]}/backlogQuotaMap":
                return doc
        return {}

    def each(fn, items):
        return [fn(item) for item in items]

    def topic_reads() -> set[str]:
        found = {p.split("/")[-2] for p in reads if "/persistent/" in p}
        reads.clear()
        return found

    cache = PolicyCache(refresh_seconds=60)
    cache.read(each, get, ["a/b"], list(maps), 0.0)
    assert topic_reads() == {"with", "without"}  # each first seen: read
    cache.read(each, get, ["a/b"], list(maps), 30.0)
    assert topic_reads() == set()  # within the period
    cache.read(each, get, ["a/b"], list(maps), 61.0)
    assert topic_reads() == {"with"}  # past it: only the topic with entries
    quotas = cache.read(each, get, ["a/b"], list(maps), 62.0,
                        now_too={"persistent://a/b/without"})
    assert topic_reads() == {"without"}  # chosen: read at once
    assert set(quotas.topics) == {"persistent://a/b/with"}


def test_the_engine_doubts_each_topic_whose_printed_limits_differ() -> None:
    """The decide asks `disagrees` once per namespace's limits and printed pair: topics of
    one namespace printing the same limits share an answer, a topic printing others, or
    with its own Pulsar entry, gets its own."""
    from exporter.config.load import parse
    from exporter.engine.decide import Decider
    from exporter.pipeline.merge import merge
    from exporter.pipeline.parse import parse_text
    from exporter.pipeline.tables import source_tables
    from exporter.sources.results import AdminSnapshot

    printed = {"same-1": 1024, "moved": 512, "same-2": 1024, "silent": None, "own": 512,
               "own-moved": 1024}
    lines = []
    for name, limit in printed.items():
        labels = f'cluster="c",namespace="{NS}",topic="persistent://{NS}/{name}"'
        lines.append(f"pulsar_in_messages_total{{{labels}}} 5")
        if limit is not None:
            lines += [f"pulsar_storage_backlog_quota_limit{{{labels}}} {limit}",
                      f"pulsar_storage_backlog_quota_limit_time{{{labels}}} -1"]
    url = "http://127.0.0.1:8080/metrics"
    agg = merge([(url, source_tables([parse_text("\n".join(lines).encode() + b"\n")]))], {})
    size = {QuotaType.SIZE: TypedQuota(1024), QuotaType.TIME: TypedQuota(-1)}
    pulsar = PulsarQuotas(namespaces={NS: size}, topics={
        f"persistent://{NS}/{t}": {QuotaType.SIZE: TypedQuota(512)} for t in ("own", "own-moved")})
    config = parse({"cluster": "c", "sources": {"brokers": [{"url": url}], "admin": {
        "url": "http://127.0.0.1:8080"}}, "backlog_quotas": {"source": "pulsar"}}, "t.yaml")
    decisions = Decider(config).decide(agg, AdminSnapshot(NOW, (), (), pulsar), NOW)
    assert len(decisions.topics) == len(printed)
    assert decisions.doubted == {f"persistent://{NS}/{t}" for t in ("moved", "own-moved")}
