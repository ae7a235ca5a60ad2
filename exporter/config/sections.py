"""One reader per config section: YAML mapping → frozen dataclass, errors into the `Reader`.

Cross-field checks that stay inside one section (duplicate brokers, a tenant bound to two
groups, stale_after vs report_interval) live here too; checks across sections live in `parse`.
"""

from __future__ import annotations

import difflib
import socket
from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import urlsplit

from exporter.config import auth, userinfo
from exporter.config import values as cv
from exporter.config.reader import Convert, Reader, T, expected, join, schema_keys
from exporter.config.settings import (
    AdminSource,
    Allocator,
    BacklogQuota,
    BacklogQuotas,
    BrokerSource,
    Exposition,
    Filters,
    LoadManager,
    RateLimit,
    ReportSigning,
    ResourceGroup,
    ResourceGroupEngine,
    RetentionPolicy,
    SheddingStrategy,
    Sources,
    Spark,
    Tls,
    TopicFilter,
)
from exporter.config.units import format_duration, parse_duration


def sources(r: Reader, value: object, path: str) -> Sources:
    m = r.mapping(value, path, ("brokers", "admin", "service_url", "service_token_file",
                                "service_tls_config"))
    brokers: list[BrokerSource] = []
    seen: dict[str, str] = {}
    for bpath, item in r.items(m.get("brokers"), f"{path}.brokers"):
        b = r.mapping(item, bpath, ("url", "timeout", "authorization", "basic_auth",
                                    "tls_config", "body_size_limit"), nullable=False)
        if isinstance(item, dict) and "url" not in b:
            r.error(f"{bpath}.url", "required: the broker's /metrics URL")
        url = r.get(b, "url", bpath, cv.url("http", "https"), None)
        timeout = r.get(b, "timeout", bpath, cv.duration, BrokerSource.timeout)
        body_size_limit = r.get(b, "body_size_limit", bpath, cv.size,
                                BrokerSource.body_size_limit)
        if url is None:
            continue
        if userinfo.has_userinfo(url) and ("authorization" in b or "basic_auth" in b):
            r.error(f"{bpath}.url", "credentials in the URL and in authorization/basic_auth: "
                    "give one")
        if (shown := userinfo.shown(url)) in seen:
            r.error(f"{bpath}.url", f"'{shown}' is already listed at {seen[shown]}")
        else:
            seen[shown] = f"{bpath}.url"
            brokers.append(BrokerSource(url=url, timeout=timeout,
                                        body_size_limit=body_size_limit,
                                        authorization=auth.authorization(r, b, bpath),
                                        tls=auth.tls_config(r, b.get("tls_config"),
                                                            f"{bpath}.tls_config")))
    if not m.get("brokers"):
        r.error(f"{path}.brokers", "at least one broker /metrics URL is required")
    admin = None
    if "admin" in m:
        a = r.mapping(m["admin"], f"{path}.admin",
                      schema_keys(AdminSource, exclude=("authorization", "broker_hosts")))
        if isinstance(m["admin"], dict) and "url" not in a:
            r.error(f"{path}.admin.url", "required when sources.admin is given")
        admin_url = r.get(a, "url", f"{path}.admin", cv.url("http", "https"), "")
        admin_token = r.get(a, "token_file", f"{path}.admin", cv.string, None)
        if userinfo.has_userinfo(admin_url) and admin_token is not None:
            r.error(f"{path}.admin.url", "credentials in the URL and a token_file: give one")
        # readable now (re-read at every use: a rotated token is picked up)
        auth.secret(r, f"{path}.admin.token_file", admin_token)
        admin_ca = r.get(a, "ca_file", f"{path}.admin", cv.string, None)
        auth.ca_bundle(r, f"{path}.admin.ca_file", admin_ca)
        admin = AdminSource(
            url=admin_url,
            token_file=admin_token,
            timeout=r.get(a, "timeout", f"{path}.admin", cv.duration, AdminSource.timeout),
            ca_file=admin_ca,
            insecure_skip_verify=r.get(
                a, "insecure_skip_verify", f"{path}.admin", cv.boolean, False
            ),
            namespaces=_namespaces(r, a.get("namespaces"), f"{path}.admin.namespaces"),
            broker_hosts=tuple(sorted({(urlsplit(b.url).hostname or "").lower()
                                       for b in brokers})),
        )
    service_url = r.get(m, "service_url", path, cv.url("pulsar", "pulsar+ssl"), None)
    token_file = r.get(m, "service_token_file", path, cv.string, None)
    auth.secret(r, f"{path}.service_token_file", token_file)  # readable now, re-read later
    tls = auth.tls_config(r, m.get("service_tls_config"), f"{path}.service_tls_config")
    if tls is not None and tls.server_name is not None:
        r.error(f"{path}.service_tls_config.server_name",
                "not supported by the Pulsar client: it verifies the service URL's host")
    return Sources(brokers=tuple(brokers), admin=admin, service_url=service_url,
                   service_token_file=token_file, service_tls=tls)


def _namespaces(r: Reader, value: object, path: str) -> tuple[str, ...]:
    """A list of distinct "tenant/namespace" names (an empty list is an error: leaving
    the key out is how to say "every tenant's")."""
    if isinstance(value, list) and not value:
        r.error(path, "expected at least one tenant/namespace; leave the key out to walk "
                "every tenant")
    names: list[str] = []
    for npath, item in r.items(value, path):
        name = r.check(item, npath, cv.namespace, None)
        if name in names:
            r.error(npath, f"namespace '{name}' is listed twice")
        elif name is not None:
            names.append(name)
    return tuple(names)


def backlog_quotas(r: Reader, value: object, path: str) -> BacklogQuotas:
    m = r.mapping(value, path, schema_keys(BacklogQuotas))
    default = _quota(r, m["default"], f"{path}.default") if "default" in m else BacklogQuota()
    by_scope = {}
    for scope, check in (("namespaces", cv.namespace), ("topics", cv.topic("persistent"))):
        entries: dict[str, BacklogQuota] = {}
        for name, item in r.mapping(m.get(scope), f"{path}.{scope}").items():
            qpath = join(f"{path}.{scope}", name)
            if r.check(name, qpath, check, None) is not None:
                entries[name] = _quota(r, item, qpath)
        by_scope[scope] = MappingProxyType(entries)
    return BacklogQuotas(
        default=default,
        namespaces=by_scope["namespaces"],
        topics=by_scope["topics"],
        enforce=r.get(m, "enforce", path, cv.boolean, BacklogQuotas.enforce),
        lock_topic=r.get(m, "lock_topic", path, cv.topic("persistent"),
                         BacklogQuotas.lock_topic),
        system_topics=r.get(m, "system_topics", path, cv.boolean, False),
        evict_system_cursors=r.get(m, "evict_system_cursors", path, cv.boolean, False),
    )


def _quota(r: Reader, value: object, path: str) -> BacklogQuota:
    q = r.mapping(value, path, schema_keys(BacklogQuota), nullable=False)
    return BacklogQuota(
        limit_size=r.get(q, "limit_size", path, cv.quota_size, None),
        limit_time=r.get(q, "limit_time", path, cv.quota_time, None),
        policy=r.get(q, "policy", path, cv.choice(RetentionPolicy, "policy"), BacklogQuota.policy),
    )


def resource_groups(r: Reader, value: object, path: str) -> Mapping[str, ResourceGroup]:
    groups: dict[str, ResourceGroup] = {}
    owners: dict[tuple[str, str], str] = {}  # (kind, tenant or namespace) → group
    for name, item in r.mapping(value, path).items():
        gpath = join(path, name)
        g = r.mapping(item, gpath, schema_keys(ResourceGroup, exclude=("name",)), nullable=False)
        bindings = {}
        for kind, check in (("tenant", cv.tenant), ("namespace", cv.namespace),
                            ("topic", cv.any_topic)):
            bound: list[str] = []
            for bpath, entry in r.items(g.get(f"{kind}s"), f"{gpath}.{kind}s"):
                entry = r.check(entry, bpath, check, None)
                owner = owners.setdefault((kind, entry), name) if entry is not None else None
                if owner == name and entry in bound:
                    r.error(bpath, f"{kind} '{entry}' is listed twice")
                elif owner is not None and owner != name:
                    r.error(
                        bpath,
                        f"{kind} '{entry}' is bound to both '{owner}' and '{name}'; "
                        f"a {kind} can belong to one resource group only",
                    )
                elif entry is not None:
                    bound.append(entry)
            bindings[kind] = tuple(bound)
        groups[name] = ResourceGroup(
            name=name,
            publish=_rate_limit(r, g.get("publish"), f"{gpath}.publish"),
            dispatch=_rate_limit(r, g.get("dispatch"), f"{gpath}.dispatch"),
            replication_dispatch=_rate_limit(r, g.get("replication_dispatch"),
                                             f"{gpath}.replication_dispatch"),
            tenants=bindings["tenant"],
            namespaces=bindings["namespace"],
            topics=bindings["topic"],
        )
    return MappingProxyType(groups)


def _rate_limit(r: Reader, value: object, path: str) -> RateLimit:
    m = r.mapping(value, path, schema_keys(RateLimit))
    unlimited = " (-1 means unlimited)"
    return RateLimit(
        messages_per_second=r.get(m, "messages_per_second", path, cv.integer(-1, unlimited), -1),
        bytes_per_second=r.get(m, "bytes_per_second", path, cv.byte_rate, -1),
    )


def resource_group_engine(r: Reader, value: object) -> ResourceGroupEngine:
    path, d = "resource_group_engine", ResourceGroupEngine
    m = r.mapping(value, path, schema_keys(ResourceGroupEngine))
    engine = ResourceGroupEngine(
        participant=r.get(m, "participant", path, cv.string, socket.gethostname()),
        topic=r.get(m, "topic", path, cv.topic("non-persistent"), d.topic),
        report_interval=r.get(m, "report_interval", path, cv.duration, d.report_interval),
        suppression_tolerance_percent=r.get(
            m, "suppression_tolerance_percent", path, cv.percent, d.suppression_tolerance_percent
        ),
        max_suppressed_rounds=r.get(
            m, "max_suppressed_rounds", path, cv.integer(0, maximum=10_000),
            d.max_suppressed_rounds
        ),
        stale_after=r.get(m, "stale_after", path, cv.duration, d.stale_after),
        allocator=r.get(m, "allocator", path, cv.choice(Allocator, "allocator"), d.allocator),
        broker_reports_topic=r.get(m, "broker_reports_topic", path,
                                   cv.switchable(cv.topic("non-persistent")),
                                   d.broker_reports_topic),
        report_signing=_report_signing(r, m.get("report_signing"), f"{path}.report_signing")
        if "report_signing" in m else None,
    )
    if engine.broker_reports_topic == engine.topic:
        r.error(f"{path}.broker_reports_topic",
                f"must differ from {path}.topic ({engine.topic}): the brokers' reports and "
                "ours are different formats, each would be refused as malformed by the other")
    silent = engine.max_report_gap
    if engine.stale_after <= silent:
        r.error(
            f"{path}.stale_after",
            f"must be longer than report_interval × (max_suppressed_rounds + 1) "
            f"({format_duration(silent)}, the longest a live peer can seem silent), "
            f"found {format_duration(engine.stale_after)}: live peers would expire between reports",
        )
    return engine


def _report_signing(r: Reader, value: object, path: str) -> ReportSigning | None:
    m = r.mapping(value, path, schema_keys(ReportSigning), nullable=False)
    if isinstance(value, dict) and "secret_file" not in m:
        r.error(f"{path}.secret_file", "required: the file holding the shared secret")
        return None
    secret_file = r.get(m, "secret_file", path, cv.string, None)
    if secret_file is not None and (text := auth.read(r, f"{path}.secret_file",
                                                      secret_file)) is not None:
        try:
            auth.parse_secrets(text)
        except ValueError as exc:
            r.error(f"{path}.secret_file", f"{secret_file!r}: {exc}")
    grace = r.get(m, "rotation_grace", path, cv.duration, ReportSigning.rotation_grace)
    return None if secret_file is None else ReportSigning(secret_file, grace)


def load_manager(r: Reader, value: object, path: str) -> LoadManager:
    m, d = r.mapping(value, path, schema_keys(LoadManager)), LoadManager

    def get(key: str, convert: Convert[T]) -> T:
        return r.get(m, key, path, convert, getattr(d, key))

    return LoadManager(
        overload_threshold_percent=get("overload_threshold_percent", cv.percent),
        shed_margin_percent=get("shed_margin_percent", cv.percent),
        bundle_max_topics=get("bundle_max_topics", cv.integer(1)),
        bundle_max_sessions=get("bundle_max_sessions", cv.integer(0, " (0 turns it off)")),
        bundle_max_msg_rate=get("bundle_max_msg_rate", cv.positive),
        bundle_max_bandwidth=get("bundle_max_bandwidth", cv.bandwidth),
        load_shedding_strategy=get("load_shedding_strategy", _shedding_strategy),
        shedding_enabled=get("shedding_enabled", cv.boolean),
        shedding_interval=get("shedding_interval", cv.duration),
        shedding_grace_period=get("shedding_grace_period", _duration_or_zero),
        cpu_resource_weight=get("cpu_resource_weight", _weight),
        direct_memory_resource_weight=get("direct_memory_resource_weight", _weight),
        bandwidth_in_resource_weight=get("bandwidth_in_resource_weight", _weight),
        bandwidth_out_resource_weight=get("bandwidth_out_resource_weight", _weight),
        broker_threshold_shedder_percentage=get("broker_threshold_shedder_percentage",
                                                cv.percent),
        history_resource_percentage=get("history_resource_percentage", _fraction),
        bundle_unload_min_throughput_threshold=get("bundle_unload_min_throughput_threshold",
                                                   _byte_rate_or_zero),
        lower_boundary_shedding_enabled=get("lower_boundary_shedding_enabled", cv.boolean),
        msg_rate_difference_shedder_threshold=get("msg_rate_difference_shedder_threshold",
                                                  cv.number),
        msg_throughput_multiplier_difference_shedder_threshold=get(
            "msg_throughput_multiplier_difference_shedder_threshold", cv.number),
        max_unload_percentage=get("max_unload_percentage", _fraction),
        max_unload_bundle_num_per_shedding=get("max_unload_bundle_num_per_shedding",
                                               cv.integer(-1, " (-1 means no limit)")),
        min_unload_message=get("min_unload_message", cv.integer(0)),
        min_unload_message_throughput=get("min_unload_message_throughput",
                                          lambda v: int(_byte_rate_or_zero(v))),
        avg_shedder_low_threshold=get("avg_shedder_low_threshold", cv.integer(0)),
        avg_shedder_high_threshold=get("avg_shedder_high_threshold", cv.integer(0)),
        avg_shedder_hit_count_low_threshold=get("avg_shedder_hit_count_low_threshold",
                                                cv.integer(0)),
        avg_shedder_hit_count_high_threshold=get("avg_shedder_hit_count_high_threshold",
                                                 cv.integer(0)),
    )


# Pulsar's names for the modelled shedders: ours, the class's simple and qualified names.
_SHEDDERS = {
    name: strategy
    for strategy in SheddingStrategy
    for name in (strategy.value, strategy.pulsar_class.rpartition(".")[2],
                 strategy.pulsar_class)
}


def _shedding_strategy(value: object) -> SheddingStrategy:
    short = ", ".join(s.value for s in SheddingStrategy)
    if not isinstance(value, str):
        raise expected(f"one of {short} (or Pulsar's class name)", value)
    if value in _SHEDDERS:
        return _SHEDDERS[value]
    close = difflib.get_close_matches(value, tuple(_SHEDDERS), n=1)
    hint = (f" (did you mean '{close[0]}'?)" if close
            else f" (expected one of {short}, or Pulsar's class name such as "
                 f"'{SheddingStrategy.THRESHOLD.pulsar_class}')")
    raise ValueError(f"unknown load shedding strategy '{value}'{hint}")


def _weight(value: object) -> float:
    weight = cv.number(value)
    if weight < 0:
        raise ValueError(f"must be at least 0 (0 leaves the resource out), found {value}")
    return weight


def _fraction(value: object) -> float:
    """Pulsar's `*Percentage` keys that hold a fraction (0.9 = 90 %)."""
    amount = cv.number(value)
    if not 0 <= amount <= 1:
        raise ValueError(f"must be a fraction from 0 to 1 as in broker.conf (0.9 = 90 %), "
                         f"found {value}")
    return amount


def _duration_or_zero(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise expected("a duration such as 30m", value)
    return parse_duration(value)  # refuses a negative one


def _byte_rate_or_zero(value: object) -> float:
    """A size per second (`10MiB`, `10MiB/s`, plain bytes), 0 allowed."""
    if isinstance(value, str) and value.strip().endswith("/s"):
        value = value.strip()[:-2]
    return float(cv.size(value))


def exposition(r: Reader, value: object, path: str) -> Exposition:
    m = r.mapping(value, path, schema_keys(Exposition))
    tls = None
    if "tls" in m:
        t = r.mapping(m["tls"], f"{path}.tls", schema_keys(Tls))
        for key in schema_keys(Tls):
            if isinstance(m["tls"], dict) and key not in t:
                r.error(f"{path}.tls.{key}", "required when exposition.tls is given")
        tls = Tls(
            cert_file=r.get(t, "cert_file", f"{path}.tls", cv.string, ""),
            key_file=r.get(t, "key_file", f"{path}.tls", cv.string, ""),
        )
        if tls.cert_file and tls.key_file:
            auth.server_pair(r, f"{path}.tls", tls.cert_file, tls.key_file)
    users: dict[str, str] = {}
    for user, hashed in r.mapping(m.get("basic_auth"), f"{path}.basic_auth").items():
        upath = join(f"{path}.basic_auth", user)
        if ":" in user:
            r.error(upath, "a basic-auth user name cannot contain ':'")
        elif (checked := r.check(hashed, upath, cv.bcrypt, None)) is not None:
            users[user] = checked
    return Exposition(
        listen=r.get(m, "listen", path, cv.listen, Exposition.listen),
        topic_level=r.get(m, "topic_level", path, cv.boolean, Exposition.topic_level),
        subscription_backlog_age=r.get(m, "subscription_backlog_age", path, cv.boolean,
                                       Exposition.subscription_backlog_age),
        forget_after=r.get(m, "forget_after", path, cv.duration,
                           Exposition.forget_after),
        tls=tls,
        basic_auth=MappingProxyType(users),
    )


def filters(r: Reader, value: object, path: str) -> Filters:
    m = r.mapping(value, path, schema_keys(Filters))
    t = r.mapping(m.get("topics"), f"{path}.topics", schema_keys(TopicFilter))
    lists: dict[str, tuple[str, ...]] = {}
    for key in schema_keys(TopicFilter):
        lists[key] = tuple(
            regex for ipath, item in r.items(t.get(key), f"{path}.topics.{key}")
            if (regex := r.check(item, ipath, cv.topic_regex, None)) is not None)
    return Filters(
        topics=TopicFilter(**lists),
        max_topics=r.get(m, "max_topics", path, cv.integer(1), None),
    )


def spark(r: Reader, value: object, path: str) -> Spark:
    m = r.mapping(value, path, schema_keys(Spark))
    conf: dict[str, str] = {}
    for key, item in r.mapping(m.get("conf"), f"{path}.conf").items():
        cpath = join(f"{path}.conf", key)
        if not key.startswith("spark."):
            r.error(cpath, "Spark only reads keys starting with 'spark.'")
        elif (text := r.check(item, cpath, cv.spark_value, None)) is not None:
            conf[key] = text
    return Spark(
        master=r.get(m, "master", path, cv.spark_master, Spark.master), conf=MappingProxyType(conf)
    )
