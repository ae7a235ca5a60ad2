"""Apache Pulsar admin REST JSON → the model's dataclasses (pure), at the boundary.

Pulsar's `TopicStats`, `PartitionedTopicStats` and `BundlesData` as admin.py fetches them;
a missing or mistyped field raises `FetchFailure` (MISSING_FIELDS / MALFORMED), so the walk
leaves that item out and counts it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Literal, overload

from exporter.sources.brokers import FetchFailure
from exporter.sources.results import (
    BundleOwnership,
    ScrapeError,
    SubscriptionStats,
    TopicStats,
)

# Every number in Pulsar's stats is a Java long (or a double of that order): anything past
# its range did not come from a broker.
_JAVA_LONG = 2**63
# No message is older than the Unix epoch: an age past a century is not an age.
MAX_AGE_SECONDS = 100 * 365 * 86400


def _number(doc: Mapping, key: str, where: str, *, required: bool) -> float | None:
    if doc.get(key) is None:
        if required:
            raise FetchFailure(ScrapeError.MISSING_FIELDS, f"{where}: missing {key!r}")
        return None
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or abs(value) >= _JAVA_LONG:
        raise FetchFailure(ScrapeError.MALFORMED,
                           f"{where}: {key!r} is not a number: {_short(value)}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


@overload
def _int(doc: Mapping, key: str, where: str, *, required: Literal[True]) -> int: ...


@overload
def _int(doc: Mapping, key: str, where: str, *, required: bool = False) -> int | None: ...


def _int(doc: Mapping, key: str, where: str, *, required: bool = False) -> int | None:
    """`required`: a missing key raises, so there is always a number."""
    value = _number(doc, key, where, required=required)
    return None if value is None else int(value)


def object_of(value: object, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: expected a JSON object")
    return value


def strings_of(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: expected a list of strings")
    return value


def _age(doc: Mapping, where: str) -> float | None:
    """`oldestBacklogMessageAgeSeconds`: -1 until a backlog-quota check has measured it
    (Pulsar's `TopicStatsImpl.reset`), absent on older brokers: both None."""
    age = _number(doc, "oldestBacklogMessageAgeSeconds", where, required=False)
    if age is not None and age > MAX_AGE_SECONDS:
        raise FetchFailure(ScrapeError.MALFORMED,
                           f"{where}: 'oldestBacklogMessageAgeSeconds' {age:g} is no age")
    return float(age) if age is not None and age >= 0 else None


def subscription_from_json(name: str, doc: object, topic: str) -> SubscriptionStats:
    """Pulsar `SubscriptionStats`; `type` and `backlogSize` are absent on old brokers, the
    subscription's own `oldestBacklogMessageAgeSeconds` before 5.0 (PIP-492,
    `SubscriptionStats.getOldestBacklogMessageAgeSeconds`)."""
    where = f"{topic} subscription {name!r}"
    sub = object_of(doc, where)
    consumers = sub.get("consumers")
    if consumers is None:
        raise FetchFailure(ScrapeError.MISSING_FIELDS, f"{where}: missing 'consumers'")
    if not isinstance(consumers, list):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: 'consumers' is not a list")
    sub_type = sub.get("type")
    return SubscriptionStats(
        name=name,
        msg_backlog=_int(sub, "msgBacklog", where, required=True),
        backlog_size=_int(sub, "backlogSize", where),
        unacked_messages=_int(sub, "unackedMessages", where, required=True),
        consumers=len(consumers),
        type=sub_type if isinstance(sub_type, str) else None,
        oldest_backlog_message_age_seconds=_age(sub, where),
    )


def topic_stats_from_json(topic: str, doc: object) -> TopicStats:
    """Pulsar `TopicStats` → `TopicStats`; raises `FetchFailure` (MISSING_FIELDS/MALFORMED).

    `oldestBacklogMessageAgeSeconds` is -1 until a backlog-quota check has measured it
    (Pulsar's `TopicStatsImpl.reset`), and absent before 3.2: both become None.
    """
    stats = object_of(doc, topic)
    subs = stats.get("subscriptions")
    if subs is None:
        raise FetchFailure(ScrapeError.MISSING_FIELDS, f"{topic}: missing 'subscriptions'")
    subs = object_of(subs, f"{topic} subscriptions")
    age = _age(stats, topic)
    oldest_sub = stats.get("oldestBacklogMessageSubscriptionName")
    known_age = age is not None
    return TopicStats(
        topic=topic,
        backlog_size=_int(stats, "backlogSize", topic),
        msg_in_counter=_int(stats, "msgInCounter", topic),
        bytes_in_counter=_int(stats, "bytesInCounter", topic),
        oldest_backlog_message_age_seconds=age,
        oldest_backlog_message_subscription=(
            oldest_sub if known_age and isinstance(oldest_sub, str) else None),
        subscriptions=tuple(subscription_from_json(name, sub, topic)
                            for name, sub in sorted(subs.items())),
    )


def partitioned_stats_from_json(topic: str, doc: object) -> tuple[TopicStats, ...]:
    """Pulsar `PartitionedTopicStats` → one `TopicStats` per partition.

    Backlog quotas are checked per partition (each is its own topic on the broker), so
    partitions are kept apart when the broker lists them (`perPartition=true`, keyed by the
    full partition name). A broker that returns no `partitions` entries gives only the
    aggregate, which is kept under the partitioned topic's name: Pulsar sums counters and
    backlogs and takes the largest age over partitions (`TopicStatsImpl.add`).
    """
    stats = object_of(doc, topic)
    partitions = stats.get("partitions") or {}
    partitions = object_of(partitions, f"{topic} partitions")
    if not partitions:
        return (topic_stats_from_json(topic, stats),)
    return tuple(topic_stats_from_json(name, part) for name, part in sorted(partitions.items()))


def bundles_from_json(
    namespace: str, doc: object, owners: Mapping[str, str]
) -> tuple[BundleOwnership, ...]:
    """Pulsar `BundlesData` (`boundaries` = n+1 hex keys for n bundles) → bundle ranges
    `0x…_0x…`, each with its owner from `ownedNamespaces` (keyed `tenant/ns/range`)."""
    where = f"{namespace} bundles"
    data = object_of(doc, where)
    if data.get("boundaries") is None:
        raise FetchFailure(ScrapeError.MISSING_FIELDS, f"{where}: missing 'boundaries'")
    bounds = strings_of(data["boundaries"], f"{where} boundaries")
    ranges = [f"{lo}_{hi}" for lo, hi in pairwise(bounds)]
    return tuple(BundleOwnership(namespace, r, owners.get(f"{namespace}/{r}")) for r in ranges)
