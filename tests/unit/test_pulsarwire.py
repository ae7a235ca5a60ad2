"""The brokers' PIP-82 reports (`ResourceUsageInfo`), decoded: payloads recorded from an
Apache Pulsar 4.0.8 broker, and hand-built ones for what a broker never sends."""

from __future__ import annotations

import pytest

from exporter.transport.pulsarwire import (
    MAX_PAYLOAD,
    GroupUsage,
    NetworkUsage,
    Undecodable,
    WireError,
    decode,
)
from tests.harness.fixtures import FIXTURES
from tests.harness.resource_usage_info import entry, field, info, network

RECORDED = [bytes.fromhex(line) for line in
            (FIXTURES / "apache-pulsar-4.0.8-resource-usage-reports.hex").read_text()
            .splitlines() if line and not line.startswith("#")]


def test_recorded_reports_decode_and_sum_to_what_the_broker_counted():
    reports = [decode(p) for p in RECORDED]
    assert len(reports) == 10
    assert {r.broker for r in reports} == {"pulsar://127.0.0.1:40725"}
    assert all(len(r.usage) == 1 and r.usage[0].owner == "rg-a" for r in reports)
    published = [r.usage[0].publish for r in reports if r.usage[0].publish is not None]
    # The broker's own pulsar_resource_group_remote_usage_{messages,bytes}_used_total for
    # rg-a / Publish after these reports (tests/fixtures/SOURCES.md): 537 and 72904.
    assert sum(u.messages for u in published) == 537
    assert sum(u.bytes for u in published) == 72904
    first = reports[0].usage[0]
    assert first.publish == NetworkUsage(0, 0) and first.dispatch == NetworkUsage(0, 0)


def test_a_suppressed_round_is_an_entry_with_its_owner_only():
    suppressed = [r.usage[0] for r in map(decode, RECORDED)
                  if r.usage[0].publish is None and r.usage[0].dispatch is None]
    assert suppressed and all(u == GroupUsage("rg-a") for u in suppressed)


def test_several_groups_storage_and_fields_a_newer_broker_adds():
    replicator = field(1, b"east") + field(2, b"west") + field(3, network(9, 1))
    payload = info(
        "pulsar://b:6650",
        entry("g1", field(2, network(1000, 10)), field(3, network(20, 2)),
              field(4, field(1, 5_000_000_000)), field(7, replicator)),
        entry("g2", field(6, network(1, 1))) + b"\x45\x01\x02\x03\x04"  # fixed32 field 8
        + b"\x49" + bytes(8))  # fixed64 field 9
    report = decode(payload)
    assert report.broker == "pulsar://b:6650"
    assert report.usage == (
        GroupUsage("g1", NetworkUsage(1000, 10), NetworkUsage(20, 2), 5_000_000_000),
        GroupUsage("g2"))


def test_an_empty_report_has_no_usage():
    assert decode(info("pulsar://b:6650")).usage == ()


@pytest.mark.parametrize(("payload", "reason", "says"), [
    (b"", WireError.MISSING_FIELDS, "no broker"),
    (info("pulsar://b:6650", field(2, network(1, 1))), WireError.MISSING_FIELDS, "no owner"),
    (info("b", entry("g", field(2, field(1, 5)))), WireError.MISSING_FIELDS,
     "no messagesPerPeriod"),
    (info("b")[:-2], WireError.TRUNCATED, "runs past the end"),
    (b"\x0a", WireError.TRUNCATED, "varint runs past the end"),
    (b"\x08" + b"\xff" * 11, WireError.MALFORMED, "longer than 10 bytes"),
    (b"\x0b", WireError.MALFORMED, "wire type 3"),
    (b"\x00\x00", WireError.MALFORMED, "field number 0"),
    (field(1, 7), WireError.MALFORMED, "broker has the wrong type"),
    (field(1, b"\xff\xfe"), WireError.MALFORMED, "not UTF-8"),
    (info("b") + field(2, 3), WireError.MALFORMED, "usageMap is not a message"),
    (info("b", entry("g", field(2, 5))), WireError.MALFORMED, "publish has the wrong type"),
    (b"\x0d\x01", WireError.TRUNCATED, "field 1 is cut"),
    (b"our own JSON report {}", WireError.MALFORMED, ""),
])
def test_what_does_not_decode_says_why(payload: bytes, reason: WireError, says: str):
    with pytest.raises(Undecodable) as caught:
        decode(payload)
    assert caught.value.reason is reason
    assert says in str(caught.value)


def test_a_payload_larger_than_a_broker_can_send_is_refused_unread():
    with pytest.raises(Undecodable) as caught:
        decode(b"\x00" * (MAX_PAYLOAD + 1))
    assert caught.value.reason is WireError.OVERSIZED
