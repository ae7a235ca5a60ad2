"""The config's shape: frozen dataclasses the rest of the exporter reads, with every default.

Every default lives here, once. Sizes are bytes, durations seconds, rates per second.
`None` for a limit means "no limit" (Pulsar's -1). Kept apart from validation
(`sections.py`) so the contract reads on one page; import the types from here
(`exporter.config.settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from exporter.config import userinfo


def _frozen_map() -> Mapping:
    return MappingProxyType({})


class RetentionPolicy(StrEnum):
    """What the broker does when a backlog quota is exceeded (Pulsar's names, snake_case)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


class PolicySource(StrEnum):
    """Where backlog quotas and resource groups come from: the YAML, Pulsar's policies
    (admin REST), or both (the YAML overriding Pulsar: engine/backlog/quotas.py per quota type,
    engine/groups/resourcegroups.py per group)."""

    PULSAR = "pulsar"
    CONFIG = "config"
    BOTH = "both"


class MonitoringClass(StrEnum):
    """PIP-82's classes, as Pulsar's `ResourceGroupMonitoringClass`: what producers publish,
    what consumers are dispatched, and (Pulsar's master, not 4.0.8) what replicators send
    to remote clusters."""

    PUBLISH = "publish"
    DISPATCH = "dispatch"
    REPLICATION_DISPATCH = "replication_dispatch"


class Allocator(StrEnum):
    PULSAR = "pulsar"  # Pulsar's proportional ResourceQuotaCalculatorImpl
    FAIR = "fair"  # max-min fair share with demand estimation


@dataclass(frozen=True)
class BacklogQuota:
    """One quota object. The most specific object (topic > namespace > default) replaces the
    whole quota: a namespace entry that names only `limit_time` has no size limit."""

    limit_size: int | None = None  # bytes
    limit_time: float | None = None  # seconds
    policy: RetentionPolicy = RetentionPolicy.PRODUCER_REQUEST_HOLD


@dataclass(frozen=True)
class BacklogQuotas:
    default: BacklogQuota = BacklogQuota()
    namespaces: Mapping[str, BacklogQuota] = field(default_factory=_frozen_map)  # "tenant/ns"
    topics: Mapping[str, BacklogQuota] = field(default_factory=_frozen_map)  # full topic name
    enforce: bool = False  # dry-run by default: decide and export, never touch the cluster
    # Pulsar's own topics and cursors (engine/systemtopics.py): the broker never checks the
    # former against a quota and its size eviction would skip the latter; we leave both.
    system_topics: bool = False  # true: check Pulsar's system topics against quotas too
    evict_system_cursors: bool = False  # true: evict __compaction when over, as the broker
    # Enforcing instances take turns through an exclusive producer here (actions/lease.py).
    lock_topic: str = "persistent://public/default/pulsar-quota-exporter-enforcer"
    # Parsed configs: `both` when sources.admin is set, else `config` (config.parse).
    source: PolicySource = PolicySource.CONFIG


@dataclass(frozen=True)
class RateLimit:
    """-1 means unlimited, as in Pulsar's resource-group policies."""

    messages_per_second: int = -1
    bytes_per_second: int = -1


@dataclass(frozen=True)
class ResourceGroup:
    """A group's limits and what is bound to it. The most specific binding wins: a topic's
    (Pulsar's master: `TopicPolicies.resourceGroupName`) beats its namespace's, which beats
    its tenant's."""

    name: str
    publish: RateLimit = RateLimit()
    dispatch: RateLimit = RateLimit()
    # Pulsar's `replicationDispatchRateIn{Msgs,Bytes}`: all remote clusters as one pool.
    replication_dispatch: RateLimit = RateLimit()
    tenants: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()  # "tenant/ns"
    topics: tuple[str, ...] = ()  # full names, "persistent://tenant/ns/topic"

    def limit(self, cls: MonitoringClass) -> RateLimit:
        return {MonitoringClass.PUBLISH: self.publish, MonitoringClass.DISPATCH: self.dispatch,
                MonitoringClass.REPLICATION_DISPATCH: self.replication_dispatch}[cls]


# Our usage reports' own topic. Apache Pulsar's brokers publish their PIP-82 reports
# (ResourceUsageInfo protobufs) on non-persistent://pulsar/system/resource-usage: sharing
# it, each of ours would be noise to them and each of theirs malformed to us.
USAGE_TOPIC = "non-persistent://pulsar/system/pulsar-quota-exporter-usage"
# The brokers' own report topic (`ResourceUsageTopicTransportManager`), read, never written.
BROKER_USAGE_TOPIC = "non-persistent://pulsar/system/resource-usage"


@dataclass(frozen=True)
class ReportSigning:
    """HMAC-SHA256 over every usage report (transport/signing.py). The file holds one
    secret per line, the first signs; it is re-read when it changes."""

    secret_file: str
    rotation_grace: float = 600.0  # a secret gone from the file is still accepted this long


@dataclass(frozen=True)
class ResourceGroupEngine:
    participant: str = "exporter-0"
    topic: str = USAGE_TOPIC
    report_interval: float = 60.0
    suppression_tolerance_percent: float = 5.0  # Pulsar's default
    max_suppressed_rounds: int = 5
    stale_after: float = 600.0
    allocator: Allocator = Allocator.PULSAR
    # Parsed configs: `both` when sources.admin is set, else `config` (config.parse).
    source: PolicySource = PolicySource.CONFIG
    broker_reports_topic: str | None = BROKER_USAGE_TOPIC  # None (`false`): not read
    report_signing: ReportSigning | None = None  # None: reports unsigned, all accepted

    @property
    def max_report_gap(self) -> float:
        """The longest a live participant goes between reports: a report is forced after
        max_suppressed_rounds suppressed ones."""
        return self.report_interval * (self.max_suppressed_rounds + 1)


# Where Pulsar's modular load manager keeps its shedders (`loadBalancerLoadSheddingStrategy`).
PULSAR_SHEDDER_PACKAGE = "org.apache.pulsar.broker.loadbalance.impl"


class SheddingStrategy(StrEnum):
    """The load-shedding strategy the brokers run (`loadBalancerLoadSheddingStrategy` of
    `ModularLoadManagerImpl`); engine/load/shedders.py models each. The config accepts these
    names, Pulsar's class names and their fully qualified form (`pulsar_class`)."""

    THRESHOLD = "threshold"  # ThresholdShedder: Pulsar's default since 2.10
    UNIFORM = "uniform"  # UniformLoadShedder
    OVERLOAD = "overload"  # OverloadShedder
    AVG = "avg"  # AvgShedder: Pulsar 5.0's default (engine/load/avgshedder.py)

    @property
    def pulsar_class(self) -> str:
        simple = {"threshold": "ThresholdShedder", "uniform": "UniformLoadShedder",
                  "overload": "OverloadShedder", "avg": "AvgShedder"}[self.value]
        return f"{PULSAR_SHEDDER_PACKAGE}.{simple}"


@dataclass(frozen=True)
class LoadManager:
    """Pulsar 4.0's load-balancer defaults (`loadBalancer*` and the shedders' keys in
    broker.conf / ServiceConfiguration), snake_case without the `loadBalancer` prefix.
    Percentages are 0–100 unless Pulsar's own key is a fraction (`*_percentage` of the
    history and of the uniform shedder: 0.9 means 90 %, as in broker.conf)."""

    # OverloadShedder: loadBalancerBrokerOverloadedThresholdPercentage; the margin is the
    # fixed ADDITIONAL_THRESHOLD_PERCENT_MARGIN (0.05) of OverloadShedder and ThresholdShedder.
    overload_threshold_percent: float = 85.0
    shed_margin_percent: float = 5.0
    bundle_max_topics: int = 1000
    bundle_max_sessions: int = 1000
    bundle_max_msg_rate: float = 30000.0
    bundle_max_bandwidth: float = 100 * 1024 * 1024  # bytes/s, in + out (Pulsar: 100 MB)
    # Which shedder, and whether the leader sheds at all (loadBalancerSheddingEnabled).
    load_shedding_strategy: SheddingStrategy = SheddingStrategy.THRESHOLD
    shedding_enabled: bool = True
    shedding_interval: float = 60.0  # seconds: loadBalancerSheddingIntervalMinutes = 1
    shedding_grace_period: float = 1800.0  # seconds: loadBalancerSheddingGracePeriodMinutes
    # LocalBrokerData.getMaxResourceUsageWithWeight (memory is no longer weighed in 4.0).
    cpu_resource_weight: float = 1.0
    direct_memory_resource_weight: float = 0.0
    bandwidth_in_resource_weight: float = 1.0
    bandwidth_out_resource_weight: float = 1.0
    # ThresholdShedder
    broker_threshold_shedder_percentage: float = 10.0
    history_resource_percentage: float = 0.9  # a fraction, as Pulsar's key
    bundle_unload_min_throughput_threshold: float = 10 * 1024 * 1024  # bytes/s (Pulsar: 10 MB)
    lower_boundary_shedding_enabled: bool = False
    # UniformLoadShedder (≤ 0 turns a difference threshold off, as in Pulsar)
    msg_rate_difference_shedder_threshold: float = 50.0  # percent
    msg_throughput_multiplier_difference_shedder_threshold: float = 4.0  # a multiplier
    max_unload_percentage: float = 0.2  # a fraction, as Pulsar's key
    max_unload_bundle_num_per_shedding: int = -1  # -1: no limit
    min_unload_message: int = 1000  # msgs/s
    min_unload_message_throughput: int = 1024 * 1024  # bytes/s
    # AvgShedder (loadBalancerAvgShedder*): score gaps in percentage points, and how many
    # consecutive runs a gap must last; it also uses the three keys above.
    avg_shedder_low_threshold: int = 15  # Pulsar's keys are int
    avg_shedder_high_threshold: int = 40
    avg_shedder_hit_count_low_threshold: int = 8
    avg_shedder_hit_count_high_threshold: int = 2


@dataclass(frozen=True)
class TlsClient:
    """A client's TLS (`tls_config`, Prometheus' names). Files are read when the config is
    loaded (and on every reload): the broker fetches run in Spark tasks, which may be on
    machines without them. The paths stay for pulsar-client, which wants files."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None  # the name the certificate must carry (and SNI)
    insecure_skip_verify: bool = False
    # The files' contents (config/auth.py); `yaml: None`: no key of their own.
    ca_pem: str | None = field(default=None, repr=False, metadata={"yaml": None})
    cert_pem: str | None = field(default=None, repr=False, metadata={"yaml": None})
    key_pem: str | None = field(default=None, repr=False, metadata={"yaml": None})


def _take_userinfo(source: BrokerSource | AdminSource) -> None:
    """Credentials in the URL become the Authorization header (unless one is given) and the
    URL keeps only its shown form (config/userinfo.py), whoever builds the source."""
    if source.authorization is None:
        object.__setattr__(source, "authorization", userinfo.basic_authorization(source.url))
    object.__setattr__(source, "url", userinfo.shown(source.url))


@dataclass(frozen=True)
class BrokerSource:
    url: str  # a password in it is shown as <secret>: see config/userinfo.py
    timeout: float = 10.0
    # The Authorization header, from `authorization` or `basic_auth` (config/auth.py) or
    # the URL's userinfo; never printed. The reference file shows both keys.
    authorization: str | None = field(default=None, repr=False, metadata={"yaml": None})
    tls: TlsClient | None = field(default=None, metadata={"yaml": "tls_config"})
    # Uncompressed bytes a body may have, 0: no limit (Prometheus' `body_size_limit`).
    # A gzip bomb is cut here, not only by the deadline.
    body_size_limit: int = 1 << 30

    def __post_init__(self) -> None:
        _take_userinfo(self)


@dataclass(frozen=True)
class AdminSource:
    url: str
    token_file: str | None = None
    timeout: float = 10.0
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    # "tenant/namespace" to walk; empty: every tenant's (listing tenants needs a superuser,
    # a tenant's namespaces its admin, a namespace's topics only produce or consume there)
    namespaces: tuple[str, ...] = ()
    # Basic credentials from the URL's userinfo, sent when no token_file is given
    authorization: str | None = field(default=None, repr=False, metadata={"yaml": None})
    # The hosts of `sources.brokers`: the operator named them, so a redirect there (Pulsar's
    # 307 to a topic's owner) may carry the credentials (adminhttp.py)
    broker_hosts: tuple[str, ...] = field(default=(), metadata={"yaml": None})

    def __post_init__(self) -> None:
        _take_userinfo(self)


@dataclass(frozen=True)
class Sources:
    brokers: tuple[BrokerSource, ...] = ()
    admin: AdminSource | None = None
    service_url: str | None = None  # pulsar://host:6650: evictions and the usage-report topic
    service_token_file: str | None = None  # Pulsar token authentication, re-read per connection
    service_tls: TlsClient | None = field(default=None, metadata={"yaml": "service_tls_config"})


@dataclass(frozen=True)
class TopicFilter:
    """Regular expressions (RE2, as Prometheus' relabelling: anchored at both ends) over
    full topic names, partitions included. A topic is kept when `allow` is empty or one
    matches, and no `deny` matches."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.allow or self.deny)


KEEP_ALL = TopicFilter()


@dataclass(frozen=True)
class Filters:
    """What is left out, applied in the Spark tasks before anything is aggregated: a topic
    filtered out is not checked, summed into its namespace or exported."""

    topics: TopicFilter = KEEP_ALL
    # Topic-level series published at most for this many topics (the rest dropped, counted
    # in pulsar_quota_exporter_topics_dropped); every topic is still checked. None: no cap.
    max_topics: int | None = None


@dataclass(frozen=True)
class Tls:
    cert_file: str
    key_file: str


@dataclass(frozen=True)
class Exposition:
    listen: str = "127.0.0.1:10049"
    topic_level: bool = True
    # pulsar_subscription_storage_backlog_age_seconds (PIP-492): a series per subscription
    subscription_backlog_age: bool = False
    tls: Tls | None = None
    basic_auth: Mapping[str, str] = field(default_factory=_frozen_map)  # user → bcrypt hash
    # The eviction counters of a topic not seen for this long are dropped (deleted topics'
    # series would otherwise live as long as the process). Seconds.
    forget_after: float = 3600.0


@dataclass(frozen=True)
class Spark:
    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=_frozen_map)


@dataclass(frozen=True)
class Config:
    cluster: str
    check_interval: float = 60.0
    sources: Sources = Sources()
    backlog_quotas: BacklogQuotas = BacklogQuotas()
    resource_groups: Mapping[str, ResourceGroup] = field(default_factory=_frozen_map)
    resource_group_engine: ResourceGroupEngine = ResourceGroupEngine()
    load_manager: LoadManager = LoadManager()
    filters: Filters = Filters()
    exposition: Exposition = Exposition()
    spark: Spark = Spark()
