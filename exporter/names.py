"""Pulsar's topic-name rules, stated once for every stage that needs them.

A partition of a partitioned topic is the topic `<parent>-partition-<N>`
(Pulsar's TopicName.PARTITIONED_TOPIC_SUFFIX); policies set on the parent apply to each
partition (TopicName.getPartitionedTopicName).
"""

from __future__ import annotations

import re

# The suffix, as a pattern both Python's `re` and RE2 (Arrow compute) accept.
PARTITION_SUFFIX = r"-partition-[0-9]+$"
_SUFFIX = re.compile(PARTITION_SUFFIX)


def partitioned_parent(topic: str) -> str | None:
    """The partitioned topic a partition belongs to; None for a topic that is none."""
    parent = _SUFFIX.sub("", topic)
    return parent if parent != topic else None
