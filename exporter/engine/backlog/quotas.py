"""Which backlog quota applies to a topic: the YAML's, Pulsar's, or both (pure).

Two ways of resolving, because the two sources are built differently:

- The YAML (`backlog_quotas` in the config): the most specific configured object, topic >
  namespace > default, replaces the whole quota (a namespace entry naming only `limit_time`
  has no size limit). A partition has its partitioned topic's quota unless it has its own,
  as Pulsar applies a partitioned topic's policies to each partition
  (`TopicName.getPartitionedTopicName`).
- Pulsar resolves each quota type on its own (`AbstractTopic`'s per-type
  `PolicyHierarchyValue`, read by `getBacklogQuota(BacklogQuotaType)`): for
  `destination_storage` the topic-level entry if the topic policies (`TopicPoliciesService`)
  have one, else the namespace's, else the broker default (`BacklogQuotaManager`'s
  `defaultQuota`); the same, independently, for `message_age`. An entry decides its type
  whatever its limit: a topic entry of -1 means unlimited there, not "ask the namespace".
  Only the entry's own field counts: a `message_age` entry carries a `limitSize` of 0 that
  Pulsar never reads for size, and the reverse.

With `source: both` the YAML overrides Pulsar per object: a YAML entry naming the topic (or
its partitioned topic) or its namespace decides the whole quota, as with `source: config`;
topics the YAML names nowhere get Pulsar's per-type resolution, where the YAML default (when
it sets a limit) takes the place of the broker's default. An operator's YAML entry is then a
deliberate, complete statement for what it names, and without Pulsar policies `both` decides
exactly as `config`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.config.settings import BacklogQuota, BacklogQuotas, PolicySource, RetentionPolicy
from exporter.pulsarnames import partitioned_parent
from exporter.sources.results import PulsarQuotas, QuotaType


class QuotaSource(StrEnum):
    """The level a quota (or one of its limits) came from."""

    TOPIC = "topic"
    NAMESPACE = "namespace"
    DEFAULT = "default"


_SPECIFICITY = (QuotaSource.TOPIC, QuotaSource.NAMESPACE, QuotaSource.DEFAULT)
_LEVELS = {level.value: level for level in QuotaSource}  # a lookup: the check asks per topic


@dataclass(frozen=True, slots=True)
class Limit:
    """One resolved limit: None is unlimited; `origin` says where it came from, e.g.
    `pulsar:topic` or `config:namespace` (README's status document, `limit_sources`)."""

    value: float | None
    policy: RetentionPolicy
    origin: str

    @property
    def level(self) -> QuotaSource:
        return _LEVELS[self.origin.partition(":")[2]]


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """Both limits of one topic. `source` and `quota` are derived once, here: a Resolver
    hands the same object to every topic of a namespace, and the check reads both per
    topic."""

    size: Limit  # bytes
    time: Limit  # seconds
    # the most specific level either limit came from (`quota_source`)
    source: QuotaSource = field(init=False, repr=False, compare=False)
    # one BacklogQuota: the size limit's policy when it has one (Pulsar checks size first)
    quota: BacklogQuota = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size, time = self.size, self.time
        policy = size.policy if size.value is not None or time.value is None else time.policy
        object.__setattr__(self, "source", min(size.level, time.level, key=_SPECIFICITY.index))
        object.__setattr__(self, "quota", BacklogQuota(
            limit_size=None if size.value is None else int(size.value),
            limit_time=time.value, policy=policy))

    def limit(self, kind: QuotaType) -> Limit:
        return self.size if kind is QuotaType.SIZE else self.time


def _size(value: float | None) -> float | None:
    return value if value is not None and value >= 0 else None


def _time(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def configured(topic: str, namespace: str, quotas: BacklogQuotas,
               ) -> tuple[BacklogQuota, QuotaSource]:
    """The most specific YAML quota object, whole, and its level."""
    if topic in quotas.topics:
        return quotas.topics[topic], QuotaSource.TOPIC
    parent = partitioned_parent(topic)
    if parent is not None and parent in quotas.topics:
        return quotas.topics[parent], QuotaSource.TOPIC
    if namespace in quotas.namespaces:
        return quotas.namespaces[namespace], QuotaSource.NAMESPACE
    return quotas.default, QuotaSource.DEFAULT


def _from_config(quota: BacklogQuota, level: QuotaSource) -> ResolvedQuota:
    origin = f"config:{level.value}"
    return ResolvedQuota(Limit(_size(quota.limit_size), quota.policy, origin),
                         Limit(_time(quota.limit_time), quota.policy, origin))


def _pulsar_type(topic: str, namespace: str, kind: QuotaType, pulsar: PulsarQuotas,
                 fallback: BacklogQuota | None) -> Limit:
    base = partitioned_parent(topic) or topic
    normal = _size if kind is QuotaType.SIZE else _time
    for level, entries in ((QuotaSource.TOPIC, pulsar.topics.get(topic)),
                           (QuotaSource.TOPIC, pulsar.topics.get(base)),
                           (QuotaSource.NAMESPACE, pulsar.namespaces.get(namespace))):
        if entries and kind in entries:
            entry = entries[kind]
            return Limit(normal(entry.limit), entry.policy, f"pulsar:{level.value}")
    if fallback is not None:  # the YAML default in place of the broker's
        return _from_config(fallback, QuotaSource.DEFAULT).limit(kind)
    default = pulsar.default.get(kind)
    if default is None:
        return Limit(None, RetentionPolicy.PRODUCER_REQUEST_HOLD, "pulsar:default")
    return Limit(normal(default.limit), default.policy, "pulsar:default")


def resolve(topic: str, namespace: str, quotas: BacklogQuotas,
            pulsar: PulsarQuotas | None = None) -> ResolvedQuota:
    """The quota that applies to `topic` under `quotas.source` (module docstring). Without
    Pulsar policies (`pulsar` None: not read yet, or no admin source) Pulsar has none."""
    mode = quotas.source
    if mode is PolicySource.CONFIG:
        return _from_config(*configured(topic, namespace, quotas))
    pulsar = pulsar or PulsarQuotas()
    fallback = None
    if mode is PolicySource.BOTH:
        quota, level = configured(topic, namespace, quotas)
        if level is not QuotaSource.DEFAULT:
            return _from_config(quota, level)
        if quota.limit_size is not None or quota.limit_time is not None:
            fallback = quota
    return ResolvedQuota(*(_pulsar_type(topic, namespace, kind, pulsar, fallback)
                           for kind in (QuotaType.SIZE, QuotaType.TIME)))


class Resolver:
    """`resolve` over one cycle's topics. A topic no topic-level entry names (the YAML's or
    Pulsar's, for it or its partitioned topic) resolves as its namespace does, so each
    namespace is resolved once, not once per topic."""

    __slots__ = ("_by_namespace", "_named", "pulsar", "quotas")

    def __init__(self, quotas: BacklogQuotas, pulsar: PulsarQuotas | None = None) -> None:
        self.quotas, self.pulsar = quotas, pulsar
        # the topic-level entries there are (none, mostly: then no topic needs a look)
        self._named = tuple(e for e in (quotas.topics, pulsar.topics if pulsar else {}) if e)
        self._by_namespace: dict[str, ResolvedQuota] = {}

    def __call__(self, topic: str, namespace: str) -> ResolvedQuota:
        if self._named and self._names(topic):
            return resolve(topic, namespace, self.quotas, self.pulsar)
        limits = self._by_namespace.get(namespace)
        if limits is None:
            limits = self._by_namespace[namespace] = resolve(topic, namespace, self.quotas,
                                                             self.pulsar)
        return limits

    def _names(self, topic: str) -> bool:
        parent = partitioned_parent(topic)
        return any(topic in entries or (parent is not None and parent in entries)
                   for entries in self._named)


def disagrees(limits: ResolvedQuota, size: float | None, time: float | None) -> bool:
    """Pulsar's limits as resolved here vs the broker's printed ones (None: not printed).
    Only limits taken from Pulsar's policies are compared: the YAML's override them here
    and not on the broker. Negative sizes and times of 0 or less are Pulsar's no limit."""
    for limit, value, floor in ((limits.size, size, 0.0), (limits.time, time, 1e-9)):
        if value is None or not math.isfinite(value) or not limit.origin.startswith("pulsar:"):
            continue
        theirs = value if value >= floor else None
        if theirs != limit.value:
            return True
    return False
