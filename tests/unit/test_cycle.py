"""One check cycle (`Exporter.cycle`) without a broker or Spark: a scripted broker side
hands over tables parsed from hand-written bodies, a fake admin side and a recording
evictor stand in for the network, and the clock is injected. What is checked is the
cycle's own logic: decisions, dry run against enforcement, the size-cut hold-back, what is
published (body and status), and a failing broker side leaving the last good data.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from exporter.actions.plan import consumers_seen
from exporter.config.load import parse
from exporter.config.settings import KEEP_ALL, TopicFilter
from exporter.pipeline.merge import merge
from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import BrokerData, source_tables
from exporter.record.replay import SimulatedEvictor
from exporter.runtime.cycle import Exporter
from exporter.sources.brokers import FetchFailed, HealthLedger
from exporter.sources.results import ScrapeError, Snapshot, SourceKind
from tests.harness.pulsar import Metrics

URL = "http://broker-1:8080/metrics"
TOPIC = "persistent://public/sized/t"


def body(backlog: int, *, published: int = 100, extra: str = "") -> str:
    """pulsar-lite's shape: 1000 bytes per message published, one stalled subscription."""
    labels = 'cluster="pulsar-lite",namespace="public/sized",partition="-1",topic="t"'
    return (f"pulsar_in_messages_total{{{labels}}} {published}\n"
            f"pulsar_in_bytes_total{{{labels}}} {published * 1000}\n"
            f'pulsar_subscription_back_log{{{labels},subscription="stalled"}} {backlog}\n'
            + extra)


class ScriptedBrokers:
    """The broker side: each `run` parses the next body (None: the fetch failed)."""

    def __init__(self, bodies: Sequence[str | None], rule: TopicFilter = KEEP_ALL):
        self.bodies = list(bodies)
        self.rule = rule  # filters.topics, as the Spark task applies it
        self.ledger = HealthLedger(URL, SourceKind.BROKER)
        self.last = None

    def run(self) -> BrokerData:
        text = self.bodies.pop(0)
        malformed = {}
        if text is None:
            self.ledger.record(up=False, at=0.0,
                               errors=(FetchFailed(ScrapeError.REFUSED, "connection refused"),))
        else:
            self.last = source_tables([parse_text(text.encode())], self.rule)
            malformed = {URL: self.last.malformed}
            self.ledger.record(up=True, at=0.0)
        tables = ((URL, self.last),) if self.last is not None else ()
        return BrokerData(tables, (self.ledger.health(),), malformed)


class NoAdmin:
    def collect(self, choose=None) -> Snapshot:
        return Snapshot(taken_at=0.0, admin=None, health=())

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def exporter_for(bodies: Sequence[str | None], *, enforce: bool):
    config = parse({
        "cluster": "unit",
        "check_interval": "10s",
        "sources": {"brokers": [{"url": URL}], "service_url": "pulsar://127.0.0.1:1"},
        "backlog_quotas": {
            "namespaces": {"public/sized": {"limit_size": "20000B",
                                            "policy": "consumer_backlog_eviction"}},
            "enforce": enforce,
        },
    }, "cycle.yaml")
    evictor, clock = SimulatedEvictor(), Clock()
    exporter = Exporter(config, brokers=ScriptedBrokers(bodies), admin_side=NoAdmin(),
                        evictor=evictor, clock=clock)
    return exporter, evictor, clock


def sample(report, name: str, **labels: str) -> float | None:
    return Metrics(report.body.decode()).value(name, **labels)


def test_dry_run_decides_and_counts_but_evicts_nothing():
    exporter, evictor, _ = exporter_for([body(50)], enforce=False)
    report = exporter.cycle()
    (topic,) = report.status["topics"]
    assert topic["topic"] == TOPIC and topic["exceeded"] == ["size"]
    # 50 messages of 1000 bytes against 20000 bytes: down to 90 %, the 32 oldest go
    assert [(e["subscription"], e["messages"]) for e in topic["evict"]] == [("stalled", 32)]
    assert evictor.orders == []
    assert sample(report, "pulsar_storage_backlog_quota_would_evict_total", topic=TOPIC,
                  quota_type="size") == 1


def test_a_reloaded_topic_sizes_its_backlog_from_the_brokers_backlog_size():
    """A broker that loads a topic again (restart, bundle move) starts its counters at 0:
    the slowest subscription's backlog bytes over its backlog give the message size, so
    the size quota is still checked, as the broker checks its backlog size."""
    labels = 'cluster="pulsar",namespace="public/sized",topic="persistent://public/sized/t"'
    reloaded = (f"pulsar_in_messages_total{{{labels}}} 0\n"
                f"pulsar_in_bytes_total{{{labels}}} 0\n"
                f"pulsar_storage_backlog_size{{{labels}}} 50000\n"
                f'pulsar_subscription_back_log{{{labels},subscription="stalled"}} 50\n'
                f'pulsar_subscription_back_log{{{labels},subscription="near"}} 5\n')
    exporter, _, _ = exporter_for([reloaded], enforce=False)
    report = exporter.cycle()
    (topic,) = report.status["topics"]
    assert topic["exceeded"] == ["size"]
    assert sample(report, "pulsar_storage_backlog_size", topic=TOPIC) == 50000
    assert [(e["subscription"], e["messages"]) for e in topic["evict"]] == [("stalled", 32)]


def test_enforcing_evicts_down_to_ninety_percent_and_counts_once():
    exporter, evictor, _ = exporter_for([body(50)], enforce=True)
    report = exporter.cycle()
    assert [(o.subscription, o.quota_type, o.messages) for o in evictor.orders] == [
        ("stalled", "size", 32)]
    assert sample(report, "pulsar_storage_backlog_quota_exceeded_evictions_total",
                  topic=TOPIC, quota_type="size") == 1


def test_a_size_cut_waits_for_fresh_broker_numbers():
    # The broker's gauges lag: the same backlog again must not be cut again.
    exporter, evictor, clock = exporter_for([body(50), body(50), body(45)], enforce=True)
    exporter.cycle()
    clock.now += 10
    exporter.cycle()
    assert len(evictor.orders) == 1
    clock.now += 10
    exporter.cycle()  # the backlog moved (45 now): a fresh cut, of what is still over
    assert [o.messages for o in evictor.orders] == [32, 27]


def test_a_failing_broker_keeps_the_last_good_data_and_shows_down():
    exporter, _, clock = exporter_for([body(10), None], enforce=False)
    first = exporter.cycle()
    clock.now += 10
    second = exporter.cycle()
    assert sample(second, "pulsar_quota_exporter_source_up", source=URL) == 0
    assert [t["topic"] for t in second.status["topics"]] == [TOPIC]  # stale, still there
    assert second.status["topics"][0]["backlog_messages"] == first.status["topics"][0][
        "backlog_messages"] == 10
    (source,) = second.status["sources"]
    assert not source["up"] and source["error"] == "connection refused"


def test_malformed_lines_are_counted_once_per_fetch():
    broken = body(10, extra="pulsar_in_messages_total{oops 1\n")
    exporter, _, clock = exporter_for([broken, None], enforce=False)
    exporter.cycle()
    clock.now += 10
    report = exporter.cycle()  # stale data: its broken line is not counted again
    assert sample(report, "pulsar_quota_exporter_source_malformed_lines_total", source=URL) == 1


def test_a_backlog_no_long_holds_is_counted_logged_once_and_the_cycle_decided(caplog):
    """A NaN backlog failed every cycle (tests/fuzz/test_fuzz_found.py, 6)."""
    nan = body(10).replace(" 10\n", " NaN\n")
    exporter, _, clock = exporter_for([nan, nan], enforce=False)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            report = exporter.cycle()
            clock.now += 10
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    said = [r.getMessage() for r in caplog.records if "skipped as not_a_count" in r.getMessage()]
    assert len(said) == 1 and URL in said[0]
    assert sample(report, "pulsar_quota_exporter_source_malformed_lines_total", source=URL) == 2
    assert report.status["topics"][0]["backlog_messages"] == 0


@pytest.mark.parametrize("enforce", [False, True])
def test_publish_renders_the_body_and_status_once_per_cycle(enforce):
    exporter, _, _ = exporter_for([body(10)], enforce=enforce)
    report = exporter.cycle()
    published = exporter.state.current
    assert published.body == report.body and published.cycle == 1
    # publish is timed around the render itself, so it shows from the next cycle on
    assert set(report.status["stage_seconds"]) == {"collect", "pipeline", "engine", "actions"}
    assert report.status["cluster"] == "unit"


def test_status_says_where_each_limit_came_from():
    exporter, _, _ = exporter_for([body(10)], enforce=False)
    (topic,) = exporter.cycle().status["topics"]
    assert topic["quota_source"] == "namespace"
    assert topic["limit_sources"] == {"size": "config:namespace", "time": "config:namespace"}
    assert (topic["limit_size_bytes"], topic["limit_time_seconds"]) == (20000, None)


def test_the_body_parses_as_prometheus_text_and_carries_the_process_metrics():
    from prometheus_client.parser import text_string_to_metric_families

    exporter, _, _ = exporter_for([body(10)], enforce=False)
    report = exporter.cycle()
    families = {f.name: f for f in text_string_to_metric_families(report.body.decode())}
    # the catalogue's series and the process's own, in one body Prometheus can read
    assert "pulsar_storage_backlog_quota_exceeded_evictions" in families  # counters lose _total
    resident = families["process_resident_memory_bytes"].samples[0].value
    assert resident > 10 * 2**20  # a Python process with pyarrow loaded
    assert families["python_info"].samples[0].labels["implementation"] == "CPython"


@pytest.mark.parametrize(("extra", "expected"), [
    ('pulsar_subscription_consumers_count{cluster="pulsar-lite",namespace="public/sized",'
     'partition="-1",topic="t",subscription="stalled"} 0\n', 0),
    ('pulsar_subscription_consumers_count{cluster="pulsar-lite",namespace="public/sized",'
     'partition="-1",topic="t",subscription="stalled"} 2\n', 2),
    ("", None),  # the broker printed no count: the binary evictor will not risk it
])
def test_orders_carry_the_consumers_the_cycle_saw(extra: str, expected: int | None):
    exporter, evictor, _ = exporter_for([body(50, extra=extra)], enforce=True)
    exporter.cycle()
    assert [o.consumers for o in evictor.orders] == [expected]


def test_only_the_consumers_of_topics_with_orders_are_read():
    """Every subscription's count, as Python values in a dict, held 455 MB at 1M topics
    (actions/plan.py): the plan asks for its orders' topics only."""
    labels = 'cluster="pulsar-lite",namespace="public/sized",partition="-1",topic="other"'
    other = (f'pulsar_subscription_back_log{{{labels},subscription="s"}} 5\n'
             f'pulsar_subscription_consumers_count{{{labels},subscription="s"}} 3\n')
    extra = ('pulsar_subscription_consumers_count{cluster="pulsar-lite",namespace="public/'
             'sized",partition="-1",topic="t",subscription="stalled"} 2\n')
    agg = merge([(URL, source_tables([parse_text(body(50, extra=extra + other).encode())]))],
                {})
    assert consumers_seen(agg, {"persistent://public/sized/t"}) == {
        ("persistent://public/sized/t", "stalled"): 2}
    assert len(consumers_seen(agg, {"persistent://public/sized/t",
                                    "persistent://public/sized/other"})) == 2
    assert consumers_seen(agg, set()) == {}


def test_the_cycle_publishes_each_brokers_own_quota_from_their_reports():
    from exporter.sources.brokerreports import BrokerReports
    from tests.harness.resource_usage_info import entry, field, info, network
    from tests.unit.test_brokerreports import PayloadsInAList

    config = parse({
        "cluster": "unit", "check_interval": "10s",
        "sources": {"brokers": [{"url": URL}], "service_url": "pulsar://127.0.0.1:1"},
        "resource_groups": {"g": {"publish": {"messages_per_second": 100},
                                  "namespaces": ["public/sized"]}},
        "resource_group_engine": {"report_interval": "10s"},
    }, "cycle.yaml")
    payloads, clock = PayloadsInAList(), Clock()
    exporter = Exporter(config, brokers=ScriptedBrokers([body(0), body(0)]),
                        admin_side=NoAdmin(), evictor=SimulatedEvictor(), clock=clock,
                        broker_reports=BrokerReports(payloads, stale_after=600.0))
    b1, b2 = "pulsar://b1:6650", "pulsar://b2:6650"
    payloads.waiting += [info(b1, entry("g", field(2, network(300, 30)), field(3, network(0, 0)))),
                         info(b2, entry("g", field(2, network(100, 10)), field(3, network(0, 0))))]
    name = "pulsar_resource_group_broker_local_quota_messages_per_second"

    def quota(report, broker: str, allocator: str = "pulsar") -> float | None:
        return sample(report, name, participant=broker, allocator=allocator,
                      resource_group="g", monitoring_class="publish")

    first = exporter.cycle()
    # {b1: 30, b2: 10} of 100 msg/s: 30 + 60 × 0.75 = 75 and 10 + 60 × 0.25 = 25
    assert (quota(first, b1), quota(first, b2)) == (75, 25)
    assert quota(first, b1, "fair") is not None
    # bytes: no limit configured (-1): no series
    assert sample(first, "pulsar_resource_group_broker_local_quota_bytes_per_second",
                  participant=b1, allocator="pulsar") is None
    clock.now += 10
    payloads.waiting.append(info(b1, entry("g")))  # b1 suppressed: its 30 stays
    second = exporter.cycle()
    assert (quota(second, b1), quota(second, b2)) == (75, 25)


def test_the_compaction_cursor_is_left_and_counted_the_others_cut():
    """`__compaction` over the quota beside a stalled subscription: only the latter is cut
    (backlog_quotas.evict_system_cursors is false by default)."""
    labels = 'cluster="pulsar-lite",namespace="public/sized",partition="-1",topic="t"'
    compacting = body(50, extra=f'pulsar_subscription_back_log{{{labels},'
                                f'subscription="__compaction"}} 40\n')
    exporter, evictor, _ = exporter_for([compacting], enforce=True)
    report = exporter.cycle()
    (topic,) = report.status["topics"]
    assert {e["subscription"] for e in topic["evict"]} == {"stalled", "__compaction"}
    assert [(o.subscription, o.messages) for o in evictor.orders] == [("stalled", 32)]
    assert sample(report, "pulsar_quota_exporter_evictions_failed_total",
                  reason="system_cursor") == 1


@pytest.mark.parametrize(("topic", "system"), [
    ("persistent://public/sized/__change_events", True),
    ("persistent://public/sized/__change_events-partition-3", True),
    ("persistent://public/sized/t__transaction_pending_ack", True),
    ("persistent://pulsar/system/__transaction_log_0", True),
    ("persistent://pulsar/standalone/127.0.0.1:8080/healthcheck", True),
    ("persistent://sla-monitor/standalone/127.0.0.1:8080/monitor", True),
    ("persistent://public/sized/change_events", False),
    ("persistent://public/sized/t", False),
])
def test_system_topics_are_never_over_a_quota(topic: str, system: bool):
    """As the broker's SystemTopic: exported, never exceeded, nothing planned; a namespace
    quota applies to the topic beside them. backlog_quotas.system_topics checks them."""
    tenant_ns, local = topic.removeprefix("persistent://").rsplit("/", 1)
    labels = f'cluster="c",namespace="{tenant_ns}",partition="-1",topic="{local}"'
    text = (f"pulsar_in_messages_total{{{labels}}} 100\n"
            f"pulsar_in_bytes_total{{{labels}}} 100000\n"
            f'pulsar_subscription_back_log{{{labels},subscription="s"}} 50\n')
    for checked in (False, True):
        config = parse({"cluster": "unit", "sources": {"brokers": [{"url": URL}]},
                        "backlog_quotas": {"default": {"limit_size": "20000B"},
                                           "system_topics": checked}}, "cycle.yaml")
        exporter = Exporter(config, brokers=ScriptedBrokers([text]), admin_side=NoAdmin(),
                            evictor=SimulatedEvictor())
        (decision,) = exporter.cycle().status["topics"]
        assert decision["topic"] == topic and decision["backlog_messages"] == 50
        assert decision["exceeded"] == ([] if system and not checked else ["size"])


def test_our_own_lock_topic_is_no_backlog_to_check():
    """pulsar-lite lists the enforcer lease's topic among its topics; it is ours, as the
    usage topic is, and never checked or published."""
    labels = ('cluster="pulsar-lite",namespace="public/default",partition="-1",'
              'topic="pulsar-quota-exporter-enforcer"')
    exporter, _, _ = exporter_for([body(10, extra=f"pulsar_in_messages_total{{{labels}}} 7\n")],
                                  enforce=False)
    assert [t["topic"] for t in exporter.cycle().status["topics"]] == [TOPIC]
