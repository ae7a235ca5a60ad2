"""The package's import contracts (pyproject.toml, [tool.importlinter]): the layers of
CONTRIBUTING.md's "Layout" hold, the three engine wings stay apart, and the check does
fail on an import that runs back up or across.

Each check runs in its own interpreter: import-linter configures logging for the whole
process (`logging.config.dictConfig`), which would silence the exporter's loggers for the
tests after it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LINT = ("from importlinter.cli import lint_imports; "
         f"raise SystemExit(lint_imports({str(ROOT / 'pyproject.toml')!r}, no_cache=True, "
         "no_logo=True))")


def _lint(package_dir: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the `exporter` package found in `package_dir`."""
    return subprocess.run([sys.executable, "-c", _LINT], cwd=package_dir, capture_output=True,
                          text=True, env={"PYTHONPATH": str(package_dir), "PATH": "/usr/bin:/bin"},
                          timeout=120)


def test_the_layers_hold() -> None:
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_an_import_back_up_breaks_the_contract(tmp_path: Path) -> None:
    copy = tmp_path / "exporter"
    shutil.copytree(ROOT / "exporter", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "sources" / "results.py").open("a") as f:
        f.write("\nfrom exporter.engine.backlog.quotas import resolve  # noqa\n")
    run = _lint(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "exporter.sources.results -> exporter.engine.backlog.quotas" in run.stdout


def test_one_engine_importing_another_breaks_the_contract(tmp_path: Path) -> None:
    copy = tmp_path / "exporter"
    shutil.copytree(ROOT / "exporter", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "engine" / "load" / "shedders.py").open("a") as f:
        f.write("\nfrom exporter.engine.groups.usage import Usage  # noqa\n")
    run = _lint(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "exporter.engine.load is not allowed to import exporter.engine.groups" in run.stdout
