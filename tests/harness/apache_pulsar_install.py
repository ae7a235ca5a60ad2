"""Apache Pulsar for the integration tests, from Maven Central only.

The release process deploys every module, the server distribution included, so
`org.apache.pulsar:pulsar-server-distribution:<v>:tar.gz:bin` is the very
`apache-pulsar-<v>-bin.tar.gz` of Pulsar's download page (245 MB for 4.0.8). It is unpacked
into `.cache/apache-pulsar-<v>/` at the repository root (ignored by git), or wherever
`APACHE_PULSAR_HOME` points. `./dev test` runs `python -m tests.harness.apache_pulsar_install`;
the tests themselves never download (a missing install fails them, see apache_pulsar.py).

Why 4.0.8: it is the newest 4.0.x (LTS) whose distribution resolves on Maven Central; the
4.0.9 and 4.0.13 BOMs are published there but neither their `pulsar-broker` jar nor their
server distribution is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "4.0.8"
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
_MARKER = ".installed"  # written last: a half-unpacked tree is never taken for an install


class InstallFailed(RuntimeError):
    """Maven or tar failed; the message carries their output."""


def home(version: str = VERSION, cache: Path = CACHE) -> Path:
    """Where the install is (or would be): `APACHE_PULSAR_HOME`, else `.cache/apache-pulsar-<v>`."""
    override = os.environ.get("APACHE_PULSAR_HOME")
    return Path(override) if override else cache / f"apache-pulsar-{version}"


def installed(path: Path) -> bool:
    return (path / "bin" / "pulsar").is_file() and (path / _MARKER).is_file()


def install(version: str = VERSION, cache: Path = CACHE) -> Path:
    """Download and unpack once; a second call returns at once. Maven runs with its own local
    repository under `cache/m2` (its plugins stay there; the 245 MB tarball is removed once
    unpacked, so it is not kept twice)."""
    target = home(version, cache)
    if installed(target):
        return target
    for tool in ("mvn", "tar", "java"):
        if shutil.which(tool) is None:
            raise InstallFailed(f"{tool} not found: install Maven and a JDK >= 17 "
                                "(./dev test does)")
    cache.mkdir(parents=True, exist_ok=True)
    m2 = cache / "m2"
    with tempfile.TemporaryDirectory(prefix=".apache-pulsar-", dir=cache) as tmp:
        artifact = f"org.apache.pulsar:pulsar-server-distribution:{version}:tar.gz:bin"
        _run(["mvn", "-B", "-q", "dependency:copy", f"-Dartifact={artifact}",
              f"-DoutputDirectory={tmp}", f"-Dmaven.repo.local={m2}"])
        tarball = Path(tmp) / f"pulsar-server-distribution-{version}-bin.tar.gz"
        _run(["tar", "xzf", str(tarball), "-C", tmp])
        unpacked = Path(tmp) / f"apache-pulsar-{version}"
        if not (unpacked / "bin" / "pulsar").is_file():
            raise InstallFailed(f"{tarball.name} holds no apache-pulsar-{version}/bin/pulsar")
        (unpacked / _MARKER).write_text(f"{artifact}\n")
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        unpacked.rename(target)
    shutil.rmtree(m2 / "org" / "apache" / "pulsar" / "pulsar-server-distribution" / version,
                  ignore_errors=True)
    return target


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise InstallFailed(f"{' '.join(argv)} exited with {done.returncode}:\n{tail}")


def main() -> int:
    try:
        print(install())
    except InstallFailed as exc:
        print(f"apache_pulsar_install: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
