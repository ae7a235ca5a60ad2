"""The user's contract: YAML → a frozen, validated `Config`, or every error with its key path.

This module is the public face: `load`, `parse` and `ConfigError`; the types it builds,
with every default, are in `config/settings.py`. The work is split by concept: `reader.py`
walks the YAML collecting errors, `values.py` converts single values (`units.py` sizes and
durations), `auth.py` reads credentials and TLS blocks, `sections.py` builds each section.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from exporter.config import sections
from exporter.config import values as cv
from exporter.config.reader import Reader, describe, schema_keys
from exporter.config.settings import (
    Config,
    PolicySource,
)

__all__ = ["ConfigError", "expand_env", "load", "parse", "read_yaml"]


class ConfigError(Exception):
    """Every problem found in one file, each already formatted `FILE: key.path: message`."""

    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = errors


_ENV_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(text: str, filename: str, environ: Mapping[str, str]) -> str:
    """`${NAME}` and `${NAME:-default}` replaced from `environ`, `$$` by `$` (Loki's
    `-config.expand-env` rules), before the YAML is read: one file can then serve every pod
    of a StatefulSet (its ordinal, its name). A variable that is unset and has no default
    is an error naming its line."""
    errors = []

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        line = text.count("\n", 0, m.start()) + 1
        errors.append(f"{filename}: line {line}: ${{{name}}} is not set in the environment "
                      "(give a default with ${NAME:-value})")
        return m.group(0)

    expanded = _ENV_REFERENCE.sub(one, text)
    if errors:
        raise ConfigError(errors)
    return expanded


def load(path: str | os.PathLike[str], *, expand: bool = False) -> Config:
    """Read, parse and validate one YAML file; raise `ConfigError` with every problem found.
    `expand`: replace environment references first (`expand_env`)."""
    filename = os.fspath(path)
    data, errors = read_yaml(filename, expand=expand)
    try:
        config = parse(data, filename)
    except ConfigError as e:
        raise ConfigError(errors + e.errors) from None
    if errors:
        raise ConfigError(errors)
    return config


def read_yaml(filename: str, *, expand: bool = False) -> tuple[object, list[str]]:
    """One YAML document read as our files are (UTF-8, no control characters, PyYAML's
    failures as one line with the line and column): the data, and an error per duplicate
    key (YAML keeps the last silently). `ConfigError` when it cannot be read at all. Also
    the web config file's reader (server/toolkit.py)."""
    try:
        with open(filename, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError([f"{filename}: cannot read: {e.strerror or e}"]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"{filename}: cannot read: not UTF-8 text (byte {e.start})"]) from None
    if expand:
        text = expand_env(text, filename, os.environ)
    try:
        loader = _Loader(text)  # refuses control characters at once
    except yaml.YAMLError as e:
        raise ConfigError([f"{filename}: not valid YAML: {e}"]) from None
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}" if mark else "somewhere"
        column = f" (column {mark.column + 1})" if mark else ""
        raise ConfigError([f"{filename}: {where}: not valid YAML: {e.problem}{column}"]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"{filename}: not valid YAML: {e}"]) from None
    except ValueError as e:  # PyYAML's int() of 4,300 digits and more, a date like 2001-13-45
        raise ConfigError([f"{filename}: not valid YAML: a value cannot be read: "
                           f"{str(e)[:120]}"]) from None
    except RecursionError:  # PyYAML's parser recurses once per level
        raise ConfigError([f"{filename}: not valid YAML: nested too deeply"]) from None
    finally:
        loader.dispose()
    return data, [
        f"{filename}: line {line}: duplicate key '{key}' (YAML would silently keep the last)"
        for line, key in loader.duplicates
    ]


def _policy_sources(r: Reader, top: dict[str, object], config: Config) -> Config:
    """`backlog_quotas.source` and `resource_group_engine.source`: Pulsar's policies are
    read over the admin REST, so each defaults to `both` with an admin source and `config`
    without, and `pulsar` needs one."""
    has_admin = config.sources.admin is not None

    def source(path: str, what: str) -> PolicySource:
        m = top.get(path)
        given = m.get("source") if isinstance(m, dict) else None
        chosen = PolicySource.BOTH if has_admin else PolicySource.CONFIG
        if given is not None:
            chosen = r.check(given, f"{path}.source", cv.choice(PolicySource, "source"), chosen)
            if chosen is PolicySource.PULSAR and not has_admin:
                r.error(f"{path}.source", f"pulsar needs sources.admin: Pulsar's {what} "
                                          "are read over the admin REST")
        return chosen

    quotas = dataclasses.replace(config.backlog_quotas,
                                 source=source("backlog_quotas", "backlog quotas"))
    engine = dataclasses.replace(config.resource_group_engine,
                                 source=source("resource_group_engine", "resource groups"))
    return dataclasses.replace(config, backlog_quotas=quotas, resource_group_engine=engine)


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
        found = "an empty document" if data is None else describe(data)
        raise ConfigError(
            [f"{filename}: top level: expected a mapping of settings (cluster: …), found {found}"]
        )
    r = Reader(filename)
    top = r.mapping(data, "", schema_keys(Config))
    if "cluster" not in top:
        r.error("cluster", "required: the cluster name, put as a label on every series")
    config = Config(
        cluster=r.get(top, "cluster", "", cv.string, ""),
        check_interval=r.get(top, "check_interval", "", cv.duration, Config.check_interval),
        sources=sections.sources(r, top.get("sources"), "sources"),
        backlog_quotas=sections.backlog_quotas(r, top.get("backlog_quotas"), "backlog_quotas"),
        resource_groups=sections.resource_groups(r, top.get("resource_groups"), "resource_groups"),
        resource_group_engine=sections.resource_group_engine(r, top.get("resource_group_engine")),
        load_manager=sections.load_manager(r, top.get("load_manager"), "load_manager"),
        filters=sections.filters(r, top.get("filters"), "filters"),
        exposition=sections.exposition(r, top.get("exposition"), "exposition"),
        spark=sections.spark(r, top.get("spark"), "spark"),
    )
    if config.backlog_quotas.enforce and config.sources.service_url is None:
        r.error("backlog_quotas.enforce", "true needs sources.service_url: evictions use it")
    config = _policy_sources(r, top, config)
    if r.errors:
        raise ConfigError(r.errors)
    return config
