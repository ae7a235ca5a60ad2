"""`pulsar-quota-exporter demo`: an embedded pulsar-lite broker, a workload, and the exporter
running the packaged demo config (`exporter/data/demo.yaml`), with a one-screen summary of
the decisions every cycle.

The workload (namespaces match the demo config's quotas):
- `public/default/orders`: produced and consumed promptly (backlog age stays near 0);
- `public/demo-time/stalled`: its consumer stops after a few seconds, so its backlog ages past
  the namespace's 30 s time quota and is evicted (`enforce: true` in the demo config);
- `public/demo-size/bulk`: a subscription with no consumer grows past the 256 KiB size quota.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

from exporter.config.load import load
from exporter.config.settings import Config
from exporter.demo.embedded import EmbeddedBroker

# Package data, beside this module in a checkout and in an installed wheel alike.
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "data" / "demo.yaml"  # package data


def _ports(config: Config) -> tuple[int, int]:
    assert config.sources.service_url is not None  # the demo's own config sets it
    service = int(config.sources.service_url.rsplit(":", 1)[1])
    metrics = int(config.sources.brokers[0].url.split(":")[2].split("/")[0])
    return service, metrics


def _busy(service_port: int, metrics_port: int, listen: str) -> list[str]:
    """The demo's fixed addresses something already listens on (a demo left running: its
    broker would answer the readiness probe meant for ours, its exporter hold the port)."""
    from exporter.server.http import listened, parse_listen

    wanted = [("127.0.0.1", service_port), ("127.0.0.1", metrics_port), parse_listen(listen)]
    return [f"{h}:{p}" for h, p in wanted if listened(h, p)]


def _workload(service_url: str, stop: threading.Event) -> None:
    import pulsar

    client = pulsar.Client(service_url, logger=logging.getLogger("pulsar.demo"))
    try:
        orders = client.create_producer("persistent://public/default/orders")
        prompt = client.subscribe("persistent://public/default/orders", "billing")
        stalled = client.create_producer("persistent://public/demo-time/stalled")
        slow = client.subscribe("persistent://public/demo-time/stalled", "reports",
                                consumer_type=pulsar.ConsumerType.Shared)
        bulk = client.create_producer("persistent://public/demo-size/bulk")
        client.subscribe("persistent://public/demo-size/bulk", "archive").close()
        started = time.monotonic()
        while not stop.wait(0.5):
            orders.send(b"order" * 20)
            msg = prompt.receive(timeout_millis=2000)
            prompt.acknowledge(msg)
            stalled.send(b"report" * 20)
            if slow is not None and time.monotonic() - started < 5:
                slow.acknowledge(slow.receive(timeout_millis=2000))
            elif slow is not None:
                slow.close()  # the consumer stops: the backlog starts to age
                slow = None
            bulk.send(b"b" * 4096)
    finally:
        client.close()


def summary(report) -> str:
    lines = [f"cycle at {report.status['checked_at']}  "
             f"({sum(report.status['stage_seconds'].values()):.1f}s)",
             f"{'topic':45} {'backlog':>8} {'age s':>7} {'policy':26} exceeded / action"]
    for t in report.status["topics"]:
        age = "-" if t["backlog_age_seconds"] is None else f"{t['backlog_age_seconds']:.0f}"
        what = ",".join(t["exceeded"]) or "ok"
        if t["evict"]:
            what += " → evict " + ", ".join(e["subscription"] for e in t["evict"])
        lines.append(f"{t['topic']:45} {t['backlog_messages']:>8} {age:>7} {t['policy']:26} "
                     f"{what}")
    return "\n".join(lines)


def run_demo(duration: float | None = None, config_path: Path = DEMO_CONFIG) -> int:
    """Run until `duration` or Ctrl-C. 1 when no cycle produced decisions: a demo whose
    every cycle failed must not look like one that worked."""
    from exporter.pipeline.spark import archivemake
    from exporter.pipeline.spark.session import start_in_background
    from exporter.pipeline.spark.session import stop as stop_spark
    from exporter.runtime.scheduler import Scheduler
    from exporter.server.http import ListenError, build_server
    from exporter.server.webconfig import load_web_config

    config = load(config_path)
    service_port, metrics_port = _ports(config)
    busy = _busy(service_port, metrics_port, config.exposition.listen)
    if busy:
        print(f"demo: {', '.join(busy)} in use: is another demo running? Stop it (Ctrl-C in "
              "its terminal), then start this one again.", file=sys.stderr)
        return 1
    start_in_background(config.spark)  # beside the broker's start and the imports below
    from exporter.runtime.cycle import Exporter

    stop = threading.Event()
    with EmbeddedBroker.start_new(service_port, metrics_port) as broker:
        print(f"broker   {broker.service_url}  (metrics {broker.metrics_url})")
        exporter = Exporter(config)
        try:
            server = build_server(config.exposition.listen, exporter.state,
                                  load_web_config(config.exposition)).start()
        except ListenError as exc:  # taken since `_busy` looked
            print(f"demo: {exc}", file=sys.stderr)
            exporter.close()
            return 1
        # the workload's client last: one still connected at an early exit aborts Python
        worker = threading.Thread(target=_workload, args=(broker.service_url, stop), daemon=True)
        worker.start()
        print(f"exporter {server.url}/metrics   status {server.url}/api/v1/status")
        print("starting Spark (about 5 s; the first time on a machine, a few more) ... Ctrl-C to "
              "stop\n", flush=True)

        decided = 0

        def cycle() -> None:
            nonlocal decided
            report = exporter.cycle()
            if report.decisions is None:
                print("no decisions yet: the cycle failed (see the log)\n", flush=True)
                return
            decided += 1
            print(summary(report) + "\n", flush=True)

        scheduler = Scheduler(config.check_interval,
                              archivemake.after_first(cycle, config.spark.master),
                              exporter.skipped)
        if duration is not None:
            timer = threading.Timer(duration, scheduler.stop)
            timer.daemon = True  # a stop before it (Ctrl-C, SIGTERM) must not wait it out
            timer.start()
        try:
            scheduler.run()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            worker.join(5)
            server.shutdown()
            exporter.close()
            stop_spark()
    if not decided:
        print("demo: no cycle produced decisions", file=sys.stderr)
        return 1
    return 0
