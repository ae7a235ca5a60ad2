"""Broker bodies → samples, inside the Spark plan (JVM string functions, no Python UDFs).

Parsing is the exporter's hot path (DESIGN.md, "Performance design"): a 10k-topic body is
~140k samples, beyond what a Python parser does in a check interval at fleet scale. So the
raw text becomes a DataFrame of lines, one scan (one task) per body, and every step below
is a Catalyst expression.

What the parse does not care about, because real bodies have it: several expositions
concatenated (a TYPE line twice, a family split apart, samples with no TYPE line), HELP and
TYPE lines at all (comments are dropped unread), trailing commas and spaces in label sets,
empty label values (= label absent, as in Prometheus), `NaN`, `±Inf`, Java's `-Infinity`,
integers without a decimal point, millisecond timestamps.

A line that is not `name[{labels}] value [timestamp]` is skipped and counted, never fatal
(`MalformedReason`); so is a kept sample that names a label twice, or whose short topic
name has no namespace to complete it.
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

FAMILIES: frozenset[str] = frozenset(SUBSCRIPTION_FAMILIES) | frozenset(NAMESPACE_FAMILIES)

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
_LABEL_SET = rf"\{{[ \t]*(?:{_PAIR}(?:[ \t]*,[ \t]*{_PAIR})*+[ \t]*,?[ \t]*)?\}}"
_VALUE = (
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf(?:inity)?))"
    r"|(?i:nan)"
)
_TIMESTAMP = r"-?[0-9]+"
SAMPLE_LINE = (
    rf"^[ \t]*{_NAME}(?:[ \t]*{_LABEL_SET}[ \t]*|[ \t]+)(?:{_VALUE})"
    rf"(?:[ \t]+{_TIMESTAMP})?[ \t]*$"
)
_SKIPPED_LINE = r"^[ \t]*(?:#.*)?$"  # comments (HELP, TYPE, other) and blank lines
_LEADING_NAME = r"^[ \t]*([^ \t{]+)"
_PAIR_GROUPS = rf'[ \t]*({_LABEL_NAME})[ \t]*=[ \t]*"((?:[^"\\]++|\\.)*+)"[ \t]*,?[ \t]*'
_KV, _END = "\u0001", "\u0002"  # separators of the normalised label set
_SENTINELS = "[\u0001\u0002]"
_PARTITION_SUFFIX = r"-partition-[0-9]+$"


def read_bodies(spark: SparkSession, bodies: Sequence[BrokerBody]) -> DataFrame:
    """(source, line) for every line of every body. One scan per spool file, so each body
    is its own task (and a body larger than `spark.sql.files.maxPartitionBytes` is split
    on line boundaries). The source is attached per file, never inferred from the text."""
    if not bodies:
        raise ValueError("read_bodies: no bodies")
    scans = [
        spark.read.text(os.path.abspath(b.path)).select(
            F.lit(b.source).alias("source"), F.col("value").alias("line"))
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


def _token(tokens: Column, index: int) -> Column:
    """The `index`-th (1-based) token, null past the end (a truncated line)."""
    return F.try_element_at(tokens, F.lit(index))


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

    Kept: samples of `families` that describe a topic, subscription or namespace;
    broker-wide samples, per-consumer samples (`consumer_name`/`consumer_id`) and
    replication samples (`remote_cluster` other than "local") are left out, not counted.
    """
    wanted = sorted(set(families))
    data = lines.filter(~F.col("line").rlike(_SKIPPED_LINE))
    data = data.select(
        "source",
        "line",
        F.regexp_extract("line", _LEADING_NAME, 1).alias("name"),
        F.col("line").rlike(SAMPLE_LINE).alias("ok"),
    )
    data = data.filter(~F.col("ok") | F.col("name").isin(wanted))

    line = F.col("line")
    data = data.select(
        "source", "name", "ok", line,
        F.substring_index(line, "}", -1).alias("tail"),  # after the labels; all if none
        F.instr(line, "{").alias("open_at"),
    )
    tail, open_at = F.col("tail"), F.col("open_at")
    has_labels = open_at > 0
    data = data.select(
        "source", "name", "ok", has_labels.alias("has_labels"),
        F.when(has_labels, line.substr(open_at + 1, F.length(line) - F.length(tail) - open_at - 1))
        .alias("label_text"),
        F.split(F.btrim(tail, F.lit(" \t")), r"[ \t]+").alias("tokens"),
    )
    has_labels, label_text, tokens = F.col("has_labels"), F.col("label_text"), F.col("tokens")
    # Each `name="value"` pair becomes name<KV>value<END>, then one str_to_map: a single
    # regex pass (regexp_extract_all is ten times slower here). A value holding one of the
    # two control characters cannot be told apart: such a line counts as malformed.
    data = data.select(
        "source", "name", "has_labels",
        (F.col("ok") & ~label_text.rlike(_SENTINELS)).alias("ok"),
        F.regexp_replace(label_text, _PAIR_GROUPS, f"$1{_KV}$2{_END}").alias("pairs"),
        F.when(has_labels, _token(tokens, 1)).otherwise(_token(tokens, 2)).alias("value_text"),
        F.when(has_labels, _token(tokens, 2)).otherwise(_token(tokens, 3)).alias("timestamp_text"),
    )
    pairs = F.col("pairs")
    data = data.select(
        "source", "name", "ok", "value_text", "timestamp_text",
        F.when(F.col("ok") & has_labels, F.str_to_map(pairs, F.lit(_END), F.lit(_KV)))
        .alias("labels"),
        (F.length(pairs) - F.length(F.replace(pairs, F.lit(_END), F.lit("")))).alias("n_pairs"),
    )
    # The map has one entry per distinct name plus "" (after the last <END>).
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
