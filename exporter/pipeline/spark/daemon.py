"""PySpark's worker daemon for local masters, importing PySpark from its installed package.

Spark starts the daemon (`python -m pyspark.daemon`) with its own `pyspark.zip` and py4j's
zip first on PYTHONPATH (`PythonWorkerFactory`, `PythonUtils.sparkPythonPath`). A zip
holds no compiled bytecode, so the daemon and every worker it forks compiled PySpark's
modules from source, seconds of CPU a first job, where the installed package's cached
bytecode imports at a third of that (docs/design.md, "What makes the start"). The installed
`pyspark` is
the one the driver runs and the one whose jars the local JVM runs, so it is the same code.

The daemon also imports `pyspark.worker` before it forks, once for all its workers. It
imports nothing that starts a thread, as PySpark's own daemon requires of the code before
its fork. (Importing pyarrow, numpy and pandas there too was tried and dropped: with
Arrow's jemalloc and numpy's OpenBLAS told to start no thread, it is safe, but the daemon
holds a copy of its own, more memory for little time; docs/design.md, "What makes the
start".) Its workers refuse pandas and pyarrow.dataset (exporter/importblocker.py).

Its workers hand the heap's free pages, and Arrow's pool's, back to the OS after each task
(`trimmed`).

Set by pipeline/spark/session.py as `spark.python.daemon.module` for local masters only: a
cluster's executors run their own Python and PySpark.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import BinaryIO

from exporter import importblocker


def _installed_first() -> None:
    """PySpark's and py4j's zips off `sys.path` when both are installed packages."""
    zips = [p for p in sys.path if p.endswith(".zip")
            and os.path.basename(p).startswith(("pyspark", "py4j"))]
    rest = [p for p in sys.path if p not in zips]
    sys.path[:] = rest
    if not all(importlib.util.find_spec(m) for m in ("pyspark", "py4j")):
        sys.path[:] = zips + rest  # not installed here: the zips it is


def trimmed(main: Callable[[BinaryIO, BinaryIO], None]) -> Callable[[BinaryIO, BinaryIO], None]:
    """`main` (one task), then the heap's free pages handed back to the OS (`malloc_trim`).

    glibc raises its mmap threshold to the size of the first large chunk it frees (a task's
    body: megabytes), and its trim threshold to twice that, so those buffers then come from
    the heap and stay there: one long-lived allocation landing above the freed buffers
    then keeps the heap's free pages from the OS for good. Trimmed after each task, a
    worker stays flat, for a trim of about a millisecond. A fixed threshold instead
    (`mallopt`) kept the heap small too, but mmapped every numpy temporary of a large body
    afresh, slowing a large cycle (docs/design.md, "Memory over an hour", has the figures).

    Arrow's pool is released too (with Arrow's default pool, mimalloc, that made the
    workers smaller: `tests.bench.footprint`, docs/design.md, "Start-up and memory"). The
    exporter's processes use the system pool now (exporter/__init__.py), whose release is a
    trim again: it matters for an operator who chooses another."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)

    def task(infile: BinaryIO, outfile: BinaryIO) -> None:
        try:
            main(infile, outfile)
        finally:
            if trim is not None:  # glibc's; another C library keeps its own ways
                trim(0)
            arrow = sys.modules.get("pyarrow")  # Arrow's pool, if not the system one
            if arrow is not None:
                arrow.default_memory_pool().release_unused()

    return task


if __name__ == "__main__":
    _installed_first()
    importblocker.refuse()
    import pyspark.worker  # (imported once, before the fork)
    from pyspark.daemon import manager

    # The daemon's forked workers call `pyspark.worker.main`, looked up at each fork.
    pyspark.worker.main = trimmed(pyspark.worker.main)
    manager()
