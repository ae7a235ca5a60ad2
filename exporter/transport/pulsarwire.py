"""Apache Pulsar's own PIP-82 usage reports: `ResourceUsageInfo` protobufs, decoded.

Each broker running `ResourceUsageTopicTransportManager` publishes one report every
`resourceUsageTransportPublishIntervalInSecs` on `non-persistent://pulsar/system/resource-usage`
(the broker's `ResourceUsage.proto`, proto2, package `pulsar.resource.usage`; as of
apache/pulsar 17548093):

    ResourceUsageInfo { required string broker = 1; repeated ResourceUsage usageMap = 2; }
    ResourceUsage     { required string owner = 1; optional NetworkUsage publish = 2;
                        optional NetworkUsage dispatch = 3; optional StorageUsage storage = 4;
                        optional NetworkUsage replicationDispatch = 6 [deprecated];
                        repeated ReplicatorUsage replicator = 7; }         (5: unused)
    ReplicatorUsage   { required string localCluster = 1; required string remoteCluster = 2;
                        required NetworkUsage networkUsage = 3; }
    NetworkUsage      { required uint64 bytesPerPeriod = 1; required uint64 messagesPerPeriod = 2; }
    StorageUsage      { required uint64 totalBytes = 1; }

Pulsar 4.0.8 has fields 1-4 of `ResourceUsage` only (no `ReplicatorUsage`). Master's
`ReplicationDispatch` class writes one `replicator` per remote cluster it reports
(`ResourceGroup.setUsageInMonitoredEntity`, `addReplicator()`) and never reads field 6; an
intermediate upstream version wrote the whole class to field 6 instead. Both are decoded.

`broker` is the sender's broker service URL, `owner` a resource group's name. The counts are
what the broker used since its previous fill: `ResourceGroup.setUsageInMonitoredEntity`
resets them every round and leaves the class (on master: the remote cluster's `replicator`)
out when the suppression rule holds the report back (so a suppressed round's usage is never
reported; measured on 4.0.8: an entry with its owner only).

A field number `ResourceUsageInfo` or `ResourceUsage` does not have (a class newer than this
reader, anything another client wrote there) is skipped by wire type and its number kept
(`unknown_fields`), to be counted, not refused: the rest of the report is still good. Inside
the nested messages unknown numbers are skipped silently. A known field of the wrong type, or
a required one missing (in a present `ReplicatorUsage` too), refuses the whole payload.

Six message types with varints and length-delimited fields only: a short reader is
simpler to check than a protobuf runtime plus generated code, and it is tested on payloads
recorded from a 4.0.8 broker and on ones protobuf's own runtime encoded from master's proto.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
MAX_PAYLOAD = 5 * 1024 * 1024  # the broker's default maxMessageSize
_INFO_FIELDS = frozenset({1, 2})  # ResourceUsageInfo's field numbers
_USAGE_FIELDS = frozenset({1, 2, 3, 4, 6, 7})  # ResourceUsage's

_Value = int | memoryview | None  # a varint, a length-delimited field, a fixed-width one


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
class ReplicatorUsage:
    """What the sender's replicators sent from `local_cluster` (its own) to `remote_cluster`
    for the group since its last report (master's `ReplicatorUsage`)."""

    local_cluster: str
    remote_cluster: str
    usage: NetworkUsage


@dataclass(frozen=True)
class GroupUsage:
    """One `ResourceUsage` entry: a class is None (`replicators`: a remote cluster is not
    there) when the broker left it out (suppressed), or never reports it (4.0.8: no
    replication at all)."""

    owner: str
    publish: NetworkUsage | None = None
    dispatch: NetworkUsage | None = None
    storage_bytes: int | None = None
    replication_dispatch: NetworkUsage | None = None  # field 6: the intermediate version
    replicators: tuple[ReplicatorUsage, ...] = ()  # field 7, in the report's order
    unknown_fields: tuple[int, ...] = ()  # field numbers ResourceUsage does not have, sorted

    def by_remote_cluster(self) -> dict[str, NetworkUsage]:
        """The replicated usage per remote cluster as master reads it
        (`getUsageFromMonitoredEntity`): the first `replicator` naming a remote cluster
        wins, `localCluster` is not looked at."""
        out: dict[str, NetworkUsage] = {}
        for r in self.replicators:
            out.setdefault(r.remote_cluster, r.usage)
        return out


@dataclass(frozen=True)
class BrokerUsageReport:
    broker: str
    usage: tuple[GroupUsage, ...]
    unknown_fields: tuple[int, ...] = ()  # field numbers ResourceUsageInfo does not have


def _fields(buf: memoryview, where: str) -> list[tuple[int, _Value]]:
    """(field number, value) pairs of one message: ints for varints, views for
    length-delimited fields, None for fixed-width ones (no field we read has that type)."""
    out: list[tuple[int, _Value]] = []
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
            out.append((number, None))
        else:
            raise Undecodable(WireError.MALFORMED, f"{where}: wire type {kind} (field {number})")
    return out


def _one(fields: list[tuple[int, _Value]], number: int, kind: type, where: str,
         name: str, required: bool = True):
    """The last value of field `number` (protobuf: the last one wins), of `kind`; a
    fixed-width field of that number is skipped, as if absent."""
    value = None
    for n, v in fields:
        if n == number and v is not None:
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
    return None if view is None else _network_usage(view, where)


def _network_usage(view: memoryview, where: str) -> NetworkUsage:
    fields = _fields(view, where)
    return NetworkUsage(bytes=_one(fields, 1, int, where, "bytesPerPeriod"),
                        messages=_one(fields, 2, int, where, "messagesPerPeriod"))


def _unknown(fields: list[tuple[int, _Value]], known: frozenset[int]) -> tuple[int, ...]:
    return tuple(sorted({n for n, _ in fields if n not in known}))


def _repeated(fields: list[tuple[int, _Value]], number: int, where: str,
              name: str) -> list[memoryview]:
    """Every occurrence of the message field `number`, in order."""
    out = []
    for n, v in fields:
        if n == number and v is not None:
            if not isinstance(v, memoryview):
                raise Undecodable(WireError.MALFORMED, f"{where}: {name} is not a message")
            out.append(v)
    return out


def _replicator(view: memoryview, where: str) -> ReplicatorUsage:
    fields = _fields(view, where)
    local = _text(_one(fields, 1, memoryview, where, "localCluster"), where)
    remote = _text(_one(fields, 2, memoryview, where, "remoteCluster"), where)
    return ReplicatorUsage(local, remote, _network_usage(
        _one(fields, 3, memoryview, where, "networkUsage"), f"{where} {remote!r}"))


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
            _fields(storage, f"{where} storage"), 1, int, where, "storage totalBytes"),
        replication_dispatch=_network(
            _one(fields, 6, memoryview, where, "replicationDispatch", False),
            f"{where} replicationDispatch"),
        replicators=tuple(_replicator(v, f"{where} replicator[{i}]") for i, v in
                          enumerate(_repeated(fields, 7, where, "replicator"))),
        unknown_fields=_unknown(fields, _USAGE_FIELDS))


def decode(payload: bytes) -> BrokerUsageReport:
    """One message from the brokers' usage topic; raises `Undecodable` with the reason."""
    if len(payload) > MAX_PAYLOAD:
        raise Undecodable(WireError.OVERSIZED, f"{len(payload)} bytes")
    fields = _fields(memoryview(payload), "ResourceUsageInfo")
    broker = _text(_one(fields, 1, memoryview, "ResourceUsageInfo", "broker"), "broker")
    where = f"report from {broker!r}"
    return BrokerUsageReport(
        broker, tuple(_usage(v, f"{where} usageMap[{i}]") for i, v in
                      enumerate(_repeated(fields, 2, where, "usageMap"))),
        _unknown(fields, _INFO_FIELDS))
