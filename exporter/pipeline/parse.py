"""Broker bodies → samples, inside the Spark plan (JVM string functions, no Python UDFs).

Parsing is the exporter's hot path (DESIGN.md, "Performance design"): at fleet scale no
single process parses every body within a check interval. So the raw text becomes a
DataFrame of lines, one scan (one task) per body, every step below a Catalyst expression,
and the parse spreads over the cores and executors Spark has. Per core it is no faster
than a Python regex loop (tests/bench/parse_throughput.py): its gain is distribution.

What the parse does not care about, because real bodies have it: several expositions
concatenated (a TYPE line twice, a family split apart, samples with no TYPE line), HELP and
TYPE lines at all (comments are dropped unread), trailing commas and spaces in label sets,
empty label values (= label absent, as in Prometheus), `NaN`, `±Inf`, Java's `-Infinity`,
integers without a decimal point, millisecond timestamps.

A line that is not `name[{labels}] value [timestamp]` is skipped and counted, never fatal
(`MalformedReason`); so is a kept sample that names a label twice, or whose short topic
name has no namespace to complete it. Label values holding the control characters
U+0000–U+0003 (the parse's own separators) count as syntax errors. Values are Prometheus
floats in decimal (Go's hexadecimal floats are not accepted).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from exporter.pipeline.model import Level, MalformedReason
from exporter.sources.model import BrokerBody

# Families the exporter reads, by the level whose labels they carry (model.Level).
SUBSCRIPTION_FAMILIES: dict[str, str] = {
    "pulsar_subscription_back_log": "backlog_messages",
    "pulsar_subscription_unacked_messages": "unacked_messages",
    "pulsar_out_messages_total": "msg_out_total",
    "pulsar_out_bytes_total": "bytes_out_total",
    "pulsar_subscription_consumers_count": "consumers",
    "pulsar_subscription_msg_rate_out": "rate_out",
    "pulsar_subscription_msg_throughput_out": "throughput_out",
    "pulsar_subscription_last_acked_timestamp": "last_acked_seconds",
    "pulsar_subscription_last_consumed_timestamp": "last_consumed_seconds",
}
TOPIC_FAMILIES: dict[str, str] = {
    "pulsar_in_messages_total": "msg_in_total",
    "pulsar_in_bytes_total": "bytes_in_total",
    "pulsar_out_messages_total": "msg_out_total",
    "pulsar_out_bytes_total": "bytes_out_total",
    "pulsar_storage_size": "storage_size_bytes",
    "pulsar_storage_backlog_size": "backlog_size_bytes",
    "pulsar_msg_backlog": "msg_backlog",
    "pulsar_producers_count": "producers",
    "pulsar_consumers_count": "consumers",
    "pulsar_subscriptions_count": "subscriptions",
    "pulsar_rate_in": "rate_in",
    "pulsar_rate_out": "rate_out",
    "pulsar_throughput_in": "throughput_in",
    "pulsar_throughput_out": "throughput_out",
}
# Apache Pulsar's namespace-level series (topic-level metrics off) use the topic names.
NAMESPACE_FAMILIES: dict[str, str] = {**TOPIC_FAMILIES, "pulsar_topics_count": "topics"}
# Broker-wide: Apache Pulsar's load-manager resource usage, percent of each limit
# (`ResourceUsage.percentUsage()`), labelled {cluster, broker=<advertised host>,
# metric="loadBalancing"}. pulsar-lite has none of them.
BROKER_FAMILIES: dict[str, str] = {
    "pulsar_lb_cpu_usage": "cpu_percent",
    "pulsar_lb_memory_usage": "memory_percent",
    "pulsar_lb_directMemory_usage": "direct_memory_percent",
    "pulsar_lb_bandwidth_in_usage": "bandwidth_in_percent",
    "pulsar_lb_bandwidth_out_usage": "bandwidth_out_percent",
}

FAMILIES: frozenset[str] = (
    frozenset(SUBSCRIPTION_FAMILIES) | frozenset(NAMESPACE_FAMILIES) | frozenset(BROKER_FAMILIES)
)

# Labels read from kept samples; the others are ignored.
LABELS = (
    "cluster", "namespace", "topic", "partition", "subscription",
    "consumer_name", "consumer_id", "remote_cluster",
)

# --- the text format, as Java regular expressions -------------------------------------------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_QUOTED = r'"(?:[^"\\]++|\\.)*+"'  # escapes: \\ \" \n (any escaped char accepted)
_PAIR = rf"{_LABEL_NAME}[ \t]*=[ \t]*{_QUOTED}"
_VALUE = (
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf(?:inity)?))"
    r"|(?i:nan)"
)
_TIMESTAMP = r"-?[0-9]+"
_LABEL_PAIRS = rf"[ \t]*(?:{_PAIR}(?:[ \t]*,[ \t]*{_PAIR})*+[ \t]*,?[ \t]*)?"
# A whole sample line; groups: name, label set (inside the braces), value, timestamp.
SAMPLE_LINE = (
    rf"^[ \t]*({_NAME})(?:[ \t]*\{{({_LABEL_PAIRS})\}}[ \t]*|[ \t]+)({_VALUE})"
    rf"(?:[ \t]+({_TIMESTAMP}))?[ \t]*$"
)
_FIELD = "\u0003"
_FIELDS_OUT = f"$1{_FIELD}$2{_FIELD}$3{_FIELD}$4"
_SKIPPED_LINE = r"^[ \t]*(?:#.*)?$"  # comments (HELP, TYPE, other) and blank lines
_PAIR_GROUPS = rf'[ \t]*({_LABEL_NAME})[ \t]*=[ \t]*"((?:[^"\\]++|\\.)*+)"[ \t]*,?[ \t]*'
_KV, _END = "\u0001", "\u0002"  # separators of the normalised label set
_SEPARATORS = r"[\x00-\x03]"  # the parse's own separators and placeholder
_PARTITION_SUFFIX = r"-partition-[0-9]+$"


def read_bodies(spark: SparkSession, bodies: Sequence[BrokerBody]) -> DataFrame:
    """(source, line) for every line of every body. One scan per spool file, so each body
    is its own task (and a body larger than `spark.sql.files.maxPartitionBytes` is split
    on line boundaries). The source is attached per file, never inferred from the text."""
    if not bodies:
        raise ValueError("read_bodies: no bodies")
    scans = [
        # Lines end at "\n" only: the text format allows a raw "\r" inside a label value,
        # which Spark's default reader would take for a line break. A "\r\n" ending
        # leaves a trailing "\r", stripped here (it cannot end a sample otherwise).
        spark.read.option("lineSep", "\n").text(os.path.abspath(b.path)).select(
            F.lit(b.source).alias("source"),
            F.regexp_replace("value", "\r$", "").alias("line"))
        for b in bodies
    ]
    return reduce(DataFrame.unionAll, scans)


def _unescape(c: Column) -> Column:
    """Label-value escapes (\\\\, \\", \\n) undone; the common case has no backslash."""
    nul = "\u0000"  # cannot occur in a text line: stands for an escaped backslash
    done = F.regexp_replace(c, r"\\\\", nul)
    done = F.regexp_replace(done, r"\\n", "\n")
    done = F.regexp_replace(done, r"\\(.)", "$1")
    done = F.regexp_replace(done, nul, r"\\")
    return F.when(F.instr(c, "\\") > 0, done).otherwise(c)


def _once(expensive: Column) -> Column:
    """`expensive`, computed once per row. Catalyst pushes a later filter below the
    projection that defines a column, inlining its definition, so a regex column read by
    a filter would run again there (measured: twice the CPU of the whole parse). A
    nondeterministic guard (always true) keeps the projection where it is."""
    return F.when(F.spark_partition_id() >= 0, expensive)


def _field(index: int) -> Column:
    """The `index`-th (1-based) field of a cut sample line."""
    return F.try_element_at(F.col("fields"), F.lit(index))


def _label(labels: Column, key: str) -> Column:
    """A label's unescaped value; null when absent or empty (Prometheus: the same)."""
    return F.nullif(_unescape(F.try_element_at(labels, F.lit(key))), F.lit(""))


def topic_key(topic: Column, namespace: Column, partition: Column) -> Column:
    """The full topic name. Apache Pulsar reports it in `topic` already; pulsar-lite
    reports the short name, completed with `namespace` as persistent (its labels carry no
    domain, so a pulsar-lite non-persistent topic cannot be told apart). A `partition`
    label ≥ 0 (pulsar-lite, or Pulsar's splitTopicAndPartitionIndexLabel) becomes the
    `-partition-N` suffix unless the name has it; -1 means not partitioned."""
    full = (
        F.when(F.instr(topic, "://") > 0, topic)
        .when(namespace.isNotNull(), F.concat(F.lit("persistent://"), namespace, F.lit("/"), topic))
    )
    index = partition.try_cast("int")
    return F.when(
        (index >= 0) & ~full.rlike(_PARTITION_SUFFIX),
        F.concat(full, F.lit("-partition-"), index.cast("string")),
    ).otherwise(full)


def namespace_of(topic: Column) -> Column:
    """`tenant/ns` (or v1 `tenant/cluster/ns`) of a full topic name."""
    return F.nullif(F.regexp_extract(topic, r"^[^:/]+://(.+)/[^/]+$", 1), F.lit(""))


def parse_lines(lines: DataFrame, families: Iterable[str] = FAMILIES) -> DataFrame:
    """(source, line) → one row per kept sample and per skipped line:

    source, reason (null for a sample, else a MalformedReason), level (model.Level),
    name, cluster, namespace, topic (full key, null at namespace level), subscription,
    value (double), timestamp_ms (long, null when absent).

    Kept: samples of `families` that describe a topic, subscription or namespace, and
    broker-wide samples (no topic, no namespace) of `BROKER_FAMILIES` at `Level.BROKER`;
    other broker-wide samples, per-consumer samples (`consumer_name`/`consumer_id`) and
    replication samples (`remote_cluster` other than "local") are left out, not counted.
    """
    wanted = sorted(set(families))
    line = F.col("line")
    # Comments and blank lines: a cheap test first, the regex only for indented lines.
    skipped = (
        F.when(line.startswith(" ") | line.startswith("\t"), line.rlike(_SKIPPED_LINE))
        .otherwise(line.startswith("#") | (line == ""))
    )
    # One regex pass both validates a line and cuts it into name, label set, value and
    # timestamp (joined by a separator the split undoes). A line that does not match is
    # left as it was, without the separator.
    fields = F.split(F.regexp_replace(line, SAMPLE_LINE, _FIELDS_OUT), _FIELD, -1)
    data = lines.filter(~skipped).select(
        "source",
        _once(fields).alias("fields"),
        (F.instr(line, _FIELD) == 0).alias("clean"),
    )
    ok = (F.size("fields") == 4) & F.col("clean")
    data = data.select(
        "source",
        ok.alias("ok"),
        F.when(ok, _field(1)).alias("name"),
        F.when(ok, _field(2)).alias("label_text"),
        F.when(ok, _field(3)).alias("value_text"),
        F.when(ok, F.nullif(_field(4), F.lit(""))).alias("timestamp_text"),
    )
    data = data.filter(~F.col("ok") | F.col("name").isin(wanted))
    # Each `name="value"` pair becomes name<KV>value<END>, then one str_to_map: a single
    # regex pass (regexp_extract_all is ten times slower here). A value holding one of
    # the separators cannot be told apart: such a line counts as malformed.
    label_text = F.col("label_text")
    data = data.select(
        "source", "name", "value_text", "timestamp_text",
        (F.col("ok") & ~label_text.rlike(_SEPARATORS)).alias("ok"),
        _once(F.regexp_replace(label_text, _PAIR_GROUPS, f"$1{_KV}$2{_END}")).alias("pairs"),
    )
    pairs = F.col("pairs")
    data = data.select(
        "source", "name", "ok", "value_text", "timestamp_text",
        F.when(F.col("ok"), F.str_to_map(pairs, F.lit(_END), F.lit(_KV))).alias("labels"),
        (F.length(pairs) - F.length(F.replace(pairs, F.lit(_END), F.lit("")))).alias("n_pairs"),
    )
    # The map has one entry per distinct name, plus "" after the last <END>.
    duplicate = F.col("ok") & (F.size("labels") - 1 != F.col("n_pairs"))
    data = data.select(
        "source", "name", "ok", "value_text", "timestamp_text",
        F.coalesce(duplicate, F.lit(False)).alias("duplicate"),
        F.when(~duplicate, F.col("labels")).alias("labels"),
    )
    labels = F.col("labels")
    data = data.select(
        "source", "name", "ok", "duplicate", "value_text", "timestamp_text",
        *[_label(labels, key).alias(f"l_{key}") for key in LABELS],
    )
    data = data.select(
        "source", "name", "ok", "duplicate", "value_text", "timestamp_text",
        F.col("l_cluster").alias("cluster"),
        F.col("l_namespace").alias("namespace_label"),
        F.col("l_topic").alias("raw_topic"),
        topic_key(F.col("l_topic"), F.col("l_namespace"), F.col("l_partition")).alias("topic"),
        F.col("l_subscription").alias("subscription"),
        (F.col("l_consumer_name").isNotNull() | F.col("l_consumer_id").isNotNull())
        .alias("per_consumer"),
        F.col("l_remote_cluster").alias("remote_cluster"),
    )
    level = (
        F.when(F.col("subscription").isNotNull() & F.col("raw_topic").isNotNull(),
               F.lit(Level.SUBSCRIPTION.value))
        .when(F.col("raw_topic").isNotNull(), F.lit(Level.TOPIC.value))
        .when(F.col("namespace_label").isNotNull(), F.lit(Level.NAMESPACE.value))
        .when(F.col("name").isin(sorted(BROKER_FAMILIES)), F.lit(Level.BROKER.value))
    )
    reason = (
        F.when(~F.col("ok"), F.lit(MalformedReason.SYNTAX.value))
        .when(F.col("duplicate"), F.lit(MalformedReason.DUPLICATE_LABEL.value))
        .when(F.col("raw_topic").isNotNull() & F.col("topic").isNull(),
              F.lit(MalformedReason.UNKEYED_TOPIC.value))
    )
    data = data.select("*", level.alias("level"), reason.alias("reason"))
    keep = F.col("reason").isNotNull() | (
        F.col("level").isNotNull()
        & ~F.col("per_consumer")
        & (F.col("remote_cluster").isNull() | (F.col("remote_cluster") == "local"))
    )
    sample = F.col("reason").isNull()
    return data.filter(keep).select(
        "source",
        "reason",
        F.when(sample, F.col("level")).alias("level"),
        F.when(sample, F.col("name")).alias("name"),
        F.when(sample, F.col("cluster")).alias("cluster"),
        F.when(sample, F.coalesce(F.col("namespace_label"), namespace_of(F.col("topic"))))
        .alias("namespace"),
        F.when(sample, F.col("topic")).alias("topic"),
        F.when(sample & (F.col("level") == Level.SUBSCRIPTION.value), F.col("subscription"))
        .alias("subscription"),
        F.when(sample, F.col("value_text").try_cast("double")).alias("value"),
        F.when(sample, F.col("timestamp_text").try_cast("long")).alias("timestamp_ms"),
    )


def parse(spark: SparkSession, bodies: Sequence[BrokerBody]) -> DataFrame:
    """`parse_lines(read_bodies(...))`: the kept samples and skipped lines of `bodies`."""
    return parse_lines(read_bodies(spark, bodies))
