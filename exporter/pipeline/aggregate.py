"""Samples → per-entity Aggregates, in the same Spark plan as the parse.

The parsed samples are cached once and every table below is derived from them, so each
body is read and parsed exactly once per cycle. Rules (schemas and units: model.py):

- a topic reported by two brokers keeps one report (largest msg_in_total, ties to the
  smaller source) and only that broker's subscriptions of it: never double-counted;
- a namespace sums its topics per broker; a broker with topic-level metrics off
  contributes its own namespace-level series instead (Apache Pulsar prints one or the
  other, NamespaceStatsAggregator.generate); brokers are then summed;
- resource-group usage sums the namespaces bound to each group, a namespace binding
  beating its tenant's (PIP-82); publish = in counters, dispatch = out counters.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from exporter.config import MonitoringClass, ResourceGroup
from exporter.pipeline.model import (
    BROKERS,
    MALFORMED,
    NAMESPACES,
    RESOURCE_GROUPS,
    SUBSCRIPTIONS,
    TOPICS,
    Aggregates,
    Level,
    MalformedReason,
)
from exporter.pipeline.parse import (
    NAMESPACE_FAMILIES,
    SUBSCRIPTION_FAMILIES,
    TOPIC_FAMILIES,
    parse,
)
from exporter.sources.model import BrokerBody

# Apache Pulsar reports the subscription timestamps in epoch milliseconds, pulsar-lite in
# seconds; 1e11 s is the year 5138, 1e11 ms is 1973: above it, a value is milliseconds.
_MILLIS_ABOVE = 1e11
_TIMESTAMP_COLUMNS = ("last_acked_seconds", "last_consumed_seconds")
# Topic columns that fall back to the subscriptions' sum (or count) when absent.
_FROM_SUBSCRIPTIONS = {
    "msg_out_total": "msg_out_total",
    "bytes_out_total": "bytes_out_total",
    "msg_backlog": "backlog_messages",
    "consumers": "consumers",
    "subscriptions": None,  # their count
    "rate_out": "rate_out",
    "throughput_out": "throughput_out",
}
_VALUE_COLUMNS = [f.name for f in TOPICS if f.name not in ("topic", "namespace", "source")]


def aggregate(
    spark: SparkSession,
    bodies: Sequence[BrokerBody],
    resource_groups: Mapping[str, ResourceGroup],
) -> Aggregates:
    """Parse `bodies` and build every table of one cycle. A body whose spool file is gone
    is left out and named in `Aggregates.unreadable`, never fatal."""
    readable = [b for b in bodies if os.path.isfile(b.path)]
    unreadable = tuple(b.source for b in bodies if not os.path.isfile(b.path))
    groups = sorted(resource_groups.values(), key=lambda g: g.name)
    if not readable:
        return _without_data(unreadable, groups)
    sources = sorted({b.source for b in readable})

    held: list[DataFrame] = []

    def hold(df: DataFrame) -> DataFrame:
        """Materialise `df` once and cut its lineage: later jobs start from its blocks,
        and their plans stay small (re-analysing the parse plan costs seconds)."""
        held.append(df.localCheckpoint(eager=True))
        return held[-1]

    try:
        samples = hold(parse(spark, readable))
        good = samples.filter(F.col("reason").isNull())
        subscriptions = hold(_subscriptions(good))
        topics = hold(_dedup(_topics(good, subscriptions)))
        owned = subscriptions.join(topics.select("source", "topic"), ["source", "topic"],
                                   "left_semi")
        per_source = hold(_namespaces_per_source(good, topics))
        namespaces = _namespaces(per_source)
        return Aggregates(
            topics=_to_table(topics, TOPICS),
            subscriptions=_to_table(owned, SUBSCRIPTIONS),
            namespaces=_to_table(namespaces.orderBy("namespace"), NAMESPACES),
            resource_groups=_to_table(_resource_groups(spark, namespaces, groups),
                                      RESOURCE_GROUPS),
            brokers=_to_table(_brokers(spark, good, per_source, sources), BROKERS),
            malformed=_to_table(_malformed(spark, samples, sources), MALFORMED),
            unreadable=unreadable,
        )
    finally:
        for df in held:
            _release(df)


def _release(checkpointed: DataFrame) -> None:
    """Free a local checkpoint's blocks now rather than at the JVM's next periodic GC
    (30 min by default): there is no public API, so reach the checkpointed RDD itself."""
    with contextlib.suppress(Exception):
        checkpointed._jdf.queryExecution().logical().rdd().unpersist(False)


def _to_table(df: DataFrame, schema: pa.Schema) -> pa.Table:
    return df.select(*schema.names).toArrow().cast(schema)


def _pivot(samples: DataFrame, level: Level, keys: Sequence[str],
           families: Mapping[str, str]) -> DataFrame:
    """One row per entity, one column per family (max of duplicates; null if absent)."""
    rows = samples.filter(F.col("level") == level.value)
    carried = [F.max(c).alias(c) for c in ("namespace", "cluster") if c not in keys]
    return rows.groupBy(*keys).agg(
        *carried,
        *[F.max(F.when(F.col("name") == family, F.col("value"))).alias(column)
          for family, column in families.items()],
    )


def _seconds(value: Column) -> Column:
    """A broker timestamp as unix seconds; null for 0/negative (never) or NaN."""
    return (
        F.when(value.isNull() | F.isnan(value) | (value <= 0), F.lit(None).cast("double"))
        .when(value > _MILLIS_ABOVE, value / 1000.0)
        .otherwise(value)
    )


def _subscriptions(samples: DataFrame) -> DataFrame:
    subs = _pivot(samples, Level.SUBSCRIPTION, ["source", "topic", "subscription"],
                  SUBSCRIPTION_FAMILIES)
    for column in _TIMESTAMP_COLUMNS:
        subs = subs.withColumn(column, _seconds(F.col(column)))
    return subs


def _topics(samples: DataFrame, subscriptions: DataFrame) -> DataFrame:
    own = _pivot(samples, Level.TOPIC, ["source", "topic"], TOPIC_FAMILIES)
    derived = subscriptions.groupBy("source", "topic").agg(
        F.max("namespace").alias("s_namespace"),
        *[
            (F.count(F.lit(1)).cast("double") if source is None else F.sum(source))
            .alias(f"s_{name}")
            for name, source in _FROM_SUBSCRIPTIONS.items()
        ],
    )
    joined = own.join(derived, ["source", "topic"], "full")
    return joined.select(
        "topic",
        F.coalesce("namespace", "s_namespace").alias("namespace"),
        "source",
        *[
            (F.coalesce(name, f"s_{name}") if name in _FROM_SUBSCRIPTIONS else F.col(name))
            .alias(name)
            for name in _VALUE_COLUMNS
        ],
    )


def _dedup(topics: DataFrame) -> DataFrame:
    """One report per topic: the largest msg_in_total wins, then the smaller source."""
    order = Window.partitionBy("topic").orderBy(
        F.col("msg_in_total").desc_nulls_last(), F.col("source").asc())
    return (topics.withColumn("_rank", F.row_number().over(order))
            .filter(F.col("_rank") == 1).drop("_rank"))


def _namespaces_per_source(samples: DataFrame, topics: DataFrame) -> DataFrame:
    """(source, namespace): sums over the broker's topics, or, where it reported no topic
    of the namespace, its namespace-level series."""
    from_topics = topics.groupBy("source", "namespace").agg(
        F.count(F.lit(1)).alias("t_topics"),
        *[F.sum(name).alias(f"t_{name}") for name in _VALUE_COLUMNS],
    )
    reported = _pivot(samples, Level.NAMESPACE, ["source", "namespace"], NAMESPACE_FAMILIES)
    reported = reported.select(
        "source", "namespace",
        F.col("topics").try_cast("long").alias("n_topics"),
        *[F.col(name).alias(f"n_{name}") for name in _VALUE_COLUMNS],
    )
    joined = from_topics.join(reported, ["source", "namespace"], "full")
    has_topics = F.col("t_topics").isNotNull()
    return joined.filter(F.col("namespace").isNotNull()).select(
        "source", "namespace",
        F.coalesce("t_topics", "n_topics", F.lit(0)).cast("long").alias("topics"),
        *[F.when(has_topics, F.col(f"t_{n}")).otherwise(F.col(f"n_{n}")).alias(n)
          for n in _VALUE_COLUMNS],
    )


def _namespaces(per_source: DataFrame) -> DataFrame:
    return per_source.groupBy("namespace").agg(
        F.sum("topics").cast("long").alias("topics"),
        *[F.sum(name).alias(name) for name in _VALUE_COLUMNS],
    )


def _brokers(spark: SparkSession, samples: DataFrame, per_source: DataFrame,
             sources: Iterable[str]) -> DataFrame:
    totals = per_source.groupBy("source").agg(
        F.sum("topics").alias("topics"),
        F.sum(F.coalesce("producers", F.lit(0.0)) + F.coalesce("consumers", F.lit(0.0)))
        .alias("sessions"),
        *[F.sum(n).alias(n) for n in ("rate_in", "rate_out", "throughput_in", "throughput_out")],
    )
    clusters = samples.groupBy("source").agg(F.max("cluster").alias("cluster"))
    every = _strings(spark, ["source"], [(s,) for s in sources])
    zero = F.lit(0.0)
    return (
        every.join(totals, "source", "left").join(clusters, "source", "left")
        .select(
            "source", "cluster",
            F.coalesce("topics", F.lit(0)).cast("long").alias("topics"),
            *[F.coalesce(n, zero).alias(n) for n in
              ("sessions", "rate_in", "rate_out", "throughput_in", "throughput_out")],
        )
        .orderBy("source")
    )


def bindings(groups: Iterable[ResourceGroup]) -> tuple[dict[str, str], dict[str, str]]:
    """(namespace → group, tenant → group). Should a namespace or tenant be named by two
    groups (config validation should refuse it), the first group by name wins."""
    namespaces: dict[str, str] = {}
    tenants: dict[str, str] = {}
    for group in sorted(groups, key=lambda g: g.name):
        for ns in group.namespaces:
            namespaces.setdefault(ns, group.name)
        for tenant in group.tenants:
            tenants.setdefault(tenant, group.name)
    return namespaces, tenants


def _resource_groups(spark: SparkSession, namespaces: DataFrame,
                     groups: Sequence[ResourceGroup]) -> DataFrame:
    if not groups:
        return spark.range(0).select(*[
            F.lit(None).cast({"string": "string", "double": "double", "int64": "long"}[
                str(f.type)]).alias(f.name) for f in RESOURCE_GROUPS])
    by_namespace, by_tenant = bindings(groups)
    ns_df = _strings(spark, ["namespace", "ns_group"], sorted(by_namespace.items()))
    tenant_df = _strings(spark, ["tenant", "tenant_group"], sorted(by_tenant.items()))
    bound = (
        namespaces.withColumn("tenant", F.substring_index("namespace", "/", 1))
        .join(F.broadcast(ns_df), "namespace", "left")
        .join(F.broadcast(tenant_df), "tenant", "left")
        .withColumn("resource_group", F.coalesce("ns_group", "tenant_group"))
        .filter(F.col("resource_group").isNotNull())
    )
    usage = bound.groupBy("resource_group").agg(
        F.count(F.lit(1)).alias("namespaces"),
        F.sum("topics").alias("topics"),
        *[F.sum(n).alias(n) for n in
          ("msg_in_total", "bytes_in_total", "msg_out_total", "bytes_out_total")],
    )
    every = _strings(spark, ["resource_group"], [(g.name,) for g in groups])
    usage = every.join(usage, "resource_group", "left")
    zero = F.lit(0.0)

    def per_class(cls: MonitoringClass, messages: str, byte_count: str) -> DataFrame:
        return usage.select(
            "resource_group",
            F.lit(cls.value).alias("monitoring_class"),
            F.coalesce(messages, zero).alias("messages_total"),
            F.coalesce(byte_count, zero).alias("bytes_total"),
            F.coalesce("namespaces", F.lit(0)).cast("long").alias("namespaces"),
            F.coalesce("topics", F.lit(0)).cast("long").alias("topics"),
        )

    return (
        per_class(MonitoringClass.PUBLISH, "msg_in_total", "bytes_in_total")
        .unionByName(per_class(MonitoringClass.DISPATCH, "msg_out_total", "bytes_out_total"))
        .orderBy("resource_group", "monitoring_class")
    )


def _malformed(spark: SparkSession, samples: DataFrame, sources: Iterable[str]) -> DataFrame:
    counts = samples.filter(F.col("reason").isNotNull()).groupBy("source", "reason").agg(
        F.count(F.lit(1)).alias("n"))
    grid = _strings(spark, ["source", "reason"],
                    [(s, r.value) for s in sources for r in MalformedReason])
    return (
        grid.join(counts, ["source", "reason"], "left")
        .select("source", "reason", F.coalesce("n", F.lit(0)).cast("long").alias("lines"))
        .orderBy("source", "reason")
    )


def _strings(spark: SparkSession, columns: Sequence[str],
             rows: Sequence[tuple[str, ...]]) -> DataFrame:
    """A small table of string literals, built in the JVM (createDataFrame from Python
    rows would start Python workers, seconds on a busy machine)."""
    if not rows:
        return spark.range(0).select(*[F.lit(None).cast("string").alias(c) for c in columns])
    structs = [F.struct(*[F.lit(v).alias(c) for c, v in zip(columns, row, strict=True)])
               for row in rows]
    return spark.range(1).select(F.inline(F.array(*structs)))


def _without_data(unreadable: tuple[str, ...], groups: Sequence[ResourceGroup]) -> Aggregates:
    """Nothing readable: every configured group at zero usage, every table else empty."""
    rows = [
        {"resource_group": g.name, "monitoring_class": c.value, "messages_total": 0.0,
         "bytes_total": 0.0, "namespaces": 0, "topics": 0}
        for g in groups for c in (MonitoringClass.DISPATCH, MonitoringClass.PUBLISH)
    ]
    empty = Aggregates.empty(unreadable)
    return Aggregates(
        subscriptions=empty.subscriptions, topics=empty.topics, namespaces=empty.namespaces,
        resource_groups=pa.Table.from_pylist(rows, schema=RESOURCE_GROUPS),
        brokers=empty.brokers, malformed=empty.malformed, unreadable=unreadable,
    )
