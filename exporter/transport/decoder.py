"""The usage report's strict decoder: only canonical bytes are accepted, so any payload it
accepts re-encodes to itself byte for byte (codec.py has the layout and why). Every
refusal is an `Undecodable` with its `WireReject` reason; nothing raises."""

from __future__ import annotations

import math

from exporter.transport.codec import (
    BYTE_SCALE,
    CLASS_BITS_MASK,
    CLASS_SHIFT,
    CLASSES,
    FLAG_GOODBYE,
    LIMIT_BYTES,
    LIMIT_MESSAGES,
    MAGIC,
    MAX_FIXED,
    MAX_REPORT_BYTES,
    MAX_SEQUENCE,
    MESSAGE_SCALE,
    PRESENT,
    TIME_SCALE,
    VERSION,
    VERSION_REPLICATION,
    Entry,
    Rates,
    Undecodable,
    WireReject,
    WireReport,
    version_of,
)


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


def _decode_group(reader: _Reader, previous: bytes, index: int, version: int,
                  ) -> tuple[bytes, list[Entry]]:
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
    bits = reader.byte(f"{what} class byte") if version == VERSION else reader.varint(
        f"{what} class field")
    if bits & ~CLASS_BITS_MASK[version]:
        raise _Reject(WireReject.MALFORMED, f"{what}: unknown class bits {bits:#04x}")
    entries: list[Entry] = []
    for cls in CLASSES:
        own = (bits >> CLASS_SHIFT[cls]) & 0x7
        if not own & PRESENT:
            if own:
                raise _Reject(WireReject.MALFORMED, f"{what}: limit bits for absent {cls}")
            continue
        where = f"{name}/{cls}"
        usage = Rates(reader.fixed(f"{where} usage.messages", MESSAGE_SCALE),
                      reader.fixed(f"{where} usage.bytes", BYTE_SCALE))
        limit = None
        if own & (LIMIT_MESSAGES | LIMIT_BYTES):
            messages = (reader.fixed(f"{where} limit.messages", MESSAGE_SCALE)
                        if own & LIMIT_MESSAGES else math.inf)
            size = reader.fixed(f"{where} limit.bytes", BYTE_SCALE) if own & LIMIT_BYTES \
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
    if version not in (VERSION, VERSION_REPLICATION):
        raise _Reject(WireReject.UNKNOWN_VERSION, f"version {version}, this decoder speaks "
                                                  f"{VERSION} and {VERSION_REPLICATION}")
    flags = reader.byte("flags")
    if flags & ~FLAG_GOODBYE:
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
    goodbye = bool(flags & FLAG_GOODBYE)
    if goodbye and count:
        raise _Reject(WireReject.MALFORMED, "a goodbye with entries")
    entries: list[Entry] = []
    previous = b""
    for index in range(count):
        previous, group = _decode_group(reader, previous, index, version)
        entries.extend(group)
    if reader.pos != len(data):
        raise _Reject(WireReject.MALFORMED, f"{len(data) - reader.pos} trailing bytes")
    report = WireReport(participant, sequence, sent_at, tuple(entries), goodbye)
    if version_of(report) != version:  # two encodings of one report: never accepted
        raise _Reject(WireReject.MALFORMED, f"version {version} without a replication entry")
    return report


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
