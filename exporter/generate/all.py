"""Regenerate every committed artefact derived from the catalogue, or check they are current."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from exporter.generate import alerts, dashboards, helm, readme, runbooks
from exporter.generate.checkout import ROOT, NotACheckout, checkout


def outputs(root: Path = ROOT) -> dict[Path, Callable[[str], str]]:
    """Each generated file and how to produce its new text from its current text."""
    return {
        root / "README.md": lambda text: runbooks.update(readme.update(text)),
        **dashboards.outputs(root),
        **alerts.outputs(root),
        **helm.outputs(root),
    }


def generate(check: bool = False, root: Path = ROOT) -> int:
    """Write (or, with `check`, list) every out-of-date output under `root`. 0 when done or
    current, 1 when `check` finds stale files, 2 when this code is not running from a
    checkout: the templates are read from there whatever `root` is."""
    try:
        checkout()
    except NotACheckout as e:
        print(f"generate: {e}.\nIt renders the repository's templates into the repository's "
              "committed files, so run it from a source checkout (or an editable install, "
              "`pip install -e .`), not from an installed package.", file=sys.stderr)
        return 2
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
