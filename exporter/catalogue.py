"""Every metric the exporter publishes, declared once.

The registry, the dashboards, the alert rules and the metric reference (docs/metrics.md) are
all generated from `CATALOGUE`. The PIP-323 metrics keep Apache Pulsar's names and label sets
so existing queries work; where the broker is wrong (eviction counters typed as gauges, a
check-duration histogram observed per topic in whole seconds) we keep the name and fix the
semantics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from exporter.actions.orders import EvictionFailure, LeaseState
from exporter.config.settings import Allocator
from exporter.sources.results import QuotaType, ScrapeError
from exporter.transport.codec import WireReject
from exporter.transport.gate import PeerReject
from exporter.transport.pulsarwire import WireError
from exporter.transport.signing import SignatureReject


class MetricType(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Domain(StrEnum):
    BACKLOG = "backlog"
    RESOURCE_GROUPS = "resource_groups"
    LOAD = "load"
    EXPORTER = "exporter"


class Unit(StrEnum):
    """Base units only (Prometheus naming); `NONE` for counts and booleans."""

    SECONDS = "seconds"
    BYTES = "bytes"
    RATIO = "ratio"
    MESSAGES_PER_SECOND = "messages_per_second"
    BYTES_PER_SECOND = "bytes_per_second"
    TIMESTAMP = "timestamp_seconds"
    NONE = ""


# Label values that exist from start, so error counters read 0 rather than being absent.
# Where the code has an enum for a label, the enum is the vocabulary: a reason added there is
# exported (at 0 from the start) and generated everywhere without a second list to keep.
def _values(*enums: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for enum in enums for member in enum)


QUOTA_TYPES = _values(QuotaType)
ENFORCERS = ("broker", "exporter", "none")  # publish.enforcer
SCRAPE_ERROR_REASONS = _values(ScrapeError)
REPORT_REJECT_REASONS = _values(WireReject, PeerReject, SignatureReject)
BROKER_REPORT_REJECT_REASONS = _values(WireError)
EVICTION_FAILURE_REASONS = _values(EvictionFailure)
LEASE_STATES = _values(LeaseState)
ALLOCATORS = _values(Allocator)
TOPIC_DROP_REASONS = ("filtered", "max_topics")
STAGES = ("collect", "pipeline", "engine", "actions", "record", "transport", "publish")
CHECK_DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]
    unit: Unit
    domain: Domain
    buckets: tuple[float, ...] = ()
    # Series carrying a `topic` label are dropped when `exposition.topic_level` is false,
    # like Pulsar's exposeTopicLevelMetricsInPrometheus; `namespace_fallback` metrics are then
    # published aggregated per namespace instead (Pulsar does so for the eviction counter).
    namespace_fallback: bool = False
    known_values: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    pulsar: bool = False  # same name and labels as the Apache Pulsar broker's metric

    @property
    def topic_level(self) -> bool:
        return "topic" in self.labels

    @property
    def sample_names(self) -> tuple[str, ...]:
        """Names of the samples as they appear in the exposition text."""
        if self.type is MetricType.HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


def _m(name, type_, help_, labels, unit, domain, **kw) -> Metric:
    return Metric(name, MetricType(type_), help_, tuple(labels), unit, domain, **kw)


_TOPIC = ("cluster", "namespace", "topic")
_SUBSCRIPTION = (*_TOPIC, "subscription")
_RG = ("cluster", "resource_group", "monitoring_class")
_RGP = (*_RG, "participant")
B, R, L, E = Domain.BACKLOG, Domain.RESOURCE_GROUPS, Domain.LOAD, Domain.EXPORTER
G, C, H = "gauge", "counter", "histogram"
U = Unit

CATALOGUE: tuple[Metric, ...] = (
    # --- PIP-323: same names and labels as the broker -----------------------------------
    _m("pulsar_storage_backlog_age_seconds", G,
       "Age of the oldest unacknowledged message of the topic's oldest subscription; "
       "0 with no backlog, absent while it cannot be known yet.",
       _TOPIC, U.SECONDS, B, pulsar=True),
    _m("pulsar_storage_backlog_quota_exceeded_evictions_total", C,
       "Backlog evictions performed because the topic exceeded its quota "
       "(performed only; the broker also counts checks that evicted nothing).",
       (*_TOPIC, "quota_type"), U.NONE, B, pulsar=True, namespace_fallback=True,
       known_values=MappingProxyType({"quota_type": QUOTA_TYPES})),
    _m("pulsar_broker_storage_backlog_quota_exceeded_evictions_total", C,
       "Backlog evictions performed in the cluster, by quota type.",
       ("cluster", "quota_type"), U.NONE, B, pulsar=True,
       known_values=MappingProxyType({"quota_type": QUOTA_TYPES})),
    _m("pulsar_storage_backlog_quota_check_duration_seconds", H,
       "Duration of one whole backlog-quota check (observed once per check, "
       "not once per topic as the broker does).",
       ("cluster",), U.SECONDS, B, buckets=CHECK_DURATION_BUCKETS, pulsar=True),
    _m("pulsar_storage_backlog_quota_limit", G,
       "The topic's effective backlog size quota in bytes (absent when unlimited).",
       _TOPIC, U.BYTES, B, pulsar=True),
    _m("pulsar_storage_backlog_quota_limit_time", G,
       "The topic's effective backlog time quota in seconds (absent when unlimited).",
       _TOPIC, U.SECONDS, B, pulsar=True),
    _m("pulsar_storage_backlog_size", G,
       "Backlog size in bytes of the topic's oldest subscription.",
       _TOPIC, U.BYTES, B, pulsar=True),
    # --- backlog: ours ---------------------------------------------------------------
    _m("pulsar_storage_backlog_age_estimated", G,
       "1 when the backlog age is estimated from publish counters, 0 when the broker "
       "measured it (admin API, or its own pulsar_storage_backlog_age_seconds).",
       _TOPIC, U.NONE, B),
    # --- PIP-492 (Pulsar >= 5.0), for every broker: opt-in, one series per subscription --
    _m("pulsar_subscription_storage_backlog_age_seconds", G,
       "Age of the subscription's oldest unacknowledged message; 0 with no backlog, absent "
       "while unknown. Published with exposition.subscription_backlog_age.",
       _SUBSCRIPTION, U.SECONDS, B, pulsar=True),
    _m("pulsar_subscription_storage_backlog_age_estimated", G,
       "1 when the subscription's backlog age is estimated from publish counters, 0 when "
       "the broker measured it. Published with exposition.subscription_backlog_age.",
       _SUBSCRIPTION, U.NONE, B),
    _m("pulsar_storage_backlog_quota_exceeded", G,
       "1 while the topic's backlog exceeds its quota of this type; `policy` is what is done "
       "about it and `enforced_by` who does it: `broker` (the quota is Pulsar's own), "
       "`exporter` (our evictions) or `none` (a quota only this exporter knows of).",
       (*_TOPIC, "quota_type", "policy", "enforced_by"), U.NONE, B,
       known_values=MappingProxyType({"enforced_by": ENFORCERS})),
    _m("pulsar_storage_backlog_quota_would_evict_total", C,
       "Evictions decided but not performed because enforcement is off (dry run).",
       (*_TOPIC, "quota_type"), U.NONE, B, namespace_fallback=True,
       known_values=MappingProxyType({"quota_type": QUOTA_TYPES})),
    _m("pulsar_storage_backlog_oldest_subscription_info", G,
       "1 for the subscription holding the topic's oldest unacknowledged message.",
       (*_TOPIC, "subscription"), U.NONE, B),
    _m("pulsar_namespace_backlog_age_max_seconds", G,
       "Largest backlog age over the namespace's topics; published also when topic-level "
       "series are off.",
       ("cluster", "namespace"), U.SECONDS, B),
    # --- resource groups (PIP-82) ----------------------------------------------------
    _m("pulsar_resource_group_quota_messages_per_second", G,
       "Configured cluster-wide quota, messages per second (absent when unlimited).",
       _RG, U.MESSAGES_PER_SECOND, R),
    _m("pulsar_resource_group_quota_bytes_per_second", G,
       "Configured cluster-wide quota, bytes per second (absent when unlimited).",
       _RG, U.BYTES_PER_SECOND, R),
    _m("pulsar_resource_group_local_quota_messages_per_second", G,
       "This participant's share of the quota as computed by the allocator, messages per second.",
       _RGP, U.MESSAGES_PER_SECOND, R),
    _m("pulsar_resource_group_local_quota_bytes_per_second", G,
       "This participant's share of the quota as computed by the allocator, bytes per second.",
       _RGP, U.BYTES_PER_SECOND, R),
    _m("pulsar_resource_group_usage_messages_per_second", G,
       "Usage per participant (this instance's own, and each peer's last report), messages/s.",
       _RGP, U.MESSAGES_PER_SECOND, R),
    _m("pulsar_resource_group_usage_bytes_per_second", G,
       "Usage per participant (this instance's own, and each peer's last report), bytes/s.",
       _RGP, U.BYTES_PER_SECOND, R),
    _m("pulsar_resource_group_utilization_ratio", G,
       "Cluster-wide usage divided by the configured quota (1 = at quota).",
       (*_RG, "resource"), U.RATIO, R,
       known_values=MappingProxyType({"resource": ("messages", "bytes")})),
    _m("pulsar_resource_group_throttle_delay_seconds", G,
       "Delay a rate limiter would impose on the group over its quota: (O - T) / T * W "
       "(Kafka's client-quota throttle).",
       _RG, U.SECONDS, R),
    _m("pulsar_resource_group_broker_reported_bytes_total", C,
       "Bytes the group used on `broker`, as that broker reported it to the others "
       "(PIP-82 reports on resource_group_engine.broker_reports_topic); rate() is the "
       "group's usage there. Rounds the broker suppressed are not in it, as for Pulsar.",
       (*_RG, "broker"), U.BYTES, R),
    _m("pulsar_resource_group_broker_reported_messages_total", C,
       "Messages the group used on `broker`, as that broker reported it to the others.",
       (*_RG, "broker"), U.NONE, R),
    _m("pulsar_resource_group_broker_local_quota_messages_per_second", G,
       "The local quota the broker `participant` computes for itself, messages per second: "
       "the brokers' own split, computed here from their PIP-82 reports; the brokers "
       "enforce, we publish. allocator=pulsar is Pulsar's computeLocalQuota, what the broker "
       "adds to its pulsar_resource_group_calculated_messages_quota each round; "
       "allocator=fair is the fair allocator over the same usage (a what-if). Absent "
       "while it cannot be known, and for no limit.",
       (*_RGP, "allocator"), U.MESSAGES_PER_SECOND, R,
       known_values=MappingProxyType({"allocator": ALLOCATORS})),
    _m("pulsar_resource_group_broker_local_quota_bytes_per_second", G,
       "The local quota the broker `participant` computes for itself, bytes per second: "
       "the brokers' own split, computed here from their PIP-82 reports; the brokers "
       "enforce, we publish (allocator as for messages; pulsar = the broker's "
       "pulsar_resource_group_calculated_bytes_quota increment).",
       (*_RGP, "allocator"), U.BYTES_PER_SECOND, R,
       known_values=MappingProxyType({"allocator": ALLOCATORS})),
    # --- load (Pulsar's load manager rules) -------------------------------------------
    _m("pulsar_load_broker_resource_usage_ratio", G,
       "Broker resource usage (cpu, memory, bandwidth_in, bandwidth_out) as a fraction "
       "of its limit.",
       ("cluster", "broker", "resource"), U.RATIO, L),
    _m("pulsar_load_broker_overloaded", G,
       "1 when the shedder the brokers run (load_manager.load_shedding_strategy) would "
       "pick this broker to shed from.",
       ("cluster", "broker"), U.NONE, L),
    _m("pulsar_load_broker_shed_ratio", G,
       "Fraction of the broker's traffic (msg rate or throughput, for the uniform shedder) "
       "the load manager would shed.",
       ("cluster", "broker"), U.RATIO, L),
    _m("pulsar_load_bundle_unload_candidate", G,
       "1 for a bundle the load manager would unload from its overloaded broker "
       "(highest traffic first, until the shed share is covered).",
       ("cluster", "broker", "namespace", "bundle"), U.NONE, L),
    _m("pulsar_load_bundle_split_candidate", G,
       "1 for a bundle over a split threshold; `reason` names the threshold.",
       ("cluster", "namespace", "bundle", "reason"), U.NONE, L),
    # --- the exporter's own health ------------------------------------------------------
    _m("pulsar_quota_exporter_build_info", G,
       "The exporter's version, the commit it was built from, and the Python, PySpark and "
       "Java it runs on (always 1).",
       ("cluster", "version", "revision", "pythonversion", "pysparkversion", "javaversion"),
       U.NONE, E),
    _m("pulsar_quota_exporter_source_up", G,
       "1 when the source's last fetch succeeded.",
       ("cluster", "source", "kind"), U.NONE, E),
    _m("pulsar_quota_exporter_source_scrape_errors_total", C,
       "Failed fetches of a source, by reason.",
       ("cluster", "source", "reason"), U.NONE, E,
       known_values=MappingProxyType({"reason": SCRAPE_ERROR_REASONS})),
    _m("pulsar_quota_exporter_source_malformed_lines_total", C,
       "Lines of a source's metrics text skipped as malformed: not the text format, or a "
       "count that no Java long holds.",
       ("cluster", "source"), U.NONE, E),
    _m("pulsar_quota_exporter_source_staleness_seconds", G,
       "Age of the data in use for a source (grows while the source fails).",
       ("cluster", "source"), U.SECONDS, E),
    _m("pulsar_quota_exporter_last_successful_cycle_timestamp_seconds", G,
       "Unix time at which the last check cycle completed and was published.",
       ("cluster",), U.TIMESTAMP, E),
    _m("pulsar_quota_exporter_cycle_stage_duration_seconds", G,
       "Duration of each stage of the last check cycle.",
       ("cluster", "stage"), U.SECONDS, E,
       known_values=MappingProxyType({"stage": STAGES})),
    _m("pulsar_quota_exporter_check_interval_seconds", G,
       "The check interval this exporter runs with (check_interval): the alert rules "
       "compare check durations and the last cycle's age with it.",
       ("cluster",), U.SECONDS, E),
    _m("pulsar_quota_exporter_cycles_skipped_total", C,
       "Check ticks skipped because the previous check was still running.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_record_bytes", G,
       "Size of the cycles kept in the record directory (run --record.dir), after retention.",
       ("cluster",), U.BYTES, E),
    _m("pulsar_quota_exporter_record_failures_total", C,
       "Cycles that could not be written to the record directory (run --record.dir).",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_topics", G,
       "Topics checked in the last cycle (after filters.topics).", ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_topics_held", G,
       "Topics no broker lists now whose last values are still published: their bundle "
       "moved or their broker restarted, and the new owner has not listed them yet (held "
       "at most 3 cycles; the admin walk's stats request loads them meanwhile).",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_topics_dropped", G,
       "Topics left out in the last cycle, by reason: filtered (filters.topics: not checked "
       "or exported) or max_topics (checked, but their series not exported).",
       ("cluster", "reason"), U.NONE, E,
       known_values=MappingProxyType({"reason": TOPIC_DROP_REASONS})),
    _m("pulsar_quota_exporter_evictions_failed_total", C,
       "Evictions that were decided with enforcement on but failed, by reason.",
       ("cluster", "reason"), U.NONE, E,
       known_values=MappingProxyType({"reason": EVICTION_FAILURE_REASONS})),
    _m("pulsar_quota_exporter_enforcer", G,
       "1 for this instance's state of the enforcer lease (enforce: true only): holding "
       "(it evicts), standing_by (another instance holds it, or the broker is out of reach) "
       "or unfenced (the broker does not honour exclusive producers: it evicts, alone). "
       "Across instances, the sum of holding is the number of enforcers: 1.",
       ("cluster", "state"), U.NONE, E,
       known_values=MappingProxyType({"state": LEASE_STATES})),
    _m("pulsar_quota_exporter_enforcer_acquired_total", C,
       "Times this instance took the enforcer lease (a hand-over when another held it).",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_enforcer_lost_total", C,
       "Times this instance found the enforcer lease gone: fenced by a new holder, or the "
       "broker out of reach when it confirmed its claim before an eviction.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_usage_reporter", G,
       "1 for this instance's state of its participant's usage-reporter lease (resource "
       "groups with a usage exchange): holding (it publishes the participant's usage), "
       "standing_by (another replica does, or the broker is out of reach) or unfenced (the "
       "broker does not honour exclusive producers: it reports, maybe beside another). "
       "Across replicas of one participant, the sum of holding is 1.",
       ("cluster", "participant", "state"), U.NONE, E,
       known_values=MappingProxyType({"state": LEASE_STATES})),
    _m("pulsar_quota_exporter_usage_reports_sent_total", C,
       "Resource-group usage reports published by this instance.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_usage_reports_suppressed_total", C,
       "Usage-report entries (resource group x class) held back because usage drifted less "
       "than the suppression tolerance.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_usage_reports_received_total", C,
       "Usage reports accepted from peers.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_usage_reports_rejected_total", C,
       "Usage reports rejected, by reason.",
       ("cluster", "reason"), U.NONE, E,
       known_values=MappingProxyType({"reason": REPORT_REJECT_REASONS})),
    _m("pulsar_quota_exporter_broker_last_report_timestamp_seconds", G,
       "Unix time at which the broker's last PIP-82 usage report was read off its topic.",
       ("cluster", "broker"), U.TIMESTAMP, E),
    _m("pulsar_quota_exporter_broker_reports_received_total", C,
       "PIP-82 usage reports read from the brokers' own topic and decoded.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_broker_reports_rejected_total", C,
       "Payloads on the brokers' usage topic that did not decode as ResourceUsageInfo.",
       ("cluster", "reason"), U.NONE, E,
       known_values=MappingProxyType({"reason": BROKER_REPORT_REJECT_REASONS})),
    _m("pulsar_quota_exporter_broker_reports_unknown_fields_total", C,
       "Entries in the brokers' reports with fields this exporter does not read, e.g. a "
       "monitoring class newer than it; counted, never fatal.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_usage_peers", G,
       "Participants (including this one) whose usage is currently known.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_usage_report_interval_seconds", G,
       "How often this exporter publishes and reads usage reports (report_interval).",
       ("cluster",), U.SECONDS, E),
    _m("pulsar_quota_exporter_usage_report_max_gap_seconds", G,
       "Longest a live participant goes between usage reports with this exporter's "
       "settings: report_interval x (max_suppressed_rounds + 1).",
       ("cluster",), U.SECONDS, E),
    _m("pulsar_quota_exporter_usage_peer_report_age_seconds", G,
       "Seconds since each peer's last accepted usage report.",
       ("cluster", "participant"), U.SECONDS, E),
    _m("pulsar_quota_exporter_stale_peers_dropped_total", C,
       "Peers dropped because they were silent longer than stale_after.",
       ("cluster",), U.NONE, E),
    _m("pulsar_quota_exporter_config_reloads_total", C,
       "Configuration reloads by result (a failed reload keeps the running config).",
       ("cluster", "result"), U.NONE, E,
       known_values=MappingProxyType({"result": ("success", "failure")})),
)

BY_NAME: Mapping[str, Metric] = MappingProxyType({m.name: m for m in CATALOGUE})


def metric(name: str) -> Metric:
    """Look a metric up by name; a typo fails loudly at import time of the caller's module."""
    return BY_NAME[name]
