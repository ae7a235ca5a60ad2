"""The usage report on the wire: a versioned, compact binary form, and its strict decoder.

Why not Pulsar's own format: Pulsar publishes a protobuf `ResourceUsageInfo` (broker name,
then per resource group the name and per class two uint64 counts per period) with no
version, no sequence, no send time and no limits — so peers cannot reject replays or
stale reports, and the `fair` allocator cannot see who is bound by its limit. This format
carries those, and still costs less than PIP-82's estimate of 32 bytes of usage per
resource group (see `tests/bench/report_size.py` for measured sizes).

Layout, version 1 (every integer an unsigned LEB128 varint of at most 64 bits, in its
shortest form):

    magic 0xB7 · version 0x01 · flags (bit 0: goodbye; other bits 0)
    participant: length, UTF-8 bytes
    sequence · sent_at in milliseconds · group count
    per resource group, sorted by name (UTF-8 byte order), each name front-coded
    against the previous one (as Lucene's term dictionary does; sorted names of a
    fleet such as `tenant-00042-rg` share long prefixes):
        shared prefix length · suffix length · suffix bytes
        class byte: bit 0 publish present, bit 1 its limit has messages, bit 2 its
                    limit has bytes; bits 3–5 the same for dispatch; bits 6–7 zero
        per present class (publish first): usage messages, usage bytes, then the limit
        values whose bits are set

Version 2 is version 1 with the class byte a varint of 9 bits: bits 6–8 the same for
replication dispatch (Pulsar master's third class). A report is written as version 2 only
when it carries a replication entry, so fleets without replication stay readable by
instances that predate it (those count a version 2 report as `unknown_version`).

Precision (what `decode(encode(r))` gives back, exactly `canonical(r)`): message rates
in thousandths of a message per second, byte rates in whole bytes per second, `sent_at`
in whole milliseconds, each rounded half to even; entries sorted by resource group then
class (publish, dispatch, replication dispatch); a limit that is unlimited in both
dimensions becomes None. A fixed-point value must not exceed `MAX_FIXED` (2**52) so that
every such value is held exactly by a float and re-encodes to the same integer.

The decoder accepts only canonical bytes: any payload it accepts re-encodes to itself,
byte for byte. So it rejects non-shortest varints, unsorted or duplicate groups, and a
front-coded prefix shorter than the one shared — two encodings of one report would make
"the same report" ambiguous for the gate's own-report check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from exporter.config.settings import MonitoringClass

MAGIC = 0xB7
VERSION = 1  # without a replication entry
VERSION_REPLICATION = 2  # with one: the class field a varint
# Pulsar's default maxMessageSize is 5 MB; keep a report well inside it.
MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_FIXED = 2**52
MAX_SEQUENCE = 2**63 - 1
MESSAGE_SCALE = 1000  # thousandths of a message per second
BYTE_SCALE = 1  # whole bytes per second
TIME_SCALE = 1000  # milliseconds

FLAG_GOODBYE = 0x01
CLASSES = (MonitoringClass.PUBLISH, MonitoringClass.DISPATCH,
           MonitoringClass.REPLICATION_DISPATCH)
CLASS_SHIFT = {MonitoringClass.PUBLISH: 0, MonitoringClass.DISPATCH: 3,
               MonitoringClass.REPLICATION_DISPATCH: 6}
PRESENT, LIMIT_MESSAGES, LIMIT_BYTES = 0x1, 0x2, 0x4
CLASS_BITS_MASK = {VERSION: 0x3F, VERSION_REPLICATION: 0x1FF}


@dataclass(frozen=True)
class Rates:
    """Per second, ≥ 0. In a limit, `math.inf` in one dimension means "no limit there"
    (a resource group may cap messages and not bytes); usage is always finite."""

    messages: float
    bytes: float


@dataclass(frozen=True)
class Entry:
    resource_group: str
    monitoring_class: MonitoringClass
    usage: Rates
    limit: Rates | None  # this participant's current local limit; None = unlimited/unknown


@dataclass(frozen=True)
class WireReport:
    participant: str
    sequence: int  # strictly increasing per sender across restarts (see gate.initial_sequence)
    sent_at: float  # unix seconds (ms precision on the wire)
    entries: tuple[Entry, ...]
    goodbye: bool = False  # "forget me now"; carries no entries


class WireReject(StrEnum):
    MALFORMED = "malformed"
    TRUNCATED = "truncated"
    OVERSIZED = "oversized"
    UNKNOWN_VERSION = "unknown_version"


@dataclass(frozen=True)
class Undecodable:
    reason: WireReject
    detail: str


# --- fixed point ------------------------------------------------------------------------------


def _to_fixed(what: str, value: float, scale: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{what} must be finite and ≥ 0, got {value!r}")
    fixed = round(value * scale)
    if fixed > MAX_FIXED:
        raise ValueError(f"{what} too large for the wire: {value!r} (max {MAX_FIXED / scale})")
    return fixed


def _limit_fixed(what: str, value: float, scale: int) -> int | None:
    """None for an unlimited dimension (inf), else the fixed-point value."""
    return None if value == math.inf else _to_fixed(what, value, scale)


def _quantize(value: float, scale: int) -> float:
    return _to_fixed("value", value, scale) / scale


def _quantize_limit(limit: Rates | None) -> Rates | None:
    if limit is None:
        return None
    messages = limit.messages if limit.messages == math.inf else _quantize(
        limit.messages, MESSAGE_SCALE)
    size = limit.bytes if limit.bytes == math.inf else _quantize(limit.bytes, BYTE_SCALE)
    return None if messages == size == math.inf else Rates(messages, size)


def _order(entry: Entry) -> tuple[bytes, int]:
    return entry.resource_group.encode("utf-8"), CLASSES.index(entry.monitoring_class)


def canonical(report: WireReport) -> WireReport:
    """The report as the wire carries it (module docstring: precision and order).
    Raises ValueError for a report `encode` would refuse."""
    _validate(report)
    entries = tuple(
        Entry(
            e.resource_group,
            MonitoringClass(e.monitoring_class),
            Rates(_quantize(e.usage.messages, MESSAGE_SCALE), _quantize(e.usage.bytes, BYTE_SCALE)),
            _quantize_limit(e.limit),
        )
        for e in sorted(report.entries, key=_order)
    )
    return WireReport(
        report.participant,
        report.sequence,
        _to_fixed("sent_at", report.sent_at, TIME_SCALE) / TIME_SCALE,
        entries,
        report.goodbye,
    )


# --- encoding ---------------------------------------------------------------------------------


def _varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _validate(report: WireReport) -> None:
    if not report.participant:
        raise ValueError("participant must not be empty")
    if isinstance(report.sequence, bool) or not isinstance(report.sequence, int):
        raise ValueError(f"sequence must be an int, got {report.sequence!r}")
    if not 0 <= report.sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence out of range [0, 2**63): {report.sequence}")
    _to_fixed("sent_at", report.sent_at, TIME_SCALE)
    if report.goodbye and report.entries:
        raise ValueError("a goodbye carries no entries")
    seen: set[tuple[str, MonitoringClass]] = set()
    for entry in report.entries:
        key = (entry.resource_group, MonitoringClass(entry.monitoring_class))
        if not entry.resource_group:
            raise ValueError("resource_group must not be empty")
        if key in seen:
            raise ValueError(f"duplicate entry for {key[0]!r} × {key[1]}")
        seen.add(key)
        where = f"{entry.resource_group}/{entry.monitoring_class}"
        _to_fixed(f"{where} usage.messages", entry.usage.messages, MESSAGE_SCALE)
        _to_fixed(f"{where} usage.bytes", entry.usage.bytes, BYTE_SCALE)
        if entry.limit is not None:
            _limit_fixed(f"{where} limit.messages", entry.limit.messages, MESSAGE_SCALE)
            _limit_fixed(f"{where} limit.bytes", entry.limit.bytes, BYTE_SCALE)


def _shared_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def version_of(report: WireReport) -> int:
    """The version `report` is written in: the oldest that carries it."""
    replication = any(MonitoringClass(e.monitoring_class) is MonitoringClass.REPLICATION_DISPATCH
                      for e in report.entries)
    return VERSION_REPLICATION if replication else VERSION


def encode(report: WireReport) -> bytes:
    """The canonical bytes of `report`. Raises ValueError for a report that cannot be
    represented (empty names, duplicate group × class, negative or non-finite rates,
    values above MAX_FIXED, a goodbye with entries, names that are not valid Unicode)."""
    _validate(report)
    version = version_of(report)
    out = bytearray((MAGIC, version, FLAG_GOODBYE if report.goodbye else 0))
    participant = report.participant.encode("utf-8")
    _varint(out, len(participant))
    out += participant
    _varint(out, report.sequence)
    _varint(out, _to_fixed("sent_at", report.sent_at, TIME_SCALE))
    groups: dict[bytes, dict[MonitoringClass, Entry]] = {}
    for e in sorted(report.entries, key=_order):
        groups.setdefault(e.resource_group.encode("utf-8"), {})[
            MonitoringClass(e.monitoring_class)] = e
    _varint(out, len(groups))
    previous = b""
    for name, classes in groups.items():
        shared = _shared_prefix(previous, name)
        _varint(out, shared)
        _varint(out, len(name) - shared)
        out += name[shared:]
        previous = name
        bits = 0
        values: list[int] = []
        for cls in CLASSES:
            entry = classes.get(cls)
            if entry is None:
                continue
            shift = CLASS_SHIFT[cls]
            bits |= PRESENT << shift
            values.append(_to_fixed("usage", entry.usage.messages, MESSAGE_SCALE))
            values.append(_to_fixed("usage", entry.usage.bytes, BYTE_SCALE))
            if entry.limit is not None:
                messages = _limit_fixed("limit", entry.limit.messages, MESSAGE_SCALE)
                size = _limit_fixed("limit", entry.limit.bytes, BYTE_SCALE)
                if messages is not None:
                    bits |= LIMIT_MESSAGES << shift
                    values.append(messages)
                if size is not None:
                    bits |= LIMIT_BYTES << shift
                    values.append(size)
        _varint(out, bits)  # version 1: < 0x40, the byte it always was
        for value in values:
            _varint(out, value)
    return bytes(out)
