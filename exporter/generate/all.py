"""Regenerate every committed artefact derived from the catalogue, or check they are current."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from exporter.generate import alerts, dashboards, helm, readme, runbooks

ROOT = Path(__file__).resolve().parents[2]


def outputs(root: Path = ROOT) -> dict[Path, Callable[[str], str]]:
    """Each generated file and how to produce its new text from its current text."""
    return {
        root / "README.md": lambda text: runbooks.update(readme.update(text)),
        **dashboards.outputs(root),
        **alerts.outputs(root),
        **helm.outputs(root),
    }


def generate(check: bool = False, root: Path = ROOT) -> int:
    stale = []
    for path, make in outputs(root).items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = make(old)
        if new != old:
            stale.append(path)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if check else 'wrote'}: {path.relative_to(root)}", file=sys.stderr)
    return 1 if check and stale else 0
