"""The composition root (runtime/assembly.py): the parts an exporter runs with are built
from its config, but those handed in; a reload rebuilds exactly the parts whose settings
changed and closes what they replace. Nothing here connects anywhere."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from exporter.config.load import parse
from exporter.config.settings import Config
from exporter.record.replay import SimulatedEvictor
from exporter.runtime.assembly import assemble, reassemble
from exporter.runtime.cycle import Exporter
from exporter.sources.adminside import AdminSide
from exporter.sources.results import Snapshot


def _config(url: str = "http://broker-1:8080/metrics", **extra: Any) -> Config:
    return parse({"cluster": "unit", "check_interval": "10s",
                  "sources": {"brokers": [{"url": url}], "service_url": "pulsar://127.0.0.1:1"},
                  "resource_groups": {"rg": {"publish": {"messages_per_second": 10}}},
                  **extra}, "assembly.yaml")


class FakeAdmin:
    closed = False

    def collect(self, choose: object = None) -> Snapshot:
        return Snapshot(taken_at=0.0, admin=None, health=())

    def close(self) -> None:
        self.closed = True


class FakeBrokers:
    def run(self) -> Any:
        raise AssertionError("not run here")


_PROBE = """
import sys
import exporter.cli, exporter.runtime.serve  # what the command imports
from exporter.config.load import parse
from exporter.runtime.cycle import Exporter

sources = {"brokers": [{"url": "http://broker-1:8080/metrics"}]}
if sys.argv[1] == "service_url":
    sources["service_url"] = "pulsar://127.0.0.1:1"
Exporter(parse({"cluster": "unit", "check_interval": "10s", "sources": sources}, "probe.yaml"))
print("pulsar" in sys.modules)
"""


def test_only_an_exporter_given_a_service_url_loads_pulsar_client() -> None:
    """pulsar-client is ~7 MB resident and ~20 ms of imports: an exporter that reads brokers
    and admin only (no binary evictions, no lease, no usage exchange) never loads it."""
    def loaded(sources: str) -> str:
        return subprocess.run([sys.executable, "-c", _PROBE, sources], check=True,
                              capture_output=True, text=True).stdout.strip()

    assert loaded("brokers") == "False"
    assert loaded("service_url") == "True"  # the binary evictor is built with it


def test_parts_given_are_used_the_others_built() -> None:
    brokers, admin, evictor = FakeBrokers(), FakeAdmin(), SimulatedEvictor()
    parts = assemble(_config(), brokers=brokers, admin_side=admin, evictor=evictor)
    assert (parts.brokers, parts.admin_side, parts.evictor) == (brokers, admin, evictor)
    assert parts.lease is None  # a given evictor evicts alone
    # not participating: no usage exchange, no reader of the brokers' reports
    assert (parts.exchange, parts.broker_reports, parts.broker_splits) == (None, None, None)
    assert parts.decider.config == _config() and parts.recorder is None


def test_the_exporter_takes_its_parts_whole_or_has_them_built() -> None:
    config = _config()
    parts = assemble(config, brokers=FakeBrokers(), admin_side=FakeAdmin(),
                     evictor=SimulatedEvictor())
    exporter = Exporter(config, parts)
    assert exporter.parts is parts and exporter.state is parts.state
    built = Exporter(config, brokers=FakeBrokers(), admin_side=FakeAdmin(),
                     evictor=SimulatedEvictor())
    assert built.decider is built.parts.decider and built.lease is None
    with pytest.raises(TypeError, match="parts given twice"):
        Exporter(config, parts, evictor=SimulatedEvictor())


def test_a_reload_keeps_the_parts_its_changes_do_not_feed() -> None:
    old = _config()
    parts = assemble(old, brokers=FakeBrokers(), admin_side=FakeAdmin(),
                     evictor=SimulatedEvictor())
    new = _config(exposition={"topic_level": False})
    again = reassemble(parts, old, new)
    for name in ("brokers", "admin_side", "evictor", "lease", "state", "decider", "exchange",
                 "broker_reports", "broker_splits"):
        assert getattr(again, name) is getattr(parts, name), name
    assert again.decider.config is new  # reconfigured in place: its state outlives a reload


def test_a_reload_rebuilds_what_new_sources_feed_and_closes_the_old() -> None:
    old = _config()
    admin, evictor = FakeAdmin(), SimulatedEvictor()
    parts = assemble(old, brokers=FakeBrokers(), admin_side=admin, evictor=evictor)
    again = reassemble(parts, old, _config("http://broker-2:8080/metrics"))
    assert again.brokers is None  # a new plan over the new endpoints, at the next cycle
    assert admin.closed and isinstance(again.admin_side, AdminSide)
    assert again.evictor is not evictor
    again.admin_side.close()


def test_a_check_that_does_not_participate_joins_no_exchange_on_reload() -> None:
    old = _config()
    parts = assemble(old, brokers=FakeBrokers(), admin_side=FakeAdmin(),
                     evictor=SimulatedEvictor())
    new = _config(resource_group_engine={
        "participant": "me", "topic": "non-persistent://pulsar/system/elsewhere"})
    assert reassemble(parts, old, new).exchange is None
