"""The pipeline on a real Spark standalone cluster: the same `check` document as `local[2]`
on the same broker bodies, with executors that share no files with the driver.

A Master and a Worker are started from the venv's own pyspark (tests/harness/spark_cluster.py),
the worker in its own mount namespace with a private /tmp. Four broker endpoints are served
on loopback: the recorded Apache Pulsar body, two synthetic brokers, and one of them again
(every topic reported twice: de-duplicated). `check --once` runs in a subprocess per master
(a process has one Spark context), and their JSON documents must agree.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml

from tests.harness import spark_cluster
from tests.harness.exporter_process import run_cli
from tests.harness.fixtures import FIXTURES
from tests.harness.loopback import LoopbackHTTP
from tests.harness.synthetic import BodySpec, body_text, expected_totals

# A Spark standalone cluster, and local Spark beside it.
pytestmark = pytest.mark.spark

SPECS = {"a": BodySpec(topics=300, namespaces=4, broker=0),
         "b": BodySpec(topics=200, namespaces=3, broker=1)}
BODIES = {
    "/apache": (FIXTURES / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt").read_bytes(),
    "/a": body_text(SPECS["a"]).encode(),
    "/b": body_text(SPECS["b"]).encode(),
}
BODIES["/a-again"] = BODIES["/a"]
VOLATILE = ("checked_at", "stage_seconds")


class Bodies(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = BODIES.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")


@pytest.fixture(scope="module")
def brokers() -> Iterator[str]:
    with LoopbackHTTP(Bodies) as server:
        yield server.url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[spark_cluster.SparkCluster]:
    started = spark_cluster.start(tmp_path_factory.mktemp("spark-cluster"))
    yield started
    started.stop()


def _check(brokers: str, master: str, tmp: Path) -> dict:
    conf = {"spark.driver.memory": "512m"}
    if master.startswith("spark://"):
        # The executors reach the driver on loopback, and run this venv's Python.
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                     "spark.pyspark.python": sys.executable, "spark.executor.memory": "512m",
                     "spark.cores.max": "2"})
    config = {
        "cluster": "bench",
        "sources": {"brokers": [{"url": f"{brokers}{path}", "timeout": "30s"}
                                for path in BODIES]},
        "backlog_quotas": {"default": {"limit_size": "1MiB", "limit_time": "1h"}},
        "spark": {"master": master, "conf": conf},
    }
    path = tmp / f"{uuid.uuid4().hex}.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli("check", "--config.file", path, "--once", "--format", "json", cwd=tmp,
                   timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _comparable(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k not in VOLATILE}
    doc["sources"] = [{k: v for k, v in s.items() if k != "last_success"}
                      for s in doc["sources"]]
    return doc


def test_the_worker_cannot_see_the_drivers_tmp(cluster):
    marker = Path("/tmp") / f"driver-only-{uuid.uuid4().hex}"
    marker.touch()
    try:
        worker_pid = cluster.processes[0].pid  # sh exec'd the worker's JVM: same pid
        assert not (Path(f"/proc/{worker_pid}/root") / marker.relative_to("/")).exists()
        assert (Path(f"/proc/{worker_pid}/root/tmp/spark-worker")).is_dir()
    finally:
        marker.unlink()


def test_a_standalone_cluster_gives_the_same_document_as_local(cluster, brokers, tmp_path):
    assert cluster.alive_workers() == 1
    remote = _check(brokers, cluster.master_url, tmp_path)
    assert cluster.finished_apps() == ["pulsar-quota-exporter"]  # it ran there
    local = _check(brokers, "local[2]", tmp_path)
    assert _comparable(remote) == _comparable(local)
    # and the document is the bodies': every source up, every topic once
    assert [s["up"] for s in remote["sources"]] == [True] * len(BODIES)
    topics = [t["topic"] for t in remote["topics"]]
    assert len(topics) == len(set(topics))
    want = sum(expected_totals(spec)["topics"] for spec in SPECS.values())
    assert len([t for t in topics if t.startswith("persistent://bench/")]) == want
