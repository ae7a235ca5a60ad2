"""What the sources hand on: admin stats, Pulsar's backlog-quota policies, and every
source's health.

Broker bodies never reach the driver: they are fetched and parsed inside the cycle's Spark
tasks (pipeline/scrape.py). A failing source keeps its last good data in use and says so
in its `SourceHealth`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from exporter.config.settings import ResourceGroup, RetentionPolicy


class ScrapeError(StrEnum):
    """Why a fetch failed; the values are the `reason` label of the scrape-error counter."""

    REFUSED = "refused"
    TIMEOUT = "timeout"
    HTTP_ERROR = "http_error"
    TLS = "tls"
    AUTH = "auth"
    MALFORMED = "malformed"
    TOO_LARGE = "too_large"  # a body over `body_size_limit` (Prometheus' scrape option)
    MISSING_FIELDS = "missing_fields"
    OTHER = "other"


class SourceKind(StrEnum):
    BROKER = "broker"
    ADMIN = "admin"


@dataclass(frozen=True)
class SourceHealth:
    source: str
    kind: SourceKind
    up: bool  # the last fetch succeeded
    last_success: float | None  # unix seconds; None if never
    last_error: ScrapeError | None
    last_error_detail: str  # one line, for logs and /api/v1/status
    errors: tuple[tuple[ScrapeError, int], ...]  # cumulative counts by reason


@dataclass(frozen=True)
class SubscriptionStats:
    """Admin REST view of one subscription (Apache Pulsar TopicStats.subscriptions[name])."""

    name: str
    msg_backlog: int
    backlog_size: int | None  # bytes; absent on old brokers
    unacked_messages: int
    consumers: int
    type: str | None  # Exclusive | Shared | Failover | Key_Shared
    # PIP-492 (Pulsar 5.0): this subscription's oldest unacknowledged message's age;
    # None when absent (older brokers) or -1 (not measured)
    oldest_backlog_message_age_seconds: float | None = None


@dataclass(frozen=True)
class TopicStats:
    """Admin REST view of one topic; the backlog age the broker's check measured (>= 3.2)."""

    topic: str  # persistent://tenant/ns/topic
    backlog_size: int | None
    msg_in_counter: int | None
    bytes_in_counter: int | None
    oldest_backlog_message_age_seconds: float | None  # None when absent or -1 (unknown)
    oldest_backlog_message_subscription: str | None
    subscriptions: tuple[SubscriptionStats, ...]


class QuotaType(StrEnum):
    """The `quota_type` label of PIP-323's eviction counters; Pulsar's BacklogQuotaType."""

    TIME = "time"  # message_age
    SIZE = "size"  # destination_storage


@dataclass(frozen=True, slots=True)
class TypedQuota:
    """One of Pulsar's per-type quota entries: a limit (bytes for size, seconds for time;
    negative, or a time of 0, is unlimited) and what the broker does on a breach."""

    limit: float
    policy: RetentionPolicy = RetentionPolicy.PRODUCER_REQUEST_HOLD


def _frozen(m: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class PulsarQuotas:
    """Pulsar's backlog-quota policies as the admin REST reports them (sources/policies.py),
    per quota type; the engine resolves them per topic (engine/backlog/quotas.py). A type missing
    from a level's mapping is not set at that level."""

    default: Mapping[QuotaType, TypedQuota] = field(default_factory=_frozen)  # broker's
    namespaces: Mapping[str, Mapping[QuotaType, TypedQuota]] = field(default_factory=_frozen)
    topics: Mapping[str, Mapping[QuotaType, TypedQuota]] = field(default_factory=_frozen)


@dataclass(frozen=True)
class BundleOwnership:
    namespace: str  # tenant/ns
    bundle: str  # 0x00000000_0x40000000
    broker: str | None


@dataclass(frozen=True)
class AdminSnapshot:
    fetched_at: float
    topics: tuple[TopicStats, ...]
    bundles: tuple[BundleOwnership, ...]
    quotas: PulsarQuotas | None = None  # Pulsar's backlog-quota policies, when read
    # Pulsar's resource groups with their namespace bindings, when read
    resource_groups: Mapping[str, ResourceGroup] | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle knows about the cluster, before any parsing."""

    taken_at: float
    admin: AdminSnapshot | None
    health: tuple[SourceHealth, ...]
