"""The driver's memory at a fleet's scale once every backlog-age table is full, cycle after
cycle as the runtime runs them: the Spark job, the merge, the decide, the publication, and
what is left between cycles, as the exporter holds it and as glibc would keep it without
the hand-back. Prints a Markdown table; not a test.

    .venv/bin/python -m tests.bench.steady [--topics 100000,1000000] [--brokers 100]
        [--master local[2]] [--pip323]

`--brokers` bodies share the topics (each its own names, every topic under a default quota
that evicts: `tests.bench.pipeline`'s), served over loopback HTTP by a separate process and
fetched and parsed by the job on Spark. The age tables are first given a history of
`max_points` + 1 points a topic, so that every table has filled once: a state a short run
never shows, reached after `max_points` cycles of new messages. Then three cycles (the
job, the merge and its hand-back, the decide, the /metrics body under `max_topics`
10,000 and the decisions it keeps, `FullCollections.after_cycle`); after each, the
driver's resident set (this process) before and after `after_cycle`, and its peaks
(VmHWM) in the job and the merge, and in the decide and the publication; the JVM's and
the Python workers' peaks at the end. The header names Arrow's memory pool (the system one
unless ARROW_DEFAULT_MEMORY_POOL says otherwise: mimalloc read 150-200 MB higher at 1M topics),
and the last line the share of the busy CPU time the hypervisor took over the run
(steal, in /proc/stat), since a noisy host moves the cycle's seconds by half.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from tests.bench.pipeline import (
    _QUOTAS,
    _body,
    _hwm_mb,
    _reset_hwm,
    _serve,
    _spark_processes,
    _status_mb,
)
from tests.harness.synthetic import BodySpec, body_text


def steady(context, total: int, brokers: int, workdir: Path, cycles: int = 3,
           pip323: bool = False) -> None:
    from exporter.config.load import parse
    from exporter.config.settings import BrokerSource
    from exporter.engine.backlog.agetable import DEFAULT_MAX_POINTS
    from exporter.engine.decide import Decider
    from exporter.exposition.build_topics import as_published
    from exporter.pipeline.merge import merge, release_unused
    from exporter.pipeline.scrape import BrokerScrape, on_spark
    from exporter.runtime.garbage import FullCollections

    template = body_text(BodySpec(topics=max(1, total // brokers), concatenated=False,
                                  pip323=pip323))
    for b in range(brokers):
        (workdir / f"b{b}.prom").write_text(template.replace("/b0-topic-", f"/b{b}-topic-"))
    del template
    server, url = _serve(workdir)
    try:
        urls = [f"{url}/b{b}.prom" for b in range(brokers)]
        sources = [BrokerSource(u, 600.0) for u in urls]
        scrape = BrokerScrape(sources, on_spark(context, sources))
        config = parse({"cluster": "bench", "backlog_quotas": _QUOTAS, "sources": {
            "brokers": [{"url": u} for u in urls]}}, "bench.yaml")
        decider, collections = Decider(config), FullCollections()
        collections.start()
        now = time.time()
        topics = merge(scrape.run().tables, {}).topics.column("topic").to_pylist()
        release_unused()
        before = _status_mb("VmRSS")
        seen, published = np.ones(len(topics), bool), np.zeros(len(topics), np.int64)
        history = DEFAULT_MAX_POINTS + 1
        for k in range(history):  # counts below those the bodies print, a minute apart
            decider.ages.observe_all(topics, published + k, seen, now - 60 * (history - k))
        del topics
        release_unused()
        filled = _status_mb("VmRSS") - before
        for cycle in range(cycles):
            _reset_hwm()
            t0 = time.perf_counter()
            data = scrape.run()
            agg = merge(data.tables, {}, malformed=data.malformed)
            data = None
            release_unused()  # as runtime/cycle.py does after the merge
            t1, merged = time.perf_counter(), _hwm_mb()
            _reset_hwm()
            decisions = decider.decide(agg, None, now + 60 * cycle)
            agg = None
            # held to the next cycle as runtime/cycle.py holds them, the published kept
            decisions = as_published(decisions, 10_000)
            _body(decisions, max_topics=10_000)
            seconds, kept, peak = time.perf_counter() - t0, _status_mb("VmRSS"), _hwm_mb()
            t2 = time.perf_counter()
            collections.after_cycle()
            handed = time.perf_counter() - t2
            print(f"| {total:,} | {filled:,.0f} | {cycle + 1} | {seconds:.1f} "
                  f"({t1 - t0:.1f}) | {kept:,.0f} | {_status_mb('VmRSS'):,.0f} "
                  f"({handed * 1e3:.0f} ms) | {merged:,.0f} | {peak:,.0f} |", flush=True)
        collections.stop()
        jvm, workers = _spark_processes()
        print(f"| {total:,} | peaks: JVM {jvm:,.0f} MB, Python workers {workers:,.0f} MB "
              "|||||||", flush=True)
    finally:
        server.terminate()
        for f in workdir.iterdir():
            f.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", default="100000")
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--pip323", action="store_true",
                        help="bodies that print PIP-323's age of each topic (Pulsar >= 3.2)")
    args = parser.parse_args()

    from exporter.config.settings import Spark
    from exporter.pipeline.spark.session import get_context

    context = get_context(Spark(master=args.master))
    import pyarrow as pa  # after exporter's, which chooses the pool (exporter/__init__.py)

    print(f"({args.master}, {os.cpu_count()} cores, Arrow's "
          f"{pa.default_memory_pool().backend_name} memory pool)\n")
    cpu = _cpu_jiffies()
    print("| topics | age tables full MB | cycle | s (job and merge) | driver MB between "
          "cycles: as glibc keeps it | after `after_cycle` (its time) | driver peak MB: "
          "job and merge | decide and publication |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="pqe-bench-") as tmp:
        for total in (int(t) for t in args.topics.split(",")):
            steady(context, total, args.brokers, Path(tmp), pip323=args.pip323)
    spent = [b - a for a, b in zip(cpu, _cpu_jiffies(), strict=True)]
    busy = sum(spent) - spent[3] - spent[4]  # all but idle and iowait
    print(f"\nsteal: {spent[7] / max(1, busy):.1%} of the busy CPU time over the run")


def _cpu_jiffies() -> list[int]:
    """The machine's CPU time so far, by kind (/proc/stat's `cpu` line: the 4th idle,
    5th iowait, 8th steal)."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


if __name__ == "__main__":
    main()
