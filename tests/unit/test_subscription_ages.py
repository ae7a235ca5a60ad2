"""Each subscription's own backlog age (PIP-492, Pulsar >= 5.0, apache/pulsar#26313), for
every broker: read where the broker has it (its admin REST `SubscriptionStats.
oldestBacklogMessageAgeSeconds`, its /metrics gauge), estimated otherwise, and published
as `pulsar_subscription_storage_backlog_age_seconds` when asked.

The 5.0 body is the recorded 4.0.8 one with the line PIP-492's TopicStats prints for the
stalled subscription (same labels as `pulsar_subscription_back_log`): no such broker is
served here."""

from __future__ import annotations

from exporter.config.load import parse
from exporter.engine.backlog.check import TimeSource
from exporter.engine.decide import Decider
from exporter.exposition.build import CycleFacts, Tallies, build
from exporter.exposition.render import render
from exporter.pipeline.merge import merge
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import source_tables
from exporter.sources.adminjson import topic_stats_from_json
from exporter.sources.results import AdminSnapshot, SubscriptionStats, TopicStats
from tests.harness.fixtures import FIXTURES
from tests.harness.pulsar import Metrics

BODY = (FIXTURES / "apache-pulsar-4.0-metrics.txt").read_text()
KEPT = "persistent://public/pip323-kept-2fef1917/kept"  # "stalled": 40 messages
LABELS = ('cluster="standalone",namespace="public/pip323-kept-2fef1917",'
          f'topic="{KEPT}",subscription="stalled"')
BODY_5_0 = BODY + f"pulsar_subscription_storage_backlog_age_seconds{{{LABELS}}} 42\n"
URL = "http://127.0.0.1:8080/metrics/"
NOW = 1_800_000_000.0
AGE = "pulsar_subscription_storage_backlog_age_seconds"


def _config(**exposition: object):
    return parse({"cluster": "c", "sources": {"brokers": [{"url": URL}]},
                  "exposition": exposition}, "t.yaml")


def _decide(body: str, admin: AdminSnapshot | None = None):
    agg = merge([(URL, source_tables([parse_text(body.encode())]))], {})
    decisions = Decider(_config()).decide(agg, admin, NOW)
    return decisions, {d.topic: d for d in decisions.topics}


def _stalled(decision) -> object:
    (sub,) = [s for s in decision.subscriptions if s.name == "stalled"]
    return sub


def test_the_brokers_own_subscription_age_is_read_from_metrics() -> None:
    agg = merge([(URL, source_tables([parse_text(BODY_5_0.encode())]))], {})
    (row,) = [r for r in agg.subscriptions.to_pylist() if r["topic"] == KEPT]
    assert row["backlog_age_seconds"] == 42.0
    _, topics = _decide(BODY_5_0)
    stalled = _stalled(topics[KEPT])
    assert (stalled.time_source, NOW - stalled.oldest_publish_time) == (TimeSource.BROKER, 42)


def test_the_admin_rests_subscription_age_wins() -> None:
    doc = {"subscriptions": {"stalled": {"msgBacklog": 40, "unackedMessages": 0,
                                         "consumers": [], "oldestBacklogMessageAgeSeconds": 50},
                             "fresh": {"msgBacklog": 0, "unackedMessages": 0, "consumers": [],
                                       "oldestBacklogMessageAgeSeconds": -1}}}
    stats = topic_stats_from_json(KEPT, doc)
    ages = {s.name: s.oldest_backlog_message_age_seconds for s in stats.subscriptions}
    assert ages == {"stalled": 50.0, "fresh": None}  # -1: not measured
    _, topics = _decide(BODY_5_0, AdminSnapshot(NOW - 2, (stats,), ()))
    stalled = _stalled(topics[KEPT])
    assert (stalled.time_source, NOW - stalled.oldest_publish_time) == (TimeSource.ADMIN, 52)


def test_without_them_the_4_0_brokers_topic_age_goes_to_the_slowest() -> None:
    _, topics = _decide(BODY)
    stalled = _stalled(topics[KEPT])
    assert (stalled.time_source, NOW - stalled.oldest_publish_time) == (TimeSource.BROKER, 3)


def _published(body: str, *, on: bool, admin: AdminSnapshot | None = None) -> Metrics:
    decisions, _ = _decide(body, admin)
    facts = CycleFacts("c", NOW, {}, NOW, 1.0, 1.0, 1.0, subscription_ages=on)
    text = render(build(facts, decisions, (), Tallies(), "me"), topic_level=True).decode()
    return Metrics(text)


def test_published_only_when_asked_with_pulsars_labels() -> None:
    assert AGE not in _published(BODY_5_0, on=False).text
    metrics = _published(BODY_5_0, on=True)
    labels = dict(cluster="c", namespace="public/pip323-kept-2fef1917", topic=KEPT,
                  subscription="stalled")
    assert metrics.value(AGE, **labels) == 42.0
    assert metrics.value("pulsar_subscription_storage_backlog_age_estimated", **labels) == 0.0
    # the other topic's subscription has no backlog: age 0, as Pulsar's
    assert metrics.value(AGE, topic="persistent://public/pip323-age-a5f53a0d/aged") == 0.0


def test_an_estimate_is_flagged_and_an_unknown_age_is_left_out() -> None:
    two = BODY.replace(f"pulsar_subscription_back_log{{{LABELS}}} 40",
                       f"pulsar_subscription_back_log{{{LABELS}}} 40\n"
                       f"pulsar_subscription_back_log{{{LABELS.replace('stalled', 'slow')}}} 5")
    metrics = _published(two, on=True)
    assert metrics.value(AGE, topic=KEPT, subscription="stalled") == 3.0  # the broker's
    # "slow" has a backlog and no measure: a fresh exporter's age table knows nothing yet
    assert metrics.find(AGE, topic=KEPT, subscription="slow") == []
    admin = AdminSnapshot(NOW, (TopicStats(
        KEPT, None, 100, None, None, None,
        (SubscriptionStats("slow", 5, None, 0, 0, "Shared", 9.0),
         SubscriptionStats("stalled", 40, None, 0, 0, "Shared"))),), ())
    measured = _published(two, on=True, admin=admin)
    assert measured.value(AGE, topic=KEPT, subscription="slow") == 9.0
    assert measured.value("pulsar_subscription_storage_backlog_age_estimated", topic=KEPT,
                          subscription="slow") == 0.0


def test_a_printed_age_of_zero_is_the_brokers_own() -> None:
    """0 s is an age (a message published this second), unlike Pulsar's -1 for none."""
    _, topics = _decide(BODY + f"{AGE}{{{LABELS}}} 0\n")
    stalled = _stalled(topics[KEPT])
    assert (stalled.time_source, stalled.oldest_publish_time) == (TimeSource.BROKER, NOW)


def test_each_topics_subscriptions_are_its_own_in_the_printed_order() -> None:
    """The subscriptions reach each decision grouped by topic, in the order the broker
    printed them; a topic without any has none."""
    from tests.harness.synthetic import BodySpec, body_text

    # printed first but last by name, so that an order by name fails; and a topic of none
    lonely = "persistent://bench/ns-0/lonely"
    body = (body_text(BodySpec(topics=40, subscriptions=3)).replace('"sub-0"', '"zz-0"')
            + BODY_5_0 + f'pulsar_storage_size{{cluster="bench",namespace="bench/ns-0",'
                         f'topic="{lonely}"}} 0\n')
    agg = merge([(URL, source_tables([parse_text(body.encode())]))], {})
    printed: dict[str, list[str]] = {}
    for row in agg.subscriptions.to_pylist():
        printed.setdefault(row["topic"], []).append(row["subscription"])
    assert sum(names == ["zz-0", "sub-1", "sub-2"] for names in printed.values()) == 40
    decisions, topics = _decide(body)
    assert topics[lonely].subscriptions == ()
    assert {d.topic: [s.name for s in d.subscriptions] for d in decisions.topics} == {
        d.topic: printed.get(d.topic, []) for d in decisions.topics}
