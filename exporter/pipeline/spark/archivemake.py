"""Making the class-data archive (pipeline/spark/jvmarchive.py says what it is and where it
lives): after the exporter's first cycle, a child process (`python -m
exporter.pipeline.spark.archivemake PATH`, at the lowest CPU priority; an image build runs
it without PATH) starts a context of
its own with `-XX:ArchiveClassesAtExit`, runs the kind of job a cycle runs and stops; a
second child starts a JVM from the result (`--verify`) before it is adopted. Apart from
jvmarchive.py because it starts Spark (session.py), which itself reads the archive."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from exporter.config.settings import Spark
from exporter.pipeline.spark import jvmarchive, session
from exporter.pipeline.spark.session import local_cores

log = logging.getLogger(__name__)
T = TypeVar("T")


def make_in_background() -> subprocess.Popen[bytes] | None:
    """Start making the archive, unless it exists or is being made; the child, or None."""
    path = jvmarchive.archive_path()
    making = [p for p in path.parent.glob(path.name + ".*.tmp")
              if time.time() - p.stat().st_mtime < jvmarchive.MAKING_SECONDS]
    if jvmarchive.usable(path) or making:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            [sys.executable, "-m", "exporter.pipeline.spark.archivemake", str(path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=lambda: os.nice(19))
    except OSError as exc:  # a read-only cache: start without an archive, as before
        log.info("no class-data archive for Spark (%s): starts stay slower", exc)
        return None


def after_first(cycle: Callable[[], T], master: str) -> Callable[[], T]:
    """`cycle`, which once it has run the first time starts making the archive (for a
    local master: a cluster's JVMs are not ours)."""
    pending = [local_cores(master) is not None]

    def run() -> T:
        result = cycle()
        if pending[0]:
            pending[0] = False
            make_in_background()
        return result

    return run


def make(path: Path) -> None:
    """A context with `-XX:ArchiveClassesAtExit`, one job like a cycle's, and a clean exit
    (the JVM writes the archive as it exits); then the file takes its final name, so no
    start ever maps a half-written archive."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    options = f"{session.JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}"
    context = session.get_context(Spark(master="local[2]", conf={
        "spark.driver.extraJavaOptions": options}))

    def echo(ids):  # the path of a cycle's job (pipeline/scrape.py): bytes from Python tasks
        for i in ids:
            yield str(i), ((str(i), bytes(4096)),)

    context.parallelize(range(4), 2).mapPartitions(echo).collect()
    gateway = context._gateway  # set by the context's start
    assert gateway is not None
    process = gateway.proc  # pyspark's launch_gateway keeps it
    session.stop()
    process.stdin.close()  # the gateway JVM exits when its stdin closes, writing the archive
    process.wait(jvmarchive.MAKING_SECONDS)
    if process.returncode != 0 or not partial.exists():
        return
    size = partial.stat().st_size
    check = subprocess.run([sys.executable, "-m", "exporter.pipeline.spark.archivemake", "--verify",
                            str(partial)], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=jvmarchive.MAKING_SECONDS)
    if check.returncode == 0 and partial.stat().st_size == size:
        jvmarchive.adopt(partial, path, size)


def verify(path: Path) -> None:
    """Start a JVM from `path` with `-Xshare:on` (it refuses, or dies, on an archive it
    cannot use) and run a job; raises if it does not."""
    options = f"{session.JVM_OPTIONS} {jvmarchive.use_flags(path)} -Xshare:on"
    context = session.get_context(Spark(master="local[1]", conf={
        "spark.driver.extraJavaOptions": options}))
    if context.parallelize(range(3), 1).count() != 3:
        raise RuntimeError("a context from the archive ran a job wrong")
    session.stop()


if __name__ == "__main__":
    # `archivemake [PATH]` (PATH: this install's `archive_path()`, as an image build makes
    # it) exits 1 when no usable archive resulted; `archivemake --verify PATH`.
    if sys.argv[1:2] == ["--verify"]:
        verify(Path(sys.argv[2]))
        sys.exit(0)
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else jvmarchive.archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        make(target)
    finally:
        for leftover in target.parent.glob(target.name + ".*.tmp"):
            leftover.unlink(missing_ok=True)
    sys.exit(0 if jvmarchive.usable(target) else 1)
