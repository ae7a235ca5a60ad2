"""Apache Pulsar's PIP-82 `ResourceUsageInfo` written the way its brokers write it (proto2
wire format, the broker's `ResourceUsage.proto`), for tests that need a broker's report
where no Apache Pulsar runs (pulsar-lite); tests/unit/test_pulsarwire.py checks our decoder
on payloads recorded from a real 4.0.8 broker."""

from __future__ import annotations

from collections.abc import Mapping


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def network(bytes_: int, messages: int) -> bytes:
    """A NetworkUsage: bytesPerPeriod, messagesPerPeriod."""
    return field(1, bytes_) + field(2, messages)


def entry(owner: str, *rest: bytes) -> bytes:
    """A ResourceUsage: its owner (the resource group), then whatever fields follow."""
    return field(1, owner.encode()) + b"".join(rest)


def info(broker: str, *entries: bytes) -> bytes:
    """A ResourceUsageInfo: the sending broker's service URL and its entries."""
    return field(1, broker.encode()) + b"".join(field(2, e) for e in entries)


def report(broker: str, usage: Mapping[str, tuple[tuple[int, int], tuple[int, int]]]) -> bytes:
    """`usage`: group → ((publish bytes, messages), (dispatch bytes, messages))."""
    return info(broker, *(entry(group, field(2, network(*publish)),
                                field(3, network(*dispatch)))
                          for group, (publish, dispatch) in usage.items()))
