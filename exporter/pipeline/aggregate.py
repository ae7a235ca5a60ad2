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
import dataclasses
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
_BROKER_RATES = ("rate_in", "rate_out", "throughput_in", "throughput_out")
_COUNTERS = ("msg_in_total", "bytes_in_total", "msg_out_total", "bytes_out_total")
# Pulsar's resource-group monitoring classes: publish counts what comes in, dispatch what
# goes out (PIP-82).
_CLASS_COUNTERS = (
    (MonitoringClass.DISPATCH, "msg_out_total", "bytes_out_total"),
    (MonitoringClass.PUBLISH, "msg_in_total", "bytes_in_total"),
)
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
            resource_groups=_resource_groups(namespaces, groups),
            brokers=_brokers(per_source, sources),
            malformed=_malformed(samples, sources),
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
        F.max("cluster").alias("s_cluster"),
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
        F.coalesce("cluster", "s_cluster").alias("cluster"),  # kept for the broker table
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
        F.max("cluster").alias("t_cluster"),
        *[F.sum(name).alias(f"t_{name}") for name in _VALUE_COLUMNS],
    )
    reported = _pivot(samples, Level.NAMESPACE, ["source", "namespace"], NAMESPACE_FAMILIES)
    reported = reported.select(
        "source", "namespace",
        F.col("topics").try_cast("long").alias("n_topics"),
        F.col("cluster").alias("n_cluster"),
        *[F.col(name).alias(f"n_{name}") for name in _VALUE_COLUMNS],
    )
    joined = from_topics.join(reported, ["source", "namespace"], "full")
    has_topics = F.col("t_topics").isNotNull()
    return joined.filter(F.col("namespace").isNotNull()).select(
        "source", "namespace",
        F.coalesce("t_topics", "n_topics", F.lit(0)).cast("long").alias("topics"),
        F.coalesce("t_cluster", "n_cluster").alias("cluster"),
        *[F.when(has_topics, F.col(f"t_{n}")).otherwise(F.col(f"n_{n}")).alias(n)
          for n in _VALUE_COLUMNS],
    )


def _namespaces(per_source: DataFrame) -> DataFrame:
    return per_source.groupBy("namespace").agg(
        F.sum("topics").cast("long").alias("topics"),
        *[F.sum(name).alias(name) for name in _VALUE_COLUMNS],
    )


def _brokers(per_source: DataFrame, sources: Sequence[str]) -> pa.Table:
    totals = per_source.groupBy("source").agg(
        F.max("cluster").alias("cluster"),
        F.sum("topics").cast("long").alias("topics"),
        F.sum(F.coalesce("producers", F.lit(0.0)) + F.coalesce("consumers", F.lit(0.0)))
        .alias("sessions"),
        *[F.sum(n).alias(n) for n in _BROKER_RATES],
    )
    rows = {r["source"]: r for r in _to_table(totals, BROKERS).to_pylist()}
    zero = {"cluster": None, "topics": 0, "sessions": 0.0, **dict.fromkeys(_BROKER_RATES, 0.0)}
    filled = [
        {k: (v if v is not None else zero.get(k)) for k, v in rows[s].items()}
        if s in rows else {"source": s, **zero}
        for s in sorted(sources)
    ]
    return pa.Table.from_pylist(filled, schema=BROKERS)


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


def _lookup(mapping: Mapping[str, str], key: Column) -> Column:
    if not mapping:
        return F.lit(None).cast("string")
    literal = F.create_map(*[F.lit(x) for kv in sorted(mapping.items()) for x in kv])
    return F.try_element_at(literal, key)


def _resource_groups(namespaces: DataFrame, groups: Sequence[ResourceGroup]) -> pa.Table:
    """Usage per group × class. The bindings are literal maps in the plan (no join)."""
    usage: dict[str, dict] = {}
    if groups:
        by_namespace, by_tenant = bindings(groups)
        tenant = F.substring_index("namespace", "/", 1)
        bound = namespaces.withColumn(
            "resource_group",
            F.coalesce(_lookup(by_namespace, F.col("namespace")), _lookup(by_tenant, tenant)),
        ).filter(F.col("resource_group").isNotNull())
        totals = bound.groupBy("resource_group").agg(
            F.count(F.lit(1)).alias("namespaces"),
            F.sum("topics").alias("topics"),
            *[F.sum(n).alias(n) for n in _COUNTERS],
        )
        usage = {r["resource_group"]: r for r in totals.toArrow().to_pylist()}
    return _group_rows(groups, usage)


def _group_rows(groups: Sequence[ResourceGroup], usage: Mapping[str, Mapping]) -> pa.Table:
    """Both classes of every configured group; zeros for a group nothing bound was seen."""
    rows = []
    for group in groups:
        seen = usage.get(group.name, {})
        for cls, messages, byte_count in _CLASS_COUNTERS:
            rows.append({
                "resource_group": group.name,
                "monitoring_class": cls.value,
                "messages_total": seen.get(messages) or 0.0,
                "bytes_total": seen.get(byte_count) or 0.0,
                "namespaces": seen.get("namespaces") or 0,
                "topics": seen.get("topics") or 0,
            })
    return pa.Table.from_pylist(rows, schema=RESOURCE_GROUPS)


def _malformed(samples: DataFrame, sources: Sequence[str]) -> pa.Table:
    counts = (samples.filter(F.col("reason").isNotNull())
              .groupBy("source", "reason").agg(F.count(F.lit(1)).alias("lines")))
    seen = {(r["source"], r["reason"]): r["lines"] for r in counts.toArrow().to_pylist()}
    rows = [
        {"source": s, "reason": r.value, "lines": seen.get((s, r.value), 0)}
        for s in sorted(sources) for r in sorted(MalformedReason, key=lambda r: r.value)
    ]
    return pa.Table.from_pylist(rows, schema=MALFORMED)


def _without_data(unreadable: tuple[str, ...], groups: Sequence[ResourceGroup]) -> Aggregates:
    """Nothing readable: every configured group at zero usage, every other table empty."""
    empty = Aggregates.empty(unreadable)
    return dataclasses.replace(empty, resource_groups=_group_rows(groups, {}))
