"""A real Spark standalone cluster on loopback, from the venv's own pyspark: a Master, and a
Worker in its own mount namespace with a private /tmp (a tmpfs), so that it sees none of
the driver's temporary files, as a worker on another host would not.

Both are the JVM classes `spark-class` runs (org.apache.spark.deploy.master.Master and
...worker.Worker); nothing is downloaded. The worker needs root for `unshare -m`, which
this project's machines and CI have; without it the cluster fails to start, loudly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyspark

from exporter.demo.embedded import free_ports
from tests.harness.wait import poll

SPARK_HOME = Path(pyspark.__file__).resolve().parent


class SparkClusterFailed(RuntimeError):
    pass


@dataclass
class SparkCluster:
    master_url: str
    ui_url: str
    processes: tuple[subprocess.Popen, ...]
    logs: tuple[Path, ...]

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            out += [f"--- {log.name}", *text[-lines:]]
        return "\n".join(out)

    def status(self) -> dict:
        """The master's JSON status page."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as resp:
            return json.load(resp)

    def alive_workers(self) -> int:
        return sum(1 for w in self.status().get("workers", []) if w.get("state") == "ALIVE")

    def finished_apps(self) -> list[str]:
        """Names of the applications that ran on the cluster and ended."""
        return [a.get("name") for a in self.status().get("completedapps", [])]

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # the executors' Python: this venv's
        "SPARK_NO_DAEMONIZE": "1",
    })
    return env


def start(workdir: Path, *, cores: int = 2, memory: str = "1g",
          timeout: float = 120.0) -> SparkCluster:
    """Master and one Worker; returns once the master lists the worker as alive."""
    if shutil.which("unshare") is None:
        raise SparkClusterFailed("`unshare` (util-linux) is needed for the worker's private /tmp")
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port, worker_ui = free_ports(3)  # three distinct ports
    master_url = f"spark://127.0.0.1:{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    master_log, worker_log = workdir / "master.log", workdir / "worker.log"
    env = _env()
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui_port)],
        stdout=master_log.open("wb"), stderr=subprocess.STDOUT, env=env,
        start_new_session=True)
    # The worker's /tmp is a fresh tmpfs in its own mount namespace: the driver's temporary
    # files are invisible to it and to the executors it starts. A checkout that itself
    # lives under /tmp (its venv is the workers' Python) is carried across through /mnt,
    # which the private namespace may cover freely.
    checkout = Path(sys.prefix).resolve().parent
    keep = checkout.is_relative_to("/tmp")
    script = " && ".join([
        *([f'mount --bind "{checkout}" /mnt'] if keep else []),
        "mount -t tmpfs -o size=512m tmpfs /tmp",
        *([f'mkdir -p "{checkout}"', f'mount --bind /mnt "{checkout}"'] if keep else []),
        "mkdir -p /tmp/spark-worker",
        f'exec "{spark_class}" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 '
        f"--cores {cores} --memory {memory} --webui-port {worker_ui} "
        f"--work-dir /tmp/spark-worker {master_url}",
    ])
    worker = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdout=worker_log.open("wb"), stderr=subprocess.STDOUT, env=env,
        start_new_session=True)
    cluster = SparkCluster(master_url, f"http://127.0.0.1:{ui_port}", (worker, master),
                           (master_log, worker_log))

    def worker_alive() -> bool:
        if any(p.poll() is not None for p in cluster.processes):
            raise SparkClusterFailed(f"a cluster process exited\n{cluster.log_tail()}")
        return cluster.alive_workers() >= 1  # OSError: the master's UI is not up yet

    try:
        poll(worker_alive, "a worker alive at the master", timeout, ignore=(OSError,),
             show=cluster.log_tail)
    except BaseException:
        cluster.stop()
        raise
    return cluster
