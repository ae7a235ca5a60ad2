"""Apache Pulsar for the integration tests, from Maven Central only.

The release process deploys every module, the server distribution included, so
`org.apache.pulsar:pulsar-server-distribution:<v>:tar.gz:bin` is the very
`apache-pulsar-<v>-bin.tar.gz` of Pulsar's download page (245 MB for 4.0.8). It is unpacked
into `.cache/apache-pulsar-<v>/` at the repository root (ignored by git), or wherever
`APACHE_PULSAR_HOME` points. `./dev test` runs `python -m tests.harness.apache_pulsar_install`;
the tests themselves never download (a missing install fails them, see apache_pulsar.py).

Why 4.0.8: it is the newest 4.0.x (LTS) whose distribution resolves on Maven Central; the
4.0.9 and 4.0.13 BOMs are published there but neither their `pulsar-broker` jar nor their
server distribution is. The version matrix (tests/integration/test_apache_pulsar_versions.py)
also runs 4.2.4, whose distribution Maven Central does not serve: it is assembled from its
broker artifacts and 4.0.8's bin/ and conf/ (apache_pulsar_artifacts.py). 3.3.6 cannot be
(UNAVAILABLE says why). `python -m tests.harness.apache_pulsar_install` installs VERSIONS.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.harness.apache_pulsar_artifacts import assemble
from tests.harness.process import InstallFailed, run_or_fail

VERSION = "4.0.8"
VERSIONS = ("4.0.8", "4.2.4")  # the matrix; VERSION is the default everywhere
# Keys a version of the matrix adds to apache_pulsar.STANDALONE_OVERRIDES (conftest's
# `apache_pulsar_of`): PIP-447 (4.2; ServiceConfiguration.exposeCustomTopicMetricLabelsEnabled,
# allowedTopicPropertyKeysForMetrics) copies the topic property `team` into a label of each of
# that topic's /metrics series; topics without the property are unchanged.
VERSION_OVERRIDES = {
    "4.2.4": {"exposeCustomTopicMetricLabelsEnabled": "true",
              "allowedTopicPropertyKeysForMetrics": "team"},
}
# Versions the matrix wants that Maven Central (as reachable here) cannot supply, and why.
UNAVAILABLE = {
    "3.3.6": "pulsar-broker:3.3.6 resolves, but two of its dependencies do not: "
             "org.apache.pulsar:pulsar-opentelemetry:3.3.6 (the broker's OpenTelemetryService, "
             "needed at start) and org.apache.pulsar:jetcd-core-shaded:3.3.6",
}
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
_MARKER = ".installed"  # written last: a half-unpacked tree is never taken for an install


def home(version: str = VERSION, cache: Path = CACHE) -> Path:
    """Where the install is (or would be): `.cache/apache-pulsar-<v>`, or for 4.0.8
    `APACHE_PULSAR_HOME` when set."""
    override = os.environ.get("APACHE_PULSAR_HOME") if version == VERSION else None
    return Path(override) if override else cache / f"apache-pulsar-{version}"


def installed(path: Path) -> bool:
    return (path / "bin" / "pulsar").is_file() and (path / _MARKER).is_file()


def install(version: str = VERSION, cache: Path = CACHE) -> Path:
    """Download and unpack once; a second call returns at once. Maven runs with its own local
    repository under `cache/m2` (its plugins stay there; the 245 MB tarball is removed once
    unpacked, so it is not kept twice). A version other than 4.0.8 is assembled from its
    broker artifacts and 4.0.8's bin/ and conf/ (installed first)."""
    target = home(version, cache)
    if installed(target):
        return target
    if version in UNAVAILABLE:
        raise InstallFailed(f"Apache Pulsar {version} cannot be installed: {UNAVAILABLE[version]}")
    for tool in ("mvn", "tar", "java"):
        if shutil.which(tool) is None:
            raise InstallFailed(f"{tool} not found: install Maven and a JDK >= 17 "
                                "(./dev test does)")
    cache.mkdir(parents=True, exist_ok=True)
    m2 = cache / "m2"
    if version != VERSION:
        base = install(VERSION, cache)
        try:
            return assemble(version, target, base, m2, _MARKER, _run)
        except FileNotFoundError as exc:
            raise InstallFailed(str(exc)) from exc
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
    run_or_fail(argv)


def main() -> int:
    try:
        for version in VERSIONS:
            print(install(version))
    except InstallFailed as exc:
        print(f"apache_pulsar_install: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
