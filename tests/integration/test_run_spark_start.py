"""`run` when Spark will not start (a setting its launcher or JVM refuses): one error line
naming the master after the JVM's own reason, exit 1, no Python traceback; and the class-data
archive, not at fault, is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from exporter.demo.embedded import free_port

SCRIPT = """
import sys
from exporter.pipeline.spark import jvmarchive, sparkhome
path = jvmarchive.archive_path()
path.parent.mkdir(parents=True, exist_ok=True)
path.write_bytes(b"x" * 64)  # stamped as verified: the start tries it first
path.with_name(path.name + ".size").write_text(f"64\\n{sparkhome.local_home()}")
print(path)
"""


def test_a_spark_setting_the_jvm_refuses_is_one_line_exit_1_and_the_archive_kept(
        tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("SPARK_HOME", None)
    archive = Path(subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                                  capture_output=True, text=True, timeout=120).stdout.strip())
    config = tmp_path / "c.yaml"
    config.write_text(
        "cluster: c\nsources:\n  brokers: [{url: 'http://127.0.0.1:9/metrics'}]\n"
        f"exposition: {{listen: '127.0.0.1:{free_port()}'}}\n"
        "spark: {conf: {spark.driver.memory: lots}}\n")
    done = subprocess.run([sys.executable, "-m", "exporter", "run", "--config.file", str(config)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "Invalid maximum heap size: -Xmxlots" in done.stderr  # the JVM's reason
    errors = [line for line in done.stderr.splitlines() if "level=error" in line]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "Spark did not start (master 'local[" in errors[0]
    assert archive.exists()  # a start that fails with or without it does not set it aside
