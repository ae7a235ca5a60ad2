"""The metric reference, docs/metrics.md, rendered from the catalogue with
docs/templates/metrics.md.j2 (the page's words are there; this module hands it the metrics)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from exporter.catalogue import CATALOGUE, Domain
from exporter.generate.checkout import ROOT
from exporter.generate.thresholds import template_environment

TEMPLATES = ROOT / "docs" / "templates"
OUTPUT = Path("docs") / "metrics.md"

TITLES: Mapping[Domain, str] = MappingProxyType({
    Domain.BACKLOG: "Backlog quotas (PIP-323)",
    Domain.RESOURCE_GROUPS: "Resource groups (PIP-82)",
    Domain.LOAD: "Load",
    Domain.EXPORTER: "Exporter health",
})


def render(templates: Path = TEMPLATES) -> str:
    """docs/metrics.md as committed: one table per domain, every catalogue metric once."""
    env = template_environment(templates)
    env.filters["cell"] = lambda text: str(text).replace("|", "\\|")
    return env.get_template("metrics.md.j2").render(catalogue=CATALOGUE, titles=TITLES)


def outputs(root: Path = ROOT) -> dict[Path, Callable[[str], str]]:
    """Generated file → function of its old text returning its new text (see all.py)."""
    return {root / OUTPUT: lambda _old: render()}
