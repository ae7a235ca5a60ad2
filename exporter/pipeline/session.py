"""The process's one SparkSession: started once (about 10 s), reused by every cycle.

Defaults suit an exporter sidecar: a loopback-bound driver for local masters (without it
the block manager advertises a non-loopback address and shuffles fail on this kind of
machine, notes/pulsar-lite.md), no UI, few shuffle partitions, Arrow on, quiet logs.
`Spark.conf` from the config is applied after them, so an operator can override any of
them (a cluster master, driver memory, ...), all but what the parse requires (`REQUIRED`).
"""

from __future__ import annotations

import atexit
import os
import re
import threading

from pyspark.sql import SparkSession

from exporter.config import Spark

APP_NAME = "pulsar-quota-exporter"

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")

# Not overridable: the parse builds label maps that may name a label twice, and counts
# such lines itself; Spark's default policy would fail the whole job instead.
REQUIRED = {"spark.sql.mapKeyDedupPolicy": "LAST_WIN"}

_lock = threading.Lock()
_session: SparkSession | None = None


def local_cores(master: str) -> int | None:
    """Worker threads of a `local` master (`local`, `local[N]`, `local[*]`,
    `local[N,retries]`); None for a cluster master."""
    m = _LOCAL.fullmatch(master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1))


def session_conf(cfg: Spark) -> dict[str, str]:
    """Everything `get_session` sets, defaults first, then the config's `conf`."""
    cores = local_cores(cfg.master)
    conf = {
        "spark.master": cfg.master,
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "ERROR",
        # Shuffles here are small group-bys; adaptive execution coalesces further.
        "spark.sql.shuffle.partitions": str(2 * (cores or os.cpu_count() or 1)),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # A body is one task; a body larger than this (a broker with ~5k topics or more)
        # is split on line boundaries so that one big broker still uses every core.
        "spark.sql.files.maxPartitionBytes": "32m",
    }
    if cores is not None:
        # Executors of a cluster master must reach the driver: bind to loopback only
        # when everything runs in this process.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf.update({str(k): str(v) for k, v in sorted(cfg.conf.items())})
    conf.update(REQUIRED)
    return conf


def get_session(cfg: Spark) -> SparkSession:
    """The process's session, started on first use with `cfg`. Later calls return the
    same session whatever their `cfg`: the first configuration wins until `stop()`."""
    global _session
    with _lock:
        if _session is None:
            builder = SparkSession.builder
            for key, value in session_conf(cfg).items():
                builder = builder.config(key, value)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel(_session.conf.get("spark.log.level", "ERROR"))
            atexit.register(stop)
        return _session


def stop() -> None:
    """Stop the session (shutdown); the next `get_session` starts a new one."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
