"""One broker's samples → its per-entity tables, inside the Spark task that fetched it.

Everything here needs only one body, so it runs where the body is, and what leaves the
executor is a few rows per entity instead of ~50 samples per topic. Samples are grouped
first on their raw labels (entities.py decides each label set's entity once, pivot.py
scatters the samples into one row per entity), and only then keyed: the full topic name,
its namespace and partition suffix are computed once per entity, not per sample.
What needs all brokers at once (a topic reported twice, namespace sums, bundles) is
`merge.py`'s, on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.config.settings import KEEP_ALL, TopicFilter
from exporter.pipeline import slices
from exporter.pipeline.aggregates import (
    LONG_BOUND,
    SOURCE_NAMESPACES,
    SOURCE_SUBSCRIPTIONS,
    SOURCE_TOPICS,
    SOURCE_USAGE,
    Level,
    MalformedReason,
)
from exporter.pipeline.entities import LEVELS, body_samples, entity_samples, unkeyed
from exporter.pipeline.otel import OTEL_TOPIC_FAMILIES
from exporter.pipeline.parse import (
    BROKER_FAMILIES,
    FAMILIES,
    NAMESPACE_FAMILIES,
    REPLICATION_COLUMNS,
    SUBSCRIPTION_FAMILIES,
    TOPIC_FAMILIES,
    Parsed,
    namespace_of,
    topic_key,
)
from exporter.pipeline.pivot import Samples, pivot
from exporter.sources.results import SourceHealth

# Topic columns that fall back to the subscriptions' sum (or count) when absent, as Apache
# Pulsar's NamespaceStatsAggregator derives them.
FROM_SUBSCRIPTIONS = {
    "msg_out_total": "msg_out_total",
    "bytes_out_total": "bytes_out_total",
    "msg_backlog": "backlog_messages",
    "consumers": "consumers",
    "subscriptions": None,  # their count
    "rate_out": "rate_out",
    "throughput_out": "throughput_out",
}
_TOPIC_COLUMNS = list(dict.fromkeys(TOPIC_FAMILIES.values()))
# Columns the broker counts in Java longs: messages, bytes, producers, consumers, topics.
_COUNT_COLUMNS = frozenset({
    "backlog_messages", "msg_in_total", "bytes_in_total", "msg_out_total",
    "bytes_out_total", "storage_size_bytes", "backlog_size_bytes", "msg_backlog", "producers",
    "consumers", "subscriptions", "topics"})
_COUNTS = np.isin(np.arange(len(FAMILIES)), [FAMILIES.index(f) for families in (
    SUBSCRIPTION_FAMILIES, TOPIC_FAMILIES, NAMESPACE_FAMILIES)
    for f, c in families.items() if c in _COUNT_COLUMNS])
_OTEL = np.isin(np.arange(len(FAMILIES)), [FAMILIES.index(f) for f in OTEL_TOPIC_FAMILIES])
_STARTED = FAMILIES.index("process_start_time_seconds")
_F = pa.float64()
_S = pa.string()
# A subscription as the task pivots it, before what leaves the task is cut to
# SOURCE_SUBSCRIPTIONS: every series of SUBSCRIPTION_FAMILIES, its namespace and cluster.
_EVERY_SERIES = pa.schema([("topic", _S), ("namespace", _S), ("subscription", _S),
                           *[(v, _F) for v in SUBSCRIPTION_FAMILIES.values()],
                           ("cluster", _S)])


@dataclass(frozen=True)
class SourceTables:
    """One broker body's entities (schemas in aggregates.py), before de-duplication."""

    subscriptions: pa.Table  # SOURCE_SUBSCRIPTIONS
    topics: pa.Table  # SOURCE_TOPICS
    namespaces: pa.Table  # SOURCE_NAMESPACES: the broker's own namespace-level series
    usage: pa.Table  # SOURCE_USAGE: one row (the pulsar_lb_* gauges, null when absent,
    # and whether the body is an OpenTelemetry exposition, no broker: see merge.py)
    malformed: Mapping[str, int]  # MalformedReason value → lines
    filtered: int = 0  # topics the config's `filters.topics` left out


@dataclass(frozen=True)
class BrokerData:
    """One cycle's broker side: the freshest tables of each broker (stale where its fetch
    failed), in configuration order, and every broker's health."""

    tables: tuple[tuple[str, SourceTables], ...]
    health: tuple[SourceHealth, ...]
    # Skipped lines by reason, of the bodies fetched this cycle (stale ones not again).
    malformed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # The bodies fetched this cycle, zstd-compressed, when the tasks were asked for them
    # (`run --record.dir`); the other brokers' tables are stale ones.
    bodies: Mapping[str, bytes] = field(default_factory=dict)
    # Topics in `tables` that no broker listed this cycle (pipeline/lastgood.py `stale`),
    # and how many of them are held (listed before by a broker that answered this cycle).
    stale: frozenset[str] = frozenset()
    held: int = 0


class BrokerSide(Protocol):
    """What a cycle needs from the brokers (tests pass a fake)."""

    def run(self) -> BrokerData: ...


def keep(topics: pa.Array | pa.ChunkedArray, rule: TopicFilter) -> pa.Array:
    """Which full topic names the filter keeps (a boolean mask; null names are kept, the
    merge reports them as unkeyed). Anchored at both ends, as Prometheus' relabelling."""
    def matches(patterns: tuple[str, ...]) -> pa.Array:
        pattern = "^(?:" + "|".join(f"(?:{p})" for p in patterns) + ")$"
        return pc.fill_null(pc.match_substring_regex(topics, pattern), False)

    mask = matches(rule.allow) if rule.allow else pc.is_valid(topics)
    if rule.deny:
        mask = pc.and_not(mask, matches(rule.deny))
    return pc.or_(mask, pc.is_null(topics))


def source_tables(parts: Sequence[Parsed], rule: TopicFilter = KEEP_ALL) -> SourceTables:
    """Every chunk of one body, parsed → that body's tables, topics outside `rule` left
    out before anything is derived from them."""
    samples = body_samples(parts)
    malformed = dict.fromkeys((r.value for r in MalformedReason), 0)
    for part in parts:
        for reason, lines in part.malformed.items():
            malformed[reason.value] += lines
    malformed[MalformedReason.UNKEYED_TOPIC.value] += unkeyed(samples)
    # OpenTelemetry only: every sample but the process start time (any exposition may
    # print that one) is of an OpenTelemetry family.
    rest = samples.family[samples.family != _STARTED]
    otel_only = len(rest) > 0 and bool(_OTEL[rest].all())
    samples, level = entity_samples(samples)
    samples, level, not_counts = _counts_only(samples, level)
    malformed[MalformedReason.NOT_A_COUNT.value] += not_counts

    def at(wanted: Level) -> Samples:
        return samples.where(level == LEVELS.index(wanted))

    every_series = _subscriptions(at(Level.SUBSCRIPTION))
    topics = _topics(at(Level.TOPIC), every_series)
    subscriptions = every_series.select(SOURCE_SUBSCRIPTIONS.names)
    filtered = 0
    if rule.active:
        subscriptions = subscriptions.filter(keep(subscriptions["topic"], rule))
        kept = topics.filter(keep(topics["topic"], rule))
        filtered, topics = topics.num_rows - kept.num_rows, kept
    return SourceTables(
        subscriptions=subscriptions,
        topics=topics,
        namespaces=_namespaces(at(Level.NAMESPACE)),
        usage=_usage(at(Level.BROKER), otel_only),
        malformed=malformed,
        filtered=filtered,
    )


def _counts_only(samples: Samples, level: np.ndarray) -> tuple[Samples, np.ndarray, int]:
    """Samples of count families (`_COUNT_COLUMNS`) whose value no Java long holds (NaN,
    ±Inf, beyond ±2^63) left out, and how many. The text format allows them anywhere, the
    broker never prints them for a count, and the engine reads counts as integers: one
    such backlog made every cycle's decisions fail, for every broker. Negative counts are
    kept: Pulsar has printed negative backlogs (apache/pulsar#5543, `msgBacklog` -2), and
    the engine reads them as none."""
    with np.errstate(invalid="ignore"):
        bad = _COUNTS[samples.family] & ~(np.abs(samples.value) < LONG_BOUND)
    count = int(bad.sum())
    return (samples.where(~bad), level[~bad], count) if count else (samples, level, 0)


def _pivot(samples: Samples, keys: Sequence[str], families: Mapping[str, str]) -> pa.Table:
    """pivot.pivot, its replication columns summed over remote clusters."""
    return pivot(samples, keys, families, REPLICATION_COLUMNS)


def _unsuffixed(name: str) -> str:
    for suffix in ("_max", "_sum"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _keyed(table: pa.Table, keys: Sequence[str], values: Sequence[str]) -> pa.Table:
    """Raw `topic`/`namespace`/`partition` labels → the full topic key and its namespace,
    then rows that name the same entity merged (max). Rows without a key are dropped
    (counted as unkeyed_topic already)."""
    key = topic_key(table["topic"], table["namespace"], table["partition"])
    namespace = table["namespace"]
    if namespace.null_count:  # Pulsar labels every topic series with it: rarely needed
        namespace = pc.coalesce(namespace, namespace_of(key))
    table = table.set_column(table.schema.get_field_index("topic"), "topic", key)
    table = table.set_column(table.schema.get_field_index("namespace"), "namespace", namespace)
    table = table.filter(key.is_valid())
    if _distinct(table, keys):  # nearly always: a broker prints an entity once
        return table.select(["namespace", "cluster", *values, *keys])
    grouped = table.group_by(list(keys), use_threads=False).aggregate(
        [(c, "max") for c in ("namespace", "cluster", *values)])
    return grouped.rename_columns([_unsuffixed(n) for n in grouped.column_names])


def _distinct(table: pa.Table, keys: Sequence[str]) -> bool:
    """Whether no two rows have the same keys, so that `_keyed` has nothing to merge: a
    hash of the keys alone, where merging aggregates every column too (docs/design.md,
    "Fetching and parsing bodies")."""
    if len(keys) == 1:
        return pc.count_distinct(table[keys[0]]).as_py() == table.num_rows
    return table.group_by(list(keys), use_threads=False).aggregate([]).num_rows == table.num_rows


def _subscriptions(samples: pa.Table) -> pa.Table:
    """Each subscription as `_EVERY_SERIES`: what its topic's row may be derived from
    (`_topics`)."""
    raw = _pivot(samples, ["topic", "namespace", "partition", "subscription"],
                 SUBSCRIPTION_FAMILIES)
    table = _keyed(raw, ["topic", "subscription"], list(SUBSCRIPTION_FAMILIES.values()))
    return _shaped(table, _EVERY_SERIES)


def _topics(samples: pa.Table, subscriptions: pa.Table) -> pa.Table:
    raw = _pivot(samples, ["topic", "namespace", "partition"], TOPIC_FAMILIES)
    own = _keyed(raw, ["topic"], _TOPIC_COLUMNS)
    derived = subscriptions.group_by("topic", use_threads=False).aggregate(
        [("namespace", "max"), ("cluster", "max"), ("subscription", "count"),
         *[(source, "sum") for source in FROM_SUBSCRIPTIONS.values() if source]])
    rename = {"namespace_max": "s_namespace", "cluster_max": "s_cluster",
              "subscription_count": "s_subscriptions"}
    for name, source in FROM_SUBSCRIPTIONS.items():
        if source:
            rename[f"{source}_sum"] = f"s_{name}"
    derived = derived.rename_columns([rename.get(n, n) for n in derived.column_names])
    joined = own.join(derived, "topic", join_type="full outer", use_threads=False)
    columns = {
        "topic": joined["topic"],
        "namespace": pc.coalesce(joined["namespace"], joined["s_namespace"]),
        "cluster": pc.coalesce(joined["cluster"], joined["s_cluster"]),
    }
    for name in _TOPIC_COLUMNS:
        if name in FROM_SUBSCRIPTIONS:
            fallback = joined[f"s_{name}"].cast(_F)
            columns[name] = pc.coalesce(joined[name], fallback)
        else:
            columns[name] = joined[name]
    table = pa.table(columns)
    table = table.append_column("topic_hash", slices.crc32(table["topic"].combine_chunks()))
    return _shaped(table.sort_by("topic"), SOURCE_TOPICS)


def _namespaces(samples: pa.Table) -> pa.Table:
    table = _pivot(samples, ["namespace"], NAMESPACE_FAMILIES)
    return _shaped(table.filter(table["namespace"].is_valid()), SOURCE_NAMESPACES)


def _usage(samples: pa.Table, otel_only: bool) -> pa.Table:
    table = _pivot(samples, [], BROKER_FAMILIES)
    if table.num_rows == 0:
        table = pa.table({"cluster": pa.nulls(1, _S)})
    return _shaped(table.append_column("otel_only", pa.array([otel_only])), SOURCE_USAGE)


def _shaped(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns in `schema`'s order and types (absent ones null), one chunk."""
    n = table.num_rows
    return pa.table(
        [table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
         for f in schema], schema=schema).combine_chunks()
