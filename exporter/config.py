"""The user's contract: YAML → a frozen, validated `Config`, or every error with its key path.

Every default lives here, once. Sizes are bytes, durations seconds, rates per second.
`None` for a limit means "no limit" (Pulsar's -1).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from exporter.units import format_duration, parse_duration, parse_size


def _frozen_map() -> Mapping:
    return MappingProxyType({})


class RetentionPolicy(StrEnum):
    """What the broker does when a backlog quota is exceeded (Pulsar's names, snake_case)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


class MonitoringClass(StrEnum):
    PUBLISH = "publish"
    DISPATCH = "dispatch"


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


@dataclass(frozen=True)
class RateLimit:
    """-1 means unlimited, as in Pulsar's resource-group policies."""

    messages_per_second: int = -1
    bytes_per_second: int = -1


@dataclass(frozen=True)
class ResourceGroup:
    name: str
    publish: RateLimit = RateLimit()
    dispatch: RateLimit = RateLimit()
    tenants: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()  # "tenant/ns"; a namespace binding beats its tenant's

    def limit(self, cls: MonitoringClass) -> RateLimit:
        return self.publish if cls is MonitoringClass.PUBLISH else self.dispatch


@dataclass(frozen=True)
class ResourceGroupEngine:
    participant: str = "exporter-0"
    topic: str = "non-persistent://pulsar/system/resource-usage"
    report_interval: float = 60.0
    suppression_tolerance_percent: float = 5.0  # Pulsar's default
    max_suppressed_rounds: int = 5
    stale_after: float = 600.0
    allocator: Allocator = Allocator.PULSAR


@dataclass(frozen=True)
class LoadManager:
    """Pulsar's load-balancer defaults (broker.conf, seed 004)."""

    overload_threshold_percent: float = 85.0
    shed_margin_percent: float = 5.0
    bundle_max_topics: int = 1000
    bundle_max_sessions: int = 1000
    bundle_max_msg_rate: float = 30000.0
    bundle_max_bandwidth: float = 100 * 1024 * 1024  # bytes/s, in + out (Pulsar: 100 MB)


@dataclass(frozen=True)
class BrokerSource:
    url: str
    timeout: float = 10.0


@dataclass(frozen=True)
class AdminSource:
    url: str
    token_file: str | None = None
    timeout: float = 10.0
    ca_file: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class Sources:
    brokers: tuple[BrokerSource, ...] = ()
    admin: AdminSource | None = None
    service_url: str | None = None  # pulsar://host:6650: evictions and the usage-report topic


@dataclass(frozen=True)
class Tls:
    cert_file: str
    key_file: str


@dataclass(frozen=True)
class Exposition:
    listen: str = "127.0.0.1:9964"
    topic_level: bool = True
    tls: Tls | None = None
    basic_auth: Mapping[str, str] = field(default_factory=_frozen_map)  # user → bcrypt hash


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
    exposition: Exposition = Exposition()
    spark: Spark = Spark()


class ConfigError(Exception):
    """Every problem found in one file, each already formatted `FILE: key.path: message`."""

    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = errors


# ---------------------------------------------------------------------------- loading
# Key paths read like jq: `sources.brokers[0].url`, and `["public/ns"]` for user-chosen
# keys that are not plain identifiers. A key set to null (or left empty) counts as absent.

T = TypeVar("T")
Convert = Callable[[object], T]

_IDENT = re.compile(r"[A-Za-z0-9_-]+")
_PULSAR_NAME = re.compile(r"[-=:.\w]+", re.ASCII)  # Pulsar's NamedEntity charset (Java's \w)
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")
_SPARK_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|(spark|k8s|mesos)://\S+|yarn")


def load(path: str | os.PathLike[str]) -> Config:
    """Read, parse and validate one YAML file; raise `ConfigError` with every problem found."""
    filename = os.fspath(path)
    try:
        with open(filename, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError([f"{filename}: cannot read: {e.strerror or e}"]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"{filename}: cannot read: not UTF-8 text (byte {e.start})"]) from None
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}" if mark else "somewhere"
        column = f" (column {mark.column + 1})" if mark else ""
        raise ConfigError([f"{filename}: {where}: not valid YAML: {e.problem}{column}"]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"{filename}: not valid YAML: {e}"]) from None
    finally:
        loader.dispose()
    errors = [
        f"{filename}: line {line}: duplicate key '{key}' (YAML would silently keep the last)"
        for line, key in loader.duplicates
    ]
    try:
        config = parse(data, filename)
    except ConfigError as e:
        raise ConfigError(errors + e.errors) from None
    if errors:
        raise ConfigError(errors)
    return config


class _Loader(yaml.SafeLoader):
    """YAML lets a repeated key silently win; we want to say so, so we record them."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, str]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and not key_node.tag.endswith(":merge"):
                key = self.construct_object(key_node)
                if key in seen:
                    self.duplicates.append((key_node.start_mark.line + 1, str(key)))
                seen.add(key)
        return super().construct_mapping(node, deep)


def parse(data: object, filename: str) -> Config:
    """Validate already-loaded YAML (`data`) into a `Config`; errors name `filename`."""
    if not isinstance(data, dict):
        found = "an empty document" if data is None else _describe(data)
        raise ConfigError(
            [f"{filename}: top level: expected a mapping of settings (cluster: …), found {found}"]
        )
    r = _Reader(filename)
    top = r.mapping(data, "", _keys(Config))
    if "cluster" not in top:
        r.error("cluster", "required: the cluster name, put as a label on every series")
    config = Config(
        cluster=r.get(top, "cluster", "", _string, ""),
        check_interval=r.get(top, "check_interval", "", _duration, Config.check_interval),
        sources=_sources(r, top.get("sources"), "sources"),
        backlog_quotas=_backlog_quotas(r, top.get("backlog_quotas"), "backlog_quotas"),
        resource_groups=_resource_groups(r, top.get("resource_groups"), "resource_groups"),
        resource_group_engine=_rg_engine(r, top.get("resource_group_engine")),
        load_manager=_load_manager(r, top.get("load_manager"), "load_manager"),
        exposition=_exposition(r, top.get("exposition"), "exposition"),
        spark=_spark(r, top.get("spark"), "spark"),
    )
    if config.backlog_quotas.enforce and config.sources.service_url is None:
        r.error("backlog_quotas.enforce", "true needs sources.service_url: evictions use it")
    if r.errors:
        raise ConfigError(r.errors)
    return config


class _Reader:
    """Walks the YAML, collecting every error instead of stopping at the first."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.errors: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{self.filename}: {path}: {message}")

    def mapping(
        self, value: object, path: str, known: tuple[str, ...] | None = None, nullable: bool = True
    ) -> dict[str, object]:
        """String-keyed entries of a mapping; `known` limits the keys (schema sections, whose
        null entries are dropped), None allows any key (user-named entries, kept as they are)."""
        if value is None and nullable:
            return {}
        if not isinstance(value, dict):
            self.error(path or "top level", f"expected a mapping, found {_describe(value)}")
            return {}
        out: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                hint = "; quote it (YAML reads yes/no/on/off as booleans)" * isinstance(key, bool)
                self.error(
                    path or "top level", f"keys must be non-empty strings, found {key!r}{hint}"
                )
            elif known is not None and key not in known:
                self.error(_join(path, key), "unknown key" + _did_you_mean(key, known))
            elif known is None or item is not None:
                out[key] = item
        return out

    def items(self, value: object, path: str) -> list[tuple[str, object]]:
        """(path, item) for each entry of a list."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"expected a list, found {_describe(value)}")
            return []
        return [(f"{path}[{i}]", item) for i, item in enumerate(value)]

    def get(self, m: Mapping[str, object], key: str, path: str, convert: Convert, default: T) -> T:
        """`convert(m[key])`, or `default` when absent or wrong (the error is recorded)."""
        if key not in m:
            return default
        return self.check(m[key], _join(path, key), convert, default)

    def check(self, value: object, path: str, convert: Convert, default: T) -> T:
        try:
            return convert(value)
        except ValueError as e:
            self.error(path, str(e))
            return default


def _keys(cls: type, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name not in exclude)


def _join(path: str, key: str) -> str:
    if _IDENT.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f'{path}["{key}"]'


def _did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return (
        f" (did you mean '{close[0]}'?)" if close else f" (expected one of: {', '.join(choices)})"
    )


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value[:60]!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__} ({value})"  # YAML dates and the like


def _expected(what: str, value: object) -> ValueError:
    quote = "; quote it to make it a string" if "string" in what and value is not None else ""
    return ValueError(f"expected {what}, found {_describe(value)}{quote}")


# --------------------------------------------------------------------------- converters
# Each takes the YAML value and returns the typed value or raises ValueError(message).


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _expected("a string", value)
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _expected("true or false", value)
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _expected("a number", value)
    return float(value)


def _integer(minimum: int, note: str = "") -> Convert[int]:
    def convert(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _expected("an integer", value)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}{note}, found {value}")
        return value

    return convert


def _positive(value: object) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError(f"must be greater than 0, found {value}")
    return number


def _percent(value: object) -> float:
    number = _number(value)
    if not 0 <= number <= 100:
        raise ValueError(f"must be a percentage from 0 to 100, found {value}")
    return number


def _duration(value: object) -> float:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise _expected("a duration such as 90s", value)
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be longer than 0, found {value}")
    return seconds


def _size(value: object) -> int:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise _expected("a size such as 10GiB", value)
    return parse_size(value)


def _is_negative(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().startswith("-")
    return isinstance(value, int | float) and not isinstance(value, bool) and value < 0


def _quota_size(value: object) -> int:
    if _is_negative(value):
        raise ValueError(f"must not be negative, found {value}; leave the key out for no limit")
    return _size(value)


def _quota_time(value: object) -> float:
    if _is_negative(value):
        raise ValueError(f"must not be negative, found {value}; leave the key out for no limit")
    return _duration(value)


def _per_second(value: object) -> int:
    """A size per second: `10MiB`, `10MiB/s` or plain bytes."""
    if isinstance(value, str) and value.strip().endswith("/s"):
        value = value.strip()[:-2]
    return _size(value)


def _byte_rate(value: object) -> int:
    if value == -1 and not isinstance(value, bool):
        return -1
    if _is_negative(value):
        raise ValueError(
            f"must be -1 (unlimited) or a size per second such as 10MiB, found {value}"
        )
    return _per_second(value)


def _bandwidth(value: object) -> float:
    rate = _per_second(value)
    if rate <= 0:
        raise ValueError(f"must be greater than 0, found {value}")
    return float(rate)


def _choice(enum: type[StrEnum], what: str) -> Convert[Any]:
    def convert(value: object) -> StrEnum:
        names = tuple(member.value for member in enum)
        if not isinstance(value, str):
            raise _expected(f"one of {', '.join(names)}", value)
        if value not in names:
            raise ValueError(f"unknown {what} '{value}'" + _did_you_mean(value, names))
        return enum(value)

    return convert


def _url(*schemes: str) -> Convert[str]:
    def convert(value: object) -> str:
        example = " or ".join(f"{s}://…" for s in schemes)
        if not isinstance(value, str):
            raise _expected(f"a URL ({example})", value)
        try:
            parts = urlsplit(value.strip())
            host = parts.hostname
        except ValueError:  # e.g. an unclosed IPv6 bracket
            host = None
        if not host or parts.scheme not in schemes:
            raise ValueError(f"expected a URL starting with {example}, found '{value}'")
        return value.strip()

    return convert


def _listen(value: object) -> str:
    if not isinstance(value, str):
        raise _expected("host:port such as 127.0.0.1:9964", value)
    host, colon, port = value.rpartition(":")
    host_ok = not host.startswith("[") or host.endswith("]")  # IPv6 as [::1]:9964
    if not colon or not port.isdigit() or not 0 < int(port) < 65536 or not host_ok or " " in host:
        raise ValueError(f"expected host:port such as 127.0.0.1:9964, found '{value}'")
    return value


def _tenant(value: object) -> str:
    if not isinstance(value, str) or not _PULSAR_NAME.fullmatch(value):
        raise ValueError(f"expected a tenant name, found {_describe(value)}")
    return value


def _namespace(value: object) -> str:
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) != 2 or not all(_PULSAR_NAME.fullmatch(p) for p in parts):
        raise ValueError(f"expected a namespace as tenant/namespace, found {_describe(value)}")
    return "/".join(parts)


def _topic(domain: str) -> Convert[str]:
    def convert(value: object) -> str:
        prefix = f"{domain}://"
        if isinstance(value, str) and value.startswith(prefix):
            tenant, _, rest = value[len(prefix) :].partition("/")
            namespace, _, local = rest.partition("/")
            if _PULSAR_NAME.fullmatch(tenant) and _PULSAR_NAME.fullmatch(namespace) and local:
                return value
        hint = ""
        if isinstance(value, str) and "://" not in value and value.count("/") >= 2:
            hint = f" (did you mean '{prefix}{value}'?)"
        raise ValueError(f"expected {prefix}tenant/namespace/topic, found {_describe(value)}{hint}")

    return convert


def _bcrypt(value: object) -> str:
    # Never echo the value: it may be a plain-text password.
    if not isinstance(value, str) or not _BCRYPT.fullmatch(value):
        raise ValueError(
            "expected a bcrypt hash starting with $2a$, $2b$ or $2y$ (e.g. from "
            "`htpasswd -nbBC 10 USER PASSWORD`); the value is not shown, it may be a password"
        )
    return value


def _spark_master(value: object) -> str:
    if not isinstance(value, str) or not _SPARK_MASTER.fullmatch(value):
        raise ValueError(
            "expected local, local[N], local[*], spark://host:port, k8s://…, mesos://… or yarn, "
            f"found {_describe(value)}"
        )
    return value


def _spark_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # Spark reads "true", not Python's "True"
    if isinstance(value, str | int | float):
        return str(value)
    raise _expected("a string, number or boolean", value)


# ----------------------------------------------------------------------------- sections


def _sources(r: _Reader, value: object, path: str) -> Sources:
    m = r.mapping(value, path, _keys(Sources))
    brokers: list[BrokerSource] = []
    seen: dict[str, str] = {}
    for bpath, item in r.items(m.get("brokers"), f"{path}.brokers"):
        b = r.mapping(item, bpath, _keys(BrokerSource), nullable=False)
        if isinstance(item, dict) and "url" not in b:
            r.error(f"{bpath}.url", "required: the broker's /metrics URL")
        url = r.get(b, "url", bpath, _url("http", "https"), None)
        timeout = r.get(b, "timeout", bpath, _duration, BrokerSource.timeout)
        if url in seen:
            r.error(f"{bpath}.url", f"'{url}' is already listed at {seen[url]}")
        elif url is not None:
            seen[url] = f"{bpath}.url"
            brokers.append(BrokerSource(url=url, timeout=timeout))
    if not m.get("brokers"):
        r.error(f"{path}.brokers", "at least one broker /metrics URL is required")
    admin = None
    if "admin" in m:
        a = r.mapping(m["admin"], f"{path}.admin", _keys(AdminSource))
        if isinstance(m["admin"], dict) and "url" not in a:
            r.error(f"{path}.admin.url", "required when sources.admin is given")
        admin = AdminSource(
            url=r.get(a, "url", f"{path}.admin", _url("http", "https"), ""),
            token_file=r.get(a, "token_file", f"{path}.admin", _string, None),
            timeout=r.get(a, "timeout", f"{path}.admin", _duration, AdminSource.timeout),
            ca_file=r.get(a, "ca_file", f"{path}.admin", _string, None),
            insecure_skip_verify=r.get(a, "insecure_skip_verify", f"{path}.admin", _boolean, False),
        )
    service_url = r.get(m, "service_url", path, _url("pulsar", "pulsar+ssl"), None)
    return Sources(brokers=tuple(brokers), admin=admin, service_url=service_url)


def _backlog_quotas(r: _Reader, value: object, path: str) -> BacklogQuotas:
    m = r.mapping(value, path, _keys(BacklogQuotas))
    default = _quota(r, m["default"], f"{path}.default") if "default" in m else BacklogQuota()
    by_scope = {}
    for scope, check in (("namespaces", _namespace), ("topics", _topic("persistent"))):
        entries: dict[str, BacklogQuota] = {}
        for name, item in r.mapping(m.get(scope), f"{path}.{scope}").items():
            qpath = _join(f"{path}.{scope}", name)
            if r.check(name, qpath, check, None) is not None:
                entries[name] = _quota(r, item, qpath)
        by_scope[scope] = MappingProxyType(entries)
    return BacklogQuotas(
        default=default,
        namespaces=by_scope["namespaces"],
        topics=by_scope["topics"],
        enforce=r.get(m, "enforce", path, _boolean, BacklogQuotas.enforce),
    )


def _quota(r: _Reader, value: object, path: str) -> BacklogQuota:
    q = r.mapping(value, path, _keys(BacklogQuota), nullable=False)
    return BacklogQuota(
        limit_size=r.get(q, "limit_size", path, _quota_size, None),
        limit_time=r.get(q, "limit_time", path, _quota_time, None),
        policy=r.get(q, "policy", path, _choice(RetentionPolicy, "policy"), BacklogQuota.policy),
    )


def _resource_groups(r: _Reader, value: object, path: str) -> Mapping[str, ResourceGroup]:
    groups: dict[str, ResourceGroup] = {}
    owners: dict[tuple[str, str], str] = {}  # (kind, tenant or namespace) → group
    for name, item in r.mapping(value, path).items():
        gpath = _join(path, name)
        g = r.mapping(item, gpath, _keys(ResourceGroup, exclude=("name",)), nullable=False)
        bindings = {}
        for kind, check in (("tenant", _tenant), ("namespace", _namespace)):
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
            tenants=bindings["tenant"],
            namespaces=bindings["namespace"],
        )
    return MappingProxyType(groups)


def _rate_limit(r: _Reader, value: object, path: str) -> RateLimit:
    m = r.mapping(value, path, _keys(RateLimit))
    unlimited = " (-1 means unlimited)"
    return RateLimit(
        messages_per_second=r.get(m, "messages_per_second", path, _integer(-1, unlimited), -1),
        bytes_per_second=r.get(m, "bytes_per_second", path, _byte_rate, -1),
    )


def _rg_engine(r: _Reader, value: object) -> ResourceGroupEngine:
    path, d = "resource_group_engine", ResourceGroupEngine
    m = r.mapping(value, path, _keys(ResourceGroupEngine))
    engine = ResourceGroupEngine(
        participant=r.get(m, "participant", path, _string, socket.gethostname()),
        topic=r.get(m, "topic", path, _topic("non-persistent"), d.topic),
        report_interval=r.get(m, "report_interval", path, _duration, d.report_interval),
        suppression_tolerance_percent=r.get(
            m, "suppression_tolerance_percent", path, _percent, d.suppression_tolerance_percent
        ),
        max_suppressed_rounds=r.get(
            m, "max_suppressed_rounds", path, _integer(0), d.max_suppressed_rounds
        ),
        stale_after=r.get(m, "stale_after", path, _duration, d.stale_after),
        allocator=r.get(m, "allocator", path, _choice(Allocator, "allocator"), d.allocator),
    )
    if engine.stale_after <= engine.report_interval:
        r.error(
            f"{path}.stale_after",
            f"must be longer than report_interval ({format_duration(engine.report_interval)}), "
            f"found {format_duration(engine.stale_after)}: live peers would expire between reports",
        )
    return engine


def _load_manager(r: _Reader, value: object, path: str) -> LoadManager:
    m, d = r.mapping(value, path, _keys(LoadManager)), LoadManager
    return LoadManager(
        overload_threshold_percent=r.get(
            m, "overload_threshold_percent", path, _percent, d.overload_threshold_percent
        ),
        shed_margin_percent=r.get(m, "shed_margin_percent", path, _percent, d.shed_margin_percent),
        bundle_max_topics=r.get(m, "bundle_max_topics", path, _integer(1), d.bundle_max_topics),
        bundle_max_sessions=r.get(
            m, "bundle_max_sessions", path, _integer(0, " (0 turns it off)"), d.bundle_max_sessions
        ),
        bundle_max_msg_rate=r.get(m, "bundle_max_msg_rate", path, _positive, d.bundle_max_msg_rate),
        bundle_max_bandwidth=r.get(
            m, "bundle_max_bandwidth", path, _bandwidth, d.bundle_max_bandwidth
        ),
    )


def _exposition(r: _Reader, value: object, path: str) -> Exposition:
    m = r.mapping(value, path, _keys(Exposition))
    tls = None
    if "tls" in m:
        t = r.mapping(m["tls"], f"{path}.tls", _keys(Tls))
        for key in _keys(Tls):
            if isinstance(m["tls"], dict) and key not in t:
                r.error(f"{path}.tls.{key}", "required when exposition.tls is given")
        tls = Tls(
            cert_file=r.get(t, "cert_file", f"{path}.tls", _string, ""),
            key_file=r.get(t, "key_file", f"{path}.tls", _string, ""),
        )
    users: dict[str, str] = {}
    for user, hashed in r.mapping(m.get("basic_auth"), f"{path}.basic_auth").items():
        upath = _join(f"{path}.basic_auth", user)
        if ":" in user:
            r.error(upath, "a basic-auth user name cannot contain ':'")
        elif (checked := r.check(hashed, upath, _bcrypt, None)) is not None:
            users[user] = checked
    return Exposition(
        listen=r.get(m, "listen", path, _listen, Exposition.listen),
        topic_level=r.get(m, "topic_level", path, _boolean, Exposition.topic_level),
        tls=tls,
        basic_auth=MappingProxyType(users),
    )


def _spark(r: _Reader, value: object, path: str) -> Spark:
    m = r.mapping(value, path, _keys(Spark))
    conf: dict[str, str] = {}
    for key, item in r.mapping(m.get("conf"), f"{path}.conf").items():
        cpath = _join(f"{path}.conf", key)
        if not key.startswith("spark."):
            r.error(cpath, "Spark only reads keys starting with 'spark.'")
        elif (text := r.check(item, cpath, _spark_value, None)) is not None:
            conf[key] = text
    return Spark(
        master=r.get(m, "master", path, _spark_master, Spark.master), conf=MappingProxyType(conf)
    )
