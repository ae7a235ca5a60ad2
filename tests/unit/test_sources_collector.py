"""One cycle over all sources: broker bodies and the admin walk together, into a Snapshot."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from exporter.config import AdminSource, BrokerSource, Sources
from exporter.sources.collector import SourceCollector
from exporter.sources.model import ScrapeError, SourceKind
from tests.harness.loopback import LoopbackHTTP
from tests.replay.admin_replay import TOPIC, AdminReplayServer, Fault

BODY = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"
        / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt").read_bytes()


class Metrics(BaseHTTPRequestHandler):
    delay = threading.Event()  # never set: `wait` below is a plain sleep

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.delay.wait(0.3)
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)


@pytest.fixture
def broker_url():
    with LoopbackHTTP(Metrics) as server:
        yield f"{server.url}/metrics"


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("replay-token")
    return str(path)


def test_snapshot_carries_bodies_admin_and_health_in_order(broker_url, token_file, tmp_path):
    ticks = iter(range(100, 200))
    with AdminReplayServer() as replay:
        replay.fail("/admin/v2/tenants", Fault.SLOW)  # 0.1 s: runs beside the 0.3 s broker
        sources = Sources(brokers=(BrokerSource(broker_url, timeout=2.0),),
                          admin=AdminSource(replay.url, token_file=token_file, timeout=2.0))
        with SourceCollector(sources, tmp_path / "spool", clock=lambda: float(next(ticks))) as c:
            snap = c.collect()
    (body,) = snap.bodies
    assert Path(body.path).read_bytes() == BODY
    assert TOPIC in {t.topic for t in snap.admin.topics}
    assert [(h.kind, h.source, h.up) for h in snap.health] == [
        (SourceKind.BROKER, broker_url, True), (SourceKind.ADMIN, replay.url, True)]
    assert snap.taken_at >= max(body.fetched_at, snap.admin.fetched_at)


def test_a_failing_admin_does_not_hide_the_brokers(broker_url, tmp_path):
    with AdminReplayServer() as replay:
        sources = Sources(brokers=(BrokerSource(broker_url, timeout=2.0),),
                          admin=AdminSource(replay.url, token_file=None, timeout=2.0))
        with SourceCollector(sources, tmp_path / "spool") as collector:
            snap = collector.collect()
    assert len(snap.bodies) == 1 and snap.admin is None
    broker, admin = snap.health
    assert broker.up and not admin.up and admin.last_error is ScrapeError.AUTH


def test_without_admin_there_is_no_admin_health(broker_url, tmp_path):
    with SourceCollector(Sources(brokers=(BrokerSource(broker_url),)), tmp_path) as collector:
        snap = collector.collect()
    assert snap.admin is None and [h.kind for h in snap.health] == [SourceKind.BROKER]
