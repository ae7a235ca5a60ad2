"""One cycle's decisions, source health and running tallies → the catalogue's `MetricSet`.

Series are built from this cycle's state only (never purged by hand): a topic that vanished
simply is not added again. Counters come from `Tallies`, the only state that outlives a cycle
here, and every error counter exists at 0 from the first cycle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.actions.orders import LeaseState, LeaseView
from exporter.actions.plan import Acted
from exporter.catalogue import CHECK_DURATION_BUCKETS
from exporter.engine.decide import Decisions, GroupResult
from exporter.engine.groups.brokersplits import Quota, Splits
from exporter.exposition.build_load import add_load
from exporter.exposition.build_topics import add_topics, finite
from exporter.exposition.metricset import HistogramValue, MetricSet, MetricSetBuilder
from exporter.pipeline.buildinfo import build_info
from exporter.sources.brokerreports import BrokerReportsView
from exporter.sources.results import SourceHealth


@dataclass
class Tallies:
    """Cumulative counts, mutated by the check loop and the usage exchange (the latter
    under `Exporter._tally_lock`, which publishing holds too)."""

    evictions: Counter = field(default_factory=Counter)  # (namespace, topic, quota_type)
    would_evict: Counter = field(default_factory=Counter)  # (namespace, topic, quota_type)
    eviction_failures: Counter = field(default_factory=Counter)  # reason
    malformed_lines: Counter = field(default_factory=Counter)  # source
    reloads: Counter = field(default_factory=Counter)  # success | failure
    reports_sent: int = 0
    reports_suppressed: int = 0  # RG × class entries held back by the suppression rule
    reports_received: int = 0
    reports_rejected: Counter = field(default_factory=Counter)  # reason
    peers_dropped: int = 0
    exchange_seconds: float | None = None  # the last usage-report round's duration
    cycles_skipped: int = 0
    record_failures: int = 0  # cycles `run --record.dir` could not write
    check_duration: HistogramValue = field(
        default_factory=lambda: HistogramValue.empty(CHECK_DURATION_BUCKETS))
    # (namespace, topic) with an eviction counter → when the topic was last seen
    counted_seen: dict = field(default_factory=dict)

    def count(self, acted: Acted) -> None:
        """Add one check's enforcement (actions/plan.py)."""
        self.evictions.update(acted.evictions)
        self.would_evict.update(acted.would_evict)
        self.eviction_failures.update(acted.failures)

    def forget_unseen(self, topics: Iterable[str], now: float, after: float) -> int:
        """Drop the eviction counters of topics not seen for `after` seconds (deleted,
        or filtered out since), so their series end; `topics` are this cycle's. Counters
        only live here, so Prometheus sees a series end, and a reset if the topic
        returns, which rate() and increase() handle. Returns how many topics went."""
        keys = {(ns, topic) for ns, topic, _ in (*self.evictions, *self.would_evict)}
        if not keys:
            return 0
        present = set(topics)
        for key in keys:
            if key[1] in present or key not in self.counted_seen:
                self.counted_seen[key] = now
        gone = {k for k in keys if now - self.counted_seen[k] >= after}
        for counter in (self.evictions, self.would_evict):
            for key in [k for k in counter if (k[0], k[1]) in gone]:
                del counter[key]
        self.counted_seen = {k: v for k, v in self.counted_seen.items() if k in keys - gone}
        return len(gone)

    def broker_evictions(self) -> Counter:
        out: Counter = Counter()
        for (_, _, quota_type), n in self.evictions.items():
            out[quota_type] += n
        return out


@dataclass(frozen=True)
class CycleFacts:
    """What the check loop measured about the cycle itself, and the cadence it runs at
    (exported so that alert rules compare with this deployment's settings, not defaults)."""

    cluster: str
    now: float
    stage_seconds: Mapping[str, float]
    last_success_at: float | None
    check_interval: float
    report_interval: float
    report_max_gap: float
    enforce: bool = False  # backlog_quotas.enforce: we evict under consumer_backlog_eviction
    topics_filtered: int = 0  # left out by filters.topics, in the brokers' latest tables
    topics_held: int = 0  # listed by no broker now, their last values kept (lastgood.py)
    subscription_ages: bool = False  # exposition.subscription_backlog_age
    topic_level: bool = True  # exposition.topic_level: False, no topic's own series are built
    max_topics: int | None = None  # filters.max_topics
    record_bytes: int | None = None  # the record directory's size, when recording
    lease: LeaseView | None = None  # the enforcer lease, when enforcing
    reporter: LeaseView | None = None  # the usage-reporter lease, with a usage exchange


def _add_group(b: MetricSetBuilder, cluster: str, participant: str, g: GroupResult) -> None:
    rg = (cluster, g.resource_group, g.monitoring_class.value)
    for unit, quota in (("messages", g.quota.messages), ("bytes", g.quota.bytes)):
        if quota >= 0:
            b.add(f"pulsar_resource_group_quota_{unit}_per_second", rg, quota)
    if g.local_quota is not None:
        for unit, v in (("messages", g.local_quota.messages), ("bytes", g.local_quota.bytes)):
            if v >= 0:
                b.add(f"pulsar_resource_group_local_quota_{unit}_per_second",
                      (*rg, participant), v)
    usages = dict(g.peers)
    if g.usage is not None:
        usages[participant] = g.usage
    for who, u in sorted(usages.items()):
        b.add("pulsar_resource_group_usage_messages_per_second", (*rg, who), u.messages)
        b.add("pulsar_resource_group_usage_bytes_per_second", (*rg, who), u.bytes)
    if g.cluster_usage is not None:
        for unit, used, quota in (("messages", g.cluster_usage.messages, g.quota.messages),
                                  ("bytes", g.cluster_usage.bytes, g.quota.bytes)):
            if quota > 0:
                b.add("pulsar_resource_group_utilization_ratio", (*rg, unit), used / quota)
    if g.throttle is not None:
        b.add("pulsar_resource_group_throttle_delay_seconds", rg, g.throttle.delay_seconds)


def _add_health(b: MetricSetBuilder, cluster: str, health: Iterable[SourceHealth],
                tallies: Tallies, now: float) -> None:
    for h in health:
        b.add("pulsar_quota_exporter_source_up", (cluster, h.source, h.kind.value),
              1.0 if h.up else 0.0)
        b.seed("pulsar_quota_exporter_source_scrape_errors_total", cluster=cluster,
               source=h.source)
        for reason, n in h.errors:
            b.add("pulsar_quota_exporter_source_scrape_errors_total",
                  (cluster, h.source, reason.value), n)
        if h.last_success is not None:
            b.add("pulsar_quota_exporter_source_staleness_seconds", (cluster, h.source),
                  max(0.0, now - h.last_success))
        b.add("pulsar_quota_exporter_source_malformed_lines_total", (cluster, h.source),
              tallies.malformed_lines[h.source])


def _add_broker_reports(b: MetricSetBuilder, cluster: str, view: BrokerReportsView) -> None:
    for u in view.usage:
        labels = (cluster, u.resource_group, u.monitoring_class.value, u.broker)
        b.add("pulsar_resource_group_broker_reported_bytes_total", labels, u.bytes)
        b.add("pulsar_resource_group_broker_reported_messages_total", labels, u.messages)
    for broker, at in view.last_report:
        b.add("pulsar_quota_exporter_broker_last_report_timestamp_seconds", (cluster, broker), at)
    b.add("pulsar_quota_exporter_broker_reports_received_total", (cluster,), view.received)
    for reason, n in view.rejected:
        b.add("pulsar_quota_exporter_broker_reports_rejected_total", (cluster, reason.value), n)
    b.add("pulsar_quota_exporter_broker_reports_unknown_fields_total", (cluster,),
          view.unknown_fields)


def _add_broker_splits(b: MetricSetBuilder, cluster: str, splits: Splits) -> None:
    """Each broker's own quota as it computes it (and `fair`'s): absent while unknown
    (`Unknowable`), for no limit (-1) and where Pulsar's calculator throws."""
    for q in splits.splits:
        if not isinstance(q, Quota):
            continue
        key = (cluster, q.resource_group, q.monitoring_class.value, q.broker)
        pulsar = (q.pulsar.messages, q.pulsar.bytes) if q.pulsar else (-1, -1)
        for allocator, values in (("pulsar", pulsar), ("fair", (q.fair_messages, q.fair_bytes))):
            for unit, v in zip(("messages", "bytes"), values, strict=True):
                if finite(v) and v >= 0:
                    b.add(f"pulsar_resource_group_broker_local_quota_{unit}_per_second",
                          (*key, allocator), v)


def build(facts: CycleFacts, decisions: Decisions | None, health: Iterable[SourceHealth],
          tallies: Tallies, participant: str,
          broker_reports: BrokerReportsView | None = None,
          broker_splits: Splits | None = None) -> MetricSet:
    """The whole /metrics content of one cycle. `decisions` is None when the pipeline
    failed: the exporter's own series are still published. `broker_reports`: what the
    brokers' own PIP-82 reports said, when they are read; `broker_splits`: each broker's
    quota computed from them (engine/groups/brokersplits.py)."""
    c = facts.cluster
    b = MetricSetBuilder()
    b.seed_counters(cluster=c)
    info = build_info()
    b.add("pulsar_quota_exporter_build_info",
          (c, info.version, info.revision, info.python, info.pyspark, info.java), 1.0)
    if decisions is not None:
        topics = decisions.topics
        b.add("pulsar_quota_exporter_topics_dropped", (c, "filtered"), facts.topics_filtered)
        b.add("pulsar_quota_exporter_topics_dropped", (c, "max_topics"),
              max(0, len(topics) - (facts.max_topics or len(topics))))
        add_topics(b, c, topics, facts.topic_level, facts.max_topics, facts.enforce,
                   decisions.checked_at if facts.subscription_ages else None)
        for ns, age in decisions.namespace_max_age.items():
            b.add("pulsar_namespace_backlog_age_max_seconds", (c, ns), age)
        for g in decisions.groups:
            _add_group(b, c, participant, g)
        if decisions.load is not None:
            add_load(b, c, decisions.load)
        b.add("pulsar_quota_exporter_topics", (c,), len(decisions.topics))
        b.add("pulsar_quota_exporter_topics_held", (c,), facts.topics_held)
        b.add("pulsar_quota_exporter_usage_peers", (c,), decisions.participants)
        for peer, age in decisions.peer_ages.items():
            b.add("pulsar_quota_exporter_usage_peer_report_age_seconds", (c, peer), age)
    for name, n in (("sent", tallies.reports_sent), ("suppressed", tallies.reports_suppressed),
                    ("received", tallies.reports_received)):
        b.add(f"pulsar_quota_exporter_usage_reports_{name}_total", (c,), n)
    for reason, n in tallies.reports_rejected.items():
        b.add("pulsar_quota_exporter_usage_reports_rejected_total", (c, reason), n)
    b.add("pulsar_quota_exporter_stale_peers_dropped_total", (c,), tallies.peers_dropped)
    for (ns, topic, qt), n in tallies.evictions.items():
        b.add("pulsar_storage_backlog_quota_exceeded_evictions_total", (c, ns, topic, qt), n)
    for (ns, topic, qt), n in tallies.would_evict.items():
        b.add("pulsar_storage_backlog_quota_would_evict_total", (c, ns, topic, qt), n)
    for qt, n in tallies.broker_evictions().items():
        b.add("pulsar_broker_storage_backlog_quota_exceeded_evictions_total", (c, qt), n)
    for reason, n in tallies.eviction_failures.items():
        b.add("pulsar_quota_exporter_evictions_failed_total", (c, reason), n)
    for result, n in tallies.reloads.items():
        b.add("pulsar_quota_exporter_config_reloads_total", (c, result), n)
    b.add("pulsar_quota_exporter_cycles_skipped_total", (c,), tallies.cycles_skipped)
    if facts.record_bytes is not None:
        b.add("pulsar_quota_exporter_record_bytes", (c,), facts.record_bytes)
        b.add("pulsar_quota_exporter_record_failures_total", (c,), tallies.record_failures)
    if facts.lease is not None:
        for state in LeaseState:
            b.add("pulsar_quota_exporter_enforcer", (c, state.value),
                  float(state is facts.lease.state))
        b.add("pulsar_quota_exporter_enforcer_acquired_total", (c,), facts.lease.acquired)
        b.add("pulsar_quota_exporter_enforcer_lost_total", (c,), facts.lease.lost)
    if facts.reporter is not None:
        for state in LeaseState:
            b.add("pulsar_quota_exporter_usage_reporter", (c, participant, state.value),
                  float(state is facts.reporter.state))
    b.add("pulsar_quota_exporter_check_interval_seconds", (c,), facts.check_interval)
    b.add("pulsar_quota_exporter_usage_report_interval_seconds", (c,), facts.report_interval)
    b.add("pulsar_quota_exporter_usage_report_max_gap_seconds", (c,), facts.report_max_gap)
    b.set_histogram("pulsar_storage_backlog_quota_check_duration_seconds", (c,),
                    tallies.check_duration)
    _add_health(b, c, health, tallies, facts.now)
    if broker_reports is not None:
        _add_broker_reports(b, c, broker_reports)
    if broker_splits is not None:
        _add_broker_splits(b, c, broker_splits)
    for stage, seconds in facts.stage_seconds.items():
        b.add("pulsar_quota_exporter_cycle_stage_duration_seconds", (c, stage), seconds)
    if facts.last_success_at is not None:
        b.add("pulsar_quota_exporter_last_successful_cycle_timestamp_seconds", (c,),
              facts.last_success_at)
    return b.build()
