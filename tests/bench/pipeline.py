"""The pipeline's cost, side by side with what a user would run instead, on the same
synthetic Apache Pulsar bodies. Prints Markdown tables; not a test.

    .venv/bin/python -m tests.bench.pipeline [--sizes 10,1000,10000] [--recorded 10000]
        [--fleet 1000,10000] [--engine 10000,100000] [--ages 100000] [--brokers 100]
        [--repeat 3] [--master local[2]]

Per body (one broker), on the synthetic bodies (tests/harness/synthetic.py: 49 samples a
topic), then on bodies of a real Apache Pulsar 4.0.8 broker's families (`--recorded`:
tests/harness/recorded_families.py, its recorded body's 95 samples a topic, most of them
of families the exporter does not read):
- `promtool check metrics` (Prometheus' Go parser, what `promtool` users would run) and a
  plain Python regex loop, each on the body from a file;
- the exporter's parse on one core in this process (`scrape.parsed_pieces`: the pieces a
  task cuts from the chunks it reads, their parse, the tables and their payloads: what one
  Spark task does after the fetch);
- the warm exporter cycle on Spark (`--master`): the job (fetch over loopback HTTP,
  parse, per-broker tables, in the tasks) plus the merge on the driver, median of
  `--repeat` after one warm-up.
The fleet: `--brokers` brokers sharing the given total topic counts, each body with its
own topic names, served by a separate process (its CPU seconds a cycle beside the job's: it
shares the job's cores, where real brokers would not); job and merge seconds, samples/s, and
peak RSS of the driver (this process, counted from when the bodies are written: its cycles'
peak, keeping of each cycle's Aggregates only what the exporter keeps until the next), the
JVM and the Python workers (VmHWM).
The engine: what the driver does next with the merged tables (`Decider.decide`, every topic
under a default quota that evicts), warm, in this process on the same bodies parsed here:
seconds, per topic, and the resident growth it and the merge leave (the decisions and the
engine's per-topic state); then the /metrics body of its decisions (build and render):
seconds, size and traced peak. All of it
under CPython's own garbage collections (their seconds inside the cycle), then with the
full ones between cycles, as the exporter runs (runtime/garbage.py). Then the publication
again, beside it under the two settings design.md gives a large fleet: `filters.max_topics`
10,000 and `exposition.topic_level` false.
The age tables (engine/backlog/agetable.py): resident bytes a topic (names excluded) after 2 cycles
and once full, beside the same points kept as Python lists, as they were until 2026-11; and
a cycle's observes, µs a topic, in a cycle where no table thins and in one where all do, and
its estimates.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness.recorded_families import recorded_family_body
from tests.harness.synthetic import BodySpec, body_text
from tests.harness.wait import poll

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _regex_loop(text: str) -> int:
    n = 0
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m:
            dict(_LABEL.findall(m.group(2) or ""))
            float(m.group(3))
            n += 1
    return n


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _status_mb(field: str, pid: int | str = "self") -> float:
    """A memory field of /proc/<pid>/status (VmHWM: peak resident, VmRSS: now), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _hwm_mb(pid: int | str = "self") -> float:
    return _status_mb("VmHWM", pid)


def _reset_hwm() -> None:
    """This process's VmHWM back to its current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _spark_processes() -> tuple[float, float]:
    """(JVM, Python workers) peak RSS in MB, over this process's descendants."""
    jvm = workers = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"org.apache.spark.deploy.SparkSubmit" in cmd:
            jvm += _hwm_mb(proc.name)
        elif b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
            workers += _hwm_mb(proc.name)
    return jvm, workers


def _serve(bodies_dir: Path) -> tuple[subprocess.Popen, str]:
    """A separate process serving the bodies' files over loopback HTTP."""
    from exporter.demo.embedded import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(bodies_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    def answers() -> bool:
        with urllib.request.urlopen(url, timeout=1):
            return True

    poll(answers, f"the body server answering at {url}", 20, interval=0.1, ignore=(OSError,))
    return proc, url


def _cycle(context, urls: list[str], repeat: int) -> tuple[float, float, float, int]:
    """(first cycle seconds, then job and merge seconds, medians), and the topics found."""
    from exporter.config.settings import BrokerSource
    from exporter.pipeline.merge import merge, release_unused
    from exporter.pipeline.scrape import BrokerScrape, on_spark

    sources = [BrokerSource(u, 600.0) for u in urls]
    scrape = BrokerScrape(sources, on_spark(context, sources))
    jobs, merges = [], []
    topics, first = 0, 0.0
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        data = scrape.run()
        t1 = time.perf_counter()
        if not all(h.up for h in data.health):
            raise RuntimeError({h.last_error_detail for h in data.health if not h.up})
        agg = merge(data.tables, {}, malformed=data.malformed)
        release_unused()  # as the exporter does after its merge (runtime/cycle.py)
        t2 = time.perf_counter()
        topics = agg.topics.num_rows
        # What the exporter keeps of a cycle's Aggregates until the next (runtime/cycle.py).
        seen, data, agg = agg.topics["topic"], None, None  # noqa: F841
        if i:  # the first run warms the plan's workers
            jobs.append(t1 - t0)
            merges.append(t2 - t1)
        else:
            first = t2 - t0
    return first, statistics.median(jobs), statistics.median(merges), topics


def _task_parse(data: bytes, repeat: int) -> float:
    """Seconds (min of `repeat`, after a warm-up) that a task takes over `data` after its
    fetch (`scrape.parsed_pieces`: the pieces it cuts from the chunks it reads, their
    parse, the tables and their payloads)."""
    from exporter.config.settings import KEEP_ALL
    from exporter.pipeline.scrape import parsed_pieces
    from exporter.sources.brokers import CHUNK_BYTES

    chunks = [data[at:at + CHUNK_BYTES] for at in range(0, len(data), CHUNK_BYTES)]

    def task() -> None:
        parsed_pieces(chunks, KEEP_ALL)

    task()
    return min(_timed(task) for _ in range(repeat))


def per_body(context, sizes: list[int], repeat: int, workdir: Path,
             recorded: bool = False) -> None:
    print("\n### One broker body" + (", Apache Pulsar 4.0.8's families" if recorded else "")
          + "\n")
    print("| topics | samples | MB | promtool s | regex loop s | parse, 1 core s "
          "| first cycle s | warm cycle s (job + merge) | samples/s (cycle) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for topics in sizes:
        text = (recorded_family_body(topics) if recorded
                else body_text(BodySpec(topics=topics, concatenated=False)))
        data = text.encode()
        path = workdir / f"body-{topics}{'-recorded' if recorded else ''}.prom"
        path.write_bytes(data)
        samples = sum(1 for line in text.split("\n") if line and line[0] != "#")
        promtool = _timed(lambda p=path: subprocess.run(
            ["promtool", "check", "metrics"], stdin=p.open("rb"), capture_output=True))
        regex = _timed(lambda t=text: _regex_loop(t))
        own = _task_parse(data, repeat)
        server, url = _serve(workdir)
        try:
            first, job, merge_s, _ = _cycle(context, [f"{url}/{path.name}"], repeat)
        finally:
            server.terminate()
        cycle = job + merge_s
        print(f"| {topics:,} | {samples:,} | {len(data) / 1e6:.1f} | {promtool:.2f} "
              f"| {regex:.2f} | {own:.2f} | {first:.2f} | {cycle:.2f} ({job:.2f} + {merge_s:.3f}) "
              f"| {samples / cycle:,.0f} |", flush=True)


def fleet(context, totals: list[int], brokers: int, repeat: int, workdir: Path) -> None:
    print(f"\n### A fleet of {brokers} brokers\n")
    print("| topics | samples | GB | job s | the stand-in brokers' CPU s a cycle | merge s "
          "| samples/s | driver MB | JVM MB | Python workers MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for total in totals:
        per = max(1, total // brokers)
        template = body_text(BodySpec(topics=per, concatenated=False))
        samples = sum(1 for line in template.split("\n") if line and line[0] != "#")
        folder = workdir / f"fleet-{total}"
        folder.mkdir(exist_ok=True)
        for b in range(brokers):  # each broker its own topic names
            (folder / f"b{b}.prom").write_text(template.replace("/b0-topic-", f"/b{b}-topic-"))
        _reset_hwm()  # the driver's peak from here on: the cycles', not the bodies' making
        server, url = _serve(folder)
        cycles = max(1, repeat - 2)
        try:
            served = _cpu_seconds(server.pid)
            _, job, merge_s, topics = _cycle(context, [f"{url}/b{b}.prom" for b in range(brokers)],
                                          cycles)
            served = (_cpu_seconds(server.pid) - served) / (cycles + 1)  # the warm-up too
        finally:
            server.terminate()
            for f in folder.iterdir():
                f.unlink()
        jvm, workers = _spark_processes()
        size = len(template) * brokers / 1e9
        print(f"| {topics:,} | {samples * brokers:,} | {size:.2f} | {job:.1f} | {served:.1f} "
              f"| {merge_s:.2f} | {samples * brokers / (job + merge_s):,.0f} | {_hwm_mb():,.0f} "
              f"| {jvm:,.0f} | {workers:,.0f} |", flush=True)


def _cpu_seconds(pid: int) -> float:
    """The CPU seconds a process has used (user and system, /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# As operators run it: every topic under a default quota whose policy evicts, so that each
# has its limits, their status and its eviction counters published (12 series a topic, not
# the 4 of a fleet without quotas, which this bench measured until 2026-11-29).
_QUOTAS = {"default": {"limit_size": "10MiB", "limit_time": "1h",
                       "policy": "consumer_backlog_eviction"}}


def engine(totals: list[int], brokers: int, cycles: int = 3) -> None:
    """What the driver does after the merge, per cycle: the engine's decisions (backlog
    checks, resource groups, load), in this process on tables parsed here (no Spark), and
    the /metrics body of them; under CPython's own garbage collections, then with the full
    ones between cycles (runtime/garbage.py), the collection's own seconds counted."""
    print(f"\n### The engine after the merge ({brokers} brokers, warm: median of cycles 2 to "
          f"{cycles})\n")
    print("| topics | merge s | decide s | µs a topic | publish s | GC inside them s "
          "| driver growth MB | body MB | publish peak MB "
          "| full GC between cycles: decide s | publish s | its collection s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    levers: list[tuple[int, list[tuple[float, float]]]] = []
    for total in totals:
        tables, config = parsed_fleet(total, brokers)
        before = _status_mb("VmRSS")
        theirs, decisions, topics = _engine_cycles(config, tables, cycles, between=False)
        grown = _status_mb("VmRSS") - before
        body_mb, peak = _publish(decisions)
        decisions = None
        ours, decisions, _ = _engine_cycles(config, tables, cycles, between=True)
        merge_s, decide_s, publish_s, gc_s, _ = theirs
        print(f"| {topics:,} | {merge_s:.2f} | {decide_s:.1f} | {decide_s / topics * 1e6:.0f} "
              f"| {publish_s:.1f} | {gc_s:.2f} | {grown:,.0f} | {body_mb:,.0f} | {peak:,.0f} "
              f"| {ours[1]:.1f} | {ours[2]:.1f} | {ours[4]:.2f} |", flush=True)
        levers.append((topics, [_timed_body(decisions, **lever) for lever in _LEVERS]))
        decisions = None
    print("\n| topics | publication s (body MB): every topic "
          + "".join(f"| {', '.join(f'{k}: {v}' for k, v in lever.items())} "
                    for lever in _LEVERS[1:]) + "|")
    print("|---:|---:" + "|---:" * (len(_LEVERS) - 1) + "|")
    for topics, timed in levers:
        print(f"| {topics:,} " + "".join(f"| {s:.2f} ({mb:,.1f}) " for s, mb in timed) + "|",
              flush=True)


def parsed_fleet(total: int, brokers: int) -> tuple[list, object]:
    """`total` topics over `brokers` bodies, each with its own topic names, parsed in this
    process into what the job hands the merge; and a configuration of them under `_QUOTAS`."""
    from exporter.config.load import parse
    from exporter.config.settings import KEEP_ALL
    from exporter.pipeline.scrape import parsed_pieces, tables_of

    template = body_text(BodySpec(topics=max(1, total // brokers), concatenated=False))
    tables = []
    for b in range(brokers):
        parts, facts = parsed_pieces(
            [template.replace("/b0-topic-", f"/b{b}-topic-").encode()], KEEP_ALL)
        tables.append((f"http://broker-{b}:8080/metrics", tables_of(dict(parts), facts)))
    config = parse({"cluster": "bench", "backlog_quotas": _QUOTAS, "sources": {"brokers": [
        {"url": u} for u, _ in tables]}}, "bench.yaml")
    return tables, config


# What design.md tells operators of a large fleet to set (filters.max_topics,
# exposition.topic_level), beside publishing every topic: each publication's seconds.
_LEVERS: tuple[dict, ...] = ({}, {"max_topics": 10_000}, {"topic_level": False})


def _timed_body(decisions, **lever) -> tuple[float, float]:
    """The publication's seconds (its best of three) and the body's MB under `lever`."""
    best, size = math.inf, 0
    for _ in range(3):
        t0 = time.perf_counter()
        size = len(_body(decisions, **lever))
        best = min(best, time.perf_counter() - t0)
    return best, size / 1e6


def _engine_cycles(config, tables, cycles: int, between: bool):
    """`cycles` cycles of merge, decide and publication on a new Decider: the medians of
    the warm ones (merge, decide, publish, GC inside them, the collection after them), the
    last decisions and the topics. `between`: runtime/garbage.py's collections."""
    import gc

    from exporter.engine.decide import Decider
    from exporter.pipeline.merge import merge
    from exporter.runtime.garbage import FullCollections

    inside, started = [0.0], [0.0]

    def clocked(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            inside[0] += time.perf_counter() - started[0]

    decider, rows = Decider(config), []
    collections = FullCollections()
    if between:
        collections.start()
    try:
        for cycle in range(cycles):
            gc.callbacks.append(clocked)
            inside[0] = 0.0
            t0 = time.perf_counter()
            agg = merge(tables, {})
            t1 = time.perf_counter()
            decisions = decider.decide(agg, None, time.time() + 60 * cycle)
            t2 = time.perf_counter()
            _body(decisions)
            t3 = time.perf_counter()
            gc.callbacks.remove(clocked)
            topics = agg.topics.num_rows
            agg = None
            collected = _timed(collections.after_cycle) if between else 0.0
            rows.append((t1 - t0, t2 - t1, t3 - t2, inside[0], collected))
    finally:
        collections.stop()
    warm = rows[1:]
    return tuple(statistics.median(r[i] for r in warm) for i in range(5)), decisions, topics


def _body(decisions, **lever) -> bytes:
    """The /metrics body of the decisions, as the cycle makes it (build, render); `lever`:
    `CycleFacts`' max_topics or topic_level, as the configuration sets them."""
    from exporter.exposition.build import CycleFacts, Tallies, build
    from exporter.exposition.render import process_body, render

    facts = CycleFacts("bench", decisions.checked_at, {}, decisions.checked_at, 60.0, 10.0,
                       60.0, **lever)
    return render(build(facts, decisions, (), Tallies(), "bench"),
                  topic_level=facts.topic_level, trailer=process_body())


def _publish(decisions) -> tuple[float, float]:
    """The /metrics body of the decisions: its MB, and the traced peak of making it over
    what was held before (MB; under tracemalloc, which slows it: its seconds are
    `_engine_cycles`')."""
    import tracemalloc

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    size = len(_body(decisions))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return size / 1e6, peak / 1e6


def _resident_per_topic(fill, points: int, topics: int) -> float:
    """Bytes a topic the process's resident set grew by while `fill(points)` was made:
    resident, not allocated, because the age store's arrays are mapped as they fill."""
    import gc

    gc.collect()
    before = _status_mb("VmRSS")
    held = fill(points)
    grown = _status_mb("VmRSS") - before
    del held
    gc.collect()
    return grown * 2**20 / topics


def ages(topics: int) -> None:
    """What the backlog-age tables hold between cycles, the names aside."""
    import numpy as np

    from exporter.engine.backlog.agetable import DEFAULT_MAX_POINTS, AgeTables

    names = [f"persistent://t/ns/topic-{i}" for i in range(topics)]
    seen, counts = np.ones(topics, bool), np.arange(topics)

    def ours(points: int) -> AgeTables:
        tables = AgeTables()
        for k in range(points):
            tables.observe_all(names, counts + 10 * k, seen, 1000.0 + 60 * k)
        return tables

    def lists(points: int) -> dict:
        tables: dict[str, tuple[list[float], list[int]]] = {}
        for k in range(points):
            for i, name in enumerate(names):
                times, counted = tables.setdefault(name, ([], []))
                times.append(1000.0 + 60 * k)
                counted.append(10 * k + i)
        return tables

    print(f"\n### The backlog-age tables, {topics:,} topics publishing every cycle\n")
    print("| points a topic | ours: resident B a topic | as Python lists |")
    print("|---:|---:|---:|")
    for points in (2, DEFAULT_MAX_POINTS):
        print(f"| {points} | {_resident_per_topic(ours, points, topics):,.0f} "
              f"| {_resident_per_topic(lists, points, topics):,.0f} |", flush=True)

    # Tables begun together fill together: every busy one thins in the same cycle.
    tables = ours(DEFAULT_MAX_POINTS)
    rows = np.arange(topics)

    def cycle(k: int) -> tuple[float, float]:  # as the check does: all topics in one call
        t0 = time.perf_counter()
        tables.observe_all(names, counts + 10 * k, seen, 1000.0 + 60 * k)
        t1 = time.perf_counter()
        tables.ages(rows, np.full(topics, 5), counts + 10 * k, 1000.0 + 60 * k)
        return (t1 - t0) / topics * 1e6, (time.perf_counter() - t1) / topics * 1e6

    thinning = cycle(DEFAULT_MAX_POINTS)[0]
    plain, estimates = cycle(DEFAULT_MAX_POINTS + 1)
    print("\n| µs a topic | observe, no table thins | observe, every table thins "
          "| estimate a backlog |")
    print("|---|---:|---:|---:|")
    print(f"| {topics:,} topics | {plain:.1f} | {thinning:.1f} | {estimates:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--recorded", default="10000")
    parser.add_argument("--fleet", default="1000,10000,100000")
    parser.add_argument("--engine", default="10000,100000")
    parser.add_argument("--ages", type=int, default=100000)
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from exporter.config.settings import Spark
    from exporter.pipeline.spark.session import get_context

    t0 = time.perf_counter()
    context = get_context(Spark(master=args.master))
    print(f"Spark context start: {time.perf_counter() - t0:.1f} s ({args.master}, "
          f"{os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="pqe-bench-") as tmp:
        per_body(context, [int(s) for s in args.sizes.split(",") if s], args.repeat, Path(tmp))
        if args.recorded:
            per_body(context, [int(s) for s in args.recorded.split(",")], args.repeat,
                     Path(tmp), recorded=True)
        if args.fleet:
            fleet(context, [int(s) for s in args.fleet.split(",")], args.brokers, args.repeat,
                  Path(tmp))
    if args.engine:
        engine([int(s) for s in args.engine.split(",")], args.brokers)
    if args.ages:
        ages(args.ages)


if __name__ == "__main__":
    main()
