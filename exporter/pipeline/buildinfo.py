"""What this build is, for `--version` and `pulsar_quota_exporter_build_info`: the version, the
commit it came from, and the runtimes a bug report needs (Python, PySpark, and the Java that
Spark's JVM runs on), as a Go exporter's build_info carries its revision and Go version.

The commit is `git rev-parse` of the checkout the package runs from (an editable install, the
image's `/opt/pulsar-quota-exporter` when built from a checkout), else the `REVISION` file an
image build writes beside this package, else "unknown". Java's version is read from the JDK's
`release` file, not by starting a JVM.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from exporter import __version__
from exporter.pipeline.spark.jvmarchive import java_binary

UNKNOWN = "unknown"
_PACKAGE = Path(__file__).resolve().parents[1]  # exporter/


@dataclass(frozen=True)
class BuildInfo:
    version: str
    revision: str
    python: str
    pyspark: str
    java: str

    def lines(self) -> str:
        """`--version`'s text, as `prometheus --version` lays it out."""
        return (f"pulsar-quota-exporter, version {self.version} (revision: {self.revision})\n"
                f"  python version:  {self.python}\n"
                f"  pyspark version: {self.pyspark}\n"
                f"  java version:    {self.java}")


@functools.cache
def build_info() -> BuildInfo:
    return BuildInfo(__version__, _revision(), platform.python_version(), _pyspark(), _java())


def _revision() -> str:
    """The checkout's commit only when the package is that checkout's own `exporter/` (not
    a copy installed into a virtualenv that happens to sit inside some checkout)."""
    try:
        done = subprocess.run(["git", "-C", str(_PACKAGE), "rev-parse", "--show-toplevel",
                               "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        done = None
    said = done.stdout.split() if done is not None and done.returncode == 0 else []
    if len(said) == 2 and Path(said[0]).resolve() == _PACKAGE.parent:
        return said[1]
    try:
        return (_PACKAGE / "REVISION").read_text(encoding="utf-8").strip() or UNKNOWN
    except OSError:
        return UNKNOWN


def _pyspark() -> str:
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return UNKNOWN


def _java() -> str:
    """`JAVA_VERSION` of `<jdk>/release` for the java Spark would start."""
    release = Path(java_binary()).parent.parent / "release"
    try:
        text = release.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return UNKNOWN
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JAVA_VERSION":
            return value.strip().strip('"') or UNKNOWN
    return UNKNOWN

