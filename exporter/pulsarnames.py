"""Pulsar's naming rules, and the text format's, stated once for every stage that needs them.

A partition of a partitioned topic is the topic `<parent>-partition-<N>`
(Pulsar's TopicName.PARTITIONED_TOPIC_SUFFIX); policies set on the parent apply to each
partition (TopicName.getPartitionedTopicName). A bundle is named by its hash range,
`0x<lower>_0x<upper>` in 32-bit hex (NamespaceBundle), after its namespace.
"""

from __future__ import annotations

import re

# A metric's and a label's name in Prometheus' text format (the parse reads them, the render
# compiles them into code), as patterns both Python's `re` and RE2 (Arrow compute) accept.
METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"

# The suffix, as a pattern both Python's `re` and RE2 (Arrow compute) accept.
PARTITION_SUFFIX = r"-partition-[0-9]+$"
_SUFFIX = re.compile(PARTITION_SUFFIX)


def after_domain(topic: str) -> str:
    """`tenant/namespace/topic`: pulsar-lite names topics without their domain, so that they
    arrive as persistent:// whatever the domain they were given."""
    return topic.partition("://")[2]


def partitioned_parent(topic: str) -> str | None:
    """The partitioned topic a partition belongs to; None for a topic that is none."""
    if "-partition-" not in topic:  # the engine asks once per topic: skip the regex
        return None
    parent = _SUFFIX.sub("", topic)
    return parent if parent != topic else None


_BUNDLE_RANGE = re.compile(r"0x([0-9a-fA-F]{1,8})_0x([0-9a-fA-F]{1,8})")


def bundle_range(text: str) -> tuple[int, int] | None:
    """`0x00000000_0x40000000` → (lower, upper); None when it is not a non-empty range."""
    match = _BUNDLE_RANGE.fullmatch(text)
    if match is None:
        return None
    lower, upper = int(match[1], 16), int(match[2], 16)
    return (lower, upper) if lower < upper else None
