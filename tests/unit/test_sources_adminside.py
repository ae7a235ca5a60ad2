"""One cycle's admin side, into a Snapshot (broker /metrics are the Spark job's: see
test_sources_brokers.py)."""

from __future__ import annotations

from exporter.config.settings import AdminSource, BrokerSource, Sources
from exporter.sources.adminside import AdminSide
from exporter.sources.results import ScrapeError, SourceKind
from tests.fakes.admin_server import TOPIC, FakeAdminServer


def test_snapshot_carries_admin_data_and_health(tmp_path):
    token = tmp_path / "token"
    token.write_text("replay-token")
    ticks = iter(range(100, 200))
    with FakeAdminServer() as replay:
        sources = Sources(admin=AdminSource(replay.url, token_file=str(token), timeout=2.0))
        with AdminSide(sources, clock=lambda: float(next(ticks))) as side:
            snap = side.collect()
    assert TOPIC in {t.topic for t in snap.admin.topics}
    assert [(h.kind, h.source, h.up) for h in snap.health] == [
        (SourceKind.ADMIN, replay.url, True)]
    assert snap.taken_at >= snap.admin.fetched_at


def test_a_failing_admin_is_down_with_its_reason():
    with FakeAdminServer() as replay:
        sources = Sources(admin=AdminSource(replay.url, token_file=None, timeout=2.0))
        with AdminSide(sources) as side:
            snap = side.collect()
    assert snap.admin is None
    (admin,) = snap.health
    assert not admin.up and admin.last_error is ScrapeError.AUTH


def test_without_admin_there_is_no_admin_health():
    sources = Sources(brokers=(BrokerSource("http://127.0.0.1:1/metrics"),))
    with AdminSide(sources) as side:
        snap = side.collect()
    assert snap.admin is None and snap.health == ()
