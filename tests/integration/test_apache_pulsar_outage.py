"""A real Apache Pulsar 4.0.8 broker going away and coming back under a running exporter
(tests/harness/apache_pulsar.py): its own broker, not the session's, since it is stopped.

The broker side runs the pipeline's own task code in process (`pipeline.scrape.in_process`,
no Spark session): the same streamed fetch, failure classification and last-good tables a
Spark task gives `BrokerScrape`. The admin side is the exporter's own `AdminSide`.
A restart reuses the broker's ports and data directory (`ApachePulsar.start` keeps both),
so the exporter's configured URLs stay right, as they would for a restarted pod.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config.load import parse
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.runtime.cycle import CycleReport, Exporter
from exporter.server.http import Server, build_server
from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.harness.pulsar import Metrics

BACKLOG = "pulsar_storage_backlog_size"
UP = "pulsar_quota_exporter_source_up"
ERRORS = "pulsar_quota_exporter_source_scrape_errors_total"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApachePulsar]:
    with ApachePulsar(tmp_path_factory.mktemp("apache-pulsar-outage")) as b:
        yield b


def _status(server: Server) -> dict:
    with urllib.request.urlopen(f"{server.url}/api/v1/status", timeout=5) as resp:
        return json.load(resp)


def _sources(report: CycleReport, server: Server) -> dict[str, dict]:
    """Per source URL: up and error from /metrics and from the served /api/v1/status."""
    metrics = Metrics(report.body.decode())
    served = {s["url"]: s for s in _status(server)["sources"]}
    return {url: {"up": metrics.value(UP, source=url), "served_up": s["up"],
                  "error": s["error"], "refused": metrics.value(ERRORS, source=url,
                                                                reason="refused")}
            for url, s in served.items()}


def test_broker_outage_keeps_last_metrics_marks_sources_down_and_recovers_next_cycle(
        broker: ApachePulsar, tmp_path: Path) -> None:
    """Cycle with data; stop the broker: the topic's backlog series stays (last good data),
    both sources are down with reason refused, in /metrics and /api/v1/status. Restart it
    on the same ports: the first cycle after the broker is ready has both sources up."""
    namespace = broker.create_namespace("outage")
    topic = f"persistent://{namespace}/stalled"
    broker.create_subscription(topic, "stalled")
    broker.produce(topic, 20, 500)
    poll(lambda: (broker.metrics().value(BACKLOG, topic=topic) or 0) > 0,
         f"{topic}: the broker's /metrics shows its backlog")

    config = parse({"cluster": broker.cluster, "check_interval": "5s",
                    "sources": {"brokers": [{"url": broker.metrics_url, "timeout": "5s"}],
                                "admin": {"url": broker.web_url, "timeout": "5s"}}},
                   "outage.yaml")
    sources = config.sources.brokers
    exporter = Exporter(config, brokers=BrokerScrape(sources, in_process(sources)))
    server = build_server("127.0.0.1:0", exporter.state).start()
    urls = {broker.metrics_url, broker.web_url}
    try:
        good = exporter.cycle()
        backlog = Metrics(good.body.decode()).value(BACKLOG, topic=topic)
        assert backlog is not None and backlog > 0
        up = _sources(good, server)
        assert set(up) == urls
        assert all(s["up"] == 1 and s["served_up"] and s["refused"] == 0
                   for s in up.values()), up

        broker.stop()
        down = exporter.cycle()
        assert Metrics(down.body.decode()).value(BACKLOG, topic=topic) == backlog
        assert {t["topic"] for t in down.status["topics"]} >= {topic}
        gone = _sources(down, server)
        print("down:", gone)
        for url, s in gone.items():
            assert s["up"] == 0 and s["served_up"] is False, (url, s)
            assert s["refused"] == 1, (url, s)
            assert "ConnectionRefusedError" in s["error"], (url, s)

        broker.start()  # returns once the broker is ready (clusters listed, brokers/ready)
        assert broker.metrics_url in urls and broker.web_url in urls  # the same ports
        began = time.monotonic()
        back = exporter.cycle()  # the broker answers: the very next cycle is up
        print(f"recovered in one cycle of {time.monotonic() - began:.1f} s")
        again = _sources(back, server)
        for url, s in again.items():
            assert s["up"] == 1 and s["served_up"] and s["error"] is None, (url, s)
            assert s["refused"] == 1, (url, s)  # the counter kept the outage
        # The restarted broker loads a topic only when asked (here by the admin walk's stats
        # call), so its first /metrics may lack it: the series is back once it lists it.
        present = topic in {t["topic"] for t in back.status["topics"]}
        print(f"first recovered cycle lists {topic}: {present}")
        cycles = []

        def series_back() -> bool:
            cycles.append(exporter.cycle())
            return Metrics(cycles[-1].body.decode()).value(BACKLOG, topic=topic) == backlog

        poll(series_back, f"{topic}: its backlog series back at {backlog}", timeout=60,
             interval=1)
        print(f"{topic}'s series back after {len(cycles)} more cycle(s)")
    finally:
        server.shutdown()
        exporter.close()
