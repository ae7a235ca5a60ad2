"""A cycle's inputs as JSON: the frozen dataclasses between the stages, tagged, and back.

Why not pickle: a record directory may be copied between machines and read by a later
version; JSON can be inspected with `jq`, and decoding builds only the types named in
`_TYPES` (a tag naming anything else is an error), so a tampered record cannot run code.
Tuples, mappings with non-string keys, enums and non-finite floats keep their type.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any

from exporter.config import settings as config_model
from exporter.sources import results as sources_model
from exporter.transport import codec as wire


def _registry() -> dict[str, type]:
    # Of the config's types only those a snapshot holds: never a source with its secrets.
    types: dict[str, type] = {cls.__name__: cls for cls in (
        config_model.ResourceGroup, config_model.RateLimit, config_model.MonitoringClass,
        config_model.RetentionPolicy)}
    for module in (sources_model, wire):
        for name, value in vars(module).items():
            if isinstance(value, type) and value.__module__ == module.__name__ and (
                    dataclasses.is_dataclass(value) or issubclass(value, Enum)):
                types[name] = value
    return types


_TYPES = _registry()


class RecordFormatError(ValueError):
    """A record that does not decode: named by the caller with its file."""


def encode(value: Any) -> Any:
    """`value` as JSON-able data with type tags."""
    if isinstance(value, Enum):
        return {"$enum": type(value).__name__, "v": value.value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if _TYPES.get(name) is not type(value):
            raise TypeError(f"{name} is not a recordable type")
        return {"$": name, **{f.name: encode(getattr(value, f.name))
                              for f in dataclasses.fields(value)}}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not isinstance(k, Enum) for k in value):
            return {"$map": {k: encode(v) for k, v in value.items()}}
        return {"$pairs": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"cannot record a {type(value).__name__}")


def decode(data: Any) -> Any:
    """The inverse of `encode`; raises RecordFormatError on anything it did not write."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    try:
        if "$" in data:
            cls = _type(data["$"])
            return cls(**{k: decode(v) for k, v in data.items() if k != "$"})
        if "$enum" in data:
            return _type(data["$enum"])(data["v"])
        if "$tuple" in data:
            return tuple(decode(v) for v in data["$tuple"])
        if "$map" in data:
            return MappingProxyType({k: decode(v) for k, v in data["$map"].items()})
        if "$pairs" in data:
            return MappingProxyType({decode(k): decode(v) for k, v in data["$pairs"]})
        if "$float" in data:
            return float(data["$float"])
    except (TypeError, ValueError, KeyError) as exc:
        raise RecordFormatError(f"cannot decode {str(data)[:80]}: {exc}") from None
    raise RecordFormatError(f"untagged object {str(data)[:80]}")


def _type(name: object) -> type:
    cls = _TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise RecordFormatError(f"unknown type {name!r}")
    return cls


def dumps(value: Any) -> str:
    return json.dumps(encode(value), separators=(",", ":"), allow_nan=False)


def loads(text: str | bytes) -> Any:
    try:
        return decode(json.loads(text))
    except json.JSONDecodeError as exc:
        raise RecordFormatError(f"not JSON: {exc}") from None
