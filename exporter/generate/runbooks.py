"""RUNBOOK.md: one entry per alert, the target of every `runbook_url`.

The alert list comes from the rendered rules; the words are templates beside them:
`alerts/templates/runbooks.md.j2` lays the page out and `runbook_texts.md.j2` holds one macro
per alert (Impact, Diagnose, Mitigate), written with the same thresholds object as the rules.
An alert without a macro, or a macro without an alert, fails the generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import jinja2

from exporter.catalogue import Domain
from exporter.generate import alerts as alert_rules
from exporter.generate.checkout import ROOT
from exporter.generate.thresholds import DEFAULT, Thresholds, template_environment

OUTPUT = Path("RUNBOOK.md")
LAYOUT = "runbooks.md.j2"
TEXTS = "runbook_texts.md.j2"

TITLES: Mapping[Domain, str] = MappingProxyType({
    Domain.BACKLOG: "Backlog-quota alerts",
    Domain.RESOURCE_GROUPS: "Resource-group alerts",
    Domain.LOAD: "Load alerts",
    Domain.EXPORTER: "Exporter alerts",
})


def texts(env: jinja2.Environment, thresholds: Thresholds) -> dict[str, jinja2.runtime.Macro]:
    """Alert name → the macro rendering its runbook items (the texts template's public macros)."""
    module = env.get_template(TEXTS).make_module({"t": thresholds})
    return {name: value for name, value in vars(module).items()
            if isinstance(value, jinja2.runtime.Macro)}


def render(thresholds: Thresholds = DEFAULT, templates: Path = alert_rules.TEMPLATES) -> str:
    """RUNBOOK.md as committed."""
    rules = alert_rules.alerts(thresholds)
    env = template_environment(templates)
    macros = texts(env, thresholds)
    names = {a.name for a in rules}
    missing, extra = names - set(macros), set(macros) - names
    if missing or extra:
        raise ValueError(f"{TEXTS}: runbooks missing for {sorted(missing)}, "
                         f"left over for {sorted(extra)}")
    return env.get_template(LAYOUT).render(
        t=thresholds, alerts=rules, texts=macros, titles=TITLES, files=alert_rules.RULE_FILES,
    )


def outputs(root: Path = ROOT) -> dict[Path, Callable[[str], str]]:
    """Generated file → function of its old text returning its new text (see all.py)."""
    return {root / OUTPUT: lambda _old: render()}
