"""Walking loaded YAML: a `Reader` that collects every error with its key path.

Key paths read like jq: `sources.brokers[0].url`, and `["public/ns"]` for user-chosen
keys that are not plain identifiers. A key set to null (or left empty) counts as absent.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")
Convert = Callable[[object], T]  # YAML value → typed value, or ValueError(message)

_IDENT = re.compile(r"[A-Za-z0-9_-]+")


class Reader:
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
            self.error(path or "top level", f"expected a mapping, found {describe(value)}")
            return {}
        out: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                hint = "; quote it (YAML reads yes/no/on/off as booleans)" * isinstance(key, bool)
                self.error(
                    path or "top level", f"keys must be non-empty strings, found {key!r}{hint}"
                )
            elif known is not None and key not in known:
                self.error(join(path, key), "unknown key" + did_you_mean(key, known))
            elif known is None or item is not None:
                out[key] = item
        return out

    def items(self, value: object, path: str) -> list[tuple[str, object]]:
        """(path, item) for each entry of a list."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"expected a list, found {describe(value)}")
            return []
        return [(f"{path}[{i}]", item) for i, item in enumerate(value)]

    def get(self, m: Mapping[str, object], key: str, path: str, convert: Convert[T],
            default: T) -> T:
        """`convert(m[key])`, or `default` when absent or wrong (the error is recorded)."""
        if key not in m:
            return default
        return self.check(m[key], join(path, key), convert, default)

    def check(self, value: object, path: str, convert: Convert[T], default: T) -> T:
        try:
            return convert(value)
        except ValueError as e:
            self.error(path, str(e))
            return default
        except OverflowError:  # a number with hundreds of digits
            self.error(path, f"out of range: {str(value)[:40]}…")
            return default


def schema_keys(cls: type, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name not in exclude)


def join(path: str, key: str) -> str:
    """`path.key`, or `path["key"]` for a key that is no identifier, quoted as a JSON string
    so that a user's `a"].b` cannot read as another path."""
    if _IDENT.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return (
        f" (did you mean '{close[0]}'?)" if close else f" (expected one of: {', '.join(choices)})"
    )


def describe(value: object) -> str:
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


def expected(what: str, value: object) -> ValueError:
    quote = "; quote it to make it a string" if "string" in what and value is not None else ""
    return ValueError(f"expected {what}, found {describe(value)}{quote}")
