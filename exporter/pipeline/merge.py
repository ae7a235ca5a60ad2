"""Every broker's tables → one cycle's Aggregates, on the driver, in Arrow.

What arrives here is per entity already (the Spark tasks parsed and grouped each body,
tables.py), so this is the only step that sees all brokers at once, and it is small:
rows per topic, not per sample. Rules (schemas and units: aggregates.py):

- a topic reported by two brokers keeps one report (a freshly fetched body's before a
  stale one's, then the largest msg_in_total, ties to the smaller source) and only that
  broker's subscriptions of it: never double-counted. Fresh first: a dead broker's last
  good body still lists the topics its survivor has loaded since, whose counters restarted
  at 0 there, so "largest counter" alone would keep the dead broker's numbers for good;
- a body that printed only OpenTelemetry families (`SOURCE_USAGE.otel_only`: a broker's
  second exposition, listed as one more broker URL; pipeline/otel.py) is no broker: its
  report of a topic is kept only where no classic body reported the topic, and it counts
  in no namespace, bundle or broker row. So the two bodies of one broker never count a
  topic twice, even when its classic exposition has topic-level series off (namespace
  series there, the topics' ages from OpenTelemetry);
- a namespace sums its topics per broker; a broker with topic-level metrics off
  contributes its own namespace-level series instead (Apache Pulsar prints one or the
  other, NamespaceStatsAggregator.generate); brokers are then summed;
- resource-group usage sums the namespaces bound to each group, a namespace binding
  beating its tenant's (PIP-82); publish = in counters, dispatch = out counters;
- a topic belongs to the namespace bundle holding the CRC-32 of its full name, Apache
  Pulsar's rule (`in_range`); the broker table adds the broker's `pulsar_lb_*` usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.config.settings import MonitoringClass, ResourceGroup
from exporter.pipeline.aggregates import (
    BROKERS,
    BUNDLES,
    FULL_BUNDLE,
    MALFORMED,
    NAMESPACES,
    RESOURCE_GROUPS,
    SUBSCRIPTIONS,
    TOPICS,
    Aggregates,
    MalformedReason,
)
from exporter.pipeline.owners import coded_topics, dedup, kept, owned, with_source
from exporter.pipeline.tables import SourceTables
from exporter.pulsarnames import PARTITION_SUFFIX, bundle_range, partitioned_parent
from exporter.sources.results import BundleOwnership

_BROKER_RATES = ("rate_in", "rate_out", "throughput_in", "throughput_out")
# Pulsar's resource-group monitoring classes: publish counts what comes in, dispatch what
# goes out (PIP-82), both from counters; replication what the replicators send (Pulsar's
# master), from the only figures the broker prints of it, rates.
_CLASS_COLUMNS = (
    (MonitoringClass.DISPATCH, "msg_out_total", "bytes_out_total"),
    (MonitoringClass.PUBLISH, "msg_in_total", "bytes_in_total"),
    (MonitoringClass.REPLICATION_DISPATCH, "replication_rate_out", "replication_throughput_out"),
)
_SUMMED = tuple(c for _, messages, byte_count in _CLASS_COLUMNS for c in (messages, byte_count))
# What a namespace sums over its topics: NAMESPACES' values (no ages, no limits).
_VALUE_COLUMNS = [f.name for f in NAMESPACES if f.name not in ("namespace", "topics")]
_BUNDLE_VALUES = ("producers", "consumers", "rate_in", "rate_out", "throughput_in",
                  "throughput_out")
_USAGE_COLUMNS = tuple(f.name for f in BROKERS if f.name.endswith("_percent"))
# Pulsar's LAST_BOUNDARY: the bundle ending there includes it (NamespaceBundles).
_LAST_BOUNDARY = 0xFFFFFFFF


def merge(
    tables: Sequence[tuple[str, SourceTables]],
    resource_groups: Mapping[str, ResourceGroup],
    bundles: Iterable[BundleOwnership] = (),
    malformed: Mapping[str, Mapping[str, int]] | None = None,
) -> Aggregates:
    """One cycle's Aggregates from each broker's tables (source URL, tables). `bundles`
    (the admin snapshot's, owners unused here) give the namespaces' bundle boundaries;
    without them every namespace is one bundle (`FULL_BUNDLE`). `malformed`: this cycle's
    skipped lines per freshly fetched source (default: every source's, from its tables).
    Without any tables, every table is empty but the configured groups, at zero usage."""
    if not tables:  # no broker ever answered: every configured group at zero usage
        return _empty(resource_groups)
    groups = sorted(resource_groups.values(), key=lambda g: g.name)
    sources = sorted({source for source, _ in tables})
    if malformed is None:
        malformed = {source: t.malformed for source, t in tables}
    usage = {s: t.usage.to_pylist()[0] if t.usage.num_rows else {} for s, t in tables}
    otel = {s for s, row in usage.items() if row.get("otel_only")}
    all_topics = with_source([(s, t.topics) for s, t in tables], sources)
    all_topics = all_topics.append_column(
        "otel_only", pc.is_in(all_topics["source"], pa.array(sorted(otel), pa.string())))
    stale = sorted(set(sources) - set(malformed))  # malformed: keyed by the fresh sources
    all_topics = all_topics.append_column(
        "stale", pc.is_in(all_topics["source"], pa.array(stale, pa.string())))
    topics, dropped = dedup(all_topics)
    brokered = kept(topics, pc.invert(topics["otel_only"])) if otel else topics
    subscriptions = coded_topics(owned(with_source(
        [(s, t.subscriptions) for s, t in tables], sources), dropped), topics)
    per_source = _namespaces_per_source(brokered, with_source(
        [(s, t.namespaces) for s, t in tables], sources))
    namespaces = _namespaces(per_source)
    shares = _bundle_shares(brokered, per_source, bundle_ranges(bundles))
    brokers, bundle_table = _load_tables(shares, usage, [s for s in sources if s not in otel])
    return Aggregates(
        topics=_shaped(topics, TOPICS),
        subscriptions=_shaped(subscriptions, SUBSCRIPTIONS),
        namespaces=_shaped(namespaces.sort_by("namespace"), NAMESPACES),
        resource_groups=_resource_groups(namespaces, brokered, groups),
        brokers=brokers,
        malformed=_malformed(malformed, sources),
        bundles=bundle_table,
    )


def release_unused() -> None:
    """The pages Arrow's allocator keeps after a merge, handed back to the OS: the last
    cycle's tables and the merge's own work are free by then, which lowers both the driver
    between cycles and its next peak (docs/design.md, "The driver's peak and the engine at
    1M topics"). With the system pool (exporter/__init__.py) it is `malloc_trim`."""
    pa.default_memory_pool().release_unused()


def _shaped(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`schema`'s columns, which the merge always has (a missing one is a bug: it raises)."""
    return table.select(schema.names).cast(schema)


def _with_namespace(topics: pa.Table) -> pa.Table:
    """The topics that have a namespace: `topics` itself when all do (as a broker's always
    do), since a filter copies every column, twice a merge."""
    if not topics["namespace"].null_count:
        return topics
    return topics.filter(topics["namespace"].is_valid())


def _sums(table: pa.Table, keys: list[str], prefix: str) -> pa.Table:
    grouped = table.group_by(keys, use_threads=False).aggregate(
        [("topic", "count"), ("cluster", "max"), *[(n, "sum") for n in _VALUE_COLUMNS]])
    names = {"topic_count": f"{prefix}topics", "cluster_max": f"{prefix}cluster",
             **{f"{n}_sum": f"{prefix}{n}" for n in _VALUE_COLUMNS}}
    return grouped.rename_columns([names.get(n, n) for n in grouped.column_names])


def _namespaces_per_source(topics: pa.Table, reported: pa.Table) -> pa.Table:
    """(source, namespace): sums over the broker's topics, or, where it reported no topic
    of the namespace, its namespace-level series."""
    from_topics = _plain(_sums(_with_namespace(topics),
                               ["source", "namespace"], "t_"))
    reported = _plain(reported).rename_columns(
        [n if n in ("source", "namespace") else f"n_{n}" for n in reported.column_names])
    joined = from_topics.join(reported, ["source", "namespace"], join_type="full outer",
                              use_threads=False)
    has_topics = joined["t_topics"].is_valid()
    n_topics = pc.cast(pc.if_else(pc.is_finite(joined["n_topics"]), joined["n_topics"], None),
                       pa.int64(), safe=False)
    columns = {
        "source": joined["source"],
        "namespace": joined["namespace"],
        "topics": pc.coalesce(joined["t_topics"], n_topics, 0),
        "cluster": pc.coalesce(joined["t_cluster"], joined["n_cluster"]),
        "topic_level": has_topics,  # False: the broker's namespace-level series
    }
    for n in _VALUE_COLUMNS:
        columns[n] = pc.if_else(has_topics, joined[f"t_{n}"], joined[f"n_{n}"])
    return pa.table(columns)


def _plain(table: pa.Table) -> pa.Table:
    """`source` as strings again, in a table of a few rows per source (joins want them)."""
    i = table.schema.get_field_index("source")
    return table.set_column(i, "source", table["source"].cast(pa.string()))


def _namespaces(per_source: pa.Table) -> pa.Table:
    grouped = per_source.group_by("namespace", use_threads=False).aggregate(
        [("topics", "sum"), *[(n, "sum") for n in _VALUE_COLUMNS]])
    return grouped.rename_columns([n.removesuffix("_sum") for n in grouped.column_names])


# --- bundles and brokers (load verdicts) ---------------------------------------------------
def in_range(key: int, lower: int, upper: int) -> bool:
    """`key` in [lower, upper), closed at the top for the range ending at 0xffffffff: the
    last bundle of a namespace includes LAST_BOUNDARY (NamespaceBundles, and
    NamespaceBundleFactory.getBundle for a range string)."""
    return lower <= key < upper or (upper == _LAST_BOUNDARY and key == upper)


def bundle_ranges(bundles: Iterable[BundleOwnership]) -> dict[str, list[tuple[int, int, str]]]:
    """namespace → its bundles as (lower, upper, range name), by lower bound. A namespace
    whose ranges do not parse or overlap is left out (its topics fall in FULL_BUNDLE): a
    topic must never land in two bundles. The names are kept as the admin REST spells them,
    so they match `BundleOwnership.bundle`."""
    listed: dict[str, list[tuple[int, int, str]]] = {}
    broken: set[str] = set()
    for b in bundles:
        bounds = bundle_range(b.bundle)
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


def place(namespace: pa.Array | pa.ChunkedArray, topic_hash: pa.Array | pa.ChunkedArray,
          ranges: Mapping[str, Sequence[tuple[int, int, str]]]) -> pa.DictionaryArray:
    """The bundle holding each topic: the range of its namespace that holds its hash
    (Apache Pulsar's NamespaceBundles.findBundle, `in_range`), FULL_BUNDLE where the
    namespace has no ranges or none holds it. One binary search over (namespace, lower
    bound) keys for all topics at once. A code a topic into the ranges' names (an int32),
    not the name again."""
    names = sorted(ranges)
    lowers, uppers, labels = [], [], []
    for i, ns in enumerate(names):
        for lo, hi, label in ranges[ns]:
            lowers.append((i << 33) + lo)
            uppers.append((i << 33) + hi)
            labels.append(label)
    n = len(namespace)
    if not lowers or n == 0:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                              pa.array([FULL_BUNDLE], pa.string()))
    index = pc.fill_null(pc.index_in(namespace, pa.array(names, pa.string())), -1)
    index = index.to_numpy(zero_copy_only=False).astype(np.int64)
    h = pc.fill_null(topic_hash, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    key = (np.maximum(index, 0) << 33) + h
    at = np.searchsorted(np.array(lowers), key, side="right") - 1
    upper = np.array(uppers)[np.maximum(at, 0)]
    last = (upper & 0x1FFFFFFFF) == _LAST_BOUNDARY
    hit = (index >= 0) & (at >= 0) & ((key < upper) | (last & (key == upper)))
    # the range's label, or FULL_BUNDLE (one past the labels) where none holds the topic
    return pa.DictionaryArray.from_arrays(
        pa.array(np.where(hit, at, len(labels)).astype(np.int32)),
        pa.array([*labels, FULL_BUNDLE], pa.string()))


def _bundle_shares(topics: pa.Table, per_source: pa.Table,
                   ranges: Mapping[str, Sequence[tuple[int, int, str]]]) -> pa.Table:
    """(source, namespace, bundle): sums over the source's topics in the bundle, plus one
    FULL_BUNDLE row per namespace a source reported only namespace-level series for (its
    topics cannot be placed)."""
    placed = _with_namespace(topics)
    placed = placed.append_column(
        "bundle", place(placed["namespace"], placed["topic_hash"], ranges))
    grouped = placed.group_by(["source", "namespace", "bundle"], use_threads=False).aggregate(
        [("topic", "count"), ("cluster", "max"), *[(n, "sum") for n in _BUNDLE_VALUES]])
    at = grouped.schema.get_field_index("bundle")  # a few rows a broker: names again
    grouped = grouped.set_column(at, "bundle", grouped["bundle"].cast(pa.string()))
    names = {"topic_count": "topics", "cluster_max": "cluster",
             **{f"{n}_sum": n for n in _BUNDLE_VALUES}}
    from_topics = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
    order = ["source", "namespace", "bundle", "topics", "cluster", *_BUNDLE_VALUES]
    namespace_level = per_source.filter(pc.invert(per_source["topic_level"]))
    namespace_level = namespace_level.append_column(
        "bundle", pa.array([FULL_BUNDLE] * namespace_level.num_rows, pa.string()))
    from_topics = from_topics.select(order)
    return pa.concat_tables([from_topics, namespace_level.select(order).cast(from_topics.schema)])


def _load_tables(shares: pa.Table, usage: Mapping[str, Mapping], sources: Sequence[str],
                 ) -> tuple[pa.Table, pa.Table]:
    """(BROKERS, BUNDLES): each broker's totals are summed from its bundle shares (a few
    rows per broker and bundle), its `pulsar_lb_*` usage taken from its own row."""
    zero: dict[str, Any] = {"cluster": None, "topics": 0, "sessions": 0.0,
                            **dict.fromkeys(_BROKER_RATES, 0.0), **dict.fromkeys(_USAGE_COLUMNS)}
    brokers = {s: {"source": s, **zero} for s in sources}

    def see_cluster(broker: dict, cluster: str | None) -> None:
        if cluster is not None and (broker["cluster"] is None or cluster > broker["cluster"]):
            broker["cluster"] = cluster

    for source, row in usage.items():
        if source in brokers and row:
            see_cluster(brokers[source], row.get("cluster"))
            brokers[source].update({c: row.get(c) for c in _USAGE_COLUMNS})
    bundle_rows = []
    for row in shares.to_pylist():
        broker = brokers.get(row["source"])
        if broker is None:
            continue
        see_cluster(broker, row["cluster"])
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


def bindings(groups: Iterable[ResourceGroup]) -> tuple[dict[str, str], ...]:
    """(namespace → group, tenant → group, topic → group). Should one be named by two
    groups (config validation should refuse it), the first group by name wins."""
    namespaces: dict[str, str] = {}
    tenants: dict[str, str] = {}
    topics: dict[str, str] = {}
    for group in sorted(groups, key=lambda g: g.name):
        for ns in group.namespaces:
            namespaces.setdefault(ns, group.name)
        for tenant in group.tenants:
            tenants.setdefault(tenant, group.name)
        for topic in group.topics:
            topics.setdefault(topic, group.name)
    return namespaces, tenants, topics


def _resource_groups(namespaces: pa.Table, topics: pa.Table,
                     groups: Sequence[ResourceGroup]) -> pa.Table:
    """Usage per group × class: each namespace counts in its own group or its tenant's, and a
    topic bound to a group of its own (Pulsar's master; a partitioned topic's binding covers
    its partitions) moves from its namespace's group to that one. Pulsar's master charges
    such a topic to both (`ResourceGroupService.incrementUsage` charges every distinct
    group of tenant, namespace and topic) while only the topic's group limits it
    (`AbstractTopic.updateResourceGroupLimiter`), so its namespace's group would count usage
    it does not limit: we count it once, where it is limited. A broker with topic-level
    metrics off prints no topic to move: its topics stay in their namespace's group."""
    usage: dict[str, dict] = {}
    if not groups:
        return _group_rows(groups, usage)
    by_namespace, by_tenant, by_topic = bindings(groups)

    def home(namespace: str) -> str | None:
        return by_namespace.get(namespace) or by_tenant.get(namespace.split("/", 1)[0])

    def add(group: str, row: Mapping, sign: int, namespaces: int, topics: int) -> None:
        seen = usage.setdefault(group, {"namespaces": 0, "topics": 0,
                                        **dict.fromkeys(_SUMMED, 0.0)})
        seen["namespaces"] += namespaces
        seen["topics"] += topics
        for c in _SUMMED:
            seen[c] += sign * (row[c] or 0.0)

    for row in namespaces.select(["namespace", "topics", *_SUMMED]).to_pylist():
        if (group := home(row["namespace"])) is not None:
            add(group, row, 1, 1, row["topics"] or 0)
    if by_topic:
        bound = pa.array(sorted(by_topic), pa.string())
        names = topics["topic"]
        parents = pc.replace_substring_regex(names, PARTITION_SUFFIX, "")
        mask = pc.or_(pc.is_in(names, bound), pc.is_in(parents, bound))
        for row in topics.filter(mask).select(["topic", "namespace", *_SUMMED]).to_pylist():
            topic = row["topic"]  # bound itself, or a partition of a bound topic (the mask)
            group = by_topic.get(topic) or by_topic[partitioned_parent(topic) or topic]
            if group != (namespace_group := home(row["namespace"])):
                if namespace_group is not None:
                    add(namespace_group, row, -1, 0, -1)
                add(group, row, 1, 0, 1)
    return _group_rows(groups, usage)


def _group_rows(groups: Sequence[ResourceGroup], usage: Mapping[str, Mapping]) -> pa.Table:
    """Every class of every configured group; zeros for a group nothing bound was seen."""
    rows = []
    for group in groups:
        seen = usage.get(group.name, {})
        for cls, messages, byte_count in _CLASS_COLUMNS:
            rate = cls is MonitoringClass.REPLICATION_DISPATCH
            m, b = seen.get(messages) or 0.0, seen.get(byte_count) or 0.0
            rows.append({
                "resource_group": group.name,
                "monitoring_class": cls.value,
                "messages_total": None if rate else m,
                "bytes_total": None if rate else b,
                "messages_per_second": m if rate else None,
                "bytes_per_second": b if rate else None,
                "namespaces": seen.get("namespaces") or 0,
                "topics": seen.get("topics") or 0,
            })
    return pa.Table.from_pylist(rows, schema=RESOURCE_GROUPS)


def _malformed(counts: Mapping[str, Mapping[str, int]], sources: Sequence[str]) -> pa.Table:
    rows = [
        {"source": s, "reason": r.value, "lines": counts.get(s, {}).get(r.value, 0)}
        for s in sorted(sources) for r in sorted(MalformedReason, key=lambda r: r.value)
    ]
    return pa.Table.from_pylist(rows, schema=MALFORMED)


def _empty(resource_groups: Mapping[str, ResourceGroup]) -> Aggregates:
    """No broker data at all: every configured group at zero usage, every table empty."""
    groups = sorted(resource_groups.values(), key=lambda g: g.name)
    return Aggregates.empty().with_resource_groups(_group_rows(groups, {}))
