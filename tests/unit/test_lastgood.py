"""A broker's last good tables and the hold-over of topics no broker lists any more
(exporter/pipeline/lastgood.py: a restart, a failed fetch, a bundle unloaded), on tables the
product parses from hand-written bodies in pulsar-lite's shape, each with the process
collector's start time."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator, Mapping

import pyarrow as pa

from exporter.pipeline.lastgood import HOLD_CYCLES, LastGood
from exporter.pipeline.packed import encoded
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import SourceTables, source_tables
from tests.harness.fixtures import FIXTURES

A, B = "http://broker-a:8080/metrics", "http://broker-b:8080/metrics"


def tables(started: float, **backlogs: int) -> SourceTables:
    """A body listing topic → its stalled subscription's backlog, in namespace public/x."""
    lines = [f"process_start_time_seconds {started}"]
    for topic, backlog in backlogs.items():
        labels = f'cluster="c",namespace="public/x",topic="{topic}"'
        lines += [f"pulsar_in_messages_total{{{labels}}} {backlog}",
                  f'pulsar_subscription_back_log{{{labels},subscription="s"}} {backlog}']
    return source_tables([parse_text("\n".join(lines).encode() + b"\n")])


def listed(last: LastGood, url: str = A) -> dict[str, int]:
    """topic (local name) → the subscription backlog the merge would see."""
    ((_, t),) = last.tables([url])
    subs = {r["topic"]: r for r in t.subscriptions.to_pylist()}
    assert set(subs) == {r["topic"] for r in t.topics.to_pylist()}  # subscriptions come along
    return {topic.rsplit("/", 1)[1]: int(r["backlog_messages"]) for topic, r in subs.items()}


def test_the_start_time_is_read_from_apache_pulsars_own_body():
    body = (FIXTURES / "apache-pulsar-4.0-metrics.txt").read_bytes()
    usage = source_tables([parse_text(body)]).usage
    assert usage["started_at"].to_pylist() == [1.795465990555e9]


def test_a_broker_back_from_a_failed_fetch_holds_what_it_no_longer_lists():
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7)})
    last.update({})
    assert listed(last) == {"t1": 5, "t2": 7}  # down: the last good tables stay
    last.update({A: tables(200.0, t1=6)})
    assert listed(last) == {"t1": 6, "t2": 7}  # t1 fresh, t2 held at its last value
    for _ in range(HOLD_CYCLES - 1):
        last.update({A: tables(200.0, t1=6)})
        assert listed(last) == {"t1": 6, "t2": 7}
    last.update({A: tables(200.0, t1=6)})
    assert listed(last) == {"t1": 6}  # never listed again: no longer held


def test_a_restart_between_two_cycles_is_seen_in_the_start_time():
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7)})
    last.update({A: tables(150.0, t1=5)})
    assert listed(last) == {"t1": 5, "t2": 7}


def test_a_topic_gone_from_a_broker_that_did_not_restart_is_held_too():
    """Its bundle was unloaded: the new owner lists it only after its next stats update.
    Deleted, it lingers HOLD_CYCLES cycles: /metrics cannot tell the two apart."""
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7)})
    for _ in range(HOLD_CYCLES):
        last.update({A: tables(100.0, t1=5)})
        assert listed(last) == {"t1": 5, "t2": 7}
    last.update({A: tables(100.0, t1=5)})
    assert listed(last) == {"t1": 5}


def test_a_moved_topic_is_held_until_its_new_owner_lists_it():
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7), B: tables(100.0)})
    last.update({A: tables(100.0, t1=5), B: tables(100.0)})
    assert (listed(last, A), listed(last, B)) == ({"t1": 5, "t2": 7}, {})
    last.update({A: tables(100.0, t1=5), B: tables(100.0, t2=8)})
    assert (listed(last, A), listed(last, B)) == ({"t1": 5}, {"t2": 8})  # once, fresh


def test_a_held_topic_listed_again_is_fresh_and_a_later_hold_counts_afresh():
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7)})
    last.update({A: tables(150.0, t1=5)})
    last.update({A: tables(150.0, t1=5)})  # held twice
    last.update({A: tables(150.0, t1=5, t2=9)})
    assert listed(last) == {"t1": 5, "t2": 9}
    for _ in range(HOLD_CYCLES):  # unlisted again: a whole new hold, at its new value
        last.update({A: tables(150.0, t1=5)})
        assert listed(last) == {"t1": 5, "t2": 9}
    last.update({A: tables(150.0, t1=5)})
    assert listed(last) == {"t1": 5}


def test_a_topic_another_broker_lists_now_is_not_held():
    """It moved with its bundle: the stale row's larger counters must not win the merge."""
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7), B: tables(100.0)})
    last.update({A: tables(150.0, t1=5), B: tables(100.0, t2=1)})
    assert listed(last, A) == {"t1": 5}
    assert listed(last, B) == {"t2": 1}


def test_a_brokers_tables_are_kept_packed_and_go_with_the_cycle():
    """The last good tables are kept as the payloads they came in (packed.py): the decoded
    ones go with the cycle that used them, so a fleet's tables are never held decoded
    between cycles; a topic that moved from A to B, which only B's tables show, is still
    not held."""
    last = LastGood()
    first_a = tables(100.0, t1=5, t2=7)
    current = last.update({A: first_a, B: tables(100.0)})
    assert current[A] is first_a
    gone = weakref.ref(first_a)
    del first_a, current
    gc.collect()
    assert gone() is None
    assert listed(last, A) == {"t1": 5, "t2": 7}  # decoded again from what was kept
    from_a = tables(150.0, t1=6)
    payloads = encoded(from_a)  # as a task sends them

    def fresh() -> Iterator[tuple[str, SourceTables, Mapping[str, bytes] | None]]:
        yield A, from_a, payloads
        yield B, tables(100.0, t2=1), None

    current = last.update(fresh())
    assert current.keys() == {A, B} and current[A] is from_a
    assert listed(last, A) == {"t1": 6}
    assert last._kept[A].payloads["topics"] is payloads["topics"]  # kept, not encoded again
    assert listed(last, B) == {"t2": 1}
    assert last.held() == 0


def test_nothing_decoded_is_kept_between_cycles_not_even_the_topic_names():
    """The topic names every cycle compares are decoded alone from the kept payload
    (packed.py): kept decoded, they held the driver 42 MB higher between cycles at 1M
    topics (tests.bench.steady)."""
    last = LastGood()
    pool = pa.total_allocated_bytes()
    first = tables(100.0, **{f"topic-{i:05d}": i + 1 for i in range(3000)})
    names = pa.array(first.topics["topic"].to_pylist())  # buffers of its own
    last.update({A: first})
    del first
    gc.collect()
    assert pa.total_allocated_bytes() - pool < names.nbytes * 3 // 2  # `names`, no copy
    assert last._kept[A].topic_names().equals(names)
    current = last.update({A: tables(150.0, **{"topic-00000": 1})})  # 2,999 gone: held
    assert last.held() == 2999 and len(current[A].topics) == 3000


def test_a_broker_down_again_during_a_hold_keeps_the_held_topics():
    last = LastGood()
    last.update({A: tables(100.0, t1=5, t2=7)})
    last.update({A: tables(150.0, t1=5)})
    last.update({})
    assert listed(last) == {"t1": 5, "t2": 7}
    last.update({A: tables(300.0)})
    assert listed(last) == {"t1": 5, "t2": 7}  # back again: both held, a fresh count


def test_a_body_without_a_start_time_holds_the_same():
    last = LastGood()
    plain = tables(100.0, t1=5, t2=7)
    without = source_tables([parse_text(
        b'pulsar_subscription_back_log{namespace="public/x",topic="t1",subscription="s"} 5\n')])
    assert without.usage["started_at"].to_pylist() in ([], [None])
    last.update({A: plain})
    last.update({A: without})
    assert listed(last) == {"t1": 5, "t2": 7}
