"""The admin side's requests and seconds per cycle on a real Apache Pulsar 4.0.8 standalone
broker, before and after reading a topic's stats only when it needs them
(engine/attention.py), side by side in one run. Prints a Markdown table; not a test.

    .venv/bin/python -m tests.bench.admin [--topics 1000,10000] [--namespaces 4] [--repeat 5]

For each topic count (topics spread over `--namespaces` namespaces, each with one
subscription; created over the admin REST, eight at a time) and each way of walking: the
requests of one cycle, counted at a proxy in front of the broker's web port, and the
median seconds of `--repeat` cycles against the broker itself:
- before: the walk as it was, every topic's stats every cycle (a fresh walk each cycle,
  so every listing is read too);
- after, steady: the exporter's walk on a cycle within the policy period, no topic needing
  attention (the common case);
- after, 1 % needing attention: the same with 1 % of the topics picked (over a quota, say);
- after, first cycle: every topic's stats and every topic's policy map (read once).
Each cycle runs the backlog-quota policy and resource-group reads as an exporter with an
admin source does. The broker runs with a 2 GB heap; its web port answers on loopback.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exporter.config.settings import AdminSource
from exporter.sources.admin import AdminFetched, AdminScraper, StatsChoice
from exporter.sources.policies import PolicyCache
from exporter.sources.resourcegroups import GroupCache
from tests.harness.apache_pulsar import ApachePulsar
from tests.harness.counting_proxy import CountingProxy


def _scraper(url: str) -> AdminScraper:
    """The exporter's walk, its clock stopped: every cycle after the first is within the
    60 s period of listings and policies (one in 60 s cycles past it re-reads those)."""
    return AdminScraper(AdminSource(url=url, timeout=60.0), policies=PolicyCache(),
                        groups=GroupCache(), clock=lambda: 0.0)


def _create(broker: ApachePulsar, namespaces: list[str], start: int, end: int) -> None:
    def one(i: int) -> None:
        ns = namespaces[i % len(namespaces)]
        broker.admin("PUT", f"/admin/v2/persistent/{ns}/t{i}/subscription/s", None,
                     timeout=60)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(start, end)))


def _walk(scraper: AdminScraper, choose: StatsChoice | None) -> float:
    t0 = time.perf_counter()
    outcome = scraper.scrape(choose)
    assert isinstance(outcome.outcome, AdminFetched), outcome.outcome
    return time.perf_counter() - t0


def _measure(proxy: CountingProxy, url: str, repeat: int) -> list[tuple[str, int, float]]:
    """(walk, requests counted at the proxy, median seconds against the broker itself: the
    proxy's own thread and connection per request would be timed too)."""
    def before() -> tuple[int, float]:
        proxy.take()
        _walk(AdminScraper(AdminSource(url=proxy.url, timeout=60.0)), None)
        counted = sum(proxy.take().values())
        return counted, statistics.median(
            _walk(AdminScraper(AdminSource(url=url, timeout=60.0)), None)
            for _ in range(repeat))

    was = before()
    counting, timed = _scraper(proxy.url), _scraper(url)
    first = _walk(timed, None)  # each past its first cycle
    _walk(counting, None)

    def after(choose: StatsChoice, runs: int) -> tuple[int, float]:
        proxy.take()
        _walk(counting, choose)
        counted = sum(proxy.take().values())
        return counted, statistics.median(_walk(timed, choose) for _ in range(runs))

    rows = [("before: every topic's stats", *was),
            ("after, steady", *after(lambda listed: (), repeat)),
            ("after, 1 % needing attention", *after(lambda listed: listed[::100], repeat))]
    proxy.take()
    _walk(_scraper(proxy.url), None)
    rows.append(("after, first cycle (once)", sum(proxy.take().values()), first))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="1000,10000")
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.topics.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-admin-") as tmp:
        broker = ApachePulsar(Path(tmp), heap="2g", direct_memory="1g",
                              resource_usage_transport=False)
        broker.start()
        try:
            namespaces = [broker.create_namespace("bench") for _ in range(args.namespaces)]
            made, table = 0, []
            with CountingProxy(broker.web_url) as proxy:
                for size in sizes:
                    t0 = time.perf_counter()
                    _create(broker, namespaces, made, size)
                    made = size
                    print(f"{size} topics ready ({time.perf_counter() - t0:.0f} s to create)",
                          flush=True)
                    table += [(size, *row) for row in _measure(proxy, broker.web_url, args.repeat)]
        finally:
            broker.stop()
    print("\n| topics | walk | admin requests / cycle | seconds / cycle |\n|---|---|---|---|")
    for size, label, requests, seconds in table:
        print(f"| {size:,} | {label} | {requests:,} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
