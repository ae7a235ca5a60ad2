"""Parse throughput: the in-plan Spark parse against prometheus-client, a plain Python regex
loop and `promtool check metrics` (Prometheus' Go parser), on the same synthetic Apache
Pulsar bodies. Prints a Markdown table; not a test.

    .venv/bin/python tests/bench/parse_throughput.py [--sizes 1000,10000,100000]
        [--fleet-brokers 100] [--fleet-topics 10000] [--budget 240] [--dir DIR]

- Spark: a warm session (its start and its first, cold job are reported separately), the
  whole parse materialised (`write.format("noop")`), best of `--repeat`; then the whole
  cycle (`aggregate`: parse + every table, as the exporter runs it), the first apart (it
  plans and compiles the tables' code) and the best of the next `--repeat`.
- The Python parsers run in a child process each, so their peak RSS is their own; they
  are skipped above `--client-max-samples` / `--regex-max-samples` (at ~20k samples/s
  prometheus-client would take minutes) and say so.
- The fleet (`--fleet-brokers` bodies of `--fleet-topics` topics, one plan) is cut down to
  what the measured warm rate parses in `--budget` seconds, and the table says so.
- Peak RSS: VmHWM, a process's own peak (ru_maxrss would include what a child inherits
  from this process at fork): the Python parsers report theirs, promtool's is polled while
  it runs, the JVM's is reset before each Spark row where the kernel allows it
  (/proc/PID/clear_refs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.harness.synthetic import BodySpec, BodyStats, write_body


@dataclass
class Row:
    body: str
    topics: int
    samples: int
    megabytes: float
    method: str
    seconds: float | None
    rss_mb: float | None
    note: str = ""

    @property
    def rate(self) -> str:
        if not self.seconds:
            return "—"
        return f"{self.samples / self.seconds:,.0f}"


# --- the Python parsers, each run in a child process (`--worker NAME PATH`) ----------------

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _regex_loop(path: str) -> int:
    samples = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            m = _LINE.match(line)
            if m is None:
                continue
            _labels = dict(_LABEL.findall(m.group(2))) if m.group(2) else {}
            float(m.group(3))
            samples += 1
    return samples


def _prometheus_client(path: str) -> int:
    from prometheus_client.parser import text_string_to_metric_families

    text = Path(path).read_text(encoding="utf-8")
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def _peak_rss_mb(pid: int | str = "self") -> float | None:
    """VmHWM of a process: its own peak, unlike ru_maxrss, which a child inherits from
    the (large) parent it was forked from."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _worker(name: str, path: str) -> None:
    started = time.perf_counter()
    samples = {"regex": _regex_loop, "prometheus_client": _prometheus_client}[name](path)
    seconds = time.perf_counter() - started
    print(json.dumps({"samples": samples, "seconds": seconds, "rss_mb": _peak_rss_mb()}))


def _child(argv: list[str], stdin_path: str | None = None) -> tuple[float, float | None, int,
                                                                     str]:
    """(seconds, peak RSS MB, exit code, output) of a child process; its peak RSS is
    polled from /proc while it runs (the last reading before it exits)."""
    with tempfile.TemporaryFile() as out, \
            open(stdin_path or os.devnull, "rb") as stdin:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=subprocess.STDOUT)
        peak = None
        while proc.poll() is None:
            peak = _peak_rss_mb(proc.pid) or peak
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        out.seek(0)
        return seconds, peak, proc.returncode, out.read().decode(errors="replace")


def _python_row(label: str, spec: BodySpec, stats: BodyStats, path: str, method: str,
                limit: int) -> Row:
    mb = stats.bytes / 1e6
    if stats.samples > limit:
        return Row(label, spec.topics, stats.samples, mb, method, None, None,
                   f"skipped: over {limit:,} samples")
    _, _, code, out = _child([sys.executable, __file__, "--worker", method, path])
    if code != 0:
        return Row(label, spec.topics, stats.samples, mb, method, None, None,
                   f"failed: {out.strip().splitlines()[-1][:60]}")
    result = json.loads(out.strip().splitlines()[-1])
    note = "" if result["samples"] == stats.samples else f"{result['samples']:,} samples"
    return Row(label, spec.topics, stats.samples, mb, method, result["seconds"],
               result["rss_mb"], note)


def _promtool_row(label: str, spec: BodySpec, stats: BodyStats, path: str) -> Row:
    mb = stats.bytes / 1e6
    promtool = shutil.which("promtool")
    if promtool is None:
        return Row(label, spec.topics, stats.samples, mb, "promtool check metrics", None, None,
                   "promtool missing: apt-get install prometheus")
    seconds, rss, code, out = _child([promtool, "check", "metrics"], stdin_path=path)
    # Exit 3 is lint findings (Pulsar's names break Prometheus' conventions): parsed fine.
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    note = f"parse error: {errors[0][:60]}" if errors else f"exit {code} (lint findings only)"
    return Row(label, spec.topics, stats.samples, mb, "promtool check metrics", seconds, rss,
               note)


# --- Spark ----------------------------------------------------------------------------------

class Jvm:
    """The session's JVM, for its peak RSS."""

    def __init__(self) -> None:
        self.pid: int | None = None
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes()
            except OSError:
                continue
            if b"java" in text and b"pyspark-shell" in text and self._is_ours(cmdline.parent):
                self.pid = int(cmdline.parent.name)

    @staticmethod
    def _is_ours(proc: Path) -> bool:
        try:
            status = (proc / "status").read_text()
        except OSError:
            return False
        return f"PPid:\t{os.getpid()}" in status

    def reset_peak(self) -> bool:
        if self.pid is None:
            return False
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def peak_mb(self) -> float | None:
        return None if self.pid is None else _peak_rss_mb(self.pid)


def _spark_rows(args: argparse.Namespace, bodies: list[tuple[str, BodySpec, BodyStats, str]],
                rows: list[Row]) -> dict[int, float]:
    """Spark rows for each body; returns the warm rate (samples/s) by topic count."""
    from pyspark.sql import functions as F  # noqa: F401  (imports pyspark before timing)

    from exporter.config import Spark
    from exporter.pipeline.aggregate import aggregate
    from exporter.pipeline.parse import parse
    from exporter.pipeline.session import get_session
    from exporter.sources.model import BrokerBody

    started = time.perf_counter()
    spark = get_session(Spark(master=args.master, conf={"spark.driver.memory": args.memory}))
    start_seconds = time.perf_counter() - started
    jvm = Jvm()

    def run_parse(brokers: list[BrokerBody]) -> float:
        t = time.perf_counter()
        parse(spark, brokers).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t

    rates: dict[int, float] = {}
    for n, (label, spec, stats, path) in enumerate(bodies):
        brokers = [BrokerBody(f"http://broker-0/{label}", path, stats.bytes, 0.0)]
        mb = stats.bytes / 1e6
        if n == 0:
            cold = run_parse(brokers)
            rows.append(Row(label, spec.topics, stats.samples, mb, "Spark session start",
                            start_seconds, None, f"{args.master}, not a parse"))
            rows.append(Row(label, spec.topics, stats.samples, mb, "Spark parse, cold first job",
                            cold, jvm.peak_mb(), "codegen + JIT warm-up"))
        reset = jvm.reset_peak()
        repeat = args.repeat if stats.samples < 2_000_000 else 1
        best = min(run_parse(brokers) for _ in range(repeat))
        note = f"best of {repeat}" + ("" if reset else "; RSS peak since start")
        rows.append(Row(label, spec.topics, stats.samples, mb, "Spark parse (warm)", best,
                        jvm.peak_mb(), note))
        rates[spec.topics] = stats.samples / best
        reset = jvm.reset_peak()
        cycles = []
        for _ in range(repeat + 1):  # the first plans and compiles the tables' code
            t = time.perf_counter()
            agg = aggregate(spark, brokers, {})
            cycles.append(time.perf_counter() - t)
        entities = f"{agg.topics.num_rows:,} topics, {agg.subscriptions.num_rows:,} subs"
        rows.append(Row(label, spec.topics, stats.samples, mb, "Spark cycle, first",
                        cycles[0], jvm.peak_mb(), entities))
        rows.append(Row(label, spec.topics, stats.samples, mb, "Spark cycle: parse + tables",
                        min(cycles[1:]), jvm.peak_mb(),
                        f"best of the next {repeat}, as a running exporter repeats it"))
    return rates


def _fleet(args: argparse.Namespace, tmp: Path, rates: dict[int, float],
           rows: list[Row]) -> None:
    from exporter.config import Spark
    from exporter.pipeline.aggregate import aggregate
    from exporter.pipeline.parse import parse
    from exporter.pipeline.session import get_session
    from exporter.sources.model import BrokerBody

    first = BodySpec(topics=args.fleet_topics, broker=0, concatenated=False)
    path0 = tmp / "fleet-0.txt"
    stats0 = write_body(path0, first)
    # The rate measured on a body of the same size (one task per body), else the lowest.
    rate = rates.get(args.fleet_topics) or min(rates.values(), default=0.0)
    fitting = int(args.budget * rate / stats0.samples) if rate else 1
    brokers_n = max(1, min(args.fleet_brokers, fitting))
    template = path0.read_bytes()
    bodies = [BrokerBody("http://broker-0/metrics", str(path0), stats0.bytes, 0.0)]
    for b in range(1, brokers_n):  # the same body, every topic name made the broker's own
        path = tmp / f"fleet-{b}.txt"
        path.write_bytes(template.replace(b"/b0-topic-", f"/b{b}-topic-".encode()))
        bodies.append(BrokerBody(f"http://broker-{b}/metrics", str(path), path.stat().st_size,
                                 0.0))
    samples = stats0.samples * brokers_n
    topics = args.fleet_topics * brokers_n
    label = f"fleet {brokers_n}×{args.fleet_topics:,}"
    cut = ("" if brokers_n == args.fleet_brokers else
           f"cut from {args.fleet_brokers} brokers to fit {args.budget:.0f} s; ")
    spark = get_session(Spark(master=args.master))
    jvm = Jvm()
    jvm.reset_peak()
    t = time.perf_counter()
    parse(spark, bodies).write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - t
    mb = sum(b.size_bytes for b in bodies) / 1e6
    rows.append(Row(label, topics, samples, mb, "Spark parse (warm)", seconds, jvm.peak_mb(),
                    f"{cut}one plan, {brokers_n} bodies"))
    if args.fleet_cycle:
        jvm.reset_peak()
        t = time.perf_counter()
        agg = aggregate(spark, bodies, {})
        rows.append(Row(label, topics, samples, mb, "Spark cycle: parse + tables",
                        time.perf_counter() - t, jvm.peak_mb(),
                        f"{agg.topics.num_rows:,} topics"))
    for path in tmp.glob("fleet-*.txt"):
        path.unlink()


def _print(rows: list[Row], args: argparse.Namespace) -> None:
    cores = os.cpu_count()
    print(f"\nParse throughput — {cores} cores, Spark master {args.master}, "
          f"driver memory {args.memory}; synthetic Apache Pulsar bodies "
          "(tests/bench/synthetic.py: 2 subscriptions per topic, ~49 samples per topic)\n")
    print("| body | topics | samples | MB | method | seconds | samples/s | peak RSS MB | note |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---|")
    for r in rows:
        seconds = f"{r.seconds:.2f}" if r.seconds is not None else "—"
        rss = f"{r.rss_mb:,.0f}" if r.rss_mb is not None else "—"
        rate = "—" if "session start" in r.method else r.rate
        print(f"| {r.body} | {r.topics:,} | {r.samples:,} | {r.megabytes:,.1f} | {r.method} | "
              f"{seconds} | {rate} | {rss} | {r.note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--fleet-brokers", type=int, default=100)
    parser.add_argument("--fleet-topics", type=int, default=10000)
    parser.add_argument("--fleet-cycle", action="store_true",
                        help="also time the whole cycle on the fleet")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="seconds the fleet parse may take (estimated from the warm rate)")
    parser.add_argument("--client-max-samples", type=int, default=600_000,
                        help="largest body for prometheus-client (~20k samples/s)")
    parser.add_argument("--regex-max-samples", type=int, default=6_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--memory", default="4g", help="spark.driver.memory")
    parser.add_argument("--dir", default=None, help="where bodies are written (default: tmp)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return

    tmp = Path(args.dir or tempfile.mkdtemp(prefix="pqe-parse-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    bodies = []
    for size in (int(s) for s in args.sizes.split(",") if s):
        spec = BodySpec(topics=size, concatenated=False)  # promtool stops at a 2nd TYPE line
        path = tmp / f"body-{size}.txt"
        bodies.append((f"1×{size:,}", spec, write_body(path, spec), str(path)))

    rows: list[Row] = []
    for label, spec, stats, path in bodies:
        for method, limit in (("prometheus_client", args.client_max_samples),
                              ("regex", args.regex_max_samples)):
            rows.append(_python_row(label, spec, stats, path, method, limit))
        rows.append(_promtool_row(label, spec, stats, path))
    for row in rows:
        if row.method == "regex":
            row.method = "Python regex loop"
        elif row.method == "prometheus_client":
            row.method = "prometheus-client text_string_to_metric_families"
    rates = _spark_rows(args, bodies, rows)
    if args.fleet_brokers > 0:
        _fleet(args, tmp, rates, rows)
    rows.sort(key=lambda r: (r.samples, r.body))
    _print(rows, args)
    if args.dir is None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
