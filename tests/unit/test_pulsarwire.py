"""The brokers' PIP-82 reports (`ResourceUsageInfo`), decoded: payloads recorded from an
Apache Pulsar 4.0.8 broker, payloads protobuf's own runtime encoded from Pulsar master's
`ResourceUsage.proto` (replication; tests/fixtures/SOURCES.md), and hand-built ones for what
a broker never sends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.transport.pulsarwire import (
    MAX_PAYLOAD,
    BrokerUsageReport,
    GroupUsage,
    NetworkUsage,
    ReplicatorUsage,
    Undecodable,
    WireError,
    decode,
)
from tests.harness.fixtures import FIXTURES
from tests.harness.resource_usage_info import entry, field, info, network


def payloads(name: str) -> list[bytes]:
    return [bytes.fromhex(line) for line in (FIXTURES / name).read_text().splitlines()
            if line and not line.startswith("#")]


RECORDED = payloads("apache-pulsar-4.0.8-resource-usage-reports.hex")
MASTER = payloads("apache-pulsar-master-17548093-resource-usage-reports.hex")
B1, B2 = "pulsar://127.0.0.1:6650", "pulsar://127.0.0.2:6650"


def with_entry_field(payload: bytes, extra: bytes) -> bytes:
    """`payload` (a broker URL, then one usageMap entry, as the master fixture's first) with
    `extra` appended inside its entry: a field no proto of Pulsar's has cannot come from
    protobuf's runtime, so it is added here, to bytes that did."""
    size = payload[1]  # the broker URL: one length byte (under 128)
    head, rest = payload[:2 + size], payload[2 + size:]
    assert rest[0] == 0x12 and rest[1] < 0x80 and len(rest) == 2 + rest[1]  # field 2, one entry
    return head + field(2, rest[2:] + extra)


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


def test_recorded_4_0_8_reports_decode_exactly_with_no_replication_and_nothing_unknown():
    p = NetworkUsage
    assert [r.usage for r in map(decode, RECORDED)] == [(GroupUsage("rg-a", *u),) for u in (
        (p(0, 0), p(0, 0)), (p(14310, 106),), (p(18338, 135),), (), (p(19992, 147),), (),
        (None, p(0, 0)), (), (), (p(20264, 149),))]
    assert all(r.unknown_fields == () for r in map(decode, RECORDED))


def test_master_reports_decode_to_what_protobuf_encoded():
    p = NetworkUsage
    assert [decode(payload) for payload in MASTER] == [
        BrokerUsageReport(B1, (GroupUsage("rg-geo", p(12000, 120), p(24000, 240), replicators=(
            ReplicatorUsage("c1", "c2", p(6000, 60)), ReplicatorUsage("c1", "c3", p(3000, 30)))),)),
        # c3 left out: suppressed this round
        BrokerUsageReport(B1, (GroupUsage("rg-geo", p(12500, 125), p(25000, 250), replicators=(
            ReplicatorUsage("c1", "c2", p(6600, 66)),)),)),
        BrokerUsageReport(B1, (GroupUsage("rg-geo"),)),  # everything suppressed
        BrokerUsageReport(B2, (
            GroupUsage("rg-geo", p(2000, 20),
                       replicators=(ReplicatorUsage("c1", "c2", p(1000, 10)),)),
            GroupUsage("rg-local", p(500, 5)))),
        # as the intermediate upstream version wrote the class: field 6, no replicator
        BrokerUsageReport(B1, (GroupUsage("rg-geo", replication_dispatch=p(9000, 90)),)),
    ]


def test_a_field_newer_than_us_is_kept_by_number_and_the_rest_still_read():
    newer = with_entry_field(MASTER[0], field(8, network(5, 5)))  # "a class newer than us"
    newer += field(3, b"x") + b"\x4d" + bytes(4)  # ResourceUsageInfo: 3, fixed32 field 9
    report, original = decode(newer), decode(MASTER[0])
    assert report.unknown_fields == (3, 9)
    assert report.usage == (replace(original.usage[0], unknown_fields=(8,)),)
    # field 5 is not in the proto either (a hole in the numbering); numbers once each
    assert decode(with_entry_field(MASTER[2], field(5, 1) + field(8, 2) + field(5, 3))
                  ).usage[0].unknown_fields == (5, 8)
    # an unknown field's content is never read: here it would be a cut varint
    assert decode(info("b", entry("g", field(8, b"\x0a")))).usage == (
        GroupUsage("g", unknown_fields=(8,)),)


def test_the_first_replicator_per_remote_cluster_is_the_one_read():
    usage = decode(info("b", entry("g", *(field(7, field(1, b"c1") + field(2, remote)
                                                     + field(3, network(n, n)))
                                            for remote, n in ((b"c2", 1), (b"c3", 2),
                                                              (b"c2", 3)))))).usage[0]
    assert [r.usage.bytes for r in usage.replicators] == [1, 2, 3]  # all decoded, in order
    assert usage.by_remote_cluster() == {"c2": NetworkUsage(1, 1), "c3": NetworkUsage(2, 2)}


def test_a_suppressed_round_is_an_entry_with_its_owner_only():
    suppressed = [r.usage[0] for r in map(decode, RECORDED)
                  if r.usage[0].publish is None and r.usage[0].dispatch is None]
    assert suppressed and all(u == GroupUsage("rg-a") for u in suppressed)


def test_several_groups_storage_replication_and_fields_a_newer_broker_adds():
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
        GroupUsage("g1", NetworkUsage(1000, 10), NetworkUsage(20, 2), 5_000_000_000,
                   replicators=(ReplicatorUsage("east", "west", NetworkUsage(9, 1)),)),
        GroupUsage("g2", replication_dispatch=NetworkUsage(1, 1), unknown_fields=(8, 9)))


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
    # master's ReplicatorUsage: all three fields required, as NetworkUsage's two
    (info("b", entry("g", field(7, field(1, b"c1") + field(2, b"c2")))),
     WireError.MISSING_FIELDS, "no networkUsage"),
    (info("b", entry("g", field(7, field(1, b"c1") + field(3, network(1, 1))))),
     WireError.MISSING_FIELDS, "no remoteCluster"),
    (info("b", entry("g", field(7, field(2, b"c2") + field(3, network(1, 1))))),
     WireError.MISSING_FIELDS, "no localCluster"),
    (info("b", entry("g", field(7, field(1, b"c1") + field(2, b"c2") + field(3, field(1, 5))))),
     WireError.MISSING_FIELDS, "'c2': no messagesPerPeriod"),
    (info("b", entry("g", field(7, field(1, b"c1") + field(2, b"\xff") + field(3, network(1, 1))))),
     WireError.MALFORMED, "not UTF-8"),
    (info("b", entry("g", field(7, 4))), WireError.MALFORMED, "replicator is not a message"),
    (info("b", entry("g", field(6, 4))), WireError.MALFORMED, "replicationDispatch has the wrong"),
    (info("b", entry("g", field(6, field(2, 1)))), WireError.MISSING_FIELDS, "no bytesPerPeriod"),
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
