"""Grafana dashboards, rendered from jinja templates beside their outputs (`dashboards/templates/`).

Templates say what each panel shows: title, queries, unit, size and threshold lines. Queries
name metrics through `sel()`, which refuses a metric the catalogue lacks or a label the metric
does not carry. The generator then does what is mechanical, so no template can get it wrong:
panel ids, grid positions (panels flow left to right in rows of 24 columns), query refIds, and
each panel's description, which ends with the catalogue's help text of every metric it queries,
and the thresholds' selector in every query of ours (selector.py; generation fails if one
lacks it), so the broker's own same-named series never show on our panels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import MappingProxyType

from exporter.catalogue import BY_NAME, CATALOGUE, Metric, Unit
from exporter.generate import selector
from exporter.generate.checkout import ROOT, fresh
from exporter.generate.thresholds import DEFAULT, Thresholds, template_environment

TEMPLATES = ROOT / "dashboards" / "templates"
GRID_WIDTH = 24
SCHEMA_VERSION = 41  # Grafana 11.6, the version of the committed JSON schema (@grafana/schema)
COMMON_TAGS = ("pulsar", "pulsar-quota-exporter")

# Catalogue unit → Grafana unit id (grafana-data valueFormats/categories.ts). Rates of counters
# are per-second counts, written as Grafana's custom `count:<what>/s` units in the templates.
GRAFANA_UNITS: Mapping[Unit, str] = MappingProxyType({
    Unit.SECONDS: "s",
    Unit.BYTES: "bytes",
    Unit.RATIO: "percentunit",
    Unit.MESSAGES_PER_SECOND: "count:msg/s",
    Unit.BYTES_PER_SECOND: "Bps",
    Unit.TIMESTAMP: "dateTimeAsIso",
    Unit.NONE: "short",
})

# Sample name as it appears in a query (`..._bucket` for histograms) → its catalogue metric.
SAMPLES: Mapping[str, Metric] = MappingProxyType(
    {sample: m for m in CATALOGUE for sample in m.sample_names}
)
# Template variable that filters each label; a label not listed here has no variable.
VARIABLE_OF_LABEL: Mapping[str, str] = MappingProxyType({
    "cluster": "cluster",
    "namespace": "namespace",
    "topic": "topic",
    "resource_group": "resource_group",
    "monitoring_class": "monitoring_class",
})
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass(frozen=True)
class Dashboard:
    slug: str  # dashboards/<slug>.json, rendered from dashboards/templates/<slug>.json.j2
    uid: str  # stable: links, bookmarks and provisioning refer to it
    title: str
    tags: tuple[str, ...]
    variables: tuple[str, ...]  # besides `datasource`, in display order

    @property
    def file(self) -> str:
        return f"{self.slug}.json"


DASHBOARDS: tuple[Dashboard, ...] = (
    Dashboard("backlog-quotas", "pqe-backlog-quotas", "Pulsar / Backlog quotas",
              ("backlog",), ("cluster", "tenant", "namespace", "topic")),
    Dashboard("resource-groups", "pqe-resource-groups", "Pulsar / Resource groups",
              ("resource-groups",), ("cluster", "resource_group", "monitoring_class")),
    Dashboard("load", "pqe-load", "Pulsar / Load",
              ("load",), ("cluster", "tenant", "namespace")),
    Dashboard("exporter-health", "pqe-exporter-health", "Pulsar / Quota exporter health",
              ("exporter",), ("cluster",)),
)


def sel(sample: str, *filtered: str, **matchers: str) -> str:
    """`name{cluster=~"$cluster", ...}` for a catalogue sample name.

    `filtered` labels match their template variable; `matchers` add raw matchers, e.g.
    `quota_type='="time"'`. Unknown metrics and labels the metric lacks fail the render.
    """
    metric = SAMPLES.get(sample)
    if metric is None:
        raise ValueError(f"{sample} is not in the catalogue")
    labels = ("cluster", *filtered)
    for label in (*labels, *matchers):
        if label not in metric.labels:
            raise ValueError(f"{metric.name} has no label {label!r}")
    parts = [f'{label}=~"${VARIABLE_OF_LABEL[label]}"' for label in labels]
    parts += [f"{label}{matcher}" for label, matcher in matchers.items()]
    return f"{sample}{{{', '.join(parts)}}}"


def unit(name: str) -> str:
    """The Grafana unit of a catalogue metric's values."""
    return GRAFANA_UNITS[BY_NAME[name].unit]


def metrics_in(expr: str) -> list[Metric]:
    """Catalogue metrics an expression queries, in order of first appearance."""
    found: dict[str, Metric] = {}
    for token in _IDENT.findall(expr):
        if token in SAMPLES:
            found.setdefault(SAMPLES[token].name, SAMPLES[token])
    return list(found.values())


def _describe(note: str, exprs: list[str]) -> str:
    metrics: dict[str, Metric] = {}
    for expr in exprs:
        for m in metrics_in(expr):
            metrics.setdefault(m.name, m)
    lines = [f"- `{m.name}`: {m.help}" for m in metrics.values()]
    return "\n\n".join(part for part in (note.strip(), "\n".join(lines)) if part)


def _layout(panels: list[dict]) -> None:
    """Ids, refIds, grid positions and descriptions, in place."""
    x = y = line_height = 0
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
        pos = panel["gridPos"]
        if panel["type"] == "row":
            pos["w"], pos["h"] = GRID_WIDTH, 1
        if panel["type"] == "row" or x + pos["w"] > GRID_WIDTH:
            x, y, line_height = 0, y + line_height, 0
        pos["x"], pos["y"] = x, y
        x += pos["w"]
        line_height = max(line_height, pos["h"])
        if panel["type"] == "row":
            x, y, line_height = 0, y + 1, 0
            continue
        targets = panel["targets"]
        for index, target in enumerate(targets):
            target["refId"] = chr(ord("A") + index)
        panel["description"] = _describe(panel.get("description", ""),
                                         [t["expr"] for t in targets])


def _select(dashboard: Dashboard, doc: dict, thresholds: Thresholds) -> None:
    """The selector into every panel query and template-variable query, in place."""
    queries = [(t, "expr") for p in doc["panels"] for t in p.get("targets", [])]
    queries += [(v, "query") for v in doc["templating"]["list"] if v["type"] == "query"]
    problems = []
    for holder, key in queries:
        holder[key] = selector.select(holder[key], thresholds.selector)
        problems += [f"{dashboard.slug}: {where} lacks {{{thresholds.selector_text}}}"
                     for where in selector.unselected(holder[key], thresholds.selector)]
    if problems:
        raise ValueError("; ".join(problems))


def render(dashboard: Dashboard, thresholds: Thresholds = DEFAULT) -> str:
    """The dashboard's JSON, as committed."""
    env = template_environment(TEMPLATES)
    env.globals.update(sel=sel, unit=unit)
    text = env.get_template(f"{dashboard.slug}.json.j2").render(
        t=thresholds, d=dashboard, dashboards=DASHBOARDS, common_tags=COMMON_TAGS,
        schema_version=SCHEMA_VERSION,
    )
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{dashboard.slug}.json.j2 renders invalid JSON: {e}") from None
    _select(dashboard, doc, thresholds)
    _layout(doc["panels"])
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def outputs(root: Path = ROOT) -> dict[Path, Callable[[str], str]]:
    """Generated file → function of its old text returning its new text (see all.py)."""
    return {
        root / "dashboards" / d.file: fresh(partial(render, d))
        for d in DASHBOARDS
    }
