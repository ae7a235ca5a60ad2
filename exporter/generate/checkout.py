"""The source checkout `generate` works in: where its templates are and where its outputs go.

The generated files (docs/metrics.md, RUNBOOK.md, dashboards, alert rules, the chart's copies)
are committed in the repository and rendered from templates that live there too, not in the
package. So `generate` only makes sense in the checkout that holds this very code (run from
the source tree or an editable install). An installed wheel has no templates beside it: there
`generate` must refuse, not write RUNBOOK.md and dashboards/ into site-packages.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

PROJECT = "pulsar-quota-exporter"
# Where a checkout holding this file has its root (exporter/generate/checkout.py).
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DIRS = (
    Path("dashboards") / "templates", Path("alerts") / "templates", Path("docs") / "templates",
)


def fresh(render: Callable[[], str]) -> Callable[[str], str]:
    """An output (all.py: its old text → its new text) that does not read its old text."""
    return lambda _old: render()


class NotACheckout(RuntimeError):
    """The code runs from an installed package, not from the project's source checkout."""


def checkout(root: Path | None = None) -> Path:
    """`root` (default: the directory that would be this code's checkout) when its pyproject
    names this project and the templates are there; otherwise `NotACheckout` saying why."""
    root = ROOT if root is None else root
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        name = project["project"]["name"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        name = None
    if name != PROJECT:
        raise NotACheckout(f"{root} is not a {PROJECT} checkout "
                           f"(no pyproject.toml there naming {PROJECT})")
    missing = [str(d) for d in TEMPLATE_DIRS if not (root / d).is_dir()]
    if missing:
        raise NotACheckout(f"{root} is not a {PROJECT} checkout (missing {', '.join(missing)})")
    return root
