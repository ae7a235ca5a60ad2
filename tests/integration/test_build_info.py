"""`--version` and `pulsar_quota_exporter_build_info`: the version, the commit and the runtimes,
each read from where it lives (git, the package metadata, the JDK's release file)."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from exporter import __version__
from exporter.exposition.build import CycleFacts, Tallies, build
from exporter.exposition.render import render
from exporter.pipeline.buildinfo import build_info
from exporter.pipeline.spark.jvmarchive import java_binary
from tests.harness.pulsar import Metrics

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark  # runs `java -version`, the JVM Spark would start


def _expected() -> dict[str, str]:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    java = subprocess.run([java_binary(), "-version"], capture_output=True, text=True,
                          check=True).stderr
    return {"version": __version__, "revision": head, "python": platform.python_version(),
            "pyspark": metadata.version("pyspark"),
            "java": re.search(r'version "([^"]+)"', java).group(1)}


def test_version_names_the_commit_and_the_runtimes_spark_runs_on():
    """The checkout's HEAD (the package is this checkout's `exporter/`), and the Java version
    `java -version` prints, read without starting a JVM."""
    want = _expected()
    done = subprocess.run([sys.executable, "-m", "exporter", "--version"], capture_output=True,
                          text=True, timeout=60, check=True, cwd="/")
    assert done.stdout.splitlines() == [
        f"pulsar-quota-exporter, version {want['version']} (revision: {want['revision']})",
        f"  python version:  {want['python']}",
        f"  pyspark version: {want['pyspark']}",
        f"  java version:    {want['java']}",
    ]


def test_build_info_carries_the_same_labels():
    facts = CycleFacts("c", 0.0, {}, None, 60.0, 10.0, 60.0)
    metrics = Metrics(render(build(facts, None, (), Tallies(), "me"), topic_level=True).decode())
    (series,) = metrics.find("pulsar_quota_exporter_build_info")
    want = _expected()
    assert series.value == 1.0
    assert series.labels == {"cluster": "c", "version": want["version"],
                             "revision": want["revision"], "pythonversion": want["python"],
                             "pysparkversion": want["pyspark"], "javaversion": want["java"]}
    assert build_info().revision == want["revision"]
