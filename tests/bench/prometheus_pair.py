"""Benchmark: the scrape path as Prometheus sees it, ours vs prometheus-client.

Not a test: prints a table. Two real Prometheus servers (an HA pair, Debian's package)
scrape one server with their default Accept (OpenMetrics first) every `--interval`, for
`--duration` seconds per row, while a check loop publishes a new body every `--cycle`
seconds (so the first OpenMetrics scrape of each cycle converts the body, on an HTTP
thread). Each Prometheus then reports its own `scrape_duration_seconds` (max and median
over the window), its failed scrapes (`up == 0`) and the body it took
(`scrape_body_size_bytes`, `--enable-feature=extra-scrape-metrics`). The server's CPU
between cycles is this process's CPU over the window less the publishing thread's own;
"fetch s" is the server's share of a scrape, the body fetched as Prometheus asks for it
but not parsed (the rest of `scrape_duration_seconds` is Prometheus' parse and append).

Beside it, what a Python exporter would use instead: prometheus-client's
`start_http_server` with the same series pre-built as metric families (it renders per
scrape; no cycles to publish). Traffic stays on 127.0.0.1. The `prometheus` first on PATH
runs: Debian's 2.x, or 3.x from `go install github.com/prometheus/prometheus/cmd/prometheus`.

    .venv/bin/python -m tests.bench.prometheus_pair [--topics 10000,100000]
        [--duration 60] [--interval 5] [--cycle 15] [--scrapers 2] [--skip-client]
"""

from __future__ import annotations

import argparse
import http.client
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, start_http_server

from exporter.exposition.render import render
from exporter.server.http import build_server
from exporter.server.published import PublishedState
from tests.bench.scrape_latency import PER_TOPIC, Prebuilt, build_set
from tests.harness.process import ManagedProcess, require_binary
from tests.harness.prometheus import Prometheus


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Scraper:
    """One real Prometheus scraping `target` every `interval` (timeout the same, at most 10 s),
    with the body-size series on."""

    def __init__(self, workdir: Path, target: str, interval: float) -> None:
        self.prometheus = Prometheus(workdir, targets={"x": [target]}, rule_files=(),
                                     alertmanager="127.0.0.1:9")
        config = {"global": {"scrape_interval": f"{interval:g}s",
                             "scrape_timeout": f"{min(interval, 10.0):g}s"},
                  "scrape_configs": [{"job_name": "x",
                                      "static_configs": [{"targets": [target]}]}]}
        self.prometheus.config_path.write_text(yaml.safe_dump(config))
        self.prometheus.process = ManagedProcess("prometheus", [
            require_binary("prometheus"), f"--config.file={self.prometheus.config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.prometheus.port}",
            "--enable-feature=extra-scrape-metrics"], workdir)

    def figures(self, window: float) -> dict[str, float]:
        w = f"[{int(window)}s]"

        def one(expr: str) -> float:
            found = self.prometheus.instant(expr)
            return float(found[0]["value"][1]) if found else float("nan")

        return {"max_s": one(f"max_over_time(scrape_duration_seconds{w})"),
                "p50_s": one(f"quantile_over_time(0.5, scrape_duration_seconds{w})"),
                "scrapes": one(f"count_over_time(up{w})"),
                "failed": one(f"count_over_time(up{w}) - sum_over_time(up{w})"),
                "body_mb": one(f"max_over_time(scrape_body_size_bytes{w})") / 1e6}


PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def fetch_seconds(target: str, tries: int = 5) -> float:
    """The median time to fetch the body as Prometheus asks for it (OpenMetrics, gzip) and
    read it whole, without parsing it: the server's share of a scrape."""
    took = []
    for _ in range(tries):
        conn = http.client.HTTPConnection(*target.rsplit(":", 1), timeout=60)
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/metrics", headers={"Accept": PROMETHEUS_ACCEPT,
                                                      "Accept-Encoding": "gzip"})
            conn.getresponse().read()
        except TimeoutError:
            return float("inf")  # a server still busy with the pair's scrapes
        finally:
            conn.close()
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def measure(target: str, workdir: Path, args: argparse.Namespace,
            publish: Callable[[], object] | None) -> tuple[list[dict[str, float]], float]:
    """Start the pair on `target`, run the window (publishing every cycle when given),
    return each Prometheus' figures and the server's CPU seconds per second."""
    pair = [Scraper(workdir / f"prom-{i}", target, args.interval)
            for i in range(args.scrapers)]
    stop = threading.Event()
    publishing = [0.0]

    def loop() -> None:
        while not stop.wait(args.cycle):
            t0 = time.thread_time()
            assert publish is not None
            publish()
            publishing[0] += time.thread_time() - t0

    try:
        for p in pair:
            p.prometheus.start(timeout=60)
        time.sleep(args.interval * 2)  # both have scraped: the window starts warm
        cpu0, t0 = _cpu(), time.monotonic()
        thread = threading.Thread(target=loop, daemon=True)
        if publish is not None:
            thread.start()
        time.sleep(args.duration)
        stop.set()
        if publish is not None:
            thread.join()
        cpu = (_cpu() - cpu0 - publishing[0]) / (time.monotonic() - t0)
        figures = [p.figures(args.duration) for p in pair]
        for p in pair:
            p.prometheus.stop()
        figures[0]["fetch_s"] = fetch_seconds(target)
        return figures, cpu
    finally:
        for p in pair:
            p.prometheus.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", default="10000,100000")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--cycle", type=float, default=15.0)
    ap.add_argument("--scrapers", type=int, default=2,
                    help="Prometheus servers scraping at once: 2 (an HA pair), or 1 to see "
                         "what the twin costs on the same cores")
    ap.add_argument("--skip-client", action="store_true",
                    help="leave out prometheus-client's rows")
    args = ap.parse_args()
    rows = []
    for topics in (int(t) for t in args.topics.split(",")):
        ms = build_set(topics * len(PER_TOPIC))
        body = render(ms, topic_level=True)
        workdir = Path(tempfile.mkdtemp(prefix="pqe-bench-pair-"))
        try:
            state = PublishedState(check_interval=args.cycle)
            state.publish(body, dict)
            with build_server("127.0.0.1:0", state) as server:
                server.start()
                host, port = server.address
                figures, cpu = measure(f"{host}:{port}", workdir / "ours", args,
                                       lambda s=state, b=body: s.publish(b, dict))
            rows.append((topics, len(ms), "ours", figures, cpu))
            if args.skip_client:
                continue
            registry = CollectorRegistry()
            registry.register(Prebuilt(ms))
            httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
            figures, cpu = measure(f"127.0.0.1:{httpd.server_address[1]}",
                                   workdir / "client", args, None)
            httpd.shutdown()
            httpd.server_close()
            thread.join(5)
            rows.append((topics, len(ms), "prometheus-client", figures, cpu))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    head = ("topics", "series", "server", "Prometheus", "scrapes", "failed", "max s", "p50 s",
            "body MB", "server CPU", "fetch s")
    table = [head]
    for topics, series, impl, figures, cpu in rows:
        for i, f in enumerate(figures):
            table.append((f"{topics:,}", f"{series:,}", impl, f"#{i + 1}",
                          f"{f['scrapes']:.0f}", f"{f['failed']:.0f}", f"{f['max_s']:.3f}",
                          f"{f['p50_s']:.3f}", f"{f['body_mb']:.1f}",
                          f"{cpu * 100:.1f} %" if i == 0 else "",
                          f"{f['fetch_s']:.3f}" if i == 0 else ""))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for i, r in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print(f"# {args.duration:g} s a row, scrape every {args.interval:g} s, a new body every "
          f"{args.cycle:g} s (ours); server CPU: cores busy serving, publishing excluded; "
          "fetch s: the median GET of the body as Prometheus asks, read, not parsed")


if __name__ == "__main__":
    main()
