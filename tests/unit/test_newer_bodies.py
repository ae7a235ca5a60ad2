"""What brokers newer than the 4.0.8 these tests run print, on bodies built from our
recorded 4.0 output as Pulsar's sources say those brokers change it (no such broker is
served here). Each build names the Pulsar commit it follows.

- PIP-447 (Pulsar 4.2), custom topic metric labels: with
  `exposeCustomTopicMetricLabelsEnabled`, each allowed topic property is one more label on
  every series that has a `topic` label, partitions included (apache/pulsar
  `PrometheusMetricsLabelsTest.testTopicPropertiesAsMetricLabels` @ 3139520e: properties
  `sla_tier`, `app_owner`). A topic stays one topic: our keys are its name.
- PIP-264's first instrument name for the size limit, `…backlog.quota.limit` with unit
  `{byte}` (apache/pulsar#22467's early commits, e.g. 10ad983a), beside the released
  `…backlog.quota.limit.size` (unit `By`, so `_bytes`).
"""

from __future__ import annotations

import re

import pyarrow as pa

from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import SourceTables, source_tables
from tests.harness.fixtures import FIXTURES

CLASSIC = (FIXTURES / "apache-pulsar-4.0-metrics.txt").read_text()
OTEL = (FIXTURES / "apache-pulsar-4.0.8-otel-metrics.txt").read_text()


def _tables(text: str) -> SourceTables:
    return source_tables([parse_text(text.encode())])


def _sorted(table: pa.Table, keys: list[str]) -> list[dict]:
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def test_custom_topic_labels_leave_every_topic_one_topic() -> None:
    labelled = re.sub(r'(\{[^}]*topic="[^"]*"[^}]*?),?\}',
                      r'\1,sla_tier="gold",app_owner="team-a"}', CLASSIC)
    assert labelled.count('sla_tier="gold"') > 50  # every topic series got them
    plain, custom = _tables(CLASSIC), _tables(labelled)
    assert custom.topics.num_rows == plain.topics.num_rows > 0
    assert _sorted(custom.topics, ["topic"]) == _sorted(plain.topics, ["topic"])
    assert _sorted(custom.subscriptions, ["topic", "subscription"]) == \
        _sorted(plain.subscriptions, ["topic", "subscription"])
    assert custom.malformed == plain.malformed


def test_the_first_opentelemetry_name_of_the_size_limit_is_read_too() -> None:
    released = "pulsar_broker_topic_storage_backlog_quota_limit_size_bytes"
    assert released in OTEL
    draft = OTEL.replace(released, "pulsar_broker_topic_storage_backlog_quota_limit")
    limits = {r["topic"]: r["backlog_quota_limit_bytes"]
              for r in _tables(OTEL).topics.to_pylist()}
    assert limits and all(v is not None for v in limits.values())
    assert {r["topic"]: r["backlog_quota_limit_bytes"]
            for r in _tables(draft).topics.to_pylist()} == limits
