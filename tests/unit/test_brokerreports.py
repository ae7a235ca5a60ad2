"""The brokers' PIP-82 reports summed per group, class and broker (sources/brokerreports.py),
fed with recorded 4.0.8 payloads and payloads encoded from Pulsar master's proto through a
list standing in for the topic reader."""

from __future__ import annotations

import logging

from exporter.config.settings import MonitoringClass
from exporter.sources.brokerreports import BrokerReports, ReportedUsage, broker_reports_for
from exporter.transport.pulsarwire import WireError
from tests.harness.resource_usage_info import entry, field, info, network
from tests.unit.test_pulsarwire import B1, B2, MASTER, RECORDED, with_entry_field

P, D = MonitoringClass.PUBLISH, MonitoringClass.DISPATCH
R = MonitoringClass.REPLICATION_DISPATCH
BROKER = "pulsar://127.0.0.1:40725"


def replicator(remote: str, bytes_: int, messages: int) -> bytes:
    """A master `ReplicatorUsage` (field 7) from local cluster c1."""
    body = field(1, b"c1") + field(2, remote.encode()) + field(3, network(bytes_, messages))
    return field(7, body)


class PayloadsInAList:
    """Stand-in for the read-only channel: what `drain` hands out is what was put in."""

    def __init__(self) -> None:
        self.waiting: list[bytes] = []
        self.closed = False

    def drain(self, limit: int = 10_000) -> list[bytes]:
        out, self.waiting = self.waiting[:limit], self.waiting[limit:]
        return out

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True


def reports() -> tuple[BrokerReports, PayloadsInAList]:
    payloads = PayloadsInAList()
    return BrokerReports(payloads, stale_after=60.0), payloads


def test_recorded_reports_sum_to_the_brokers_own_remote_usage_counters():
    ledger, payloads = reports()
    payloads.waiting += RECORDED[:4]
    first = ledger.take(now=100.0)
    payloads.waiting += RECORDED[4:]
    view = ledger.take(now=110.0)
    assert view.usage == (ReportedUsage("rg-a", BROKER, D, 0, 0),
                          ReportedUsage("rg-a", BROKER, P, 72904, 537))
    assert view.received == 10 and first.received == 4
    assert view.last_report == ((BROKER, 110.0),)
    assert dict(view.rejected) == {reason: 0 for reason in WireError}
    assert view.unknown_fields == 0  # and no replication series: 4.0.8 never reports one


def test_master_reports_sum_replication_over_remote_clusters_and_field_6_alone():
    ledger, payloads = reports()
    payloads.waiting += MASTER
    view = ledger.take(now=5.0)
    assert view.usage == (
        ReportedUsage("rg-geo", B1, D, 24000 + 25000, 240 + 250),
        ReportedUsage("rg-geo", B1, P, 12000 + 12500, 120 + 125),
        # c2 + c3, then c2 (c3 suppressed), nothing, then field 6 as the intermediate
        # version wrote it
        ReportedUsage("rg-geo", B1, R, 6000 + 3000 + 6600 + 9000, 60 + 30 + 66 + 90),
        ReportedUsage("rg-geo", B2, D, 0, 0),  # left out
        ReportedUsage("rg-geo", B2, P, 2000, 20),
        ReportedUsage("rg-geo", B2, R, 1000, 10),
        ReportedUsage("rg-local", B2, D, 0, 0),
        ReportedUsage("rg-local", B2, P, 500, 5))  # no replication: no series
    assert view.received == 5 and view.unknown_fields == 0


def test_field_6_only_counts_where_an_entry_has_no_replicator_and_the_first_per_cluster_wins():
    ledger, payloads = reports()
    payloads.waiting.append(info("b1", entry(
        "g", field(6, network(100_000, 1000)), replicator("c2", 10, 1),
        replicator("c3", 20, 2), replicator("c2", 40_000, 400))))  # c2 again: not read
    assert ReportedUsage("g", "b1", R, 30, 3) in ledger.take(1.0).usage
    payloads.waiting.append(info("b1", entry("g")))  # suppressed: the series stays, unchanged
    assert ReportedUsage("g", "b1", R, 30, 3) in ledger.take(2.0).usage


def test_unknown_fields_are_counted_named_once_per_take_and_never_fatal(caplog):
    caplog.set_level(logging.INFO, logger="exporter.sources.brokerreports")
    ledger, payloads = reports()
    newer = with_entry_field(MASTER[0], field(8, network(5, 5))) + field(3, b"x")
    payloads.waiting += [newer, newer, MASTER[1]]
    view = ledger.take(1.0)
    # each of the two copies: the report (field 3) and its entry (field 8)
    assert view.unknown_fields == 4 and view.received == 3
    assert dict(view.rejected) == {reason: 0 for reason in WireError}
    assert ReportedUsage("rg-geo", B1, P, 2 * 12000 + 12500, 2 * 120 + 125) in view.usage
    assert ReportedUsage("rg-geo", B1, R, 2 * 9000 + 6600, 2 * 90 + 66) in view.usage
    lines = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith("3: 2, 8: 2")
    caplog.clear()
    payloads.waiting.append(MASTER[1])
    assert ledger.take(2.0).unknown_fields == 4  # cumulative; nothing new
    assert "does not read" not in caplog.text


def test_the_log_line_names_a_bounded_number_of_field_numbers(caplog):
    caplog.set_level(logging.INFO, logger="exporter.sources.brokerreports")
    ledger, payloads = reports()
    payloads.waiting.append(info("b1", entry("g", *(field(n, 1) for n in range(100, 115)))))
    view = ledger.take(1.0)
    assert view.unknown_fields == 1
    assert "100: 1, 101: 1" in caplog.text and "109: 1 and 5 more" in caplog.text
    assert "110: 1" not in caplog.text


def test_counts_only_grow_and_a_suppressed_class_still_has_its_series():
    ledger, payloads = reports()
    payloads.waiting.append(info("b1", entry("g", field(2, network(100, 1)))))
    before = {u.monitoring_class: u for u in ledger.take(1.0).usage}
    payloads.waiting.append(info("b1", entry("g")))  # suppressed round
    payloads.waiting.append(info("b1", entry("g", field(2, network(50, 2)),
                                             field(3, network(7, 7)))))
    after = {u.monitoring_class: u for u in ledger.take(2.0).usage}
    assert before == {P: ReportedUsage("g", "b1", P, 100, 1),
                      D: ReportedUsage("g", "b1", D, 0, 0)}  # left out: suppressed
    assert after == {P: ReportedUsage("g", "b1", P, 150, 3),
                     D: ReportedUsage("g", "b1", D, 7, 7)}
    payloads.waiting.append(info("b1", entry("h")))
    usage = ledger.take(3.0).usage
    assert {(u.resource_group, u.monitoring_class, u.bytes) for u in usage} >= {
        ("h", P, 0), ("h", D, 0)}


def test_brokers_are_kept_apart():
    ledger, payloads = reports()
    payloads.waiting += [info("b1", entry("g", field(2, network(10, 1)))),
                         info("b2", entry("g", field(2, network(20, 2))))]
    usage = ledger.take(5.0).usage
    assert [(u.broker, u.bytes) for u in usage if u.monitoring_class is P] == [
        ("b1", 10), ("b2", 20)]


def test_undecodable_payloads_are_counted_by_reason_and_the_rest_still_read(caplog):
    ledger, payloads = reports()
    payloads.waiting += [b'{"participant": "ours"}', RECORDED[1], b"\x0a\x05ab", b""]
    view = ledger.take(1.0)
    assert view.received == 1
    assert dict(view.rejected) == {WireError.MALFORMED: 1, WireError.TRUNCATED: 1,
                                   WireError.MISSING_FIELDS: 1, WireError.OVERSIZED: 0}
    assert "3 report(s) refused" in caplog.text
    assert dict(ledger.take(2.0).rejected)[WireError.MALFORMED] == 1  # cumulative, not reset


def test_a_silent_broker_is_forgotten_after_stale_after():
    ledger, payloads = reports()
    payloads.waiting += [info("b1", entry("g", field(2, network(1, 1)))),
                         info("b2", entry("g", field(2, network(1, 1))))]
    ledger.take(0.0)
    payloads.waiting.append(info("b2", entry("g")))
    assert {u.broker for u in ledger.take(60.0).usage} == {"b1", "b2"}  # not yet
    payloads.waiting.append(info("b2", entry("g")))
    view = ledger.take(60.5)
    assert {u.broker for u in view.usage} == {"b2"}
    assert view.last_report == (("b2", 60.5),)


def test_made_only_with_a_service_url_and_a_topic_and_read_only():
    made: list[dict] = []

    def channel(*args, **kwargs):
        made.append({"args": args, **kwargs})
        return PayloadsInAList()

    assert broker_reports_for(None, "non-persistent://pulsar/system/resource-usage", 60,
                              channel) is None
    assert broker_reports_for("pulsar://b:6650", None, 60, channel) is None
    ledger = broker_reports_for("pulsar://b:6650", "non-persistent://pulsar/system/x", 60,
                                channel)
    assert ledger is not None and ledger.stale_after == 60
    assert made == [{"args": ("pulsar://b:6650", "non-persistent://pulsar/system/x",
                              "broker-reports"), "read_only": True}]
    ledger.close()
    assert ledger.channel.closed


def test_each_take_hands_on_its_reports_in_order_suppressed_classes_included():
    ledger, payloads = reports()
    payloads.waiting += [info("b1", entry("g", field(2, network(100, 1)), field(3, network(7, 2)))),
                         b"\x0a\x05ab",  # truncated: refused, not handed on
                         info("b2", entry("g"))]  # suppressed: owner only
    first = ledger.take(10.0)
    assert [(r.at, r.report.broker) for r in first.reports] == [(10.0, "b1"), (10.0, "b2")]
    (b1,), (b2,) = (r.report.usage for r in first.reports)
    assert (b1.publish.bytes, b1.publish.messages, b1.dispatch.messages) == (100, 1, 2)
    assert b2.owner == "g" and b2.publish is None and b2.dispatch is None
    payloads.waiting.append(info("b1", entry("g", field(2, network(5, 5)))))
    second = ledger.take(20.0)
    # only what this take read, with its time; the sums still cover both takes
    assert [(r.at, r.report.broker) for r in second.reports] == [(20.0, "b1")]
    assert ReportedUsage("g", "b1", P, 105, 6) in second.usage
    assert ledger.take(30.0).reports == ()
