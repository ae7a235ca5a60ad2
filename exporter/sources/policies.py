"""Pulsar's backlog-quota policies over the admin REST, cached per namespace.

The engine resolves them per quota type as the broker does (engine/backlog/quotas.py); this module
only reads them. Policies change rarely, so they are read on a period instead: each
namespace's map at most every `refresh_seconds`, the broker default with the first
namespace due. Topic-level maps are far more numerous and mostly empty, and Pulsar has no
read listing the topics that have one (they live in each namespace's `__change_events`
system topic), so a topic's map is read when the topic is first seen, then again on its
namespace's period only while it has entries, and at once whenever the walk reads the
topic's stats (`now_too`: a topic over a quota, before anything acts on it). A topic given
a map later is thus seen when it first goes over a quota, and acted on only by its own
map. A failed read keeps what was cached and is retried next cycle (namespace) or at its
namespace's next refresh (topic).

Endpoints (Pulsar's `admin/v2` resources, `BacklogQuota` JSON):
  GET /admin/v2/namespaces/{t}/{ns}/backlogQuotaMap       → {"destination_storage": {...},
                                                             "message_age": {...}}, {} if none
  GET /admin/v2/persistent/{t}/{ns}/{topic}/backlogQuotaMap → the topic-level entries only,
      {} if none (`applied=false`, the default). On 4.0.8 `applied=true` resolves per type
      only for a topic without entries; for one with any it answers the topic's map whole,
      leaving out the namespace's entries the broker does apply to the other type.
  GET /admin/v2/brokers/configuration/runtime              → every broker setting, as strings
A partitioned topic's policies are read on the partitioned topic's name; they apply to each
partition (`TopicName.getPartitionedTopicName`). A 405 (topic-level policies disabled,
`topicLevelPoliciesEnabled=false`) means there are none.
"""

from __future__ import annotations

import contextlib
import math
import urllib.error
from collections.abc import Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar
from urllib.parse import quote

from exporter.config.settings import RetentionPolicy
from exporter.sources.brokers import FetchFailure
from exporter.sources.results import PulsarQuotas, QuotaType, ScrapeError, TypedQuota

A = TypeVar("A")
T = TypeVar("T")
Each = Callable[[Callable[[A], T], Sequence[A]], list[T]]
Get = Callable[[str], object]

# Pulsar's BacklogQuotaType names → ours; each type reads only its own limit field.
_TYPES = {"destination_storage": QuotaType.SIZE, "message_age": QuotaType.TIME}
_BYTES_IN_GIGABYTE = 1024 ** 3  # BacklogQuotaImpl.BYTES_IN_GIGABYTE


def _policy(value: object, where: str) -> RetentionPolicy:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return RetentionPolicy(value)
    raise FetchFailure(ScrapeError.MALFORMED, f"{where}: unknown policy {value!r}")


def _limit(entry: Mapping, keys: Sequence[str], where: str) -> float:
    for key in keys:
        value = entry.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FetchFailure(ScrapeError.MALFORMED, f"{where}: {key!r} is not a number")
            return float(value)
    return -1.0  # left out: Pulsar's "no limit"


def quota_map_from_json(doc: object, where: str) -> dict[QuotaType, TypedQuota]:
    """A `backlogQuotaMap` answer → per-type entries. A left-out limit reads back as 0
    (`message_age` entries carry `limitSize: 0`): only `destination_storage`'s `limitSize`
    (or the deprecated `limit`) and `message_age`'s `limitTime` are read. A size entry
    posted without `limitSize` thus has a limit of 0, which the 4.0.8 broker applies too
    (its `pulsar_storage_backlog_quota_limit` shows 0). Types we do not know are ignored."""
    if not isinstance(doc, Mapping):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: expected a JSON object")
    out = {}
    for name, entry in doc.items():
        kind = _TYPES.get(name)
        if kind is None:
            continue
        if not isinstance(entry, Mapping):
            raise FetchFailure(ScrapeError.MALFORMED, f"{where} {name}: expected an object")
        keys = ("limitSize", "limit") if kind is QuotaType.SIZE else ("limitTime",)
        policy = _policy(entry.get("policy", "producer_request_hold"), f"{where} {name}")
        out[kind] = TypedQuota(_limit(entry, keys, f"{where} {name}"), policy)
    return out


def broker_default_from_json(doc: object) -> dict[QuotaType, TypedQuota]:
    """The broker's runtime configuration → its default quota, built as
    `BacklogQuotaManager`'s constructor builds `defaultQuota`: the deprecated
    `backlogQuotaDefaultLimitGB` when > 0, else `backlogQuotaDefaultLimitBytes`;
    `backlogQuotaDefaultLimitSecond`; one `backlogQuotaDefaultRetentionPolicy` for both."""
    where = "broker runtime configuration"
    if not isinstance(doc, Mapping):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: expected a JSON object")

    def number(key: str, default: float) -> float:
        value = doc.get(key)
        if value is None or value == "":
            return default
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = math.nan
        if isinstance(value, bool) or not math.isfinite(number):
            raise FetchFailure(ScrapeError.MALFORMED,
                               f"{where}: {key} is not a number: {value!r}")
        return number

    gigabytes = number("backlogQuotaDefaultLimitGB", -1.0)
    size = gigabytes * _BYTES_IN_GIGABYTE if gigabytes > 0 else number(
        "backlogQuotaDefaultLimitBytes", -1.0)
    if not math.isfinite(size):  # 1e308 GB is a finite number of gigabytes, not of bytes
        raise FetchFailure(ScrapeError.MALFORMED,
                           f"{where}: backlogQuotaDefaultLimitGB out of range: {gigabytes!r}")
    policy = _policy(doc.get("backlogQuotaDefaultRetentionPolicy", "producer_request_hold"),
                     where)
    return {QuotaType.SIZE: TypedQuota(float(int(size)), policy),
            QuotaType.TIME: TypedQuota(number("backlogQuotaDefaultLimitSecond", -1.0), policy)}


def _path(name: str) -> str:
    return "/".join(quote(part, safe="") for part in name.split("/"))


def _namespace_of(topic: str) -> str:
    return topic.partition("://")[2].rsplit("/", 1)[0]


class PolicyCache:
    """Pulsar's quota policies, refreshed per namespace on a period (module docstring).
    Used by one admin walk at a time."""

    def __init__(self, refresh_seconds: float = 60.0):
        self.refresh_seconds = refresh_seconds
        self._namespaces: dict[str, tuple[float, dict[QuotaType, TypedQuota]]] = {}
        self._topics: dict[str, dict[QuotaType, TypedQuota]] = {}
        self._default: tuple[float, dict[QuotaType, TypedQuota]] | None = None

    def read(self, each: Each, get: Get, namespaces: Sequence[str], topics: Sequence[str],
             now: float, *, complete: bool = True, now_too: Collection[str] = ()
             ) -> PulsarQuotas:
        """`namespaces` and `topics` (partitioned topics by their own name, not their
        partitions') as the walk listed them; `each` runs a function over items, leaving
        out (and recording) those that failed; `get` is one JSON GET; `now_too`: topics
        whose map to read this time whatever its period. Entries of what was not listed
        are forgotten only after a `complete` listing (a failed one is no deletion)."""
        def due(at: float | None) -> bool:
            return at is None or now - at >= self.refresh_seconds

        refreshing = [ns for ns in namespaces if due(self._namespaces.get(ns, (None,))[0])]
        fresh = set(refreshing)
        wanted = [t for t in topics if t not in self._topics or t in now_too
                  or (self._topics[t] and _namespace_of(t) in fresh)]
        if refreshing and due(self._default[0] if self._default else None):
            for doc in each(lambda path: get(path), ["/admin/v2/brokers/configuration/runtime"]):
                self._default = (now, broker_default_from_json(doc))
        for ns, entries in each(lambda ns: (ns, quota_map_from_json(
                get(f"/admin/v2/namespaces/{_path(ns)}/backlogQuotaMap"), ns)), refreshing):
            self._namespaces[ns] = (now, entries)
        read = dict(each(lambda t: (t, self._topic(get, t)), wanted))
        for topic in wanted:  # a failed read keeps the old entries until the next refresh
            self._topics[topic] = read.get(topic, self._topics.get(topic, {}))
        if complete:
            listed_ns, listed_topics = set(namespaces), set(topics)
            self._namespaces = {k: v for k, v in self._namespaces.items() if k in listed_ns}
            self._topics = {k: v for k, v in self._topics.items() if k in listed_topics}
        return self.snapshot()

    @staticmethod
    def _topic(get: Get, topic: str) -> dict[QuotaType, TypedQuota]:
        domain, _, rest = topic.partition("://")
        try:
            doc = get(f"/admin/v2/{domain}/{_path(rest)}/backlogQuotaMap")
        except FetchFailure as exc:
            cause = exc.__cause__
            if isinstance(cause, urllib.error.HTTPError) and cause.code == 405:
                return {}  # topic-level policies disabled on the broker: none to read
            raise
        return quota_map_from_json(doc, topic)

    def snapshot(self) -> PulsarQuotas:
        frozen = MappingProxyType
        return PulsarQuotas(
            default=frozen(dict(self._default[1] if self._default else {})),
            namespaces=frozen({ns: frozen(e) for ns, (_, e) in self._namespaces.items() if e}),
            topics=frozen({t: frozen(dict(e)) for t, e in self._topics.items() if e}),
        )
