"""The benchmarks' bodies of Apache Pulsar 4.0.8's own families (tests/harness/
recorded_families.py): each made topic parses to the values its recorded topic has."""

from __future__ import annotations

from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import source_tables
from tests.harness.recorded_families import (
    RECORDED,
    TEMPLATES,
    recorded_family_body,
    topic_name,
)

_COLUMNS = ("msg_backlog", "backlog_age_seconds", "backlog_quota_limit_bytes",
            "backlog_quota_limit_seconds", "msg_in_total", "storage_size_bytes")


def _rows(body: bytes) -> tuple[dict[str, dict], list[dict]]:
    tables = source_tables([parse_text(body)])
    topics = {r["topic"]: r for r in tables.topics.to_pylist()}
    return topics, tables.subscriptions.to_pylist()


def test_each_topic_made_has_its_recorded_topics_values() -> None:
    recorded, recorded_subscriptions = _rows(RECORDED.read_bytes())
    made, subscriptions = _rows(recorded_family_body(200).encode())
    assert set(made) == {topic_name(i) for i in range(200)}
    for i in (0, 1, 198, 199):
        template = recorded[TEMPLATES[i % 2]]
        assert {c: made[topic_name(i)][c] for c in _COLUMNS} == {c: template[c] for c in _COLUMNS}
    assert made[topic_name(0)]["msg_backlog"] == 40  # kept's backlog, aged's evicted
    assert made[topic_name(1)]["msg_backlog"] == 0
    assert len(subscriptions) == 100 * len(recorded_subscriptions)


def test_lines_that_name_no_topic_are_printed_once_as_recorded() -> None:
    recorded = [line for line in RECORDED.read_text().splitlines() if 'topic="' not in line]
    made = recorded_family_body(3).splitlines()
    assert [line for line in made if 'topic="' not in line] == recorded
    samples = [line for line in made if 'topic="' in line and not line.startswith("#")]
    per_topic = {i: sum(f'topic="{topic_name(i)}"' in line for line in samples) for i in range(3)}
    assert per_topic[0] == per_topic[2] > 60 and per_topic[1] > 60
    assert sum(per_topic.values()) == len(samples)
