"""A FAKE of an Apache Pulsar broker's /metrics for tests — a recorded body, not a broker.

A fake shows what the brokers the tests start cannot: the output of another Apache Pulsar
version, as Pulsar itself wrote it. `FakeMetricsServer` stands in for one broker's /metrics
endpoint by serving, byte for byte and on every request, the real body recorded from Pulsar's
own CI test broker:

  GET /metrics  ← apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt
                  (tests/fixtures, see its SOURCES.md: cluster="test",
                  namespace-level series only, no topic labels)

Everything else is 404. Being a recording, the counters never move; an exporter that reads it
sees an Apache Pulsar broker whose traffic has stopped. Requests are counted so a test can
tell that the exporter really read it.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.harness.fixtures import FIXTURES
from tests.harness.loopback import LoopbackHTTP

BROKER_METRICS_2_12 = "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what Pulsar's broker sends


class FakeMetricsServer:
    """Serves one recorded Apache Pulsar /metrics body on 127.0.0.1 (a free port by default)."""

    def __init__(self, body_file: Path | None = None, port: int = 0) -> None:
        path = body_file if body_file is not None else FIXTURES / BROKER_METRICS_2_12
        self.body = path.read_bytes()  # read once: a missing fixture fails at construction
        self._lock = threading.Lock()
        self._requests = 0
        self._server = LoopbackHTTP(self._handler(), port)

    @property
    def url(self) -> str:
        return f"{self._server.url}/metrics"

    @property
    def requests(self) -> int:
        """How many times /metrics was served."""
        with self._lock:
            return self._requests

    def start(self) -> FakeMetricsServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> FakeMetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _served(self) -> None:
        with self._lock:
            self._requests += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is replayed")
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(replay.body)))
                self.end_headers()
                self.wfile.write(replay.body)
                replay._served()

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the exporter fetches it every cycle

        return Handler
