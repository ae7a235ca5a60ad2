"""Every panel query of every generated dashboard, with its template variables substituted
the way Grafana does, returns data from the e2e Prometheus.

Variables are resolved as Grafana would on opening the dashboard: each query variable's
`label_values(…)` is asked of Prometheus (an empty dropdown is a gap too); a variable that
offers "All" is on All (its `allValue`, or the alternation of every value, regex-escaped);
the others take the scenario's value (cluster `e2e`); every dropdown must offer the
workload's own value (tenant, namespace, topic, resource group). Built-ins follow
Grafana's rules for a Prometheus data source whose scrape interval is this Prometheus' 1 s:
`$__interval` = max(range / max data points, 1 s), `$__rate_interval` = max($__interval +
1 s, 4 × 1 s), `$__range` = the queried range. Range targets are range queries over the
whole run at step `$__interval`; instant targets are instant queries now. "Data" means at
least one sample that is not NaN (Grafana draws nothing for NaN). All gaps are collected and
reported together, with the metric names that have no series at all.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.scenario import REPO, Scenario
from tests.harness.prometheus import Prometheus, PromQLError
from tests.harness.wait import poll

DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
SCRAPE_INTERVAL = 1  # seconds: the data source's "scrape interval", as Prometheus here
MAX_DATA_POINTS = 1000  # about what a full-width Grafana panel asks for
_VARIABLE = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)
_METRIC = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?=\{|\[|\)|\s|$)")
_REGEX_SPECIAL = re.compile(r"[$^*+?.()|{}\[\]]")


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    expr: str
    instant: bool


@dataclass(frozen=True)
class Gap:
    dashboard: str
    panel: str  # a panel title, or "variable $name"
    expr: str  # as substituted
    why: str

    def __str__(self) -> str:
        return f"- [{self.dashboard}] {self.panel}\n    {self.expr}\n    → {self.why}"


def _panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from _panels(panel.get("panels", []))


def targets(path: Path) -> list[Target]:
    dashboard = json.loads(path.read_text())
    found = []
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                instant = bool(target.get("instant")) and not target.get("range")
                found.append(Target(path.name, panel.get("title", "?"), target["expr"], instant))
    return found


def _escape_regex(value: str) -> str:
    """Grafana's prometheusSpecialRegexEscape: regex specials escaped inside a PromQL string
    (a backslash becomes four, a special gets two in front)."""
    value = value.replace("\\", "\\" * 4)
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def _escape_plain(value: str) -> str:
    """Grafana's prometheusRegularEscape, for a variable without multi/All."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _grafana_regex(spec: str) -> re.Pattern[str] | None:
    if not spec:
        return None
    match = re.fullmatch(r"/(.*)/([gimsuy]*)", spec, re.S)
    pattern, flags = (match.group(1), match.group(2)) if match else (spec, "")
    return re.compile(pattern, re.I if "i" in flags else 0)


def substitute(text: str, values: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(one, text)


class Dashboard:
    """One dashboard's variables, resolved against Prometheus as Grafana would."""

    def __init__(self, path: Path, prometheus: Prometheus, preferred: Mapping[str, str],
                 builtins: Mapping[str, str]) -> None:
        self.name = path.name
        self.doc = json.loads(path.read_text())
        self.prometheus = prometheus
        self.values: dict[str, str] = dict(builtins)
        self.options: dict[str, list[str]] = {}
        self.gaps: list[Gap] = []
        for variable in self.doc.get("templating", {}).get("list", []):
            self.values[variable["name"]] = self._resolve(variable, preferred)

    def _resolve(self, variable: dict[str, Any], preferred: Mapping[str, str]) -> str:
        name, kind = variable["name"], variable.get("type")
        if kind == "datasource":
            return "prometheus"
        if kind != "query":
            self._gap(f"variable ${name}", str(variable.get("query")),
                      f"variable type {kind!r} not handled by this test")
            return ""
        raw = variable.get("query")
        query = substitute(raw["query"] if isinstance(raw, dict) else str(raw), self.values)
        options = self._options(name, query, variable.get("regex", ""))
        self.options[name] = options
        if not options:
            self._gap(f"variable ${name}", query, "no values: the dropdown is empty")
        elif name in preferred and preferred[name] not in options:
            self._gap(f"variable ${name}", query,
                      f"the workload's {preferred[name]!r} is not among {options}")
        if variable.get("includeAll"):
            if variable.get("allValue"):
                return str(variable["allValue"])
            escaped = [_escape_regex(v) for v in options]
            return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
        choice = preferred.get(name)
        value = choice if choice in options else (options[0] if options else "")
        return _escape_regex(value) if variable.get("multi") else _escape_plain(value)

    def _options(self, name: str, query: str, regex: str) -> list[str]:
        match = _LABEL_VALUES.match(query)
        if match is None:
            self._gap(f"variable ${name}", query, "not a label_values() query")
            return []
        selector, label = match.group(1), match.group(2)
        try:
            if selector:
                values = self.prometheus.series_labels(selector, label)
            else:
                values = self.prometheus.api(f"label/{label}/values")
        except PromQLError as e:
            self._gap(f"variable ${name}", query, f"Prometheus rejected it: {e}")
            return []
        pattern = _grafana_regex(regex)
        if pattern is not None:
            kept = []
            for value in values:
                m = pattern.search(value)
                if m:
                    kept.append(m.group(1) if m.groups() else value)
            values = kept
        return sorted(set(values))

    def _gap(self, panel: str, expr: str, why: str) -> None:
        self.gaps.append(Gap(self.name, panel, expr, why))


def builtins(start: float, end: float) -> dict[str, str]:
    span = max(1, int(end - start))
    interval = max(SCRAPE_INTERVAL, math.ceil(span / MAX_DATA_POINTS))
    rate_interval = max(interval + SCRAPE_INTERVAL, 4 * SCRAPE_INTERVAL)
    return {
        "__interval": f"{interval}s", "__interval_ms": str(interval * 1000),
        "__rate_interval": f"{rate_interval}s",
        "__range": f"{span}s", "__range_s": str(span), "__range_ms": str(span * 1000),
    }


def _has_data(result: list[dict[str, Any]]) -> bool:
    samples = [s["value"] for s in result if "value" in s]
    samples += [v for s in result for v in s.get("values", [])]
    return any(math.isfinite(float(value)) for _, value in samples)


def _absent_metrics(prometheus: Prometheus, expr: str, since: float) -> list[str]:
    names = {n for n in _METRIC.findall(expr) if n.startswith("pulsar_")}
    absent = []
    for name in sorted(names):
        series = prometheus.api("series", **{"match[]": name, "start": f"{since:.3f}"})
        if not series:
            absent.append(name)
    return absent


def _run(prometheus: Prometheus, target: Target, expr: str, start: float, end: float,
         step: float) -> Gap | None:
    def gap(why: str) -> Gap:
        return Gap(target.dashboard, target.panel, expr, why)

    if _VARIABLE.search(expr):
        return gap("a template variable is left unsubstituted")
    try:
        result = (prometheus.instant(expr, at=end) if target.instant
                  else prometheus.range(expr, start, end, step))
    except PromQLError as e:
        return gap(f"Prometheus rejected it: {e}")
    if _has_data(result):
        return None
    absent = _absent_metrics(prometheus, expr, start)
    kind = "instant" if target.instant else "range"
    if absent:
        return gap(f"no data ({kind}); no series at all for: {', '.join(absent)}")
    return gap(f"no data ({kind}); {len(result)} series, none with a non-NaN sample")


def _settle(scenario: Scenario) -> None:
    """Give the slow signals time to appear when this file runs alone: a few published
    cycles, an eviction on the size-quota topic, a topic over its time quota. Not an
    assertion: whatever is still missing afterwards shows up as a gap."""
    prometheus, work = scenario.prometheus, scenario.workload
    waits = [
        f'changes(pulsar_quota_exporter_last_successful_cycle_timestamp_seconds'
        f'{{cluster="{work.cluster}"}}[10m]) >= 3',
        f'pulsar_storage_backlog_quota_exceeded_evictions_total{{topic="{work.sized_topic}"}}',
        f'pulsar_storage_backlog_quota_exceeded{{topic="{work.held_topic}"}} == 1',
    ]
    for expr in waits:
        try:
            poll(lambda e=expr: prometheus.instant(e), timeout=180, interval=1.0, what=expr)
        except AssertionError:
            continue


def test_both_sources_are_read_and_up(scenario: Scenario) -> None:
    prometheus = scenario.prometheus
    expected = {scenario.broker.metrics_url, scenario.replay.url}
    poll(lambda: {s["metric"]["source"]
                  for s in prometheus.instant("pulsar_quota_exporter_source_up == 1")},
         "both sources up in Prometheus in the same cycle", timeout=60,
         until=lambda sources: sources == expected)
    assert scenario.replay.requests >= 1
    # The last value over 30 s: one scrape past its timeout marks every series stale.
    malformed = prometheus.instant(
        f'last_over_time(pulsar_quota_exporter_source_malformed_lines_total'
        f'{{source="{scenario.replay.url}"}}[30s])')
    assert [float(s["value"][1]) for s in malformed] == [0.0]


def test_every_panel_query_returns_data(scenario: Scenario) -> None:
    assert DASHBOARDS, "no dashboards/*.json: run `pulsar-quota-exporter generate`"
    _settle(scenario)
    prometheus, work = scenario.prometheus, scenario.workload
    start, end = scenario.started_at, time.time()
    values = builtins(start, end)
    step = float(values["__interval"].rstrip("s"))
    preferred = {"cluster": work.cluster, "tenant": work.tenant,
                 "namespace": work.stalled_topic.split("://")[1].rsplit("/", 1)[0],
                 "topic": work.stalled_topic, "resource_group": work.resource_group}
    gaps: list[Gap] = []
    checked = 0
    for path in DASHBOARDS:
        dashboard = Dashboard(path, prometheus, preferred, values)
        gaps += dashboard.gaps
        found = targets(path)
        assert found, f"{path.name} has no panel queries"
        for target in found:
            checked += 1
            expr = substitute(target.expr, dashboard.values)
            gap = _run(prometheus, target, expr, start, end, step)
            for _ in range(3):  # one scrape past its 1 s timeout leaves an instant empty
                if gap is None or not target.instant:
                    break
                time.sleep(2)
                gap = _run(prometheus, target, expr, start, time.time(), step)
            if gap is not None:
                gaps.append(gap)
    assert not gaps, (f"{len(gaps)} of {checked} panel queries (plus variables) return no "
                      f"data over the last {values['__range']}:\n"
                      + "\n".join(str(g) for g in gaps))
