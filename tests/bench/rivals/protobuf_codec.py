"""The usage report through Google's `protobuf` runtime, the rival `tests/bench/libraries.py`
measures against exporter/transport/codec.py + decoder.py. Not used by the exporter.

Needs `protobuf` and `grpcio-tools` (its protoc compiles usage_report.proto into a temporary
directory at import), which the project venv does not have: libraries.py runs this module
with another interpreter (`--venv`), and it prints its figures as JSON.

- `encode`: the same refusals as codec.encode (its `_validate`), then the message,
  serialized deterministically (known fields in field-number order).
- `decode(payload, strict=False)`: `ParseFromString` and conversion to a `WireReport`, as
  a protobuf user writes it. Accepts unknown fields, any field order, non-shortest
  varints, a repeated scalar (the last wins), a repeated sub-message (merged), unsorted
  and duplicate groups.
- `decode(payload)`: the same plus what codec's decoder guarantees, re-added by hand:
  unknown fields dropped and the payload re-serialized and compared byte for byte (this
  one check refuses non-canonical varints and lengths, field order, repeats, explicit
  defaults and unknown fields), then the checks protobuf has no notion of: group count,
  sorted unique non-empty names, a class per group, no goodbye with groups, non-empty
  participant, sequence and fixed-point ranges.
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from exporter.config.settings import MonitoringClass
from exporter.transport import codec, decoder
from exporter.transport.codec import (
    BYTE_SCALE,
    MAX_FIXED,
    MAX_REPORT_BYTES,
    MAX_SEQUENCE,
    MESSAGE_SCALE,
    TIME_SCALE,
    Entry,
    Rates,
    Undecodable,
    WireReject,
    WireReport,
)

PROTO = Path(__file__).with_name("usage_report.proto")
FIELD = {MonitoringClass.PUBLISH: "publish", MonitoringClass.DISPATCH: "dispatch",
         MonitoringClass.REPLICATION_DISPATCH: "replication_dispatch"}


def _compile() -> Any:
    out = tempfile.mkdtemp(prefix="pqe-protobuf-")
    atexit.register(shutil.rmtree, out, True)
    from grpc_tools import protoc

    if protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", str(PROTO)]):
        raise RuntimeError(f"protoc failed on {PROTO}")
    sys.path.insert(0, out)
    return importlib.import_module("usage_report_pb2")


pb = _compile()
from google.protobuf.message import DecodeError  # noqa: E402  (after the runtime is known)

# --- encode -------------------------------------------------------------------------------


def _class_usage(message: Any, entry: Entry) -> None:
    message.SetInParent()  # present even when every value is 0
    message.messages_milli = codec._to_fixed("usage", entry.usage.messages, MESSAGE_SCALE)
    message.bytes = codec._to_fixed("usage", entry.usage.bytes, BYTE_SCALE)
    if entry.limit is not None:
        messages = codec._limit_fixed("limit", entry.limit.messages, MESSAGE_SCALE)
        size = codec._limit_fixed("limit", entry.limit.bytes, BYTE_SCALE)
        if messages is not None:
            message.limit_messages_milli = messages
        if size is not None:
            message.limit_bytes = size


def _grouped(report: WireReport) -> dict[bytes, dict[MonitoringClass, Entry]]:
    groups: dict[bytes, dict[MonitoringClass, Entry]] = {}
    for entry in sorted(report.entries, key=codec._order):
        groups.setdefault(entry.resource_group.encode("utf-8"), {})[
            MonitoringClass(entry.monitoring_class)] = entry
    return groups


def encode(report: WireReport, *, front_coded: bool = False) -> bytes:
    codec._validate(report)
    message = (pb.FrontCodedReport if front_coded else pb.UsageReport)(
        participant=report.participant, sequence=report.sequence,
        sent_at_ms=codec._to_fixed("sent_at", report.sent_at, TIME_SCALE),
        goodbye=report.goodbye)
    groups = _grouped(report)
    message.group_count = len(groups)
    previous = b""
    for name, classes in groups.items():
        if front_coded:
            shared = codec._shared_prefix(previous, name)
            group = message.groups.add(shared=shared, suffix=name[shared:])
            previous = name
        else:
            group = message.groups.add(name=name.decode("utf-8"))
        for cls, entry in classes.items():
            _class_usage(getattr(group, FIELD[cls]), entry)
    return message.SerializeToString(deterministic=True)


# --- decode -------------------------------------------------------------------------------


class _Reject(Exception):
    pass


def _fixed(value: int, what: str, scale: int, strict: bool) -> float:
    if strict and value > MAX_FIXED:
        raise _Reject(f"{what} out of range: {value}")
    return value / scale


def _entries(message: Any, strict: bool) -> list[Entry]:
    entries: list[Entry] = []
    previous = b""
    for index, group in enumerate(message.groups):
        name = group.name
        if strict:
            raw = name.encode("utf-8")
            if not raw:
                raise _Reject(f"group {index}: empty name")
            if index and raw <= previous:
                raise _Reject(f"group {index}: duplicate or unsorted name")
            previous = raw
        found = False
        for cls, field in FIELD.items():
            if not group.HasField(field):
                continue
            found = True
            c = getattr(group, field)
            usage = Rates(_fixed(c.messages_milli, "usage", MESSAGE_SCALE, strict),
                          _fixed(c.bytes, "usage", BYTE_SCALE, strict))
            limit = None
            has_messages, has_bytes = c.HasField("limit_messages_milli"), c.HasField(
                "limit_bytes")
            if has_messages or has_bytes:
                limit = Rates(
                    _fixed(c.limit_messages_milli, "limit", MESSAGE_SCALE, strict)
                    if has_messages else math.inf,
                    _fixed(c.limit_bytes, "limit", BYTE_SCALE, strict) if has_bytes
                    else math.inf)
            entries.append(Entry(name, cls, usage, limit))
        if strict and not found:
            raise _Reject(f"group {index}: no monitoring class")
    return entries


def _parse(payload: bytes, strict: bool) -> WireReport:
    message = pb.UsageReport()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:  # truncated and malformed alike: one exception
        raise _Reject(f"not a report: {exc}") from None
    if strict:
        message.DiscardUnknownFields()
        if message.SerializeToString(deterministic=True) != payload:
            raise _Reject("not the canonical encoding (or unknown fields)")
        if not message.participant:
            raise _Reject("empty participant")
        if message.sequence > MAX_SEQUENCE:
            raise _Reject(f"sequence out of range: {message.sequence}")
        if message.group_count != len(message.groups):
            raise _Reject(f"{message.group_count} groups announced, {len(message.groups)} sent")
        if message.goodbye and message.groups:
            raise _Reject("a goodbye with groups")
    report = WireReport(message.participant, message.sequence,
                        _fixed(message.sent_at_ms, "sent_at", TIME_SCALE, strict),
                        tuple(_entries(message, strict)), message.goodbye)
    return report


def decode(payload: bytes, *, strict: bool = True,
           max_bytes: int = MAX_REPORT_BYTES) -> WireReport | Undecodable:
    if len(payload) > max_bytes:
        return Undecodable(WireReject.OVERSIZED, f"{len(payload)} bytes > {max_bytes}")
    try:
        return _parse(bytes(payload), strict)
    except _Reject as reject:
        return Undecodable(WireReject.MALFORMED, str(reject))


# --- bench only: hand-built payloads for the strictness table -----------------------------


def _varint(value: int, padded: bool = False) -> bytes:
    """LEB128; `padded`: one needless 0x00 continuation byte (not the shortest form)."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out[:-1]) + bytes((out[-1] | 0x80, 0)) if padded else bytes(out)


def _field(number: int, value: int | bytes, padded: bool = False) -> bytes:
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value), padded) + value
    return _varint(number << 3) + _varint(value, padded)


def _usage(messages: int = 1000, size: int = 100) -> bytes:
    return _field(1, messages) + _field(2, size)


def _group(name: bytes, *classes: tuple[int, bytes]) -> bytes:
    return _field(6, _field(1, name) + b"".join(_field(n, body) for n, body in classes))


COUNT, PARTICIPANT, SEQUENCE, SENT, GOODBYE = 1, 2, 3, 4, 5  # UsageReport's field numbers


def _head(participant: bytes = b"b1", sequence: int = 5, sent: int = 1500, count: int = 1,
          ) -> bytes:
    return ((_field(COUNT, count) if count else b"") + _field(PARTICIPANT, participant)
            + _field(SEQUENCE, sequence) + _field(SENT, sent))


VALID = _head() + _group(b"rg", (2, _usage()))
FIXED = "cannot occur (fixed layout)"
ATTACKS: dict[str, tuple[str, bytes]] = {
    # name: (what codec's decoder says, payload)
    "unknown field (a newer sender)": ("unknown_version", VALID + _field(15, 1)),
    "unknown field inside a class": ("malformed", _head() + _group(
        b"rg", (2, _usage() + _field(9, 7)))),
    "fields out of order": (FIXED,
                            _field(SEQUENCE, 5) + _field(COUNT, 1) + _field(PARTICIPANT, b"b1")
                            + _field(SENT, 1500) + _group(b"rg", (2, _usage()))),
    "non-shortest varint": ("malformed", _field(COUNT, 1) + _field(PARTICIPANT, b"b1")
                            + _field(SEQUENCE, 5, padded=True) + _field(SENT, 1500)
                            + _group(b"rg", (2, _usage()))),
    "non-shortest length": ("malformed", _head() + _field(6, _field(1, b"rg") + _field(
        2, _usage()), padded=True)),
    "a scalar twice (last wins)": (FIXED,
                                   _head() + _field(SEQUENCE, 7) + _group(b"rg", (2, _usage()))),
    "a class twice (merged)": (FIXED,
                               _head() + _group(b"rg", (2, _usage()), (2, _usage(5, 5)))),
    "explicit default (goodbye: false)": (FIXED,
                                          _head() + _field(GOODBYE, 0)
                                          + _group(b"rg", (2, _usage()))),
    "duplicate group": ("malformed", _head(count=2) + _group(b"rg", (2, _usage()))
                        + _group(b"rg", (3, _usage()))),
    "unsorted groups": ("malformed", _head(count=2) + _group(b"rh", (2, _usage()))
                        + _group(b"rg", (2, _usage()))),
    "empty group name": ("malformed", _head() + _group(b"", (2, _usage()))),
    "group with no class": ("malformed", _head() + _group(b"rg")),
    "group name not UTF-8": ("malformed", _head() + _group(b"\xc3(", (2, _usage()))),
    "empty participant": ("malformed", _head(b"") + _group(b"rg", (2, _usage()))),
    "goodbye with groups": ("malformed", _head() + _field(GOODBYE, 1)
                            + _group(b"rg", (2, _usage()))),
    "sequence over 2**63 - 1": ("malformed", _head(sequence=2**63)
                                + _group(b"rg", (2, _usage()))),
    "value over MAX_FIXED": ("malformed", _head() + _group(b"rg", (2, _usage(MAX_FIXED + 1)))),
    "varint over 64 bits": ("malformed", _field(COUNT, 1) + _field(PARTICIPANT, b"b1")
                            + _varint(SEQUENCE << 3) + b"\xff" * 9 + b"\x7f"
                            + _field(SENT, 1500) + _group(b"rg", (2, _usage()))),
    "cut at a group (count kept)": ("truncated", _head(count=2) + _group(b"rg", (2, _usage()))),
    "cut inside a group": ("truncated", VALID[:-2]),
}


def strictness() -> list[dict[str, Any]]:
    assert isinstance(decode(VALID), WireReport), decode(VALID)
    rows = []
    for name, (ours, payload) in ATTACKS.items():
        strict = decode(payload)
        by = "" if isinstance(strict, WireReport) else (
            "protobuf's parser" if strict.detail.startswith("not a report") else
            "re-encode ≠ payload" if strict.detail.startswith("not the canonical") else
            "a check by hand")
        rows.append({"case": name, "ours": ours,
                     "plain": _verdict(decode(payload, strict=False)),
                     "strict": _verdict(strict), "by": by})
    return rows


def _verdict(result: WireReport | Undecodable) -> str:
    return "accepted" if isinstance(result, WireReport) else "refused"


def prefixes(report: WireReport) -> dict[str, int]:
    """Of the strict prefixes of one encoded report, how many each decoder accepts (each
    is a cut-off report: codec's decoder calls every one TRUNCATED)."""
    payload = encode(report)
    accepted = {"plain": 0, "strict": 0, "count": len(payload)}
    for end in range(len(payload)):
        for key, strict in (("plain", False), ("strict", True)):
            accepted[key] += isinstance(decode(payload[:end], strict=strict), WireReport)
    return accepted


# --- the worker libraries.py runs ----------------------------------------------------------


def _import_seconds() -> float:
    """What the runtime and the generated module (compiled beforehand: protoc not timed) add
    to an interpreter that has codec.py's dataclasses."""
    from tests.bench import libraries as bench

    generated = os.path.dirname(sys.modules["usage_report_pb2"].__file__ or "")
    return bench.import_seconds("usage_report_pb2", after=bench.WIRE_BASE, path=generated)


def main() -> None:
    import google.protobuf

    from tests.bench import libraries as bench

    sizes, timings = {}, {}
    for groups, limits in bench.WIRE_CASES:
        report = bench.wire_report(groups, limits=limits)
        key = f"{groups}/{int(limits)}"
        payload = encode(report)
        back = decode(payload)
        assert back == codec.canonical(report), "protobuf round trip differs"
        sizes[key] = {"plain": len(payload),
                      "front_coded": len(encode(report, front_coded=True))}
        ours = codec.encode(report)
        timings[key] = {  # ours beside, in this process: the machine's load is shared
            "ours_encode": bench.best(lambda r=report: codec.encode(r)),
            "encode": bench.best(lambda r=report: encode(r)),
            "ours_decode": bench.best(lambda p=ours: decoder.decode(p)),
            "decode_plain": bench.best(lambda p=payload: decode(p, strict=False)),
            "decode_strict": bench.best(lambda p=payload: decode(p)),
            "parse_only": bench.best(lambda p=payload: pb.UsageReport.FromString(p)),
        }
    small = bench.wire_report(3, limits=True)
    json.dump({
        "versions": {"protobuf": google.protobuf.__version__,
                     "backend": _backend(), "python": sys.version.split()[0]},
        "sizes": sizes, "timings": timings, "strictness": strictness(),
        "prefixes": prefixes(small),
        "goodbye_prefixes": prefixes(WireReport(small.participant, small.sequence,
                                                small.sent_at, (), goodbye=True)),
        "import_seconds": _import_seconds(),
        "installed_bytes": bench.installed_bytes(["protobuf"]),
        "lines": bench.count_lines([Path(__file__), PROTO], stop=bench.WORKER),
        "generated_lines": bench.count_lines([Path(sys.modules["usage_report_pb2"].__file__)]),
    }, sys.stdout)


def _backend() -> str:
    from google.protobuf.internal import api_implementation

    return api_implementation.Type()


if __name__ == "__main__":
    main()
