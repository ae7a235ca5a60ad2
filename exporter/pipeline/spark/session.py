"""The process's one SparkContext: started once (seconds), reused by every cycle.

A context, not a SparkSession: a cycle's job is Python tasks over an RDD of endpoint
indexes (pipeline/scrape.py), which Spark SQL would only wrap: a context starts its first
job sooner and its JVM is smaller (Catalyst, its code generation and the SQL status store
never load), and the driver needs no pandas, which `mapInArrow` will not plan without
(docs/design.md, "Start-up and memory").

Defaults suit an exporter sidecar: a loopback-bound driver for local masters (without it
the block manager advertises the host's non-loopback address, which sandboxes and laptops
often cannot reach), this process's own Python for local Python workers (a venv's, not
whatever `python3` is first on PATH), Python workers reused between cycles (their imports
stay warm), no UI and little history of finished jobs, quiet logs, and for local masters a
JVM started from Spark Core's jars only (sparkhome.py). `Spark.conf` from the
config is applied after them, so an operator can override any of them (a cluster master,
executor memory, ...).

With a cluster master the executors run the broker fetch and parse (pipeline/scrape.py),
so they need this package: it is shipped to them as a zip (`addPyFile`); their Python must
have its dependencies (pyarrow and numpy: `pip install pulsar-quota-exporter` in the
executor image does all of it) and reach the brokers' /metrics.

Starting the context must not take over the process: PySpark installs its own SIGINT handler
(cancel jobs, raise KeyboardInterrupt) when started on the main thread, which would turn the
exporter's clean Ctrl-C stop into a traceback; `get_context` puts the previous one back.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext

import exporter
from exporter.config.settings import Spark
from exporter.pipeline.spark import jvmarchive, sparkhome
from exporter.pipeline.spark.cores import available_cores

log = logging.getLogger(__name__)

APP_NAME = "pulsar-quota-exporter"

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")

PYTHON_KEY = "spark.pyspark.python"

# The local driver JVM's flags. Its work is small (task scheduling, Arrow payloads of a
# few rows per broker), and its start is most of the first cycle, so: the client compiler
# only (C2's threads compete with the start on 2 cores), one GC thread's collector and a
# small initial heap (the default, 1/64 of the machine's memory, is committed from the
# start), whose young generation is 8 MB (a third of the heap by default): it halves the
# JVM's growth over an hour, its JIT code and heap pages first touched. The client compiler
# compiles a method after ten times its default calls: many run once a cycle, and their code
# was most of that growth; a large job is no slower for it (docs/design.md, "Start-up and
# memory" and "Memory over an hour", has the figures).
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:CompileThresholdScaling=10 -XX:+UseSerialGC "
               "-Xms32m -Xmn8m -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30")

# Finished jobs, stages, tasks a stage and lost executors the driver remembers.
FINISHED_KEPT = 10
_RETAINED = ("spark.ui.retainedJobs", "spark.ui.retainedStages", "spark.ui.retainedTasks",
             "spark.ui.retainedDeadExecutors")


class SparkStartError(Exception):
    """The context did not start: the JVM's own reason is on stderr above (a bad
    `spark.conf` value, a master the launcher refuses, no Java), this says which master."""


_lock = threading.Lock()
_context: SparkContext | None = None
# The background start's failure, raised by the next `get_context` instead of a second
# launch that would print the JVM's same error again.
_failed: SparkStartError | None = None


def local_cores(master: str) -> int | None:
    """Worker threads of a `local` master (`local`, `local[N]`, `local[*]`,
    `local[N,retries]`); None for a cluster master."""
    m = _LOCAL.fullmatch(master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    if m.group(1) == "*":
        return available_cores()
    return int(m.group(1))


def session_conf(cfg: Spark) -> dict[str, str]:
    """Everything `get_context` sets, defaults first, then the config's `conf`."""
    cores = local_cores(cfg.master)
    conf = {
        # local[*]: the container's cores, not the node's (pipeline/spark/cores.py)
        "spark.master": f"local[{cores}]" if cfg.master.strip() == "local[*]" else cfg.master,
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        # The driver's status store records every job, stage and task, UI or no UI
        # (SparkContext's AppStatusListener), and by default keeps 1,000 finished jobs and
        # stages: a cycle runs one of each, so its heap grows for 83 minutes at a 5 s cycle.
        # Nothing here reads them back.
        **{key: str(FINISHED_KEPT) for key in _RETAINED},
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "ERROR",
        "spark.python.worker.reuse": "true",
    }
    if cores is not None:
        # Executors of a cluster master must reach the driver: bind to loopback only
        # when everything runs in this process.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # Python workers are forked on this machine: run them on this interpreter. (A
        # cluster's executors have their own Python; this path means nothing there.)
        conf[PYTHON_KEY] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
        # ... and import PySpark's compiled modules, not its zip's sources (daemon.py).
        conf["spark.python.daemon.module"] = "exporter.pipeline.spark.daemon"
        archive = jvmarchive.archive_path()
        conf["spark.driver.extraJavaOptions"] = JVM_OPTIONS + (
            " " + jvmarchive.use_flags(archive) if jvmarchive.usable(archive) else "")
    conf.update({str(k): str(v) for k, v in sorted(cfg.conf.items())})
    return conf


def get_context(cfg: Spark, *, background: bool = False) -> SparkContext:
    """The process's context, started on first use with `cfg`. Later calls return the
    same context whatever their `cfg`: the first configuration wins until `stop()`.
    Raises SparkStartError when it does not start."""
    global _context, _failed
    with _lock:
        if _failed is not None:
            failed, _failed = _failed, None
            raise failed
        if _context is None:
            conf = session_conf(cfg)
            if PYTHON_KEY in conf:
                # PySpark started from Python takes the workers' Python from this variable
                # only (SparkContext.pythonExec); the conf key alone is not read.
                os.environ["PYSPARK_PYTHON"] = conf[PYTHON_KEY]
            # A local JVM starts from Spark Core's jars only (sparkhome.py); a cluster's
            # driver from PySpark's install, or the operator's.
            home = sparkhome.local_home() if local_cores(cfg.master) is not None else None
            try:
                with keeping_sigint_handler(), sparkhome.launching_from(home):
                    _context = _started(conf)
            except SparkStartError as exc:
                if background:
                    _failed = exc
                raise
            _context.setLogLevel(_context.getConf().get("spark.log.level") or "ERROR")
            _quiet_accumulator_server(_context)
            if local_cores(cfg.master) is None:
                _context.addPyFile(package_zip())
            atexit.register(stop)
        return _context


def _quiet_accumulator_server(context: SparkContext) -> None:
    """PySpark's accumulator server, a `socketserver`, prints a bare multi-line traceback
    to stderr when the JVM's connection to it ends mid-read: when the JVM dies first, as it
    does when a service manager sends SIGTERM to the whole group (systemd's default,
    `KillMode=control-group`). No cycle uses accumulators, so its errors go to the log at
    debug, one record, like the rest (logs.py)."""
    server = getattr(context, "_accumulatorServer", None)  # pyspark/core/context.py
    if server is not None:
        def handle_error(_request: object, client: object) -> None:
            log.debug("the accumulator server's connection from %s failed", client,
                      exc_info=True)

        server.handle_error = handle_error


def _started(conf: dict[str, str]) -> SparkContext:
    """A context with `conf`; should its JVM not start from our class-data archive but start
    without it, the archive is set aside (one that fails either way, from a bad setting, is
    not the archive's fault and stays); should it start without mapping the archive, a
    warning says so (jvmarchive.py)."""
    archive = jvmarchive.archive_path()
    from_archive = jvmarchive.use_flags(archive) in conf.get("spark.driver.extraJavaOptions", "")
    try:
        started = _new_context(conf)
    except Exception as first:
        if not from_archive:
            raise _start_error(conf, first) from None
        try:
            started = _new_context({**conf, "spark.driver.extraJavaOptions": JVM_OPTIONS})
        except Exception as second:
            raise _start_error(conf, second) from None
        log.warning("the Spark JVM did not start from the class-data archive %s but did "
                    "without it: the archive set aside", archive)
        jvmarchive.set_aside(archive)
        return started
    if from_archive:
        # pyspark's launch_gateway keeps its Popen; spark-submit execs the JVM in it
        process = getattr(started._gateway, "proc", None)
        if process is not None and jvmarchive.mapped(archive, process.pid) is False:
            log.warning("the Spark JVM did not map the class-data archive %s (made from other "
                        "files, or for another class path): it started about twice as slowly. "
                        "Delete it to have it made again after the first cycle", archive)
        else:
            jvmarchive.used(archive)
    return started


def _new_context(conf: dict[str, str]) -> SparkContext:
    return SparkContext(conf=SparkConf().setAll(list(conf.items())))


def _start_error(conf: dict[str, str], exc: Exception) -> SparkStartError:
    """One line for the operator: PySpark's own is a traceback ending in `JAVA_GATEWAY_EXITED`
    while the reason is what the JVM printed just before."""
    reason = " ".join(str(exc).split())[:300]
    return SparkStartError(f"Spark did not start (master {conf.get('spark.master')!r}; the "
                           f"JVM's reason, if it gave one, is above): {reason}")


def start_in_background(cfg: Spark) -> None:
    """Start the context on a thread of its own, now: the JVM's start (seconds) then runs
    beside the process's own imports and set-up instead of after them. `get_context`
    waits for it; if it fails, the next `get_context` raises its error (and the one after
    tries again)."""
    def start() -> None:
        try:
            get_context(cfg, background=True)
        except Exception as exc:  # the caller's get_context raises it again, in context
            log.debug("the Spark context's start in the background failed: %s", exc)

    threading.Thread(target=start, name="spark-start", daemon=True).start()


def package_zip() -> str:
    """This package as a zip in a temporary directory, for a cluster's executors."""
    root = Path(exporter.__file__).resolve().parent
    target = Path(tempfile.mkdtemp(prefix="pulsar-quota-exporter-")) / "exporter.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*.py")):
            archive.write(path, path.relative_to(root.parent).as_posix())
    return str(target)


@contextmanager
def keeping_sigint_handler() -> Iterator[None]:
    """Whatever the block installs for SIGINT, the handler from before is back after it
    (on the main thread, the only one that may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not None:  # None: set outside Python, cannot be restored
            signal.signal(signal.SIGINT, previous)


def cancel_running() -> None:
    """Cancel the jobs of the running cycle (on SIGTERM): the cycle fails fast, keeps the
    last good metrics, and the loop can end within seconds instead of after the cycle."""
    if _context is not None:
        _context.cancelAllJobs()


def stop() -> None:
    """Stop the context (shutdown); the next `get_context` starts a new one. A service
    manager's SIGTERM may reach the Spark JVM with us (systemd's control-group kill, a
    shell's `timeout`): a JVM already gone has nothing left to stop."""
    global _context
    with _lock:
        if _context is not None:
            try:
                _context.stop()
            except (Py4JError, OSError) as exc:
                log.debug("the Spark JVM was gone before its context stopped: %s", exc)
            _context = None
