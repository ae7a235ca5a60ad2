"""Tools the tests take from the Go module proxy, as the clusters that run our chart and rules
have them: promtool 3 (Prometheus v3.16, module v0.316.0; Debian's is 2.42), cloudflare's
`pint` rule linter, prometheus-operator's CRD schemas (ServiceMonitor, PrometheusRule),
`pss`, our few lines over Kubernetes' pod-security admission library (tests/tools/pss/), and
go-jsonnet's `jsonnet`, which evaluates the monitoring mixin (mixin.libsonnet).

Everything goes under `.cache/go/` at the repository root (its own module, build and bin
directories, so a machine's Go caches are neither used nor filled). `./dev test` runs
`python -m tests.harness.go_tools`; the tests never build (a missing tool fails them).

promtool is built with `-tags remove_all_sd`: rule checks need no service discovery, and
without the SDs' cloud SDKs it builds in ~2 min on 2 cores instead of ~4. pint is built from
its downloaded module: `go install …/pint@v0.87.0` stops at the proxy's 403 for the module's
version list (a deprecation lookup), which the download of one version does not make.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness.process import InstallFailed, run_or_fail

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / ".cache" / "go"
PROMETHEUS = "github.com/prometheus/prometheus"
PROMETHEUS_VERSION = "v0.316.0"  # Prometheus 3.16
PINT = "github.com/cloudflare/pint"
PINT_VERSION = "v0.87.0"
OPERATOR = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.85.0"
JSONNET = "github.com/google/go-jsonnet"
JSONNET_VERSION = "v0.22.0"
PSS_SOURCE = REPO / "tests" / "tools" / "pss"
_MARKER = ".installed"  # written last, naming what was built


def promtool3(home: Path = HOME) -> Path:
    return home / "bin" / "promtool"


def pint(home: Path = HOME) -> Path:
    return home / "bin" / "pint"


def pss(home: Path = HOME) -> Path:
    return home / "bin" / "pss"


def jsonnet(home: Path = HOME) -> Path:
    return home / "bin" / "jsonnet"


def crd_dir(home: Path = HOME) -> Path:
    """prometheus-operator's CRDs as it ships them (its `example/prometheus-operator-crd/`)."""
    return home / "crds"


def _wanted() -> str:
    sources = hashlib.sha256(b"".join(
        (PSS_SOURCE / name).read_bytes() for name in ("go.mod", "go.sum", "main.go")))
    return " ".join((f"{PROMETHEUS}@{PROMETHEUS_VERSION}", f"{PINT}@{PINT_VERSION}",
                     f"{OPERATOR}@{OPERATOR_VERSION}", f"{JSONNET}@{JSONNET_VERSION}",
                     f"pss@{sources.hexdigest()[:16]}")) + "\n"


def installed(home: Path = HOME) -> bool:
    marker = home / _MARKER
    return (marker.is_file() and marker.read_text() == _wanted()
            and all(p.is_file() for p in (promtool3(home), pint(home), pss(home),
                                          jsonnet(home)))
            and crd_dir(home).is_dir())


def install(home: Path = HOME) -> Path:
    """Fetch and build once; a second call returns at once."""
    if installed(home):
        return home
    if shutil.which("go") is None:
        raise InstallFailed("go not found: install Go >= 1.24 (the build machines have it)")
    env = {**os.environ, "GOMODCACHE": str(home / "mod"), "GOCACHE": str(home / "build"),
           "GOBIN": str(home / "bin"), "GOFLAGS": "-modcacherw -buildvcs=false",
           "GOTOOLCHAIN": "local"}
    home.mkdir(parents=True, exist_ok=True)
    (home / _MARKER).unlink(missing_ok=True)
    _run(["go", "install", "-tags", "remove_all_sd",
          f"{PROMETHEUS}/cmd/promtool@{PROMETHEUS_VERSION}"], env, home)
    pint_dir = _download(f"{PINT}@{PINT_VERSION}", env, home)
    _run(["go", "build", "-o", str(pint(home)), "./cmd/pint"], env, pint_dir)
    _run(["go", "build", "-o", str(pss(home)), "."], env, PSS_SOURCE)
    _run(["go", "install", f"{JSONNET}/cmd/jsonnet@{JSONNET_VERSION}"], env, home)  # ~15 s
    shipped = _download(f"{OPERATOR}@{OPERATOR_VERSION}", env, home) / "example" / \
        "prometheus-operator-crd"
    if not shipped.is_dir():
        raise InstallFailed(f"{OPERATOR}@{OPERATOR_VERSION} holds no {shipped.name}/")
    shutil.rmtree(crd_dir(home), ignore_errors=True)
    shutil.copytree(shipped, crd_dir(home))
    # The sources and objects (2.4 GB) are not needed once built: 120 MB are kept.
    for scratch in ("mod", "build"):
        shutil.rmtree(home / scratch, ignore_errors=True)
    (home / _MARKER).write_text(_wanted())
    return home


def pod_security(workloads: list[dict], level: str = "restricted",
                 home: Path = HOME) -> list[dict]:
    """Kubernetes' pod-security admission's verdict on each workload's pod template, in
    order: {"kind", "name", "allowed", "reasons", "details"}."""
    lines = "".join(json.dumps(w) + "\n" for w in workloads)
    done = subprocess.run([str(pss(home)), "-level", level], input=lines, capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pss exited with {done.returncode}: {done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def _download(module: str, env: dict[str, str], cwd: Path) -> Path:
    said = json.loads(_run(["go", "mod", "download", "-json", module], env, cwd))
    return Path(said["Dir"])


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    return run_or_fail(argv, env=env, cwd=cwd)


def main() -> int:
    try:
        print(install())
    except InstallFailed as exc:
        print(f"go_tools: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
