"""Apache Pulsar's OpenTelemetry backlog series (PIP-264, Pulsar >= 3.3), read as the same
topic columns as the classic /metrics families.

With OpenTelemetry on (`OTEL_SDK_DISABLED=false`, `OTEL_METRICS_EXPORTER=prometheus`:
Pulsar's OpenTelemetryService leaves the SDK disabled unless told), a broker serves a
second exposition, `/metrics` on the SDK's own Prometheus port
(`OTEL_EXPORTER_PROMETHEUS_PORT`), beside the classic `/metrics` of its web service. What
it prints, as measured on 4.0.8 (tests/fixtures/SOURCES.md):

- Names are the instruments' dotted names with `_` for `.`, the unit appended
  (`s` → `_seconds`, `By` → `_bytes`, annotations such as `{eviction}` dropped) and
  `_total` on monotonic counters. OpenTelemetryTopicStats's
  `pulsar.broker.topic.storage.backlog.age` (gauge, s) is
  `pulsar_broker_topic_storage_backlog_age_seconds`; `…backlog.quota.limit.size`
  (up-down counter, By) and `…limit.time` (gauge, s) are `…_limit_size_bytes` and
  `…_limit_time_seconds`, printed as gauges; `…backlog.quota.eviction.count`
  (counter) is `…_eviction_count_total`, TYPE counter, one series per
  `pulsar_backlog_quota_type` (size, time); `…backlog.size` is `…_backlog_size_bytes`.
- Attributes are labels with `_` for `.`: a topic's are TopicAttributes' `pulsar_domain`,
  `pulsar_tenant`, `pulsar_namespace`, `pulsar_topic` (the partitioned topic's full name,
  TopicName.getPartitionedTopicName) and, for a partition only, `pulsar_partition_index`.
  Every sample also carries `otel_scope_name="org.apache.pulsar.broker"` and every
  resource attribute (`pulsar_cluster`, `service_name`, `host_name`, `process_pid`,
  `process_command_args`, …): OpenTelemetryService gives the exporter a resource
  attribute filter that allows all of them, so each line carries the JVM's command line
  and a big broker's backlog lines alone run to hundreds of MiB (docs/design.md,
  "Fetching and parsing bodies"). `OTEL_RESOURCE_DISABLED_KEYS=process.command_args,…` on
  the broker takes them out.
- Topic series are printed for every topic the broker serves, whatever
  `exposeTopicLevelMetricsInPrometheus` says (that key is the classic exposition's).
- Values are the classic families' (the same broker methods): -1 for an age not measured
  and for an unlimited quota. No timestamps, no `_created` samples.

The parse reads the families below into TOPICS' columns, and the labels into the classic
label columns (`LABEL_ALIASES`), so `pulsar_topic` + `pulsar_partition_index` key a
partition exactly as the classic `topic="…-partition-N"` does. The eviction counter has
no column: the pipeline reads no eviction count from the classic exposition either
(the broker's own `pulsar_storage_backlog_quota_exceeded_evictions_total` is not an
entity column; our own evictions are counted where we perform them).

An OpenTelemetry body has no subscription series (Pulsar 4.0's OpenTelemetry consumer
series are per consumer, not per subscription backlog) and no load-manager usage, so it
is no broker for the pipeline. An operator who wants it read lists its URL as one more
`sources.brokers` entry, beside the broker's classic `/metrics` (no other setting: the
body says what it is, `SOURCE_USAGE.otel_only`). merge.py then takes its topics' values
only where no classic body reported the topic, and never counts them in namespaces,
bundles or brokers, so a broker's two bodies never count a topic twice. That is worth it
where the classic exposition has topic-level series off
(`exposeTopicLevelMetricsInPrometheus=false`: namespace series only, no ages), since
OpenTelemetry prints every topic's age and limits anyway; beside topic-level classic
series it adds nothing. Listed alone, it gives topic rows only: no subscriptions to
evict, no namespace sums, no load verdicts.
"""

from __future__ import annotations

# OpenTelemetryTopicStats instruments, as the SDK's Prometheus exporter names them →
# TOPICS columns (the classic family each one replaces is in the comment).
OTEL_TOPIC_FAMILIES: dict[str, str] = {
    # pulsar_storage_backlog_age_seconds
    "pulsar_broker_topic_storage_backlog_age_seconds": "backlog_age_seconds",
    # pulsar_storage_backlog_quota_limit; the instrument was first `…backlog.quota.limit`,
    # unit {byte} (dropped: no `_bytes`), in apache/pulsar#22467's early commits
    "pulsar_broker_topic_storage_backlog_quota_limit_size_bytes": "backlog_quota_limit_bytes",
    "pulsar_broker_topic_storage_backlog_quota_limit": "backlog_quota_limit_bytes",
    # pulsar_storage_backlog_quota_limit_time
    "pulsar_broker_topic_storage_backlog_quota_limit_time_seconds":
        "backlog_quota_limit_seconds",
    # pulsar_storage_backlog_size
    "pulsar_broker_topic_storage_backlog_size_bytes": "backlog_size_bytes",
}

# OpenTelemetryAttributes as labels → the classic label read into the same column.
LABEL_ALIASES: dict[str, str] = {
    "pulsar_cluster": "cluster",
    "pulsar_namespace": "namespace",
    "pulsar_topic": "topic",
    "pulsar_partition_index": "partition",
}
