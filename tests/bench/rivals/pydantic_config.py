"""A slice of the config validated by pydantic v2, the rival `tests/bench/libraries.py`
measures against exporter/config/ (reader.py, sections.py). Not used by the exporter.

The slice: `cluster`, `check_interval`, `sources` (brokers' url and timeout, admin,
service_url), `backlog_quotas`, `resource_groups`; the same error lines as today
(`FILE: key.path: message`, did-you-mean, every error in one go — but for `cross_checks`,
which run only once every field is valid).

Needs `pydantic` (v2), which the project venv does not have: libraries.py runs this
module with another interpreter (`--venv`), and it prints its figures as JSON.

What it takes to keep today's messages, each part below:
- every leaf a `PlainValidator` around the converter of exporter/config/values.py (units,
  -1, Pulsar names; pydantic's own int/float/str/bool messages are not ours, and its lax
  mode would read "true" as a boolean), its ValueError turned into a PydanticCustomError;
- null is absent in schema sections (a before-validator), not in named entries;
- `lines`: pydantic's error types mapped to ours (extra → unknown key with a did-you-mean
  over the model's fields found by walking the loc, missing → a per-key "required" text,
  model/tuple type → "expected a mapping/list, found …"), the loc joined as a jq path;
- `cross_checks`: what spans entries (a broker listed twice, a tenant bound to two groups,
  enforce without service_url): after validation, in plain Python, with their own paths
  (a validator cannot place an error at another key's path).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from exporter.config import values as cv
from exporter.config.reader import describe, did_you_mean, join
from exporter.config.settings import RetentionPolicy


def leaf(convert: Callable[[object], Any]) -> PlainValidator:
    def run(value: object) -> Any:
        try:
            return convert(value)
        except ValueError as exc:
            raise PydanticCustomError("config", "{message}", {"message": str(exc)}) from None
        except OverflowError:
            raise PydanticCustomError("config", "{message}",
                                      {"message": f"out of range: {str(value)[:40]}…"}) from None

    return PlainValidator(run)


Text = Annotated[str, leaf(cv.string)]
Boolean = Annotated[bool, leaf(cv.boolean)]
Duration = Annotated[float, leaf(cv.duration)]
HttpUrl = Annotated[str, leaf(cv.url("http", "https"))]
PulsarUrl = Annotated[str, leaf(cv.url("pulsar", "pulsar+ssl"))]
Namespace = Annotated[str, leaf(cv.namespace)]
Tenant = Annotated[str, leaf(cv.tenant)]
AnyTopic = Annotated[str, leaf(cv.any_topic)]
PersistentTopic = Annotated[str, leaf(cv.topic("persistent"))]
QuotaSize = Annotated[int, leaf(cv.quota_size)]
QuotaTime = Annotated[float, leaf(cv.quota_time)]
Policy = Annotated[RetentionPolicy, leaf(cv.choice(RetentionPolicy, "policy"))]
MessageRate = Annotated[int, leaf(cv.integer(-1, " (-1 means unlimited)"))]
ByteRate = Annotated[int, leaf(cv.byte_rate)]


class Section(BaseModel):
    """A schema section: unknown keys refused, null the same as absent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: object) -> object:
        if isinstance(data, dict):
            for key in data:
                if not isinstance(key, str) or not key:
                    hint = "; quote it (YAML reads yes/no/on/off as booleans)" * isinstance(
                        key, bool)
                    raise PydanticCustomError("config", "{message}", {
                        "message": f"keys must be non-empty strings, found {key!r}{hint}"})
            return {k: v for k, v in data.items() if v is not None}
        return data


class Broker(Section):
    url: HttpUrl
    timeout: Duration = 10.0


class Admin(Section):
    url: HttpUrl
    token_file: Text | None = None
    timeout: Duration = 10.0
    ca_file: Text | None = None
    insecure_skip_verify: Boolean = False
    namespaces: tuple[Namespace, ...] = ()


class Sources(Section):
    brokers: tuple[Broker, ...] = ()
    admin: Admin | None = None
    service_url: PulsarUrl | None = None


class Quota(Section):
    limit_size: QuotaSize | None = None
    limit_time: QuotaTime | None = None
    policy: Policy = RetentionPolicy.PRODUCER_REQUEST_HOLD


class BacklogQuotas(Section):
    default: Quota = Field(default_factory=Quota)
    namespaces: dict[Namespace, Quota] = Field(default_factory=dict)
    topics: dict[PersistentTopic, Quota] = Field(default_factory=dict)
    enforce: Boolean = False
    lock_topic: PersistentTopic = "persistent://public/default/pulsar-quota-exporter-enforcer"
    system_topics: Boolean = False
    evict_system_cursors: Boolean = False


class RateLimit(Section):
    messages_per_second: MessageRate = -1
    bytes_per_second: ByteRate = -1


class ResourceGroup(Section):
    publish: RateLimit = Field(default_factory=RateLimit)
    dispatch: RateLimit = Field(default_factory=RateLimit)
    replication_dispatch: RateLimit = Field(default_factory=RateLimit)
    tenants: tuple[Tenant, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    topics: tuple[AnyTopic, ...] = ()


class Config(Section):
    cluster: Text
    check_interval: Duration = 60.0
    sources: Sources = Field(default_factory=Sources)
    backlog_quotas: BacklogQuotas = Field(default_factory=BacklogQuotas)
    resource_groups: dict[str, ResourceGroup] = Field(default_factory=dict)
    # Outside the slice: named so that the did-you-mean offers them, not validated.
    resource_group_engine: Any = None
    load_manager: Any = None
    filters: Any = None
    exposition: Any = None
    spark: Any = None


# --- pydantic's errors as today's lines ----------------------------------------------------

REQUIRED = {  # a key's "required" text, by its path with list indexes as [*]
    "cluster": "required: the cluster name, put as a label on every series",
    "sources.brokers[*].url": "required: the broker's /metrics URL",
    "sources.admin.url": "required when sources.admin is given",
}


def _path(loc: tuple[int | str, ...], star: bool = False) -> str:
    path = ""
    for part in loc:
        if part == "[key]":
            continue
        path = (f"{path}[*]" if star else f"{path}[{part}]") if isinstance(part, int) \
            else join(path, part)
    return path


def _fields_at(loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """The keys the model at `loc` knows: the loc walked through the models' annotations."""
    model: Any = Config
    for part in loc:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation if part in getattr(
            model, "model_fields", {}) else None
        if annotation is None:  # a user-named key (a group, a namespace)
            continue
        model = _model_in(annotation)
    return tuple(model.model_fields)


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def lines(exc: ValidationError, filename: str) -> list[str]:
    out = []
    for error in exc.errors(include_url=False):
        loc, kind, value = error["loc"], error["type"], error["input"]
        path = _path(loc) or "top level"
        if kind == "extra_forbidden":
            message = "unknown key" + did_you_mean(str(loc[-1]), _fields_at(loc[:-1]))
        elif kind == "missing":
            message = REQUIRED.get(_path(loc, star=True), "required")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = f"expected a mapping, found {describe(value)}"
        elif kind in ("tuple_type", "list_type"):
            message = f"expected a list, found {describe(value)}"
        else:
            message = error["msg"]
        out.append(f"{filename}: {path}: {message}")
    return out


def cross_checks(config: Config, filename: str) -> list[str]:
    errors: list[str] = []

    def error(path: str, message: str) -> None:
        errors.append(f"{filename}: {path}: {message}")

    seen: dict[str, str] = {}
    for i, broker in enumerate(config.sources.brokers):
        where = f"sources.brokers[{i}].url"
        if broker.url in seen:
            error(where, f"'{broker.url}' is already listed at {seen[broker.url]}")
        else:
            seen[broker.url] = where
    if not config.sources.brokers:
        error("sources.brokers", "at least one broker /metrics URL is required")
    admin = config.sources.admin
    if admin is not None:
        if admin.namespaces == () and "namespaces" in admin.model_fields_set:
            error("sources.admin.namespaces", "expected at least one tenant/namespace; leave "
                  "the key out to walk every tenant")
        for i, name in enumerate(admin.namespaces):
            if name in admin.namespaces[:i]:
                error(f"sources.admin.namespaces[{i}]", f"namespace '{name}' is listed twice")
    owners: dict[tuple[str, str], str] = {}
    for name, group in config.resource_groups.items():
        for kind, bound in (("tenant", group.tenants), ("namespace", group.namespaces),
                            ("topic", group.topics)):
            for i, entry in enumerate(bound):
                owner = owners.setdefault((kind, entry), name)
                where = f"{join('resource_groups', name)}.{kind}s[{i}]"
                if owner == name and entry in bound[:i]:
                    error(where, f"{kind} '{entry}' is listed twice")
                elif owner != name:
                    error(where, f"{kind} '{entry}' is bound to both '{owner}' and '{name}'; "
                                 f"a {kind} can belong to one resource group only")
    if config.backlog_quotas.enforce and config.sources.service_url is None:
        error("backlog_quotas.enforce", "true needs sources.service_url: evictions use it")
    return errors


def validate(data: object, filename: str) -> Config | list[str]:
    """The config, or every error line (exit 2 is the CLI's, as today)."""
    if not isinstance(data, dict):
        found = "an empty document" if data is None else describe(data)
        return [f"{filename}: top level: expected a mapping of settings (cluster: …), "
                f"found {found}"]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        return lines(exc, filename)
    return cross_checks(config, filename) or config


# --- bench only: the worker libraries.py runs ---------------------------------------------


def main() -> None:
    """argv[1]: the JSON libraries.py writes (cases with today's lines, config bodies, and
    what today's validation makes of each body)."""
    import pydantic

    from tests.bench import libraries as bench

    spec = json.loads(Path(sys.argv[1]).read_text())
    outcome = {}
    for case in spec["cases"]:
        got = validate(case["data"], bench.FILE)
        outcome[case["name"]] = {"expected": case["expected"],
                                 "got": got if isinstance(got, list) else []}
    timings = {}
    for name, data in spec["bodies"].items():
        result = validate(data, bench.FILE)
        assert not isinstance(result, list), result[:3]
        same = bench._facts(result.model_dump(include=set(bench.SLICE))) == spec["facts"][name]
        assert same, f"{name}: not the config today's validation makes"
        timings[name] = {  # ours beside, in this process: the machine's load is shared
            "ours": bench.best(lambda d=data: bench.ours_slice(d, bench.FILE)),
            "pydantic": bench.best(lambda d=data: validate(d, bench.FILE))}
    json.dump({
        "versions": {"pydantic": pydantic.VERSION, "python": sys.version.split()[0]},
        "cases": outcome, "timings": timings,
        "import_seconds": bench.import_seconds("tests.bench.rivals.pydantic_config",
                                               after=bench.CONFIG_BASE),
        "installed_bytes": bench.installed_bytes(
            ["pydantic", "pydantic-core", "annotated-types", "typing-inspection"]),
        "lines": bench.count_lines([Path(__file__)], stop=bench.WORKER),
    }, sys.stdout)


if __name__ == "__main__":
    main()
