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

Precision (what `decode(encode(r))` gives back, exactly `canonical(r)`): message rates
in thousandths of a message per second, byte rates in whole bytes per second, `sent_at`
in whole milliseconds, each rounded half to even; entries sorted by resource group then
class (publish, dispatch); a limit that is unlimited in both dimensions becomes None.
A fixed-point value must not exceed `MAX_FIXED` (2**52) so that every such value is held
exactly by a float and re-encodes to the same integer.

The decoder accepts only canonical bytes: any payload it accepts re-encodes to itself,
byte for byte. So it rejects non-shortest varints, unsorted or duplicate groups, and a
front-coded prefix shorter than the one shared — two encodings of one report would make
"the same report" ambiguous for the gate's own-report check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from exporter.config.model import MonitoringClass

MAGIC = 0xB7
VERSION = 1
# Pulsar's default maxMessageSize is 5 MB; keep a report well inside it.
MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_FIXED = 2**52
MAX_SEQUENCE = 2**63 - 1
MESSAGE_SCALE = 1000  # thousandths of a message per second
BYTE_SCALE = 1  # whole bytes per second
TIME_SCALE = 1000  # milliseconds

_FLAG_GOODBYE = 0x01
_CLASSES = (MonitoringClass.PUBLISH, MonitoringClass.DISPATCH)
_CLASS_SHIFT = {MonitoringClass.PUBLISH: 0, MonitoringClass.DISPATCH: 3}
_PRESENT, _LIMIT_MESSAGES, _LIMIT_BYTES = 0x1, 0x2, 0x4
_CLASS_BITS_MASK = 0x3F


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
    return entry.resource_group.encode("utf-8"), _CLASSES.index(entry.monitoring_class)


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


def encode(report: WireReport) -> bytes:
    """The canonical bytes of `report`. Raises ValueError for a report that cannot be
    represented (empty names, duplicate group × class, negative or non-finite rates,
    values above MAX_FIXED, a goodbye with entries, names that are not valid Unicode)."""
    _validate(report)
    out = bytearray((MAGIC, VERSION, _FLAG_GOODBYE if report.goodbye else 0))
    participant = report.participant.encode("utf-8")
    _varint(out, len(participant))
    out += participant
    _varint(out, report.sequence)
    _varint(out, _to_fixed("sent_at", report.sent_at, TIME_SCALE))
    groups: dict[bytes, dict[MonitoringClass, Entry]] = {}
    for entry in sorted(report.entries, key=_order):
        groups.setdefault(entry.resource_group.encode("utf-8"), {})[
            MonitoringClass(entry.monitoring_class)] = entry
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
        for cls in _CLASSES:
            entry = classes.get(cls)
            if entry is None:
                continue
            shift = _CLASS_SHIFT[cls]
            bits |= _PRESENT << shift
            values.append(_to_fixed("usage", entry.usage.messages, MESSAGE_SCALE))
            values.append(_to_fixed("usage", entry.usage.bytes, BYTE_SCALE))
            if entry.limit is not None:
                messages = _limit_fixed("limit", entry.limit.messages, MESSAGE_SCALE)
                size = _limit_fixed("limit", entry.limit.bytes, BYTE_SCALE)
                if messages is not None:
                    bits |= _LIMIT_MESSAGES << shift
                    values.append(messages)
                if size is not None:
                    bits |= _LIMIT_BYTES << shift
                    values.append(size)
        out.append(bits)
        for value in values:
            _varint(out, value)
    return bytes(out)


# --- decoding ---------------------------------------------------------------------------------


class _Reject(Exception):
    def __init__(self, reason: WireReject, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _Reader:
    """A cursor over the payload; every read either succeeds or raises `_Reject`."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def byte(self, what: str) -> int:
        if self.pos >= len(self.data):
            raise _Reject(WireReject.TRUNCATED, f"payload ends before {what}")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self, what: str) -> int:
        # The hot path of decoding (a 5,000-group report holds ~50,000 varints): locals
        # and a one-byte fast path instead of calls to byte().
        data, pos = self.data, self.pos
        if pos < len(data) and data[pos] < 0x80:
            self.pos = pos + 1
            return data[pos]
        value = shift = 0
        end = len(data)
        while True:
            if pos >= end:
                raise _Reject(WireReject.TRUNCATED, f"payload ends inside {what}")
            b = data[pos]
            pos += 1
            if shift == 63 and b > 1:
                raise _Reject(WireReject.MALFORMED, f"{what}: varint exceeds 64 bits")
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                if b == 0 and shift:
                    raise _Reject(WireReject.MALFORMED, f"{what}: varint not in shortest form")
                self.pos = pos
                return value
            shift += 7

    def take(self, n: int, what: str) -> bytes:
        if n > len(self.data) - self.pos:
            raise _Reject(WireReject.TRUNCATED, f"payload ends inside {what}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def fixed(self, what: str, scale: int) -> float:
        value = self.varint(what)
        if value > MAX_FIXED:
            raise _Reject(WireReject.MALFORMED, f"{what} out of range: {value}")
        return value / scale


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Reject(WireReject.MALFORMED, f"{what} is not valid UTF-8: {exc.reason}") from None


def _decode_group(reader: _Reader, previous: bytes, index: int) -> tuple[bytes, list[Entry]]:
    what = f"group {index}"
    shared = reader.varint(f"{what} prefix length")
    suffix = reader.take(reader.varint(f"{what} name length"), f"{what} name")
    if shared > len(previous):
        raise _Reject(WireReject.MALFORMED, f"{what}: prefix longer than the previous name")
    if not suffix:
        raise _Reject(WireReject.MALFORMED, f"{what}: empty or repeated resource group name")
    if shared < len(previous) and suffix[0] <= previous[shared]:
        detail = "duplicate or unsorted" if suffix[0] < previous[shared] else "prefix not shared"
        raise _Reject(WireReject.MALFORMED, f"{what}: {detail} resource group name")
    name_bytes = previous[:shared] + suffix
    name = _text(name_bytes, f"{what} name")
    bits = reader.byte(f"{what} class byte")
    if bits & ~_CLASS_BITS_MASK:
        raise _Reject(WireReject.MALFORMED, f"{what}: unknown class bits {bits:#04x}")
    entries: list[Entry] = []
    for cls in _CLASSES:
        own = (bits >> _CLASS_SHIFT[cls]) & 0x7
        if not own & _PRESENT:
            if own:
                raise _Reject(WireReject.MALFORMED, f"{what}: limit bits for absent {cls}")
            continue
        where = f"{name}/{cls}"
        usage = Rates(reader.fixed(f"{where} usage.messages", MESSAGE_SCALE),
                      reader.fixed(f"{where} usage.bytes", BYTE_SCALE))
        limit = None
        if own & (_LIMIT_MESSAGES | _LIMIT_BYTES):
            messages = (reader.fixed(f"{where} limit.messages", MESSAGE_SCALE)
                        if own & _LIMIT_MESSAGES else math.inf)
            size = reader.fixed(f"{where} limit.bytes", BYTE_SCALE) if own & _LIMIT_BYTES \
                else math.inf
            limit = Rates(messages, size)
        entries.append(Entry(name, cls, usage, limit))
    if not entries:
        raise _Reject(WireReject.MALFORMED, f"{what}: no monitoring class")
    return name_bytes, entries


def _decode(data: bytes) -> WireReport:
    reader = _Reader(data)
    if reader.byte("magic") != MAGIC:
        raise _Reject(WireReject.MALFORMED, "bad magic byte: not a usage report")
    version = reader.byte("version")
    if version != VERSION:
        raise _Reject(WireReject.UNKNOWN_VERSION, f"version {version}, this decoder speaks "
                                                  f"{VERSION}")
    flags = reader.byte("flags")
    if flags & ~_FLAG_GOODBYE:
        raise _Reject(WireReject.MALFORMED, f"unknown flag bits {flags:#04x}")
    participant = _text(reader.take(reader.varint("participant length"), "participant"),
                        "participant")
    if not participant:
        raise _Reject(WireReject.MALFORMED, "empty participant")
    sequence = reader.varint("sequence")
    if sequence > MAX_SEQUENCE:
        raise _Reject(WireReject.MALFORMED, f"sequence out of range: {sequence}")
    sent_at = reader.fixed("sent_at", TIME_SCALE)
    count = reader.varint("group count")
    goodbye = bool(flags & _FLAG_GOODBYE)
    if goodbye and count:
        raise _Reject(WireReject.MALFORMED, "a goodbye with entries")
    entries: list[Entry] = []
    previous = b""
    for index in range(count):
        previous, group = _decode_group(reader, previous, index)
        entries.extend(group)
    if reader.pos != len(data):
        raise _Reject(WireReject.MALFORMED, f"{len(data) - reader.pos} trailing bytes")
    return WireReport(participant, sequence, sent_at, tuple(entries), goodbye)


def decode(payload: bytes, max_bytes: int = MAX_REPORT_BYTES) -> WireReport | Undecodable:
    """The report in `payload`, or why not. Never raises.

    The reasons, checked in this order: OVERSIZED (longer than `max_bytes`; checked before
    reading anything), MALFORMED (bad magic), UNKNOWN_VERSION (good magic, another version),
    then TRUNCATED (the payload ends inside a structure — every strict prefix of a valid
    encoding is TRUNCATED, because each count and length comes before what it counts) or
    MALFORMED (anything else: bad UTF-8, non-canonical varints, values out of range,
    unsorted or duplicate groups, unknown bits, a goodbye with entries, trailing bytes).
    Negative and non-finite numbers cannot be written in this format at all.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        return Undecodable(WireReject.MALFORMED, f"not bytes: {type(payload).__name__}")
    size = payload.nbytes if isinstance(payload, memoryview) else len(payload)
    if size > max_bytes:
        return Undecodable(WireReject.OVERSIZED, f"{size} bytes > {max_bytes}")
    data = bytes(payload)
    try:
        return _decode(data)
    except _Reject as reject:
        return Undecodable(reject.reason, reject.detail)
