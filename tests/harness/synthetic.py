"""Synthetic Apache Pulsar broker bodies for benchmarks (and tests that need volume).

The shape follows Apache Pulsar 3.x's PrometheusMetricsGenerator with topic-level metrics
on: the JVM/process and broker families of simpleclient (with `_created` samples, a
histogram, a summary with NaN quantiles, Java's `-Infinity`), then per-topic families
grouped by family (TopicStats.printTopicStats: full topic names in `topic`, subscription
families with `subscription`), `pulsar_topics_count` per namespace, and a function-worker
exposition concatenated after it (a second TYPE line for a family, samples with no TYPE).

Values are deterministic functions of the topic index, so a benchmark or test can know
the totals without parsing (`expected_totals`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Apache Pulsar's per-topic families (one sample each per topic), in its print order.
TOPIC_FAMILIES = (
    "pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
    "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
    "pulsar_average_msg_size", "pulsar_txn_tb_active_total", "pulsar_storage_size",
    "pulsar_storage_logical_size", "pulsar_msg_backlog", "pulsar_storage_write_rate",
    "pulsar_storage_read_rate", "pulsar_storage_backlog_size", "pulsar_publish_rate_limit_times",
    "pulsar_storage_offloaded_size", "pulsar_storage_backlog_quota_limit",
    "pulsar_storage_backlog_quota_limit_time", "pulsar_in_bytes_total", "pulsar_in_messages_total",
)
PIP323_FAMILY = "pulsar_storage_backlog_age_seconds"
SUBSCRIPTION_FAMILIES = (
    "pulsar_subscription_back_log", "pulsar_subscription_back_log_no_delayed",
    "pulsar_subscription_delayed", "pulsar_subscription_msg_rate_redeliver",
    "pulsar_subscription_unacked_messages", "pulsar_subscription_blocked_on_unacked_messages",
    "pulsar_subscription_msg_rate_out", "pulsar_subscription_msg_ack_rate",
    "pulsar_subscription_msg_throughput_out", "pulsar_out_bytes_total",
    "pulsar_out_messages_total", "pulsar_subscription_last_acked_timestamp",
    "pulsar_subscription_last_consumed_timestamp", "pulsar_subscription_consumers_count",
)
_EPOCH_MS = 1_700_000_000_000


@dataclass(frozen=True)
class BodySpec:
    """One broker's body: `topics` topics spread over `namespaces` namespaces of `tenant`,
    `subscriptions` subscriptions each. `broker` makes names unique across a fleet."""

    topics: int
    subscriptions: int = 2
    namespaces: int = 10
    tenant: str = "bench"
    broker: int = 0
    cluster: str = "bench"
    # Real bodies repeat a TYPE line where expositions are concatenated; Prometheus' own
    # strict parser (promtool) stops there, so a benchmark comparing with it turns it off.
    concatenated: bool = True
    # Apache Pulsar >= 3.2 prints PIP-323's age of each topic's slowest backlog
    # (`pulsar_storage_backlog_age_seconds`, seconds; 2 minutes and more here).
    pip323: bool = False

    def namespace(self, i: int) -> str:
        return f"{self.tenant}/ns-{i % self.namespaces}"

    def topic(self, i: int) -> str:
        return f"persistent://{self.namespace(i)}/b{self.broker}-topic-{i}"


@dataclass(frozen=True)
class BodyStats:
    lines: int
    samples: int
    bytes: int


def topic_value(family: str, i: int, subscriptions: int = 2) -> float:
    """The value a topic-level family has for topic `i` (consistent with its
    `subscriptions` subscriptions: backlog and consumers are their sums)."""
    return {
        "pulsar_subscriptions_count": float(subscriptions),
        "pulsar_producers_count": 1.0,
        "pulsar_consumers_count": float(subscriptions),
        "pulsar_in_messages_total": float(1000 + i),
        "pulsar_in_bytes_total": float((1000 + i) * 100),
        "pulsar_msg_backlog": float(subscriptions * (i % 50)),
        "pulsar_storage_size": float(4096 + i),
        "pulsar_storage_backlog_size": float(100 * (i % 50)),
        "pulsar_rate_in": (i % 7) * 1.5,
        "pulsar_throughput_in": (i % 7) * 150.0,
        PIP323_FAMILY: float(120 + i % 600),
    }.get(family, float(i % 3))


def subscription_value(family: str, i: int, s: int) -> float:
    """The value a subscription-level family has for subscription `s` of topic `i`."""
    return {
        "pulsar_subscription_back_log": float(i % 50),
        "pulsar_out_messages_total": float(1000 + i - i % 50),
        "pulsar_out_bytes_total": float((1000 + i - i % 50) * 100),
        "pulsar_subscription_last_acked_timestamp": float(_EPOCH_MS + i),
        "pulsar_subscription_last_consumed_timestamp": float(_EPOCH_MS + i + s),
        "pulsar_subscription_consumers_count": 1.0,
    }.get(family, float((i + s) % 5))


def _fmt(value: float) -> str:
    """Pulsar's writer prints integral longs without a decimal point, doubles with one."""
    return str(int(value)) if value.is_integer() else repr(value)


def _header(cluster: str, concatenated: bool) -> Iterator[str]:
    c = f'cluster="{cluster}"'
    yield "# TYPE jvm_memory_bytes_used gauge\n"
    for area, v in (("heap", "5.36870912E8"), ("nonheap", "1.2345678E8")):
        yield f'jvm_memory_bytes_used{{{c},area="{area}",}} {v}\n'
    yield "# TYPE jvm_gc_collection_seconds summary\n"
    for gc in ("ZGC Cycles", "ZGC Pauses"):
        yield f'jvm_gc_collection_seconds_count{{{c},gc="{gc}",}} 42.0\n'
        yield f'jvm_gc_collection_seconds_sum{{{c},gc="{gc}",}} 1.5\n'
    yield "# TYPE process_cpu_seconds_total counter\n"
    yield f"process_cpu_seconds_total{{{c},}} 1234.5\n"
    yield "# TYPE pulsar_broker_lookup_answers counter\n"
    yield f"pulsar_broker_lookup_answers_total{{{c}}} 2282.0\n"
    yield f"pulsar_broker_lookup_answers_created{{{c}}} 1.67546120086E9\n"
    yield "# TYPE pulsar_batch_metadata_store_batch_size histogram\n"
    for le in ("1.0", "5.0", "10.0", "+Inf"):
        yield (f'pulsar_batch_metadata_store_batch_size_bucket{{{c},name="metadata-store",'
               f'le="{le}"}} 36.0\n')
    yield f'pulsar_batch_metadata_store_batch_size_count{{{c},name="metadata-store"}} 36.0\n'
    yield f'pulsar_batch_metadata_store_batch_size_sum{{{c},name="metadata-store"}} 48.0\n'
    yield "# TYPE pulsar_resource_group_calculate_quota_secs summary\n"
    for q in ("0.5", "0.9"):
        yield f'pulsar_resource_group_calculate_quota_secs{{{c},quantile="{q}"}} NaN\n'
    yield "# TYPE pulsar_managedLedger_client_bookkeeper_ml_scheduler_task_queued summary\n"
    yield (f'pulsar_managedLedger_client_bookkeeper_ml_scheduler_task_queued{{{c}, '
           f'success="false", quantile="1.0"}} -Infinity\n')
    yield "# TYPE pulsar_resource_group_namespace_registers counter\n"  # no samples
    if concatenated:  # the broker-wide default; the per-namespace counts come later
        yield "# TYPE pulsar_topics_count gauge\n"
        yield f"pulsar_topics_count{{{c}}} 0\n"


def _topic_blocks(spec: BodySpec) -> Iterator[str]:
    c = f'cluster="{spec.cluster}"'
    for family in TOPIC_FAMILIES + (PIP323_FAMILY,) * spec.pip323:
        out = io.StringIO()
        out.write(f"# TYPE {family} gauge\n")
        for i in range(spec.topics):
            out.write(f'{family}{{{c},namespace="{spec.namespace(i)}",topic="{spec.topic(i)}"}} '
                      f"{_fmt(topic_value(family, i, spec.subscriptions))}\n")
        yield out.getvalue()
    for family in SUBSCRIPTION_FAMILIES:
        out = io.StringIO()
        out.write(f"# TYPE {family} gauge\n")
        for i in range(spec.topics):
            for s in range(spec.subscriptions):
                out.write(f'{family}{{{c},namespace="{spec.namespace(i)}",topic="{spec.topic(i)}",'
                          f'subscription="sub-{s}"}} {_fmt(subscription_value(family, i, s))}\n')
        yield out.getvalue()
    # The namespace topic counts, a second TYPE line for the family (concatenated output).
    if spec.concatenated:
        yield "# TYPE pulsar_topics_count gauge\n"
    for n in range(min(spec.namespaces, spec.topics)):
        count = len(range(n, spec.topics, spec.namespaces))
        yield f'pulsar_topics_count{{{c},namespace="{spec.tenant}/ns-{n}"}} {count}\n'


def _function_worker(cluster: str) -> Iterator[str]:
    # The function worker's exposition is appended with no TYPE lines at all.
    yield f'pulsar_function_worker_start_up_time_ms{{cluster="{cluster}",}} 1234.0\n'
    yield f'pulsar_function_worker_is_leader{{cluster="{cluster}",}} 1.0\n'


def chunks(spec: BodySpec) -> Iterator[str]:
    yield from _header(spec.cluster, spec.concatenated)
    yield from _topic_blocks(spec)
    yield from _function_worker(spec.cluster)


def body_text(spec: BodySpec) -> str:
    return "".join(chunks(spec))


def write_body(path: str | Path, spec: BodySpec) -> BodyStats:
    lines = samples = size = 0
    with open(path, "w", encoding="utf-8") as f:
        for chunk in chunks(spec):
            f.write(chunk)
            n = chunk.count("\n")
            comments = chunk.count("# ")
            lines += n
            samples += n - comments
            size += len(chunk.encode())
    return BodyStats(lines=lines, samples=samples, bytes=size)


def expected_totals(spec: BodySpec) -> dict[str, float]:
    """Broker-wide sums the pipeline should find for this body (topic-level families)."""
    n = spec.topics
    return {
        "topics": float(n),
        "msg_in_total": sum(topic_value("pulsar_in_messages_total", i) for i in range(n)),
        "msg_backlog": sum(topic_value("pulsar_msg_backlog", i, spec.subscriptions)
                           for i in range(n)),
        "msg_out_total": sum(subscription_value("pulsar_out_messages_total", i, s)
                             for i in range(n) for s in range(spec.subscriptions)),
    }
