"""`run --web.telemetry-path --web.max-requests` as a real process: the flags reach the
server (the metrics move, the index links them), and a bad one exits 2 naming the flag
before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.exporter_process import ExporterProcess, run_cli
from tests.harness.wait import poll

pytestmark = pytest.mark.spark  # `run` starts Spark in the background

CONFIG = {"cluster": "flags", "sources": {"brokers": [{"url": "http://127.0.0.1:9/metrics"}]}}


def test_the_telemetry_path_flag_moves_the_metrics_of_the_running_exporter(tmp_path: Path):
    proc = ExporterProcess(tmp_path, CONFIG, extra_args=(
        "--web.telemetry-path", "/prom", "--web.max-requests", "2")).start()
    try:
        poll(lambda: proc.get("/healthz")[0], "the server up", timeout=120, interval=0.2,
             ignore=(OSError,), until=lambda code: code == 200, show=lambda: proc.log()[-3000:])
        status, _, body = proc.get("/prom")
        assert status == 200 or (status == 503 and b"no check cycle" in body), (status, body)
        assert proc.get("/metrics")[0] == 404
        status, _, index = proc.get("/")
        assert status == 200 and b'href="prom"' in index
    finally:
        proc.stop(grace=0)


@pytest.mark.parametrize(("flag", "value"), [("--web.telemetry-path", "/readyz"),
                                             ("--web.max-requests", "-3")])
def test_a_bad_server_flag_exits_2_naming_it(tmp_path: Path, flag: str, value: str):
    config = tmp_path / "c.yaml"
    config.write_text("cluster: c\nsources:\n  brokers:\n    - url: http://127.0.0.1:9/metrics\n")
    done = run_cli("run", "--config.file", config, flag, value, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"pulsar-quota-exporter: {flag}: "), done.stderr
