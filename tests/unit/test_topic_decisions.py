"""The backlog check over columns (engine/backlog/publishtimes.py,
engine/backlog/topicdecisions.py) against
the rules stated one subscription at a time, as the check read them before it ran over
columns: on generated fleets whose subscriptions tie, whose brokers print or withhold each
age, whose admin REST views name a subscription or none, over cycles in which a measured age
goes unmeasured. Each decision made when read, and each column the cycle reads without
making one, must be what the rules give."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config.load import parse
from exporter.engine.backlog.agetable import AgeTables
from exporter.engine.backlog.check import (
    MEASURED,
    LimitStatus,
    SubscriptionBacklog,
    TimeSource,
    TopicDecision,
    check_against,
)
from exporter.engine.backlog.publishtimes import first_per_row
from exporter.engine.backlog.quotas import Resolver
from exporter.engine.backlog.sizes import message_sizes, slowest_backlogs
from exporter.engine.backlog.topicdecisions import TopicDecisions
from exporter.engine.columns import counts, floats, positions
from exporter.engine.decide import Decider
from exporter.pipeline.aggregates import Aggregates
from exporter.pipeline.merge import merge
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import source_tables
from exporter.sources.results import AdminSnapshot, SubscriptionStats, TopicStats

URL = "http://127.0.0.1:8080/metrics/"
NOW = 1_800_000_000.0
NAMES = ("a", "b", "zz")  # few names: ties between a topic's subscriptions are common

_subscription = st.tuples(
    st.sampled_from(NAMES),
    st.sampled_from([0, 0.5, 1, 7, 40]),  # backlog
    st.sampled_from([None, -1.0, 0.0, 20.0, 42.0]),  # its own age, printed (PIP-492)
    st.sampled_from([None, (None, None), (50.0, 4000), (None, 900)]))  # admin: age, bytes
_topic = st.tuples(
    st.lists(_subscription, max_size=4, unique_by=lambda s: s[0]),
    st.sampled_from([None, -1.0, 0.0, 30.0, 3600.0, 3600.5, 7200.0]),  # PIP-323's gauge
    st.sampled_from([0, 1, 10]),  # messages published a cycle
    st.sampled_from([None, (None, 5.0), ("a", 60.0), ("nope", 9.0)]))  # admin topic-level
_cycle = st.lists(_topic, min_size=1, max_size=5)
_quota = st.fixed_dictionaries({
    "limit_size": st.sampled_from([None, 100, 699, 700, 4000]),
    "limit_time": st.sampled_from([None, 20, 3600]),
    "policy": st.sampled_from(["consumer_backlog_eviction", "producer_request_hold"])})


def _body(cycle: list, k: int) -> str:
    families: dict[str, list[str]] = {}
    for i, (subscriptions, gauge, rate, _) in enumerate(cycle):
        labels = f'cluster="c",namespace="t/n{i % 2}",topic="persistent://t/n{i % 2}/t{i}"'
        families.setdefault("pulsar_in_messages_total", []).append(
            f"{{{labels}}} {1000 + rate * k}")
        families.setdefault("pulsar_in_bytes_total", []).append(
            f"{{{labels}}} {(1000 + rate * k) * 100}")
        if gauge is not None:
            families.setdefault("pulsar_storage_backlog_age_seconds", []).append(
                f"{{{labels}}} {gauge}")
        for name, backlog, age, _ in subscriptions:
            sub = f'{{{labels},subscription="{name}"}}'
            families.setdefault("pulsar_subscription_back_log", []).append(f"{sub} {backlog}")
            if age is not None:
                families.setdefault("pulsar_subscription_storage_backlog_age_seconds",
                                    []).append(f"{sub} {age}")
    return "".join(f"# TYPE {name} gauge\n" + "".join(f"{name}{line}\n" for line in lines)
                   for name, lines in families.items())


def _admin(cycle: list, at: float) -> AdminSnapshot:
    views = []
    for i, (subscriptions, _, _, oldest) in enumerate(cycle):
        subs = tuple(SubscriptionStats(name, int(backlog), view[1], 0, 0, None, view[0])
                     for name, backlog, _, view in subscriptions if view is not None)
        if oldest is None and not subs:
            continue
        name, age = oldest if oldest is not None else (None, None)
        views.append(TopicStats(f"persistent://t/n{i % 2}/t{i}", None, None, None, age, name,
                                subs))
    return AdminSnapshot(at, tuple(views), ())


class _Rules:
    """Each subscription's publish time by the rules, one at a time (decide.py's loop
    before the check ran over columns), then `check_against` for each topic."""

    def __init__(self, decider: Decider) -> None:
        self.config = decider.config
        self.ages = AgeTables()
        self.measured: dict[tuple[str, str], tuple[float, int]] = {}

    def decide(self, agg: Aggregates, admin: AdminSnapshot, now: float) -> list[TopicDecision]:
        stats = {t.topic: t for t in admin.topics}
        topics = agg.topics["topic"].to_pylist()
        namespaces = agg.topics["namespace"].to_pylist()
        gauges = agg.topics["backlog_age_seconds"].to_pylist()
        published, counted = counts(agg.topics["msg_in_total"])
        at = positions(agg.subscriptions["topic"], agg.topics["topic"])
        backlogs = floats(agg.subscriptions["backlog_messages"], 0.0)
        averages, per_entries = message_sizes(
            agg.topics, slowest_backlogs(at, backlogs, len(topics)), published)
        rows = self.ages.observe_all(topics, published, counted, now)
        entries = np.round(np.trunc(backlogs) * per_entries[at])
        estimates, lower = self.ages.ages(np.where(counted, rows, -1)[at], entries.astype(np.int64),
                                          published[at], now)
        printed = agg.subscriptions["backlog_age_seconds"].to_pylist()
        names = agg.subscriptions["subscription"].to_pylist()
        resolver = Resolver(self.config.backlog_quotas)
        measured: dict[tuple[str, str], tuple[float, int]] = {}
        decisions = []
        for r, topic in enumerate(topics):
            mine = [j for j in range(len(at)) if at[j] == r]
            gauge = gauges[r] if gauges[r] is not None and gauges[r] >= 0 else None
            states = self._topic(topic, [(names[j], float(backlogs[j]), float(estimates[j]),
                                          bool(lower[j]), printed[j]) for j in mine],
                                 stats.get(topic), admin.fetched_at, now, gauge, measured)
            average = None if math.isnan(averages[r]) else float(averages[r])
            decisions.append(check_against(topic, namespaces[r], states, average,
                                           resolver(topic, namespaces[r]), now))
        self.ages.retain(topics)
        self.measured = measured
        return decisions

    def _topic(self, topic, subs, view, admin_at, now, gauge, measured):
        views = {s.name: s for s in view.subscriptions} if view else {}
        precise = precise_time = slowest = slowest_time = None
        if view and view.oldest_backlog_message_age_seconds is not None:
            precise = view.oldest_backlog_message_subscription
            precise_time = admin_at - view.oldest_backlog_message_age_seconds
        if precise is None and gauge is not None:
            backlogged = [(-b, n) for n, b, *_ in subs if b > 0]
            if backlogged:
                slowest, slowest_time = min(backlogged)[1], now - gauge
        states = []
        for name, backlog, estimate, bound, printed in subs:
            messages, sub = int(backlog), views.get(name)
            size = None if sub is None else sub.backlog_size
            if messages <= 0:
                states.append(SubscriptionBacklog(name, messages, size))
                continue
            publish, source = None, TimeSource.ESTIMATED
            if sub is not None and sub.oldest_backlog_message_age_seconds is not None:
                publish, source = admin_at - sub.oldest_backlog_message_age_seconds, \
                    TimeSource.ADMIN
            elif printed is not None and printed >= 0:
                publish, source = now - printed, TimeSource.BROKER
            elif name == precise:
                publish, source = precise_time, TimeSource.ADMIN
            elif name == slowest:
                publish, source = slowest_time, TimeSource.BROKER
            elif not math.isnan(estimate):
                publish = now - estimate
                if slowest_time is not None:
                    publish = max(publish, slowest_time)
                elif bound:
                    source = TimeSource.LOWER_BOUND
            if source in MEASURED:
                measured[(topic, name)] = (publish, messages)
            elif (last := self.measured.get((topic, name))) is not None \
                    and messages >= last[1] and (publish is None or publish > last[0]):
                publish, source = last[0], TimeSource.ESTIMATED
                measured[(topic, name)] = last
            states.append(SubscriptionBacklog(name, messages, size, publish, source))
        return tuple(states)


def _same_columns(got: TopicDecisions, made: list[TopicDecision]) -> None:
    want = TopicDecisions.of(made).columns
    for name in ("topic", "namespace"):
        assert getattr(got.columns, name) == getattr(want, name)
    for name in ("over", "age", "backlog_bytes", "time", "messages", "measured", "evicts"):
        assert np.array_equal(getattr(got.columns, name), getattr(want, name),
                              equal_nan=name in ("age", "backlog_bytes")), name


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_cycle, min_size=1, max_size=4), _quota, st.booleans())
def test_the_checks_over_columns_are_the_rules_one_subscription_at_a_time(
        cycles: list, quota: dict, with_admin: bool) -> None:
    decider = Decider(parse({"cluster": "c", "sources": {"brokers": [{"url": URL}]},
                             "backlog_quotas": {"default": quota}}, "t.yaml"))
    rules = _Rules(decider)
    for k, cycle in enumerate(cycles):
        now = NOW + 60 * k
        agg = merge([(URL, source_tables([parse_text(_body(cycle, k).encode())]))], {})
        admin = _admin(cycle, now - 2) if with_admin else AdminSnapshot(now, (), ())
        got = decider.decide(agg, admin, now).topics
        want = rules.decide(agg, admin, now)
        # read one at a time first (each from its slices), then all (from lists of all)
        assert [got[k] for k in range(len(got))] == want
        assert list(got) == want
        _same_columns(got, want)
        assert got.over() == [d for d in want if d.exceeded]


def test_a_decision_is_made_when_read_and_kept_only_when_it_acts() -> None:
    """Those over a quota are made once and kept (the plan reads them every cycle); the
    others are made again at each read, equal each time."""
    cycle = [([("a", 40, None, None)], 7200.0, 1, None), ([("a", 1, None, None)], 0.0, 1, None)]
    decider = Decider(parse({"cluster": "c", "sources": {"brokers": [{"url": URL}]},
                             "backlog_quotas": {"default": {"limit_time": 3600}}}, "t.yaml"))
    agg = merge([(URL, source_tables([parse_text(_body(cycle, 0).encode())]))], {})
    topics = decider.decide(agg, None, NOW).topics
    over, within = topics
    assert over.exceeded and not within.exceeded
    assert topics[0] is over and topics.over() == [over]
    assert topics[1] == within and topics[1] is not within
    assert topics[-1] == within and topics[:1] == (over,)


def test_a_backlog_a_float_rounds_onto_its_limit_is_decided_exactly() -> None:
    """10 messages of 0.1 bytes on average (100 bytes in over 1,000 messages): as floats,
    10 × 0.1 is exactly 1.0, within a 1-byte limit; the float 0.1 is a little more than a
    tenth, so the check's exact product is over it. The columns defer to the exact check."""
    cycle = [([("a", 10, None, None)], None, 0, None)]
    decider = Decider(parse({"cluster": "c", "sources": {"brokers": [{"url": URL}]},
                             "backlog_quotas": {"default": {"limit_size": 1}}}, "t.yaml"))
    body = _body(cycle, 0).replace("} 100000\n", "} 100\n")
    agg = merge([(URL, source_tables([parse_text(body.encode())]))], {})
    topics = decider.decide(agg, None, NOW).topics
    assert 10 * 0.1 == 1.0 and 10 * Fraction(0.1) > 1
    (d,) = topics
    assert d.backlog_bytes == 1.0 and d.size is LimitStatus.EXCEEDED
    assert topics.columns.over.tolist() == [True] and topics.over() == [d]


@given(st.lists(st.tuples(st.integers(-1, 6), st.booleans(),
                          st.sampled_from([0.0, 1.5, 2.0, -math.inf, math.inf]),
                          st.integers(-2, 2), st.integers(0, 2)), max_size=60),
       st.integers(0, 3), st.integers(1, 4))
def test_each_rows_first_item_is_the_least_by_its_keys_then_the_first(items, extra,
                                                                      at_once) -> None:
    """`first_per_row` narrows by one key at a time, without a sort: each row's answer is
    the least of its items in `among` by the keys in turn, the first of those that tie, or
    -1; items of no row (-1, first) and rows without items have none. Whatever the rows it
    takes at once."""
    items.sort(key=lambda item: item[0])  # grouped by row, as the check's subscriptions are
    width = max([r for r, *_ in items], default=-1) + 1 + extra
    rows = np.array([r for r, *_ in items], np.int64)
    among = np.array([a for _, a, *_ in items], bool)
    keys = (np.array([k for *_, k, _, _ in items], np.float64),
            np.array([k for *_, k, _ in items], np.int64),
            np.array([k for *_, k in items], np.int64))
    starts = np.searchsorted(rows, np.arange(width + 1))
    expected = [-1] * width
    for r in range(width):
        mine = [j for j in range(len(items)) if items[j][0] == r and items[j][1]]
        if mine:
            expected[r] = min(mine, key=lambda j: (*(int(k[j]) if k.dtype.kind == "i"
                                                      else k[j] for k in keys), j))
    keyed = [lambda at, k=k: k[at] for k in keys]
    assert first_per_row(starts, among, keyed, at_once).tolist() == expected
