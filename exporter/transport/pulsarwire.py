"""Apache Pulsar's own PIP-82 usage reports: `ResourceUsageInfo` protobufs, decoded.

Each broker running `ResourceUsageTopicTransportManager` publishes one report every
`resourceUsageTransportPublishIntervalInSecs` on `non-persistent://pulsar/system/resource-usage`
(the broker's `ResourceUsage.proto`, proto2, package `pulsar.resource.usage`):

    ResourceUsageInfo { required string broker = 1; repeated ResourceUsage usageMap = 2; }
    ResourceUsage     { required string owner = 1; optional NetworkUsage publish = 2;
                        optional NetworkUsage dispatch = 3; optional StorageUsage storage = 4;
                        optional NetworkUsage replicationDispatch = 6; (newer: 7, replicator) }
    NetworkUsage      { required uint64 bytesPerPeriod = 1; required uint64 messagesPerPeriod = 2; }
    StorageUsage      { required uint64 totalBytes = 1; }

`broker` is the sender's broker service URL, `owner` a resource group's name. The counts are
what the broker used since its previous fill: `ResourceGroup.setUsageInMonitoredEntity`
resets them every round and leaves the class out when the suppression rule holds the report
back (so a suppressed round's usage is never reported; measured on 4.0.8: an entry with its
owner only). Fields we do not read are skipped by wire type, so newer brokers' additions pass.

Five message types with varints and length-delimited fields only: a 60-line reader is
simpler to check than a protobuf runtime plus generated code, and it is tested on payloads
recorded from a 4.0.8 broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
MAX_PAYLOAD = 5 * 1024 * 1024  # the broker's default maxMessageSize


class WireError(StrEnum):
    """Why a payload was refused; counted by value."""

    TRUNCATED = "truncated"  # a field runs past the end of its message
    MALFORMED = "malformed"  # not protobuf, or a field of the wrong type
    MISSING_FIELDS = "missing_fields"  # a required field is absent
    OVERSIZED = "oversized"  # larger than the broker would ever send


class Undecodable(ValueError):
    def __init__(self, reason: WireError, detail: str):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class NetworkUsage:
    bytes: int
    messages: int


@dataclass(frozen=True)
class GroupUsage:
    """One `ResourceUsage` entry: a class is None when the broker left it out (suppressed)."""

    owner: str
    publish: NetworkUsage | None = None
    dispatch: NetworkUsage | None = None
    storage_bytes: int | None = None


@dataclass(frozen=True)
class BrokerUsageReport:
    broker: str
    usage: tuple[GroupUsage, ...]


def _fields(buf: memoryview, where: str) -> list[tuple[int, int | memoryview]]:
    """(field number, value) pairs of one message: ints for varints, views for
    length-delimited fields; fixed-width fields are skipped."""
    out: list[tuple[int, int | memoryview]] = []
    pos, end = 0, len(buf)

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= end:
                raise Undecodable(WireError.TRUNCATED, f"{where}: varint runs past the end")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift >= 70:
                raise Undecodable(WireError.MALFORMED, f"{where}: varint longer than 10 bytes")

    while pos < end:
        key = varint()
        number, kind = key >> 3, key & 7
        if number == 0:
            raise Undecodable(WireError.MALFORMED, f"{where}: field number 0")
        if kind == _VARINT:
            out.append((number, varint()))
        elif kind == _LENGTH:
            size = varint()
            if pos + size > end:
                raise Undecodable(WireError.TRUNCATED,
                                  f"{where}: field {number} of {size} bytes runs past the end")
            out.append((number, buf[pos:pos + size]))
            pos += size
        elif kind in (_FIXED64, _FIXED32):
            pos += 8 if kind == _FIXED64 else 4
            if pos > end:
                raise Undecodable(WireError.TRUNCATED, f"{where}: field {number} is cut")
        else:
            raise Undecodable(WireError.MALFORMED, f"{where}: wire type {kind} (field {number})")
    return out


def _one(fields: list[tuple[int, int | memoryview]], number: int, kind: type, where: str,
         name: str, required: bool = True):
    """The last value of field `number` (protobuf: the last one wins), of `kind`."""
    value = None
    for n, v in fields:
        if n == number:
            if not isinstance(v, kind):
                raise Undecodable(WireError.MALFORMED, f"{where}: {name} has the wrong type")
            value = v
    if value is None and required:
        raise Undecodable(WireError.MISSING_FIELDS, f"{where}: no {name}")
    return value


def _text(view: memoryview, where: str) -> str:
    try:
        return bytes(view).decode("utf-8")
    except UnicodeDecodeError:
        raise Undecodable(WireError.MALFORMED, f"{where}: not UTF-8") from None


def _network(view: memoryview | None, where: str) -> NetworkUsage | None:
    if view is None:
        return None
    fields = _fields(view, where)
    return NetworkUsage(bytes=_one(fields, 1, int, where, "bytesPerPeriod"),
                        messages=_one(fields, 2, int, where, "messagesPerPeriod"))


def _usage(view: memoryview, where: str) -> GroupUsage:
    fields = _fields(view, where)
    owner = _text(_one(fields, 1, memoryview, where, "owner"), where)
    where = f"{where} {owner!r}"
    storage = _one(fields, 4, memoryview, where, "storage", required=False)
    return GroupUsage(
        owner=owner,
        publish=_network(_one(fields, 2, memoryview, where, "publish", False), f"{where} publish"),
        dispatch=_network(_one(fields, 3, memoryview, where, "dispatch", False),
                          f"{where} dispatch"),
        storage_bytes=None if storage is None else _one(
            _fields(storage, f"{where} storage"), 1, int, where, "storage totalBytes"))


def decode(payload: bytes) -> BrokerUsageReport:
    """One message from the brokers' usage topic; raises `Undecodable` with the reason."""
    if len(payload) > MAX_PAYLOAD:
        raise Undecodable(WireError.OVERSIZED, f"{len(payload)} bytes")
    fields = _fields(memoryview(payload), "ResourceUsageInfo")
    broker = _text(_one(fields, 1, memoryview, "ResourceUsageInfo", "broker"), "broker")
    where = f"report from {broker!r}"
    usage = []
    for number, value in fields:
        if number == 2:
            if not isinstance(value, memoryview):
                raise Undecodable(WireError.MALFORMED, f"{where}: usageMap is not a message")
            usage.append(_usage(value, f"{where} usageMap[{len(usage)}]"))
    return BrokerUsageReport(broker, tuple(usage))
