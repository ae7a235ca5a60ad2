"""What the pipeline hands to the engine and the server: columnar per-entity results.

One `Aggregates` per cycle, built by one Spark plan from the cycle's broker bodies. Every
table is a pyarrow Table with exactly the schema below (column order included), so the
stages after the pipeline never see a Spark object and never parse text.

Conventions, all tables:
- Sample values are `float64`, as Prometheus samples are; `null` where no broker reported
  the series (pulsar-lite, for instance, has no `pulsar_storage_backlog_size`). Counters
  (`*_total`) are the broker's cumulative values, not rates: the engine diffs them.
- Counts the pipeline computes itself (topics, lines) are `int64` and never null.
- Topic keys are full names (`persistent://tenant/ns/topic`, `-partition-N` for a
  partition); namespaces are `tenant/ns` (`tenant/cluster/ns` for v1 names).
- `source` is the broker source URL (`BrokerBody.source`); in TOPICS and SUBSCRIPTIONS
  dictionary-encoded, a code per row (Arrow sorts no dictionary column: cast it first).
- TOPICS and SUBSCRIPTIONS rows come broker by broker, each broker's in its own order: the
  merge shares the brokers' buffers rather than copying them into another order.
- Bundles are named by their hash range (`0x00000000_0x40000000`, as the admin REST and
  `BundleOwnership.bundle` name them), next to a `namespace` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

import pyarrow as pa

# A count the broker keeps in a Java long is below this in magnitude (tables.py skips the
# others; the engine reads counts as integers).
LONG_BOUND = 2.0**63


class MalformedReason(StrEnum):
    """Why a line of a broker body was skipped; the `reason` label of the error counter."""

    SYNTAX = "syntax"  # not `name[{labels}] value [timestamp]` in the text format
    DUPLICATE_LABEL = "duplicate_label"  # a kept family's sample names a label twice
    UNKEYED_TOPIC = "unkeyed_topic"  # a short topic name with no namespace to complete it
    NOT_A_COUNT = "not_a_count"  # a count (a Java long on the broker) that no long holds


class Level(StrEnum):
    """Which entity a sample describes, decided by the labels it carries."""

    SUBSCRIPTION = "subscription"  # has `subscription` (and `topic`)
    TOPIC = "topic"  # has `topic`, no `subscription`
    NAMESPACE = "namespace"  # has `namespace` only: a broker with topic-level metrics off
    BROKER = "broker"  # none of those: broker-wide (kept only for parse.BROKER_FAMILIES)


# Pulsar's default bundle: a namespace with no bundle boundaries known is one bundle over the
# whole 32-bit hash range (NamespaceBundleFactory's FIRST_BOUNDARY_LAST_BOUNDARY).
FULL_BUNDLE = "0x00000000_0xffffffff"


_F = pa.float64()
_S = pa.string()
_I = pa.int64()
# Broker source URLs, one code per row: a fleet's topics and subscriptions share a handful.
_SOURCE = pa.dictionary(pa.int32(), _S)

# The Aggregates' subscriptions, on the broker that owns their topic (see TOPICS for the
# ownership rule): what the stages after the merge read of them, the backlog check and
# the eviction plan. The task reads a few more series of a subscription (its out counters
# and rates), only to sum them into its topic's where the broker printed no topic-level
# series (tables.py); they never leave the task. A subscription's topic is a code into
# its broker's topic names, those of the TOPICS rows of its source (merge.py), not its
# topic's name again, which every subscription would hold through the decide.
_TOPIC_NAME = pa.dictionary(pa.int32(), _S)
SUBSCRIPTIONS = pa.schema([
    ("topic", _TOPIC_NAME),
    ("subscription", _S),
    ("source", _SOURCE),
    ("backlog_messages", _F),  # pulsar_subscription_back_log
    ("consumers", _F),  # pulsar_subscription_consumers_count
    ("backlog_age_seconds", _F),  # pulsar_subscription_storage_backlog_age_seconds (PIP-492)
])

# Per topic, as a broker's task reads it (SOURCE_TOPICS, below) and its namespace sums it
# (NAMESPACES). A column the broker has no topic-level series for is derived from the
# topic's subscriptions, as Apache Pulsar's NamespaceStatsAggregator derives it:
# msg_backlog, rate_out, throughput_out, consumers and the out counters are sums over
# subscriptions, `subscriptions` their count (Apache Pulsar has no topic-level out counters
# at all).
_TOPIC_SERIES = [
    ("msg_in_total", _F),  # pulsar_in_messages_total
    ("bytes_in_total", _F),  # pulsar_in_bytes_total
    ("msg_out_total", _F),
    ("bytes_out_total", _F),
    ("storage_size_bytes", _F),  # pulsar_storage_size
    ("backlog_size_bytes", _F),  # pulsar_storage_backlog_size (Apache Pulsar only; its
    # OpenTelemetry exposition's pulsar_broker_topic_storage_backlog_size_bytes too)
    ("msg_backlog", _F),  # pulsar_msg_backlog
    ("producers", _F),  # pulsar_producers_count
    ("consumers", _F),  # pulsar_consumers_count
    ("subscriptions", _F),  # pulsar_subscriptions_count
    ("rate_in", _F),  # pulsar_rate_in, msg/s
    ("rate_out", _F),  # pulsar_rate_out, msg/s
    ("throughput_in", _F),  # pulsar_throughput_in, bytes/s
    ("throughput_out", _F),  # pulsar_throughput_out, bytes/s
    # What the topic's replicators send, summed over remote clusters: Apache Pulsar prints
    # rates only (TopicStats / AggregatedReplicationStats, averaged over
    # statsUpdateFrequencyInSecs), no counter; null without replication.
    ("replication_rate_out", _F),  # pulsar_replication_rate_out{remote_cluster}, msg/s
    ("replication_throughput_out", _F),  # pulsar_replication_throughput_out, bytes/s
    # PIP-323, Apache Pulsar >= 3.2 only (null elsewhere). The broker prints -1 for an age
    # it has not measured and for an unlimited quota: kept as printed. Also read from the
    # OpenTelemetry exposition (>= 3.3, pipeline/otel.py): pulsar_broker_topic_storage_
    # backlog_age_seconds, …_backlog_quota_limit_size_bytes, …_limit_time_seconds.
    ("backlog_age_seconds", _F),  # pulsar_storage_backlog_age_seconds, the slowest cursor's
    ("backlog_quota_limit_bytes", _F),  # pulsar_storage_backlog_quota_limit
    ("backlog_quota_limit_seconds", _F),  # pulsar_storage_backlog_quota_limit_time
]
# The Aggregates' topics, one row per topic: what the stages after the merge read of them
# (the backlog check, its age tables and its sizes). Their namespaces', bundles' and
# resource groups' sums are the merge's; the other columns went no further, yet were held
# through the decide. A topic reported by two brokers (it moved during the
# cycle) keeps the report with the largest msg_in_total, ties to the smaller source URL:
# never double-counted, deterministic, and the counter the series already followed (Apache
# Pulsar's new owner restarts it from 0) goes on until the old owner stops reporting it.
TOPICS = pa.schema([
    ("topic", _S),
    ("namespace", _S),
    ("source", _SOURCE),
    *[(n, t) for n, t in _TOPIC_SERIES if n in (
        "msg_in_total", "bytes_in_total", "backlog_size_bytes", "backlog_age_seconds",
        "backlog_quota_limit_bytes", "backlog_quota_limit_seconds")],
])
# Topic columns that are no quantity of a namespace: never summed, not in NAMESPACES.
TOPIC_ONLY = ("backlog_age_seconds", "backlog_quota_limit_bytes", "backlog_quota_limit_seconds")

# Per namespace: sums over its topics. For a broker with topic-level metrics off
# (exposeTopicLevelMetricsInPrometheus=false) the broker's own namespace-level series are
# used instead, and `topics` is its pulsar_topics_count.
NAMESPACES = pa.schema([
    ("namespace", _S),
    ("topics", _I),
    *[(n, t) for n, t in _TOPIC_SERIES if n not in TOPIC_ONLY],
])

# Per configured resource group × monitoring class (publish = in counters, dispatch = out
# counters, replication_dispatch = the replicators' rates), summed over what is bound to the
# group (a topic's binding beats its namespace's, which beats its tenant's). Every configured
# group has a row per class, with 0 and namespaces = 0 when nothing bound to it was seen.
RESOURCE_GROUPS = pa.schema([
    ("resource_group", _S),
    ("monitoring_class", _S),  # exporter.config.settings.MonitoringClass values
    ("messages_total", _F),  # counters: publish and dispatch (null for replication)
    ("bytes_total", _F),
    ("messages_per_second", _F),  # rates as the broker prints them: replication only
    ("bytes_per_second", _F),
    ("namespaces", _I),  # bound namespaces seen this cycle
    ("topics", _I),
])

# Per broker source, over the topics it owns after de-duplication (for load verdicts).
# Every body's source has a row, zeros when it reported nothing. The *_percent columns are
# Apache Pulsar's load-manager gauges as the broker reports them (`pulsar_lb_*_usage`:
# percent of each limit, `ResourceUsage.percentUsage()`, may exceed 100); null when the body
# has no such series (pulsar-lite never reports them).
BROKERS = pa.schema([
    ("source", _S),
    ("cluster", _S),  # the `cluster` label it reports (pulsar-lite: always "pulsar-lite")
    ("topics", _I),
    ("sessions", _F),  # producers + consumers, as Pulsar's bundle-split thresholds count them
    ("rate_in", _F),
    ("rate_out", _F),
    ("throughput_in", _F),
    ("throughput_out", _F),
    ("cpu_percent", _F),  # pulsar_lb_cpu_usage
    ("memory_percent", _F),  # pulsar_lb_memory_usage
    ("direct_memory_percent", _F),  # pulsar_lb_directMemory_usage
    ("bandwidth_in_percent", _F),  # pulsar_lb_bandwidth_in_usage
    ("bandwidth_out_percent", _F),  # pulsar_lb_bandwidth_out_usage
])

# Per broker source × namespace bundle: the source's share of the bundle, over the topics it
# owns after de-duplication (a bundle moving during the cycle has a row per source). A topic
# is in the bundle whose range holds the CRC-32 of its full name, as Apache Pulsar assigns
# it (merge.py, `place`); a namespace with no boundaries given, or a broker reporting only
# namespace-level series for it, is one bundle, FULL_BUNDLE. Sources and bundles without
# topics have no row. Values are sums over the topics, null when none reported the series.
BUNDLES = pa.schema([
    ("source", _S),
    ("namespace", _S),
    ("bundle", _S),  # hash range, "0x00000000_0x40000000"
    ("topics", _I),
    ("producers", _F),
    ("consumers", _F),
    ("rate_in", _F),  # msg/s
    ("rate_out", _F),  # msg/s
    ("throughput_in", _F),  # bytes/s
    ("throughput_out", _F),  # bytes/s
])

# --- per broker body, as the Spark task that fetched it hands it over (tables.py) ----------
# Keyed like the tables above, before topics reported by two brokers are de-duplicated.
# A broker's subscriptions: SUBSCRIPTIONS' columns but the source, the only ones the
# driver reads (the series that went no further were a large share of the driver's decoded
# tables; docs/design.md, "The driver once every age table is full").
SOURCE_SUBSCRIPTIONS = pa.schema([f.with_type(_S) if f.name == "topic" else f
                                  for f in SUBSCRIPTIONS if f.name != "source"])
SOURCE_TOPICS = pa.schema([
    ("topic", _S),
    ("namespace", _S),
    *_TOPIC_SERIES,
    ("cluster", _S),
    ("topic_hash", _I),  # CRC-32 of the full topic name: its namespace bundle (merge.py)
])
# The broker's own namespace-level series (Apache Pulsar with topic-level metrics off).
SOURCE_NAMESPACES = pa.schema([
    ("namespace", _S),
    ("cluster", _S),
    ("topics", _F),  # pulsar_topics_count
    *[(n, t) for n, t in _TOPIC_SERIES if n not in TOPIC_ONLY],
])
# One row: the broker-wide pulsar_lb_* gauges (null when the body has none), the process
# start time (epoch seconds, null when absent), and whether the body printed only
# OpenTelemetry families (pipeline/otel.py): a broker's second exposition, which merge.py
# uses for topic values only, never as a broker of its own.
SOURCE_USAGE = pa.schema([
    ("cluster", _S),
    *[f for f in BROKERS if f.name.endswith("_percent")],
    ("started_at", _F),
    ("otel_only", pa.bool_()),
])

# Skipped lines per source × reason; every body's source has a row per reason.
MALFORMED = pa.schema([
    ("source", _S),
    ("reason", _S),  # MalformedReason values
    ("lines", _I),
])


@dataclass(frozen=True, eq=False)
class Aggregates:
    """One cycle's per-entity results."""

    subscriptions: pa.Table
    topics: pa.Table
    namespaces: pa.Table
    resource_groups: pa.Table
    brokers: pa.Table
    malformed: pa.Table
    # Last and defaulted, so code building Aggregates without it keeps working.
    bundles: pa.Table = field(default_factory=BUNDLES.empty_table)

    def __post_init__(self) -> None:
        for name, schema in SCHEMAS.items():
            table = getattr(self, name)
            if not table.schema.equals(schema):
                raise ValueError(f"Aggregates.{name}: schema {table.schema} != {schema}")

    @classmethod
    def empty(cls) -> Aggregates:
        return cls(**{n: s.empty_table() for n, s in SCHEMAS.items()})

    def with_resource_groups(self, table: pa.Table) -> Aggregates:
        return replace(self, resource_groups=table)


SCHEMAS: dict[str, pa.Schema] = {
    "subscriptions": SUBSCRIPTIONS,
    "topics": TOPICS,
    "namespaces": NAMESPACES,
    "resource_groups": RESOURCE_GROUPS,
    "brokers": BROKERS,
    "bundles": BUNDLES,
    "malformed": MALFORMED,
}
