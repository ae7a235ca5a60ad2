"""Recording and replay at fleet size: N recorded snapshots of one broker with `--topics`
topics, replayed as one Spark batch job on `--master`. Prints Markdown; not a test.

    .venv/bin/python -m tests.bench.replay [--topics 10000] [--snapshots 2,4,8,16]
        [--master local[2]]

- recording: what `run --record.dir` adds to a cycle, per snapshot: zstd of the body in
  the task (beside the parse it already does) and the driver's write of the cycle
  directory; side by side with gzip -6 of the same body, what a user would reach for to
  keep bodies themselves (e.g. a cron job saving curl output).
- replay: seconds for N snapshots (parse job + engine), snapshots per second, and the
  parse and engine shares; linear in N means snapshots/s stays flat.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from exporter.config.load import parse
from exporter.pipeline.spark.session import get_context
from exporter.record.replay import parse_all, replay_cycles
from exporter.record.store import Recorder, read_cycles
from exporter.sources.results import Snapshot, SourceHealth, SourceKind
from tests.harness.synthetic import BodySpec, body_text

URL = "http://broker-0:8080/metrics"


def _zstd(body: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(body)
    return sink.getvalue().to_pybytes()


def _best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _record(directory: Path, body: bytes, count: int, start: float = 1_800_000_000.0) -> None:
    recorder = Recorder(directory, max_age=1e12, max_bytes=1 << 40, clock=lambda: start)
    health = (SourceHealth(URL, SourceKind.BROKER, True, start, None, "", ()),)
    compressed = _zstd(body)
    for i in range(count):
        now = start + 60 * i
        recorder.write(now, "cluster: bench\n", Snapshot(now, None, ()), health,
                       {URL: compressed}, ())


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--topics", type=int, default=10_000)
    args.add_argument("--snapshots", default="2,4,8,16")
    args.add_argument("--master", default="local[2]")
    opts = args.parse_args()
    body = body_text(BodySpec(topics=opts.topics)).encode()
    compressed = _zstd(body)
    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(Path(tmp) / "r", max_age=1e12, max_bytes=1 << 40)
        health = (SourceHealth(URL, SourceKind.BROKER, True, 0.0, None, "", ()),)
        write = _best(lambda: rec.write(time.time(), "cluster: bench\n",
                                        Snapshot(0.0, None, ()), health, {URL: compressed}, ()))
    zstd_s, gzip_s = _best(lambda: _zstd(body)), _best(lambda: gzip.compress(body, 6))
    print(f"\n### Recording one {opts.topics}-topic body ({len(body) / 1e6:.1f} MB)\n")
    print("| | seconds | bytes kept |")
    print("|---|---:|---:|")
    print(f"| zstd in the task (record) | {zstd_s:.3f} | {len(compressed):,} |")
    print(f"| driver's cycle write (record) | {write:.4f} | |")
    print(f"| gzip -6 (a user's own copy) | {gzip_s:.3f} | {len(gzip.compress(body, 6)):,} |")

    config = parse({"cluster": "bench", "sources": {"brokers": [{"url": URL}]},
                    "backlog_quotas": {"default": {"limit_time": "1h", "limit_size": "1GiB"}},
                    "spark": {"master": opts.master}}, "bench.yaml")
    context = get_context(config.spark)
    print(f"\n### Replay on {opts.master}, {opts.topics} topics per snapshot\n")
    print("| snapshots | seconds | snapshots/s | parse job s | engine s |")
    print("|---:|---:|---:|---:|---:|")
    warm = True
    for count in [int(n) for n in opts.snapshots.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            _record(Path(tmp), body, count)
            cycles = list(read_cycles(tmp))
            if warm:  # the first job pays for the Python workers' start
                parse_all(cycles[:1], config.filters.topics, context)
                warm = False
            t0 = time.perf_counter()
            tables = parse_all(cycles, config.filters.topics, context)
            t1 = time.perf_counter()
            docs = list(replay_cycles(config, cycles, tables))
            t2 = time.perf_counter()
        assert len(docs) == count and all(len(d.status["topics"]) == opts.topics for d in docs)
        total = t2 - t0
        print(f"| {count} | {total:.2f} | {count / total:.2f} | {t1 - t0:.2f} | {t2 - t1:.2f} |")


if __name__ == "__main__":
    main()
