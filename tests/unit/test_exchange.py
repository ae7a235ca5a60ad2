"""Translation between the engine's usage reports and the wire's."""

from __future__ import annotations

import math

from exporter.config.settings import MonitoringClass
from exporter.engine.groups.usage import Usage, UsageReport
from exporter.runtime.exchange import from_wire, to_wire
from exporter.transport.codec import WireReport, encode
from exporter.transport.decoder import decode


def test_reports_survive_the_wire_with_unlimited_dimensions_kept_apart():
    reports = [
        UsageReport("rg-a", MonitoringClass.PUBLISH, "p1", Usage(bytes=2048.0, messages=12.5),
                    Usage(bytes=-1.0, messages=40.0)),  # bytes unlimited, messages capped
        UsageReport("rg-a", MonitoringClass.DISPATCH, "p1", Usage(bytes=0.0, messages=0.0),
                    None),
        UsageReport("rg-b", MonitoringClass.PUBLISH, "p1", Usage(bytes=10.0, messages=1.0),
                    Usage(bytes=-1.0, messages=-1.0)),  # unlimited both ways
    ]
    wire = to_wire("p1", 7, 1_700_000_000.0, reports)
    assert wire.entries[0].limit.bytes == math.inf
    back = from_wire(decode(encode(wire)))
    assert back[0] == reports[0]
    assert back[1] == reports[1]
    # unlimited in both dimensions travels as "no limit": the fair allocator treats both alike
    assert back[2].limit is None and back[2].usage == reports[2].usage


def test_a_goodbye_survives_the_wire_and_carries_no_usage():
    wire = decode(encode(WireReport("p1", 8, 1_700_000_000.0, (), goodbye=True)))
    assert wire.goodbye and wire.participant == "p1" and wire.sequence == 8
    assert from_wire(wire) == []
