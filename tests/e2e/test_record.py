"""The e2e exporter runs with `--record.dir`: its record holds complete cycles with both
brokers' bodies and the usage reports of the scenario's second participant, which is what
`replay` needs to redo the resource-group rounds."""

from __future__ import annotations

from exporter.record.store import read_cycles
from tests.e2e.scenario import Scenario
from tests.harness.wait import poll


def test_the_record_holds_both_bodies_and_the_peer_reports(scenario: Scenario) -> None:
    record = scenario.exporter.config_path.parent.parent / "record"
    cycles = poll(lambda: [c for c in read_cycles(record) if c.reports], timeout=120,
                  what="a recorded cycle with a peer's usage report")
    assert {r.participant for c in cycles for r in c.reports} == {"e2e-peer"}  # PeerReporter
    assert any(set(c.bodies) == {scenario.broker.metrics_url, scenario.replay.url}
               for c in read_cycles(record))
