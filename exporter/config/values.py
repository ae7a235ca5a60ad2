"""Converters for single YAML values (durations, sizes, URLs, Pulsar names, …).

Each takes the YAML value and returns the typed value or raises ValueError(message);
the `Reader` turns that message into an error line with the key path.
"""

from __future__ import annotations

import math
import re
import warnings
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import urlsplit

from exporter.config import userinfo
from exporter.config.reader import Convert, describe, did_you_mean, expected
from exporter.config.units import parse_duration, parse_size

T = TypeVar("T")

_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(%\w+)?")  # names, IPv4, IPv6 (no brackets)
_PULSAR_NAME = re.compile(r"[-=:.\w]+", re.ASCII)  # Pulsar's NamedEntity charset (Java's \w)
BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")
_SPARK_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|(spark|k8s)://\S+|yarn")


def string(value: object) -> str:
    if not isinstance(value, str):
        raise expected("a string", value)
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise expected("true or false", value)
    return value


def number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise expected("a number", value)
    return float(value)


def integer(minimum: int, note: str = "", maximum: int | None = None) -> Convert[int]:
    def convert(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise expected("an integer", value)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}{note}, found {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be at most {maximum}, found {str(value)[:40]}")
        return value

    return convert


def positive(value: object) -> float:
    amount = number(value)
    if amount <= 0:
        raise ValueError(f"must be greater than 0, found {value}")
    return amount


def percent(value: object) -> float:
    amount = number(value)
    if not 0 <= amount <= 100:
        raise ValueError(f"must be a percentage from 0 to 100, found {value}")
    return amount


def duration(value: object) -> float:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise expected("a duration such as 90s", value)
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be longer than 0, found {value}")
    return seconds


def size(value: object) -> int:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise expected("a size such as 10GiB", value)
    return parse_size(value)


def _is_negative(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().startswith("-")
    return isinstance(value, int | float) and not isinstance(value, bool) and value < 0


def quota_size(value: object) -> int:
    if _is_negative(value):
        raise ValueError(f"must not be negative, found {value}; leave the key out for no limit")
    return size(value)


def quota_time(value: object) -> float:
    if _is_negative(value):
        raise ValueError(f"must not be negative, found {value}; leave the key out for no limit")
    return duration(value)


def _per_second(value: object) -> int:
    """A size per second: `10MiB`, `10MiB/s` or plain bytes."""
    if isinstance(value, str) and value.strip().endswith("/s"):
        value = value.strip()[:-2]
    return size(value)


def byte_rate(value: object) -> int:
    if value == -1 and not isinstance(value, bool):
        return -1
    if _is_negative(value):
        raise ValueError(
            f"must be -1 (unlimited) or a size per second such as 10MiB, found {value}"
        )
    return _per_second(value)


def bandwidth(value: object) -> float:
    rate = _per_second(value)
    if rate <= 0:
        raise ValueError(f"must be greater than 0, found {value}")
    return float(rate)


def choice(enum: type[StrEnum], what: str) -> Convert[Any]:
    def convert(value: object) -> StrEnum:
        names = tuple(member.value for member in enum)
        if not isinstance(value, str):
            raise expected(f"one of {', '.join(names)}", value)
        if value not in names:
            raise ValueError(f"unknown {what} '{value}'" + did_you_mean(value, names))
        return enum(value)

    return convert


def url(*schemes: str) -> Convert[str]:
    def convert(value: object) -> str:
        example = " or ".join(f"{s}://…" for s in schemes)
        if not isinstance(value, str):
            raise expected(f"a URL ({example})", value)
        shown = userinfo.shown(value.strip())  # what an error may print
        try:
            parts = urlsplit(value.strip())
            host = parts.hostname
        except ValueError:  # e.g. an unclosed IPv6 bracket
            host = None
        if not host or parts.scheme not in schemes:
            raise ValueError(f"expected a URL starting with {example}, found '{shown}'")
        if not _HOST.fullmatch(host):
            hint = " (an environment reference? run with --config.expand-env)" * ("${" in host)
            raise ValueError(f"'{host}' is not a host name or address in '{shown}'{hint}")
        return value.strip()

    return convert


def listen(value: object) -> str:
    if not isinstance(value, str):
        raise expected("host:port such as 127.0.0.1:10049", value)
    host, colon, port = value.rpartition(":")
    host_ok = not host.startswith("[") or host.endswith("]")  # IPv6 as [::1]:10049
    if not colon or not port.isdigit() or not 0 < int(port) < 65536 or not host_ok or " " in host:
        raise ValueError(f"expected host:port such as 127.0.0.1:10049, found '{value}'")
    return value


def tenant(value: object) -> str:
    if not isinstance(value, str) or not _PULSAR_NAME.fullmatch(value):
        raise ValueError(f"expected a tenant name, found {describe(value)}")
    return value


def namespace(value: object) -> str:
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) != 2 or not all(_PULSAR_NAME.fullmatch(p) for p in parts):
        raise ValueError(f"expected a namespace as tenant/namespace, found {describe(value)}")
    return "/".join(parts)


def switchable(convert: Convert[T]) -> Convert[T | None]:
    """`convert`, or None for `false`: a setting that can be switched off (YAML's null
    means "the default" in schema sections, so it cannot)."""
    def check(value: object) -> T | None:
        return None if value is False else convert(value)

    return check


def topic(domain: str) -> Convert[str]:
    def convert(value: object) -> str:
        prefix = f"{domain}://"
        if isinstance(value, str) and value.startswith(prefix):
            tenant_name, _, rest = value[len(prefix) :].partition("/")
            namespace_name, _, local = rest.partition("/")
            if (
                _PULSAR_NAME.fullmatch(tenant_name)
                and _PULSAR_NAME.fullmatch(namespace_name)
                and local
            ):
                return value
        hint = ""
        if isinstance(value, str) and "://" not in value and value.count("/") >= 2:
            hint = f" (did you mean '{prefix}{value}'?)"
        raise ValueError(f"expected {prefix}tenant/namespace/topic, found {describe(value)}{hint}")

    return convert


def any_topic(value: object) -> str:
    """A full topic name of either domain (a resource group binds both)."""
    domain = "non-persistent" if str(value).startswith("non-persistent://") else "persistent"
    return topic(domain)(value)


def bcrypt(value: object) -> str:
    # Never echo the value: it may be a plain-text password.
    if not isinstance(value, str) or not BCRYPT_HASH.fullmatch(value):
        raise ValueError(
            "expected a bcrypt hash starting with $2a$, $2b$ or $2y$ (e.g. from "
            "`htpasswd -nbBC 10 USER PASSWORD`); the value is not shown, it may be a password"
        )
    return value


def spark_master(value: object) -> str:
    if not isinstance(value, str) or not _SPARK_MASTER.fullmatch(value):
        raise ValueError(
            "expected local, local[N], local[*], spark://host:port, k8s://… or yarn, "
            f"found {describe(value)}"
        )
    return value


def spark_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # Spark reads "true", not Python's "True"
    if isinstance(value, str | int | float):
        return str(value)
    raise expected("a string, number or boolean", value)


def topic_regex(value: object) -> str:
    """A regular expression over full topic names, in the syntax the pipeline runs it with
    (RE2, via Arrow: no look-around or back-references)."""
    text = string(value)
    try:
        with warnings.catch_warnings():  # Python's hints about its own future syntax
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(text)
    except re.error as e:
        raise ValueError(f"not a regular expression: {e}") from None
    import pyarrow as pa  # here: only a config with filters needs Arrow to check them
    import pyarrow.compute as pc

    try:
        pc.match_substring_regex(pa.array([""]), f"^(?:{text})$")
    except pa.ArrowInvalid as e:
        raise ValueError(f"not supported by RE2 (no look-around or back-references): "
                         f"{str(e).split(':', 1)[-1].strip()}") from None
    return text
