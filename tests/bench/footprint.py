"""The exporter's footprint as an operator meets it: how long from the process start to the
first published cycle, and how much memory the whole exporter holds (its Python process,
the Spark JVM and Spark's Python workers; not the broker), on the demo and on `run`.
Prints Markdown tables; not a test.

    .venv/bin/python -m tests.bench.footprint [--topics 1000] [--seconds 60] [--runs 3]
        [--hour]   (`--runs 0 --hour`: the hour alone)

- `demo`: `pulsar-quota-exporter demo` (its embedded pulsar-lite broker, 3 topics).
- `run`: `pulsar-quota-exporter run` against a synthetic Apache Pulsar body of `--topics`
  topics (tests/harness/synthetic.py) served by a separate process, check_interval 5 s.
First cycle: seconds from spawning the command to `/readyz` answering 200 (the first cycle
published). Resident: the sum of PSS over the exporter's process tree (RSS beside it, which
counts pages the forked Python workers share once per worker), the broker left out,
sampled every second; the median of the last half of the run, and the peak.
`--hour`: one `run` for an hour, resident every 5 s; five-minute medians, the growth from
minutes 5-10 to 55-60.
Beside it, for scale: `promtool check metrics` on the same body (its own VmHWM), what a
Go exporter of this kind holds per body it reads.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.bench.pipeline import _serve
from tests.harness.synthetic import BodySpec, body_text

EXE = Path(sys.executable).with_name("pulsar-quota-exporter")


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _tree(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        try:
            todo += _children(p)
        except OSError:
            continue
    return seen


def _kind(pid: int) -> str | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"pulsar-lite" in cmd or b"pulsar_lite" in cmd:
        return None  # the demo's broker: not the exporter
    if b"org.apache.spark" in cmd or cmd.startswith(b"/usr/lib/jvm") or b"java\0" in cmd:
        return "jvm"
    if b"pyspark" in cmd:
        return "workers"
    return "python"


def _memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of one process: PSS shares a page among the processes mapping it (the
    Python workers forked from one daemon share much of theirs), so PSS sums to what the
    tree holds, RSS over-counts it."""
    rss = pss = 0.0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, pss


def resident(pid: int) -> dict[str, float]:
    """MB by kind (PSS) over the process tree of `pid`, the broker left out; `rss` the
    tree's RSS summed."""
    out = {"python": 0.0, "jvm": 0.0, "workers": 0.0}
    rss, workers = 0.0, 0
    for p in _tree(pid):
        kind = _kind(p)
        if kind is not None:
            r, pss = _memory_mb(p)
            out[kind] += pss
            rss += r
            workers += kind == "workers"
    out["total"] = sum(out.values())
    out["rss"] = rss
    out["worker_processes"] = workers  # the daemon and the workers it forked
    return out


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def measure(argv: list[str], readyz: str, seconds: float, every: float = 1.0,
            ) -> tuple[float | None, list[dict[str, float]]]:
    """(seconds to the first cycle, resident samples) of one run of `argv`."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    first, samples = None, []
    try:
        next_sample = began
        while time.monotonic() - began < seconds and proc.poll() is None:
            if first is None and _ready(readyz):
                first = time.monotonic() - began
            if time.monotonic() >= next_sample:
                samples.append(resident(proc.pid))
                next_sample += every
            time.sleep(0.05 if first is None else 0.2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return first, samples


def _config(path: Path, body_url: str, listen: str) -> None:
    path.write_text(f"""cluster: bench
check_interval: 5s
sources:
  brokers:
    - url: {body_url}
exposition:
  listen: {listen}
spark:
  master: local[2]
""" + os.environ.get("PQE_BENCH_SPARK_CONF", ""))


def _summary(name: str, runs: list[tuple[float | None, list[dict[str, float]]]]) -> str:
    firsts = [f for f, _ in runs if f is not None]
    steady = [statistics.median(s["total"] for s in samples[len(samples) // 2:])
              for _, samples in runs if samples]
    parts = {k: statistics.median(statistics.median(s[k] for s in samples[len(samples) // 2:])
                                  for _, samples in runs if samples)
             for k in ("python", "jvm", "workers")}
    peak = max(s["total"] for _, samples in runs for s in samples)
    first = (f"{min(firsts):.1f} / {statistics.median(firsts):.1f} / {max(firsts):.1f}"
             if firsts else "never")
    rss = statistics.median(statistics.median(s["rss"] for s in samples[len(samples) // 2:])
                            for _, samples in runs if samples)
    return (f"| {name} | {first} | {statistics.median(steady):.0f} ({rss:.0f}) "
            f"| {parts['python']:.0f} | {parts['jvm']:.0f} | {parts['workers']:.0f} "
            f"| {peak:.0f} |")


def _hour(samples: list[dict[str, float]], every: float) -> str:
    """Samples every `every` s → each part's median resident MB over five-minute windows,
    and the growth from the window after warm-up (minutes 5-10) to the last: a single
    instant swings by tens of MB with where the cycle is, a window's median does not."""
    kinds = ("python", "jvm", "workers", "total")
    per = round(300 / every)
    windows = [(m, samples[m * per // 5:(m + 5) * per // 5]) for m in range(0, 60, 5)]
    windows = [(m, w) for m, w in windows if len(w) == per]
    rows = ["\nOne hour of `run`, median resident MB (PSS) over five minutes:\n",
            "| minutes | " + " | ".join(kinds) + " | worker processes (fewest-most) |",
            "|---|" + "---:|" * (len(kinds) + 1)]
    medians = [(m, {k: statistics.median(s[k] for s in w) for k in kinds}) for m, w in windows]
    counts = [(min(s["worker_processes"] for s in w), max(s["worker_processes"] for s in w))
              for _, w in windows]
    rows += [f"| {m}-{m + 5} | " + " | ".join(f"{v[k]:.0f}" for k in kinds)
             + f" | {low:.0f}-{high:.0f} |"
             for (m, v), (low, high) in zip(medians, counts, strict=True)]
    if len(medians) > 2:
        first, last = medians[1][1], medians[-1][1]
        rows.append(f"| growth {medians[1][0]}-{medians[1][0] + 5} → {medians[-1][0]}-"
                    f"{medians[-1][0] + 5} | " + " | ".join(
                        f"{(last[k] - first[k]) / first[k] * 100:+.1f} %" for k in kinds) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hour", action="store_true")
    args = parser.parse_args()
    from exporter.demo.embedded import free_port

    print(f"{os.cpu_count()} cores; each run {args.seconds:.0f} s\n")
    print("| command | first cycle s (min / median / max) | resident MB, PSS (RSS) "
          "| Python | Spark JVM | Spark workers | peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    runs = [measure([str(EXE), "demo", "--duration", str(int(args.seconds) + 30)],
                    "http://127.0.0.1:10049/readyz", args.seconds) for _ in range(args.runs)]
    if runs:  # `--runs 0 --hour`: the hour alone
        print(_summary("demo (3 topics)", runs), flush=True)
    with tempfile.TemporaryDirectory(prefix="pqe-footprint-") as tmp:
        folder = Path(tmp)
        body = folder / "metrics"
        body.write_text(body_text(BodySpec(topics=args.topics, concatenated=False)))
        server, url = _serve(folder)
        try:
            port = free_port()
            config = folder / "config.yaml"
            _config(config, f"{url}/metrics", f"127.0.0.1:{port}")
            argv = [str(EXE), "run", "--config.file", str(config)]
            readyz = f"http://127.0.0.1:{port}/readyz"
            runs = [measure(argv, readyz, args.seconds) for _ in range(args.runs)]
            if runs:
                print(_summary(f"run ({args.topics:,} topics)", runs), flush=True)
            promtool = subprocess.run(
                ["/usr/bin/time", "-f", "%M", "promtool", "check", "metrics"],
                stdin=body.open("rb"), capture_output=True, text=True)
            print(f"\nBeside it: `promtool check metrics` on the same body holds "
                  f"{int(promtool.stderr.strip().splitlines()[-1]) / 1024:.0f} MB at its peak.")
            if args.hour:
                _, samples = measure(argv, readyz, 3600, every=5)
                print(_hour(samples, 5))
        finally:
            server.terminate()


if __name__ == "__main__":
    main()
