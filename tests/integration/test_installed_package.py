"""The package as a user gets it: a wheel built from the working tree, installed with its
locked dependencies into a fresh virtualenv (no system or project site-packages), run from a
directory outside the checkout. What a checkout hides shows up here: data files missing from
the wheel, code reading paths relative to the repository, undeclared dependencies (the
lock holds what pyproject.toml declares, and the wheel is installed without resolving).

The wheel is built from a copy of the files the build reads, so no `build/` or egg-info is
written into the shared working tree. Dependencies come from the package index (pip's cache
makes it fast) at the versions and hashes of requirements/extras.lock, as the README's
Install says; the times of each step are printed, not asserted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "README.md", "exporter")
SCRIPT = "pulsar-quota-exporter"
# The first cycle starts Spark: 10 s idle, 40 s seen on a busy 2-core machine; then 5 s cycles.
DEMO_SECONDS = 60
# The demo's workload topics (exporter/data/demo.yaml's namespaces).
DEMO_TOPICS = ("persistent://public/default/orders", "persistent://public/demo-time/stalled",
               "persistent://public/demo-size/bulk")

# A wheel built and installed with its dependencies into a fresh virtualenv.
pytestmark = [pytest.mark.timeout(600), pytest.mark.install]


@dataclass(frozen=True)
class Installed:
    venv: Path
    workdir: Path  # outside the checkout: every command runs here
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return _run([self.venv / "bin" / SCRIPT, *args], self.workdir, self.env, timeout)

    def python_says(self, code: str) -> str:
        done = _run([self.python, "-c", code], self.workdir, self.env, 60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


def _run(cmd: Sequence[str | Path], cwd: Path, env: dict[str, str] | None,
         timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _timed(what: str, cmd: Sequence[str | Path], cwd: Path, timeout: float = 300) -> None:
    started = time.monotonic()
    done = _run(cmd, cwd, None, timeout)
    assert done.returncode == 0, f"{what} failed:\n{done.stdout}\n{done.stderr}"
    print(f"{what}: {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    source, wheels, venv, workdir = (base / d for d in ("source", "wheels", "venv", "work"))
    source.mkdir()
    workdir.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    _timed("build the wheel", [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                               "-w", wheels, "."], source)
    (wheel,) = wheels.glob("*.whl")
    # The base interpreter's venv, not this one's: nothing of the project's .venv is visible.
    _timed("create the venv", [sys.executable, "-m", "venv", venv], base)
    # As README's Install says: the locked dependencies, hashes checked, then the wheel alone.
    _timed("install the locked deps", [venv / "bin" / "python", "-m", "pip", "install", "-q",
                                       "--require-hashes", "-r",
                                       REPO / "requirements" / "extras.lock"], base)
    _timed("install the wheel", [venv / "bin" / "python", "-m", "pip", "install", "-q",
                                 "--no-deps", f"{wheel}[demo]"], base)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # The class-data archive the demo makes after its first cycle (~150 MB) is for this
    # venv, gone after the run: in the user's cache it stayed 30 days, one a run.
    env["XDG_CACHE_HOME"] = str(base / "cache")
    return Installed(venv, workdir, env)


def packaged_demo_config(installed: Installed) -> Path:
    """The demo config inside the installed package (found without importing the app)."""
    return Path(installed.python_says(
        "import importlib.resources as r; print(r.files('exporter') / 'data' / 'demo.yaml')"))


def test_the_package_and_its_demo_config_come_from_the_venv(installed: Installed):
    site = installed.python_says("import exporter; print(exporter.__file__)")
    assert Path(site).is_relative_to(installed.venv), site
    config = packaged_demo_config(installed)
    assert config.is_file() and config.is_relative_to(installed.venv)
    # The checkout's test dependencies are not there: the venv really is fresh.
    assert installed.python_says("import importlib.util as u; print(u.find_spec('pytest'))") \
        == "None"


def test_validate_config_accepts_the_packaged_demo_config(installed: Installed):
    config = packaged_demo_config(installed)
    done = installed.run("validate-config", config)
    assert (done.returncode, done.stdout.strip()) == (0, "OK"), done.stderr
    copy = installed.workdir / "demo.yaml"  # the copy a user would start from
    shutil.copy(config, copy)
    done = installed.run("validate-config", copy.name)
    assert (done.returncode, done.stdout.strip()) == (0, "OK"), done.stderr


def test_generate_refuses_outside_a_checkout(installed: Installed):
    # Where an installed generator's would-be checkout is: site-packages itself.
    site = Path(installed.python_says("import exporter; print(exporter.__file__)")).parents[1]
    before = sorted(p.name for p in site.iterdir())
    done = installed.run("generate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a pulsar-quota-exporter checkout" in done.stderr
    assert sorted(p.name for p in site.iterdir()) == before  # no README.md, no dashboards/


@pytest.mark.lite  # the demo's broker and Spark
@pytest.mark.spark
def test_demo_runs_and_prints_decisions(installed: Installed):
    started = time.monotonic()
    done = installed.run("demo", "--duration", str(DEMO_SECONDS), timeout=DEMO_SECONDS + 180)
    print(f"demo --duration {DEMO_SECONDS}: {time.monotonic() - started:.1f} s")
    out = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, out
    assert "Traceback" not in done.stderr, out
    # A cycle's decisions table lists every workload topic, with its namespace's policy (the
    # first cycle collects before the workload has created them).
    tables = done.stdout.split("cycle at ")[1:]
    assert any(all(t in table for t in DEMO_TOPICS) for table in tables), out
    assert_promised_evictions(done.stdout)


STALLED, BULK = DEMO_TOPICS[1], DEMO_TOPICS[2]
BULK_MESSAGE = 4096  # bytes, each of the demo workload's bulk messages


def assert_promised_evictions(stdout: str) -> None:
    """The evictions the demo promises (exporter/demo/run.py): the stalled subscription's
    backlog passes its 30 s time quota, the consumer-less one its 256 KiB size quota, and
    each is evicted, so neither keeps growing: at 2 messages/s without evictions the age
    would gain 5 s and the backlog 10 messages a cycle."""
    for topic, quota, promised in ((STALLED, "time", "reports"), (BULK, "size", "archive")):
        rows = _rows(stdout, topic)
        evicting = [(at, row) for at, row in rows if row[-1] == f"{quota} → evict {promised}"]
        assert evicting, stdout
        (first, (_, backlog, age, *_)), (last, (_, last_backlog, last_age, *_)) = \
            evicting[0], rows[-1]
        assert last - first >= 10, stdout  # two cycles at least after the first eviction
        if quota == "time":
            assert age >= 30 and last_age <= 30 + 5, stdout  # held at the quota by evictions
        else:
            assert backlog * BULK_MESSAGE >= 256 * 1024, stdout
            assert last_backlog <= backlog + 2, stdout


def _rows(stdout: str, topic: str) -> list[tuple[float, list]]:
    """(seconds since the first table, [topic, backlog, age, policy, exceeded / action]) of
    `topic` in each decisions table the demo printed (exporter/demo/run.py's `summary`)."""
    rows, start = [], None
    for table in stdout.split("cycle at ")[1:]:
        at = datetime.fromisoformat(table.split()[0].replace("Z", "+00:00")).timestamp()
        start = at if start is None else start
        for line in table.splitlines():
            if line.startswith(topic + " "):
                name, backlog, age, policy, action = line.split(maxsplit=4)
                rows.append((at - start, [name, int(backlog),
                                          None if age == "-" else int(age), policy, action]))
    return rows
