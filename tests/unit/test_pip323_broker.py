"""PIP-323 as Apache Pulsar >= 3.2 prints it (the recorded 4.0.8 body): the per-topic
backlog age and quota limits parsed into the topic table, kept out of namespace sums, and
the broker's age used by the engine where the admin REST has no precise one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.config.load import parse
from exporter.engine.backlog.check import TimeSource
from exporter.engine.decide import Decider
from exporter.pipeline.aggregates import NAMESPACES, SOURCE_NAMESPACES, TOPIC_ONLY, TOPICS
from exporter.pipeline.merge import merge
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import SourceTables, source_tables
from exporter.sources.results import AdminSnapshot, SubscriptionStats, TopicStats
from tests.harness.fixtures import FIXTURES

BODY = (FIXTURES / "apache-pulsar-4.0-metrics.txt").read_bytes()
KEPT = "persistent://public/pip323-kept-2fef1917/kept"  # 40 messages, 10 MiB size quota
AGED = "persistent://public/pip323-age-a5f53a0d/aged"  # evicted by its 2 s time quota
URL = "http://127.0.0.1:8080/metrics/"
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def tables() -> SourceTables:
    return source_tables([parse_text(BODY)])


def _by_topic(table) -> dict[str, dict]:
    return {r["topic"]: r for r in table.to_pylist()}


def test_the_broker_age_and_limits_are_topic_columns(tables) -> None:
    # Lines of the fixture, e.g.
    # pulsar_storage_backlog_quota_limit{…,topic="…/kept"} 10485760
    # pulsar_storage_backlog_quota_limit_time{…,topic="…/kept"} -1
    topics = _by_topic(tables.topics)
    assert {t: (r["backlog_age_seconds"], r["backlog_quota_limit_bytes"],
                r["backlog_quota_limit_seconds"]) for t, r in topics.items()} == {
        KEPT: (3.0, 10485760.0, -1.0),
        AGED: (3.0, -1.0, 2.0),
    }
    assert topics[KEPT]["msg_backlog"] == 40 and topics[AGED]["msg_backlog"] == 0


def test_ages_and_limits_are_never_namespace_sums(tables) -> None:
    for schema in (NAMESPACES, SOURCE_NAMESPACES):
        assert not set(TOPIC_ONLY) & set(schema.names)
    assert set(TOPIC_ONLY) <= set(TOPICS.names)
    agg = merge([(URL, tables)], {})
    assert _by_topic(agg.topics)[KEPT]["backlog_quota_limit_bytes"] == 10485760.0
    namespaces = {r["namespace"]: r for r in agg.namespaces.to_pylist()}
    assert namespaces["public/pip323-kept-2fef1917"]["msg_backlog"] == 40


def _decider() -> Decider:
    return Decider(parse({"cluster": "c", "sources": {"brokers": [{"url": URL}]}}, "t.yaml"))


def test_the_engine_takes_the_brokers_age_for_the_slowest_subscription(tables) -> None:
    agg = merge([(URL, tables)], {})
    decisions = {d.topic: d for d in _decider().decide(agg, None, NOW).topics}
    kept = decisions[KEPT]
    assert (kept.holder, kept.backlog_messages) == ("stalled", 40)
    assert kept.time_source is TimeSource.BROKER
    assert kept.backlog_age_seconds == 3.0
    # The aged topic's gauge is stale (it was measured before the eviction emptied the
    # backlog): with nothing unacknowledged its age is 0.
    assert decisions[AGED].backlog_age_seconds == 0.0 and decisions[AGED].holder is None


def test_the_admin_rests_precise_age_still_wins(tables) -> None:
    agg = merge([(URL, tables)], {})
    admin = AdminSnapshot(NOW - 1, (TopicStats(
        KEPT, 9400, 40, 9400, 7.5, "stalled",
        (SubscriptionStats("stalled", 40, 9400, 0, 0, "Shared"),)),), ())
    decisions = {d.topic: d for d in _decider().decide(agg, admin, NOW).topics}
    assert decisions[KEPT].time_source is TimeSource.ADMIN
    assert decisions[KEPT].backlog_age_seconds == pytest.approx(8.5)


def test_a_broker_without_pip323_keeps_our_estimate() -> None:
    without = b"\n".join(line for line in BODY.splitlines()
                         if not line.startswith(b"pulsar_storage_backlog_age_seconds"))
    agg = merge([(URL, source_tables([parse_text(without)]))], {})
    assert _by_topic(agg.topics)[KEPT]["backlog_age_seconds"] is None
    decider = _decider()
    first = {d.topic: d for d in decider.decide(agg, None, NOW).topics}[KEPT]
    assert first.backlog_age_seconds is None  # one point of the age table: unknown yet
    kept = {d.topic: d for d in decider.decide(agg, None, NOW + 10).topics}[KEPT]
    assert kept.time_source is TimeSource.LOWER_BOUND  # older than the table's first point
    assert kept.backlog_age_seconds == 10.0


def test_an_unmeasured_broker_age_is_not_an_age(tables) -> None:
    """The broker prints -1 until its backlog-quota check has measured a topic."""
    unmeasured = BODY.replace(
        f'topic="{KEPT}"}} 3'.encode(), f'topic="{KEPT}"}} -1'.encode())
    assert unmeasured != BODY
    agg = merge([(URL, source_tables([parse_text(unmeasured)]))], {})
    kept = {d.topic: d for d in _decider().decide(agg, None, NOW).topics}[KEPT]
    assert kept.time_source is None and kept.backlog_age_seconds is None  # not "-1 s old"


def _reloaded(backlog: int = 40) -> SourceTables:
    """The same topic just loaded again by a broker (a bundle moved, a restart): its counters
    restarted at 0, its age not measured yet (-1), its backlog `backlog` messages."""
    body = BODY.replace(f'topic="{KEPT}"}} 3'.encode(), f'topic="{KEPT}"}} -1'.encode())
    lines = []
    for line in body.splitlines():
        if f'topic="{KEPT}"'.encode() in line and line.startswith(
                (b"pulsar_in_messages_total", b"pulsar_in_bytes_total")):
            line = line.rsplit(b" ", 1)[0] + b" 0"
        if f'topic="{KEPT}",subscription="stalled"'.encode() in line and line.startswith(
                (b"pulsar_subscription_back_log{", b"pulsar_msg_backlog{")):
            line = line.rsplit(b" ", 1)[0] + f" {backlog}".encode()
        lines.append(line)
    return source_tables([parse_text(b"\n".join(lines) + b"\n")])


def test_a_measured_age_goes_on_while_the_new_owner_has_not_measured_it(tables) -> None:
    """Measured by the broker (3 s at NOW), then reloaded: ten seconds later the age is
    13 s, carried and marked estimated, where the age table alone would restart near 0."""
    decider = _decider()
    first = {d.topic: d for d in decider.decide(merge([(URL, tables)], {}), None, NOW).topics}
    assert (first[KEPT].time_source, first[KEPT].backlog_age_seconds) == (TimeSource.BROKER, 3.0)
    moved = merge([(URL, _reloaded())], {})
    kept = {d.topic: d for d in decider.decide(moved, None, NOW + 10).topics}[KEPT]
    assert kept.backlog_messages == 40
    assert (kept.time_source, kept.backlog_age_seconds) == (TimeSource.ESTIMATED, 13.0)
    later = {d.topic: d for d in decider.decide(moved, None, NOW + 20).topics}[KEPT]
    assert later.backlog_age_seconds == 23.0  # still carried: nothing measured it since


def test_a_shrunk_backlog_is_not_carried(tables) -> None:
    """Acknowledged meanwhile: the oldest message is another one, the old time is no age."""
    decider = _decider()
    decider.decide(merge([(URL, tables)], {}), None, NOW)
    kept = {d.topic: d for d in decider.decide(merge([(URL, _reloaded(30))], {}), None,
                                                NOW + 10).topics}[KEPT]
    assert kept.backlog_messages == 30
    # unknown (the age table restarted with the counters at the reload), not a carried 13 s
    assert (kept.time_source, kept.backlog_age_seconds) == (None, None)


def test_a_counter_no_long_holds_is_no_count(tables) -> None:
    """The age tables keep counts as 64-bit integers, as the broker's counters are: a
    malformed `pulsar_in_messages_total` beyond them leaves the estimate unknown and the
    cycle decided, never an OverflowError (the broker's own age still serves)."""
    import pyarrow as pa

    agg = merge([(URL, tables)], {})
    column = agg.topics.schema.get_field_index("msg_in_total")
    huge = pa.array([1e19] * agg.topics.num_rows, agg.topics.schema.field(column).type)
    agg = replace(agg, topics=agg.topics.set_column(column, "msg_in_total", huge))
    decider = _decider()
    for cycle in range(2):
        decisions = {d.topic: d for d in decider.decide(agg, None, NOW + 60 * cycle).topics}
    assert decisions[KEPT].time_source is TimeSource.BROKER
    assert len(decider.ages) == 0


def test_decisions_share_one_name_per_namespace_and_subscription() -> None:
    """The decisions are held until the next cycle: a namespace's name, or a subscription's,
    is one object however many topics repeat it (with the broker's tables one per row)."""
    from tests.harness.synthetic import BodySpec, body_text

    spec = BodySpec(topics=40, namespaces=3)
    agg = merge([(URL, source_tables([parse_text(body_text(spec).encode())]))], {})
    topics = _decider().decide(agg, None, NOW).topics
    assert len(topics) == 40
    assert len({id(d.namespace) for d in topics}) == len({d.namespace for d in topics}) == 3
    names = [s.name for d in topics for s in d.subscriptions]
    assert len(names) == 80 and len({id(n) for n in names}) == len(set(names)) == 2
    import pyarrow as pa

    from exporter.engine.columns import shared

    values = shared(pa.chunked_array([["a", None, "b", "a"], ["a"], []], pa.string()))
    assert values == ["a", None, "b", "a", "a"]  # nulls kept, across chunks
    assert len({id(v) for v in values if v == "a"}) == 1


def test_a_topics_name_is_held_once_across_cycles() -> None:
    """Each cycle's tables spell every topic's name afresh; the decisions take the one the
    engine already holds (its age table's), so a name is not held once a cycle."""
    decider = _decider()
    first = {d.topic: d for d in decider.decide(
        merge([(URL, source_tables([parse_text(BODY)]))], {}), None, NOW).topics}
    again = decider.decide(merge([(URL, source_tables([parse_text(BODY)]))], {}), None,
                           NOW + 60)
    assert {d.topic for d in again.topics} == set(first)
    assert all(d.topic is first[d.topic].topic for d in again.topics)
