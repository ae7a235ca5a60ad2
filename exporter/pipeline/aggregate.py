"""Samples → per-entity Aggregates, in the same Spark plan as the parse.

The parsed samples are cached once and every table below is derived from them, so each
body is read and parsed exactly once per cycle. Rules (schemas and units: model.py):

- a topic reported by two brokers keeps one report (largest msg_in_total, ties to the
  smaller source) and only that broker's subscriptions of it: never double-counted;
- a namespace sums its topics per broker; a broker with topic-level metrics off
  contributes its own namespace-level series instead (Apache Pulsar prints one or the
  other, NamespaceStatsAggregator.generate); brokers are then summed;
- resource-group usage sums the namespaces bound to each group, a namespace binding
  beating its tenant's (PIP-82); publish = in counters, dispatch = out counters;
- a topic belongs to the namespace bundle holding its hash, Apache Pulsar's rule
  (`topic_hash`, `in_range`); the bundle table and the broker table (with the broker's
  `pulsar_lb_*` usage) come out of one Spark job, the one the broker table needed anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from exporter.config import MonitoringClass, ResourceGroup
from exporter.pipeline.model import (
    BROKERS,
    BUNDLES,
    FULL_BUNDLE,
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
    BROKER_FAMILIES,
    NAMESPACE_FAMILIES,
    SUBSCRIPTION_FAMILIES,
    TOPIC_FAMILIES,
    parse,
)
from exporter.sources.model import BrokerBody, BundleOwnership

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
_BUNDLE_VALUES = ("producers", "consumers", "rate_in", "rate_out", "throughput_in",
                  "throughput_out")
_USAGE_COLUMNS = tuple(BROKER_FAMILIES.values())
# Pulsar's LAST_BOUNDARY: the bundle ending there includes it (NamespaceBundles).
_LAST_BOUNDARY = 0xFFFFFFFF
_RANGE = re.compile(r"0x([0-9a-fA-F]{1,8})_0x([0-9a-fA-F]{1,8})")


def aggregate(
    spark: SparkSession,
    bodies: Sequence[BrokerBody],
    resource_groups: Mapping[str, ResourceGroup],
    bundles: Iterable[BundleOwnership] = (),
) -> Aggregates:
    """Parse `bodies` and build every table of one cycle. A body whose spool file is gone
    is left out and named in `Aggregates.unreadable`, never fatal. `bundles` (the admin
    snapshot's, owners unused here) give the namespaces' bundle boundaries; without them
    every namespace is one bundle (`FULL_BUNDLE`)."""
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
        shares = _bundle_shares(spark, topics, per_source, bundle_ranges(bundles))
        brokers, bundle_table = _load_tables(shares, _broker_usage(good), sources)
        return Aggregates(
            topics=_to_table(topics, TOPICS),
            subscriptions=_to_table(owned, SUBSCRIPTIONS),
            namespaces=_to_table(namespaces.orderBy("namespace"), NAMESPACES),
            resource_groups=_resource_groups(namespaces, groups),
            brokers=brokers,
            malformed=_malformed(samples, sources),
            unreadable=unreadable,
            bundles=bundle_table,
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
        has_topics.alias("topic_level"),  # False: the broker's namespace-level series
        *[F.when(has_topics, F.col(f"t_{n}")).otherwise(F.col(f"n_{n}")).alias(n)
          for n in _VALUE_COLUMNS],
    )


def _namespaces(per_source: DataFrame) -> DataFrame:
    return per_source.groupBy("namespace").agg(
        F.sum("topics").cast("long").alias("topics"),
        *[F.sum(name).alias(name) for name in _VALUE_COLUMNS],
    )


# --- bundles and brokers (load verdicts) ---------------------------------------------------
def topic_hash(topic: Column) -> Column:
    """Apache Pulsar's bundle key of a topic: the CRC-32 (java.util.zip.CRC32, which Guava's
    `Hashing.crc32()` wraps) of the UTF-8 bytes of the full topic name, unsigned 32-bit.
    NamespaceService builds its NamespaceBundleFactory with `Hashing.crc32()`, and both
    `NamespaceBundles.findBundle` and the 3.x `ConsistentHashingTopicBundleAssigner` hash
    `TopicName.toString()`: `persistent://tenant/ns/topic`, with `-partition-N` for a
    partition, so the partitions of one topic are placed independently."""
    return F.crc32(F.encode(topic, "UTF-8"))


def in_range(key: Column, lower: Column, upper: Column) -> Column:
    """`key` in [lower, upper), closed at the top for the range ending at 0xffffffff: the
    last bundle of a namespace includes LAST_BOUNDARY (NamespaceBundles, and
    NamespaceBundleFactory.getBundle for a range string)."""
    return (key >= lower) & ((key < upper) | ((upper == _LAST_BOUNDARY) & (key == upper)))


def parse_range(text: str) -> tuple[int, int] | None:
    """`0x00000000_0x40000000` → (lower, upper); None when it is not a non-empty range."""
    match = _RANGE.fullmatch(text)
    if match is None:
        return None
    lower, upper = int(match[1], 16), int(match[2], 16)
    return (lower, upper) if lower < upper else None


def bundle_ranges(bundles: Iterable[BundleOwnership]) -> dict[str, list[tuple[int, int, str]]]:
    """namespace → its bundles as (lower, upper, range name), by lower bound. A namespace
    whose ranges do not parse or overlap is left out (its topics fall in FULL_BUNDLE): a
    topic must never land in two bundles. The names are kept as the admin REST spells them,
    so they match `BundleOwnership.bundle`."""
    listed: dict[str, list[tuple[int, int, str]]] = {}
    broken: set[str] = set()
    for b in bundles:
        bounds = parse_range(b.bundle)
        if bounds is None:
            broken.add(b.namespace)
        else:
            listed.setdefault(b.namespace, []).append((*bounds, b.bundle))
    out = {}
    for namespace, ranges in sorted(listed.items()):
        ranges = sorted(set(ranges))
        disjoint = all(a[1] <= b[0] for a, b in pairwise(ranges))
        if namespace not in broken and disjoint:
            out[namespace] = ranges
    return out


def _bundle_shares(spark: SparkSession, topics: DataFrame, per_source: DataFrame,
                   ranges: Mapping[str, Sequence[tuple[int, int, str]]]) -> DataFrame:
    """(source, namespace, bundle): sums over the source's topics in the bundle, plus one
    FULL_BUNDLE row per namespace a source reported only namespace-level series for (its
    topics cannot be placed). The ranges are a broadcast table joined on namespace."""
    if ranges:
        table = spark.createDataFrame(
            [(ns, lo, hi, name) for ns, rs in ranges.items() for lo, hi, name in rs],
            "r_namespace string, r_lower long, r_upper long, r_bundle string")
        placed = topics.withColumn("_hash", topic_hash(F.col("topic"))).join(
            F.broadcast(table),
            (F.col("namespace") == F.col("r_namespace"))
            & in_range(F.col("_hash"), F.col("r_lower"), F.col("r_upper")),
            "left",
        ).withColumn("bundle", F.coalesce(F.col("r_bundle"), F.lit(FULL_BUNDLE)))
    else:
        placed = topics.withColumn("bundle", F.lit(FULL_BUNDLE))
    from_topics = placed.filter(F.col("namespace").isNotNull()).groupBy(
        "source", "namespace", "bundle").agg(
        F.count(F.lit(1)).cast("long").alias("topics"),
        F.max("cluster").alias("cluster"),
        *[F.sum(n).alias(n) for n in _BUNDLE_VALUES],
    )
    namespace_level = per_source.filter(~F.col("topic_level")).select(
        "source", "namespace", F.lit(FULL_BUNDLE).alias("bundle"), "topics", "cluster",
        *_BUNDLE_VALUES)
    return from_topics.unionByName(namespace_level)


def _broker_usage(samples: DataFrame) -> DataFrame:
    """(source, cluster, *_percent) from the broker-wide `pulsar_lb_*_usage` gauges."""
    usage = _pivot(samples, Level.BROKER, ["source"], BROKER_FAMILIES)
    return usage.select("source", "cluster", *_USAGE_COLUMNS)


def _load_tables(shares: DataFrame, usage: DataFrame, sources: Sequence[str],
                 ) -> tuple[pa.Table, pa.Table]:
    """(BROKERS, BUNDLES) from one job: the bundle shares and the usage rows (bundle null)
    are collected as one union, and each broker's totals are summed from its shares."""
    rows = shares.unionByName(usage, allowMissingColumns=True).toArrow().to_pylist()
    zero = {"cluster": None, "topics": 0, "sessions": 0.0, **dict.fromkeys(_BROKER_RATES, 0.0),
            **dict.fromkeys(_USAGE_COLUMNS)}
    brokers = {s: {"source": s, **zero} for s in sources}
    bundle_rows = []
    for row in rows:
        broker = brokers.get(row["source"])
        if broker is None:
            continue
        if row["cluster"] is not None and (broker["cluster"] is None
                                           or row["cluster"] > broker["cluster"]):
            broker["cluster"] = row["cluster"]
        if row["bundle"] is None:
            broker.update({c: row[c] for c in _USAGE_COLUMNS})
            continue
        bundle_rows.append(row)
        broker["topics"] += row["topics"]
        broker["sessions"] += (row["producers"] or 0.0) + (row["consumers"] or 0.0)
        for rate in _BROKER_RATES:
            broker[rate] += row[rate] or 0.0
    bundle_rows.sort(key=lambda r: (r["source"], r["namespace"], r["bundle"]))
    return (
        pa.Table.from_pylist([brokers[s] for s in sorted(sources)], schema=BROKERS),
        pa.Table.from_pylist(bundle_rows, schema=BUNDLES),
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
