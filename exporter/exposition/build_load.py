"""A cycle's `LoadResult` → the catalogue's load series (`pulsar_load_*`).

Series come from this cycle's result only: a broker without a verdict (`Unjudged`, e.g.
pulsar-lite, which reports no resource usage) has no load series at all rather than zeros
that would read as "idle", and only bundles over a threshold have a split series (1 per
exceeded threshold), so the bundle count does not multiply the cardinality.
"""

from __future__ import annotations

from exporter.engine.load.loadview import Judged, LoadResult
from exporter.exposition.metricset import MetricSetBuilder


def add_load(builder: MetricSetBuilder, cluster: str, result: LoadResult) -> None:
    """Usage ratios (percent / 100, every resource the broker reports), the overload flag,
    the shed fraction and the bundles it would unload per judged broker, labelled with its
    broker id (host:port); one split series per exceeded threshold, `bundle` being the
    hash range (namespace apart)."""
    for b in result.brokers:
        if not isinstance(b, Judged):
            continue
        for resource, percent in b.load.usages():
            builder.add("pulsar_load_broker_resource_usage_ratio",
                        (cluster, b.broker, resource.value), percent / 100.0)
        builder.add("pulsar_load_broker_overloaded", (cluster, b.broker),
                    1.0 if b.verdict.overloaded else 0.0)
        builder.add("pulsar_load_broker_shed_ratio", (cluster, b.broker), b.verdict.shed_fraction)
        for name in b.verdict.unload:  # which bundles, not only how much
            namespace, _, bundle = name.rpartition("/")
            builder.add("pulsar_load_bundle_unload_candidate",
                        (cluster, b.broker, namespace, bundle), 1.0)
    for candidate in result.splits:
        namespace, _, bundle = candidate.bundle.rpartition("/")
        for reason in candidate.reasons:
            builder.add("pulsar_load_bundle_split_candidate",
                        (cluster, namespace, bundle, reason.value), 1.0)
