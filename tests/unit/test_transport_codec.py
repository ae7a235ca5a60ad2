"""The wire report: round-trip laws within the documented precision, and every reject reason."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from exporter.config.settings import MonitoringClass
from exporter.transport.codec import (
    CLASSES,
    MAX_FIXED,
    MAX_REPORT_BYTES,
    Entry,
    Rates,
    Undecodable,
    WireReject,
    WireReport,
    canonical,
    encode,
)
from exporter.transport.decoder import decode

PUB, DIS = MonitoringClass.PUBLISH, MonitoringClass.DISPATCH
REP = MonitoringClass.REPLICATION_DISPATCH


# --- an independent writer for hand-built payloads (the layout as documented) ----------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def header(participant: bytes = b"b1", *, flags: int = 0, sequence: int = 5,
           sent_ms: int = 1500, version: int = 1) -> bytes:
    return (bytes((0xB7, version, flags)) + varint(len(participant)) + participant
            + varint(sequence) + varint(sent_ms))


def group(shared: int, suffix: bytes, bits: int, *values: int) -> bytes:
    """Version 1's class byte or version 2's class varint: the same bytes below 0x80."""
    return varint(shared) + varint(len(suffix)) + suffix + varint(bits) + b"".join(
        varint(v) for v in values)


def reject(payload: bytes, **kwargs: int) -> WireReject:
    result = decode(payload, **kwargs)
    assert isinstance(result, Undecodable), result
    assert result.detail  # says what is wrong
    return result.reason


# --- strategies -------------------------------------------------------------------------------

names = st.one_of(
    st.text(min_size=1, max_size=12),
    st.integers(0, 99_999).map(lambda n: f"tenant-{n:05d}-rg"),
)
rates = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
limit_value = st.one_of(rates, st.just(math.inf))
limits = st.one_of(st.none(), st.builds(Rates, limit_value, limit_value))


@st.composite
def reports(draw: st.DrawFn) -> WireReport:
    goodbye = draw(st.booleans())
    keys = [] if goodbye else draw(st.lists(st.tuples(names, st.sampled_from([PUB, DIS, REP])),
                                            max_size=12, unique=True))
    entries = tuple(Entry(rg, cls, draw(st.builds(Rates, rates, rates)), draw(limits))
                    for rg, cls in keys)
    return WireReport(
        participant=draw(st.text(min_size=1, max_size=20)),
        sequence=draw(st.integers(0, 2**63 - 1)),
        sent_at=draw(st.floats(0, 4e9, allow_nan=False)),
        entries=entries,
        goodbye=goodbye,
    )


# --- laws -------------------------------------------------------------------------------------


@given(reports())
def test_round_trip_gives_the_canonical_report(report: WireReport) -> None:
    payload = encode(report)
    assert decode(payload) == canonical(report)
    assert encode(canonical(report)) == payload  # quantising twice changes nothing


@given(reports())
def test_round_trip_is_within_the_documented_precision(report: WireReport) -> None:
    decoded = decode(encode(report))
    assert isinstance(decoded, WireReport)
    assert decoded.participant == report.participant
    assert decoded.sequence == report.sequence
    assert decoded.goodbye == report.goodbye
    assert abs(decoded.sent_at - report.sent_at) <= 0.0005 + 1e-6
    originals = {(e.resource_group, e.monitoring_class): e for e in report.entries}
    assert len(decoded.entries) == len(originals)
    for got in decoded.entries:
        want = originals[(got.resource_group, got.monitoring_class)]
        assert abs(got.usage.messages - want.usage.messages) <= 0.0005 + 1e-9 * want.usage.messages
        assert abs(got.usage.bytes - want.usage.bytes) <= 0.5 + 1e-9 * want.usage.bytes
        if want.limit is None or want.limit.messages == want.limit.bytes == math.inf:
            assert got.limit is None
        else:
            assert got.limit is not None
            for mine, theirs, tolerance in ((got.limit.messages, want.limit.messages, 0.0005),
                                            (got.limit.bytes, want.limit.bytes, 0.5)):
                if theirs == math.inf:
                    assert mine == math.inf
                else:
                    assert abs(mine - theirs) <= tolerance + 1e-9 * theirs


@given(reports())
def test_entries_come_back_sorted_by_group_then_class(report: WireReport) -> None:
    decoded = decode(encode(report))
    assert isinstance(decoded, WireReport)
    order = [(e.resource_group.encode(), CLASSES.index(e.monitoring_class))
             for e in decoded.entries]
    assert order == sorted(order)
    assert len(set(order)) == len(order)


@given(reports(), st.data())
def test_every_strict_prefix_is_truncated(report: WireReport, data: st.DataObject) -> None:
    # Every count and length precedes what it counts, so a cut anywhere leaves the decoder
    # expecting more: TRUNCATED, never MALFORMED.
    payload = encode(report)
    cut = data.draw(st.integers(0, len(payload) - 1))
    assert reject(payload[:cut]) is WireReject.TRUNCATED


def test_every_prefix_of_one_report_is_truncated() -> None:
    report = WireReport("broker-1", 10**12, 1.7e9, (
        Entry("tenant-00001-rg", PUB, Rates(10.5, 1000), Rates(20, math.inf)),
        Entry("tenant-00001-rg", DIS, Rates(1, 2), None),
        Entry("tenant-00002-rg", DIS, Rates(3, 4), Rates(5, 6)),
    ))
    payload = encode(report)
    assert [reject(payload[:cut]) for cut in range(len(payload))] == \
        [WireReject.TRUNCATED] * len(payload)


@given(st.binary(max_size=200))
def test_random_bytes_never_raise_and_accepted_bytes_are_canonical(data: bytes) -> None:
    result = decode(data)
    assert isinstance(result, WireReport | Undecodable)
    if isinstance(result, WireReport):
        assert encode(result) == data


@given(st.binary(max_size=120))
def test_random_bodies_behind_a_good_header_never_raise(body: bytes) -> None:
    data = bytes((0xB7, 1)) + body
    result = decode(data)
    assert isinstance(result, WireReport | Undecodable)
    if isinstance(result, WireReport):
        assert encode(result) == data


@given(reports(), st.data())
def test_corrupted_reports_are_rejected_or_still_canonical(report: WireReport,
                                                           data: st.DataObject) -> None:
    payload = bytearray(encode(report))
    index = data.draw(st.integers(0, len(payload) - 1))
    value = data.draw(st.integers(0, 255))
    assume(payload[index] != value)
    payload[index] = value
    result = decode(bytes(payload))
    if isinstance(result, WireReport):
        assert encode(result) == bytes(payload)
    else:
        assert result.reason in set(WireReject) - {WireReject.OVERSIZED}


@given(st.binary(min_size=1, max_size=64), st.data())
def test_oversized_is_checked_before_anything_else(data: bytes, draw: st.DataObject) -> None:
    limit = draw.draw(st.integers(0, len(data) - 1))
    assert reject(data, max_bytes=limit) is WireReject.OVERSIZED


# --- the documented layout, by hand ----------------------------------------------------------


def test_layout_matches_the_documentation_byte_for_byte() -> None:
    report = WireReport("b1", 5, 1.5, (Entry("rg", PUB, Rates(1.0, 10.0), None),))
    # magic, version, flags · participant · sequence 5 · 1500 ms · 1 group ·
    # prefix 0, "rg" · publish present · 1000 milli-messages, 10 bytes
    expected = (b"\xb7\x01\x00" + b"\x02b1" + b"\x05" + b"\xdc\x0b" + b"\x01"
                + b"\x00\x02rg" + b"\x01" + b"\xe8\x07" + b"\x0a")
    assert encode(report) == expected
    assert decode(expected) == report


def test_names_are_front_coded_against_the_previous_group() -> None:
    report = WireReport("b1", 5, 1.5, (
        Entry("tenant-00042-rg", PUB, Rates(0, 0), None),
        Entry("tenant-00043-rg", DIS, Rates(0, 0), None),
    ))
    payload = encode(report)
    second = group(11, b"3-rg", 0x08, 0, 0)  # shares "tenant-0004", dispatch present
    assert payload.endswith(second)
    assert payload == header() + b"\x02" + group(0, b"tenant-00042-rg", 0x01, 0, 0) + second


def test_limit_bits_say_which_dimension_is_limited() -> None:
    report = WireReport("b1", 5, 1.5, (
        Entry("rg", DIS, Rates(2, 3), Rates(math.inf, 7)),
    ))
    # dispatch present (bit 3) and its limit has bytes (bit 5), not messages (bit 4)
    assert encode(report) == header() + b"\x01" + group(0, b"rg", 0x08 | 0x20, 2000, 3, 7)
    decoded = decode(encode(report))
    assert isinstance(decoded, WireReport)
    assert decoded.entries[0].limit == Rates(math.inf, 7.0)


def test_a_replication_entry_makes_it_version_2_with_a_class_varint() -> None:
    report = WireReport("b1", 5, 1.5, (
        Entry("rg", PUB, Rates(1, 10), None),
        Entry("rg", REP, Rates(2, 3), Rates(4, math.inf)),
    ))
    # publish present (bit 0); replication present (bit 6) with a message limit (bit 7):
    # 0xC1, two varint bytes
    expected = header(version=2) + b"\x01" + varint(0) + varint(2) + b"rg" + b"\xc1\x01" + \
        b"".join(varint(v) for v in (1000, 10, 2000, 3, 4000))
    assert encode(report) == expected
    assert decode(expected) == report
    without = WireReport("b1", 5, 1.5, report.entries[:1])
    assert encode(without)[1] == 1  # an older peer still reads a report with no replication


def test_two_encodings_of_one_report_are_refused() -> None:
    # version 2 for a report version 1 carries, and replication bits in a version 1 byte
    assert reject(header(version=2) + b"\x01" + group(0, b"rg", 0x01, 1, 1)) \
        is WireReject.MALFORMED
    assert reject(header() + b"\x01" + group(0, b"rg", 0x40, 1, 1)) is WireReject.MALFORMED
    # a class varint in its shortest form only (0x01 written in two bytes)
    assert reject(header(version=2) + b"\x01" + varint(0) + varint(2) + b"rg" + b"\xc1\x00"
                  + b"\x01\x01\x01\x01") is WireReject.MALFORMED


def test_goodbye_is_a_flag_with_no_entries() -> None:
    payload = encode(WireReport("b1", 5, 1.5, (), goodbye=True))
    assert payload == header(flags=1) + b"\x00"
    decoded = decode(payload)
    assert isinstance(decoded, WireReport) and decoded.goodbye and decoded.entries == ()


def test_a_fleet_entry_costs_less_than_pip82_estimate() -> None:
    # PIP-82 estimates 32 bytes of usage per resource group (16 per class) plus an 80-byte
    # name. Here id + usage of both classes fits in less than its usage alone, and adding
    # both classes' limits (which PIP-82 does not carry) stays below its usage + id.
    def report(count: int, limit: Rates | None) -> WireReport:
        entries = tuple(
            Entry(f"tenant-{n:05d}-rg", cls, Rates(1234.567 + n, 1_250_000.0 + n), limit)
            for n in range(count) for cls in (PUB, DIS))
        return WireReport("broker-00042.pulsar.svc", 1_700_000_000_000, 1.7e9, entries)

    def per_group(limit: Rates | None) -> float:
        return (len(encode(report(100, limit))) - len(encode(report(0, limit)))) / 100

    assert per_group(None) < 32
    assert per_group(Rates(2500.0, 10 * 1024 * 1024)) < 32 + 80


def test_accepts_bytearray_and_memoryview() -> None:
    payload = encode(WireReport("b1", 5, 1.5, ()))
    assert decode(bytearray(payload)) == decode(memoryview(payload)) == decode(payload)


# --- every reject reason ----------------------------------------------------------------------


def test_oversized_even_with_garbage_and_exact_size_is_fine() -> None:
    payload = encode(WireReport("b1", 5, 1.5, ()))
    assert reject(payload, max_bytes=len(payload) - 1) is WireReject.OVERSIZED
    assert reject(b"junk" * 10, max_bytes=8) is WireReject.OVERSIZED
    assert isinstance(decode(payload, max_bytes=len(payload)), WireReport)
    assert MAX_REPORT_BYTES < 5_000_000  # inside Pulsar's default maxMessageSize


@pytest.mark.parametrize("payload", [b"", b"\xb7", b"\xb7\x01", header()[:-1], header()])
def test_truncated(payload: bytes) -> None:
    assert reject(payload) is WireReject.TRUNCATED


@pytest.mark.parametrize("version", [0, 3, 255])
def test_unknown_version(version: int) -> None:
    assert reject(header(version=version) + b"\x00") is WireReject.UNKNOWN_VERSION
    assert reject(bytes((0xB7, version))) is WireReject.UNKNOWN_VERSION


VALID_GROUP = group(0, b"rg", 0x01, 1, 1)

MALFORMED = {
    "bad magic": b"{" + header()[1:] + b"\x00",
    "json instead": b'{"broker": "b1"}',
    "unknown flag bits": header(flags=0x02) + b"\x00",
    "participant not UTF-8": header(b"\xff\xfe") + b"\x00",
    "empty participant": header(b"") + b"\x00",
    "trailing bytes": header() + b"\x00" + b"\x00",
    "goodbye with entries": header(flags=1) + b"\x01" + VALID_GROUP,
    "non-shortest varint": b"\xb7\x01\x00" + b"\x82\x00b1" + b"\x05\xdc\x0b\x00",
    "varint over 64 bits": header() [:-2] + b"\xff" * 9 + b"\x02" + b"\x00",
    "sequence over 2**63 - 1": header(sequence=2**63) + b"\x00",
    "fixed value over MAX_FIXED": header() + b"\x01" + group(0, b"rg", 0x01, MAX_FIXED + 1, 0),
    "empty group name": header() + b"\x01" + group(0, b"", 0x01, 1, 1),
    "group name not UTF-8": header() + b"\x01" + group(0, b"\xc3(", 0x01, 1, 1),
    "duplicate group": header() + b"\x02" + VALID_GROUP + group(2, b"", 0x08, 1, 1),
    "duplicate group, spelt out": header() + b"\x02" + VALID_GROUP + group(0, b"rg", 0x08, 1, 1),
    "unsorted groups": header() + b"\x02" + group(0, b"rh", 0x01, 1, 1) + group(1, b"g", 0x01,
                                                                                1, 1),
    "prefix longer than previous name": header() + b"\x02" + VALID_GROUP + group(3, b"x", 1, 1, 1),
    "first group with a prefix": header() + b"\x01" + group(1, b"rg", 0x01, 1, 1),
    "no class in a group": header() + b"\x01" + group(0, b"rg", 0x00),
    "unknown class bits": header() + b"\x01" + group(0, b"rg", 0x41, 1, 1),
    "limit bits for an absent class": header() + b"\x01" + group(0, b"rg", 0x01 | 0x10, 1, 1),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed(case: str) -> None:
    assert reject(MALFORMED[case]) is WireReject.MALFORMED


def test_the_malformed_cases_differ_from_a_valid_payload_only_where_they_say() -> None:
    # The hand-built pieces are right: the same pieces, made valid, decode.
    valid = header() + b"\x02" + VALID_GROUP + group(1, b"h", 0x08, 1, 1)
    decoded = decode(valid)
    assert isinstance(decoded, WireReport)
    assert [(e.resource_group, e.monitoring_class) for e in decoded.entries] == [
        ("rg", PUB), ("rh", DIS)]


@pytest.mark.parametrize("payload", [None, "text", 12, [1, 2]])
def test_not_bytes_is_malformed_not_an_exception(payload: object) -> None:
    assert reject(payload) is WireReject.MALFORMED  # type: ignore[arg-type]


# --- what encode refuses (negative and non-finite cannot reach the wire) ----------------------


def _one(usage: Rates, limit: Rates | None = None, rg: str = "rg") -> WireReport:
    return WireReport("b1", 5, 1.5, (Entry(rg, PUB, usage, limit),))


@pytest.mark.parametrize("report", [
    _one(Rates(-1, 0)),
    _one(Rates(0, math.nan)),
    _one(Rates(math.inf, 0)),
    _one(Rates(0, 0), Rates(-1, 5)),
    _one(Rates(0, 0), Rates(math.nan, 5)),
    _one(Rates(0, 0), Rates(1, -math.inf)),
    _one(Rates(0, 2**53)),
    _one(Rates(0, 0), rg=""),
    WireReport("", 5, 1.5, ()),
    WireReport("b1", -1, 1.5, ()),
    WireReport("b1", 2**63, 1.5, ()),
    WireReport("b1", 5, -1.0, ()),
    WireReport("b1", 5, math.nan, ()),
    WireReport("b1", 5, 1.5, _one(Rates(0, 0)).entries, goodbye=True),
    WireReport("b1", 5, 1.5, _one(Rates(0, 0)).entries * 2),
])
def test_encode_refuses_what_the_wire_cannot_carry(report: WireReport) -> None:
    with pytest.raises(ValueError):
        encode(report)
    with pytest.raises(ValueError):
        canonical(report)
