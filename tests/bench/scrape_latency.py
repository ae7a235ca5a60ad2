"""Benchmark: /metrics render time and scrape latency, ours vs prometheus-client.

Not a test: prints a table. For each size it builds the same series once, then
  - ours: `render()` once (what the loop pays per cycle) + gzip, served by `build_server`;
  - prometheus-client: pre-built metric families (its cheapest custom-collector use),
    `generate_latest` timed, served by its own `start_http_server` (renders per scrape);
and runs N scraper *processes* (so client work does not share the server's GIL) for about
`--duration` seconds per row, plain and with `Accept-Encoding: gzip`, on 127.0.0.1 only.

    .venv/bin/python -m tests.bench.scrape_latency [--sizes 100000,1000000]
        [--scrapers 4] [--duration 10]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import multiprocessing as mp
import statistics
import sys
import time

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.catalogue import MetricType
from exporter.exposition.metricset import MetricSet, MetricSetBuilder
from exporter.exposition.render import render
from exporter.server.http import build_server
from exporter.server.published import GZIP_LEVEL, PublishedState

PER_TOPIC = (  # 5 series per topic, like a backlog-quota cycle
    "pulsar_storage_backlog_age_seconds",
    "pulsar_storage_backlog_size",
    "pulsar_storage_backlog_quota_limit",
    "pulsar_storage_backlog_quota_limit_time",
    "pulsar_storage_backlog_age_estimated",
)


def build_set(n_series: int) -> MetricSet:
    b = MetricSetBuilder()
    topics = n_series // len(PER_TOPIC)
    for i in range(topics):
        ns = f"tenant-{i % 100}/ns-{i % 1000}"
        key = ("prod-eu", ns, f"persistent://{ns}/topic-{i}")
        b.add(PER_TOPIC[0], key, (i * 7919 % 86400) / 3.0)
        b.add(PER_TOPIC[1], key, float(i * 104729 % 10**10))
        b.add(PER_TOPIC[2], key, 10737418240.0)
        b.add(PER_TOPIC[3], key, 3600.0)
        b.add(PER_TOPIC[4], key, 1.0)
    b.seed_counters(cluster="prod-eu")
    return b.build()


class Prebuilt:
    """prometheus-client collector yielding families built once from the same MetricSet."""

    def __init__(self, ms: MetricSet) -> None:
        self.families = []
        for name, metric in ms.metrics.items():
            series = ms.samples.get(name)
            if not series:
                continue
            if metric.type is MetricType.COUNTER:
                fam = CounterMetricFamily(name.removesuffix("_total"), metric.help,
                                          labels=metric.labels)
            else:
                fam = GaugeMetricFamily(name, metric.help, labels=metric.labels)
            for key, value in series.items():
                fam.add_metric(key, value)
            self.families.append(fam)

    def collect(self):
        yield from self.families


def scraper(port: int, use_gzip: bool, deadline: float, max_requests: int, out) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    headers = {"Accept-Encoding": "gzip"} if use_gzip else {}
    latencies, done = [], 0
    while time.time() < deadline and done < max_requests:
        t0 = time.perf_counter()
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        latencies.append(time.perf_counter() - t0)
        assert resp.status == 200 and body, resp.status
        done += 1
    conn.close()
    out.put(latencies)


def run_scrapers(port: int, use_gzip: bool, n: int, duration: float,
                 max_requests: int) -> list[float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    deadline = time.time() + duration
    procs = [ctx.Process(target=scraper, args=(port, use_gzip, deadline, max_requests, q))
             for _ in range(n)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return [x for r in results for x in r]


def pct(xs: list[float], p: float) -> float:
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(p) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--scrapers", type=int, default=4)
    ap.add_argument("--duration", type=float, default=10.0)
    args = ap.parse_args()

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        t0 = time.perf_counter()
        ms = build_set(size)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        body = render(ms, topic_level=True)
        render_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        gz = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
        gzip_s = time.perf_counter() - t0
        print(f"# {len(ms)} series: build {build_s:.2f}s render {render_s:.2f}s "
              f"gzip {gzip_s:.2f}s", file=sys.stderr)

        state = PublishedState(check_interval=60)
        state.publish(body, dict)
        srv = build_server("127.0.0.1:0", state).start()
        for use_gzip in (False, True):
            lat = run_scrapers(srv.address[1], use_gzip, args.scrapers, args.duration, 10**9)
            rows.append((len(ms), "ours", f"{render_s:.2f} (+gzip {gzip_s:.2f})", len(body),
                         len(gz), "gzip" if use_gzip else "plain", args.scrapers, lat))
        srv.shutdown()

        registry = CollectorRegistry()
        registry.register(Prebuilt(ms))
        t0 = time.perf_counter()
        pc_body = generate_latest(registry)
        gen_s = time.perf_counter() - t0
        pc_gz = len(gzip.compress(pc_body, mtime=0))
        print(f"# prometheus-client generate_latest {gen_s:.2f}s", file=sys.stderr)
        httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        port = httpd.server_address[1]
        # Every scrape renders; at 1M series one scrape alone outlasts the window.
        big = gen_s * args.scrapers > args.duration
        n = 1 if big else args.scrapers
        cap = 1 if big else 10**9
        for use_gzip in (False, True):
            lat = run_scrapers(port, use_gzip, n, args.duration, cap)
            rows.append((len(ms), "prometheus-client", f"{gen_s:.2f} per scrape", len(pc_body),
                         pc_gz, "gzip" if use_gzip else "plain", n, lat))
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
        del ms, body, gz, pc_body, registry

    head = ("series", "server", "render s", "body MB", "gzip MB", "mode", "scrapers",
            "requests", "p50 ms", "p99 ms")
    table = [head]
    for series, impl, rend, blen, glen, mode, n, lat in rows:
        table.append((f"{series:,}", impl, rend, f"{blen / 1e6:.1f}", f"{glen / 1e6:.2f}", mode,
                      str(n), str(len(lat)), f"{pct(lat, 50) * 1e3:.0f}",
                      f"{pct(lat, 99) * 1e3:.0f}"))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for i, r in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


if __name__ == "__main__":
    main()
