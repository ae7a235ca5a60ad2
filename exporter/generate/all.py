"""Regenerate every committed artefact derived from the catalogue, or check they are current:
docs/metrics.md, RUNBOOK.md, the dashboards, the alert rules, the chart's copies of them and
the monitoring mixin that imports them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from exporter.generate import alerts, dashboards, helm, metrics, mixin, runbooks
from exporter.generate.checkout import ROOT, NotACheckout, checkout, fresh
from exporter.generate.thresholds import DEFAULT, Thresholds


def outputs(root: Path = ROOT) -> dict[Path, Callable[[str], str]]:
    """Each generated file and how to produce its new text from its current text."""
    return {
        **metrics.outputs(root),
        **runbooks.outputs(root),
        **dashboards.outputs(root),
        **alerts.outputs(root),
        **helm.outputs(root),
        **mixin.outputs(root),
    }


def deployment_outputs(out: Path, thresholds: Thresholds) -> dict[Path, Callable[[str], str]]:
    """The rules and dashboards rendered with `thresholds` (an operator's selector), laid out
    under `out` as in the repository: alerts/*.rules.yaml, dashboards/*.json."""
    made: dict[Path, Callable[[str], str]] = {
        out / "alerts" / filename: fresh(partial(alerts.render_rules, domain, thresholds))
        for domain, (_, filename) in alerts.RULE_FILES.items()
    }
    for d in dashboards.DASHBOARDS:
        made[out / "dashboards" / d.file] = fresh(partial(dashboards.render, d, thresholds))
    return made


def generate(check: bool = False, root: Path = ROOT, selector: str | None = None,
             out: Path | str | None = None) -> int:
    """Write (or, with `check`, list) every out-of-date output under `root`. 0 when done or
    current, 1 when `check` finds stale files, 2 when this code is not running from a
    checkout: the templates are read from there whatever `root` is.

    With `out`, write only the rules and dashboards, rendered with `selector` (default the
    committed one), under `out` instead; the committed files are left alone. 2 for an
    invalid selector."""
    try:
        checkout()
    except NotACheckout as e:
        print(f"generate: {e}.\nIt renders the repository's templates into the repository's "
              "committed files, so run it from a source checkout (or an editable install, "
              "`pip install -e .`), not from an installed package.", file=sys.stderr)
        return 2
    if out is not None:
        try:
            thresholds = DEFAULT if selector is None else DEFAULT.with_(selector=selector)
        except ValueError as e:
            print(f"generate: {e}", file=sys.stderr)
            return 2
        return _write(deployment_outputs(Path(out), thresholds), check, Path(out))
    if selector is not None:
        print("generate: --selector needs --out DIR: the committed files keep the default "
              "selector", file=sys.stderr)
        return 2
    return _write(outputs(root), check, root)


def _write(made: dict[Path, Callable[[str], str]], check: bool, root: Path) -> int:
    stale = []
    for path, make in made.items():
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
