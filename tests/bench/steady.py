"""The driver's memory between cycles once every backlog-age table is full, as the exporter
holds it and as glibc would keep it without the hand-back between cycles. Prints a
Markdown table; not a test.

    .venv/bin/python -m tests.bench.steady [--topics 100000,1000000] [--brokers 100]

A fleet's bodies are parsed in this process (what the job hands the merge), every topic
under a default quota that evicts (`tests.bench.pipeline`'s). The age tables are given a
history of `max_points` + 1 points a topic first, so that every table has filled once (and
thinned): a state a short run never shows, reached after `max_points` cycles of new
messages. Then three cycles as the runtime runs them (merge, its hand-back, decide, the
/metrics body under `max_topics` 10,000); after each, the driver's resident set over what it
was before the engine began (the parsed bodies aside): as glibc keeps it, then after
`FullCollections.after_cycle` (runtime/garbage.py), and the cycle's peak.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tests.bench.pipeline import _body, _hwm_mb, _reset_hwm, _status_mb, parsed_fleet


def steady(total: int, brokers: int, cycles: int = 3) -> None:
    import gc

    from exporter.engine.agetable import DEFAULT_MAX_POINTS
    from exporter.engine.decide import Decider
    from exporter.pipeline.merge import merge, release_unused
    from exporter.runtime.garbage import FullCollections

    tables, config = parsed_fleet(total, brokers)
    gc.collect()
    release_unused()
    base = _status_mb("VmRSS")
    decider, collections = Decider(config), FullCollections()
    collections.start()
    now = time.time()
    topics = merge(tables, {}).topics.column("topic").to_pylist()
    seen, published = np.ones(len(topics), bool), np.zeros(len(topics), np.int64)
    history = DEFAULT_MAX_POINTS + 1
    for k in range(history):  # counts below those the bodies print, a minute apart
        decider.ages.observe_all(topics, published + k, seen, now - 60 * (history - k))
    del topics
    release_unused()
    filled = _status_mb("VmRSS") - base
    try:
        for cycle in range(cycles):
            _reset_hwm()
            t0 = time.perf_counter()
            agg = merge(tables, {})
            release_unused()  # as runtime/cycle.py does after the merge
            decisions = decider.decide(agg, None, now + 60 * cycle)
            agg = None
            _body(decisions, max_topics=10_000)
            seconds, kept, peak = time.perf_counter() - t0, _status_mb("VmRSS"), _hwm_mb()
            t1 = time.perf_counter()
            collections.after_cycle()
            handed = time.perf_counter() - t1
            after = _status_mb("VmRSS") - base
            print(f"| {total:,} | {filled:,.0f} | {cycle + 1} | {seconds:.1f} "
                  f"| {kept - base:,.0f} | {after:,.0f} ({handed * 1e3:.0f} ms) "
                  f"| {peak - base:,.0f} |", flush=True)
    finally:
        collections.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", default="100000")
    parser.add_argument("--brokers", type=int, default=100)
    args = parser.parse_args()
    print("| topics | age tables full MB | cycle | s | between cycles MB: as glibc keeps it "
          "| after `after_cycle` (its time) | the cycle's peak MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for total in (int(t) for t in args.topics.split(",")):
        steady(total, args.brokers)


if __name__ == "__main__":
    main()
