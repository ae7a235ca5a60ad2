"""The generated Grafana dashboards: valid against Grafana's dashboard JSON schema (committed,
generated from @grafana/schema; see dashboards/schema/README.md), every query PromQL that
promtool parses and that selects only catalogue metrics, a unit and the catalogue's help on
every panel, threshold lines from the thresholds object, stable uids and working links."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from test_alerts import metric_names  # tests/unit is on sys.path (pytest prepend mode)

from exporter.catalogue import BY_NAME, CATALOGUE
from exporter.generate import dashboards as gen
from exporter.generate import selector as sel
from exporter.generate.thresholds import DEFAULT

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "dashboards" / "schema" / "dashboard.schema.json").read_text())
FILES = sorted((ROOT / "dashboards").glob("*.json"))
SAMPLES = {s for m in CATALOGUE for s in m.sample_names}
# Unit ids from Grafana's packages/grafana-data/src/valueFormats/categories.ts that we use;
# `count:<text>` is Grafana's custom count unit (valueFormats.ts, getValueFormat).
GRAFANA_UNITS = {"s", "bytes", "percentunit", "Bps", "short", "dateTimeAsIso"}
REQUIRED_VARIABLES = {"datasource", "cluster", "tenant", "namespace", "topic", "resource_group",
                      "monitoring_class"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(doc: dict) -> list[dict]:
    return [p for p in doc["panels"] if p["type"] != "row"]


def queries(doc: dict) -> list[str]:
    return [t["expr"] for p in panels(doc) for t in p["targets"]]


def concrete(expr: str) -> str:
    """Grafana's variables replaced by values, as Grafana would before querying."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    return re.sub(r"\$\{?(\w+)\}?", "x", expr)


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {path.name: load(path) for path in FILES}


def test_the_four_dashboards_exist(docs):
    assert sorted(docs) == sorted(d.file for d in gen.DASHBOARDS)
    titles = {doc["title"] for doc in docs.values()}
    assert titles == {"Pulsar / Backlog quotas", "Pulsar / Resource groups", "Pulsar / Load",
                      "Pulsar / Quota exporter health"}


def test_every_dashboard_validates_against_grafanas_schema(docs):
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    validator.check_schema(SCHEMA)
    for name, doc in docs.items():
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, (name, errors[:5])


def test_the_schema_catches_wrong_types_and_unknown_keys(docs):
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    doc = copy.deepcopy(next(iter(docs.values())))
    doc["title"] = 123
    assert not validator.is_valid(doc)
    doc = copy.deepcopy(next(iter(docs.values())))
    panels(doc)[0]["fieldconfig"] = {}  # misspelt
    assert not validator.is_valid(doc)
    doc = copy.deepcopy(next(iter(docs.values())))
    del doc["schemaVersion"]
    assert not validator.is_valid(doc)


def test_every_panel_query_parses_as_promql(docs, tmp_path, promtool):
    rules = [
        {"record": f"dashboard:{name[:-5].replace('-', '_')}:{p['id']}{t['refId']}",
         "expr": concrete(t["expr"])}
        for name, doc in docs.items() for p in panels(doc) for t in p["targets"]
    ]
    broken = {"record": "control:broken", "expr": concrete('sum by (le (x{a=~"$a"}[$__range])')}
    good_file, bad_file = tmp_path / "queries.rules.yaml", tmp_path / "control.rules.yaml"
    good_file.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    bad_file.write_text(yaml.safe_dump({"groups": [{"name": "control", "rules": [broken]}]}))
    good = subprocess.run([promtool, "check", "rules", str(good_file)],
                          capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"SUCCESS: {len(rules)} rules found" in good.stdout
    bad = subprocess.run([promtool, "check", "rules", str(bad_file)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0  # promtool really parses what it is given


def test_queries_select_only_catalogue_metrics_and_filter_by_cluster(docs):
    for name, doc in docs.items():
        for p in panels(doc):
            for t in p["targets"]:
                found = metric_names(t["expr"])
                assert found, (name, p["title"])
                assert found <= SAMPLES, (name, p["title"], found - SAMPLES)
                selectors = re.findall(r"(\w+)\{([^}]*)\}", t["expr"])
                assert {metric for metric, _ in selectors} == found, (name, p["title"])
                for metric, matchers in selectors:
                    assert 'cluster=~"$cluster"' in matchers, (name, p["title"], metric)


def all_queries(doc: dict) -> list[str]:
    return queries(doc) + [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]


def test_every_query_selects_the_exporters_job_first(docs):
    """A broker's same-named PIP-323 series (scraped under its own job) never show up."""
    for name, doc in docs.items():
        for expr in all_queries(doc):
            selectors = re.findall(r"(\w+)\{([^}]*)\}", expr)
            assert selectors and {m for m, _ in selectors} == metric_names(expr) & SAMPLES, (
                name, expr)
            for metric, matchers in selectors:
                assert matchers.startswith('job="pulsar-quota-exporter"'), (name, metric)
            assert sel.unselected(expr, DEFAULT.selector) == [], (name, expr)


def test_a_custom_selector_reaches_every_query_and_keeps_the_variable_filters(docs):
    t = DEFAULT.with_(selector='job="pulsar-exporter",env="prod"')
    for d in gen.DASHBOARDS:
        custom, committed = rendered(d.slug, t), docs[d.file]
        pairs = list(zip(all_queries(custom), all_queries(committed), strict=True))
        for mine, theirs in pairs:
            assert "pulsar-quota-exporter" not in mine
            assert mine == theirs.replace('job="pulsar-quota-exporter"',
                                          'job="pulsar-exporter", env="prod"')
        assert any('cluster=~"$cluster"' in mine for mine, _ in pairs)


def test_variable_queries_use_catalogue_metrics(docs):
    for doc in docs.values():
        for v in doc["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, (\w+)\)", v["query"])
                assert m, v["query"]
                metric = BY_NAME[m.group(1)]
                assert m.group(3) in metric.labels, v["query"]


def test_template_variables(docs):
    seen = set()
    for name, doc in docs.items():
        variables = [v["name"] for v in doc["templating"]["list"]]
        assert variables[:2] == ["datasource", "cluster"], name
        seen |= set(variables)
        text = json.dumps([queries(doc), [v.get("query") for v in doc["templating"]["list"]]])
        for var in variables[1:]:
            assert f"${var}" in text, f"{name}: ${var} is never used"
        for p in panels(doc):
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert all(t["datasource"] == p["datasource"] for t in p["targets"])
    assert seen == REQUIRED_VARIABLES


def test_every_panel_has_a_grafana_unit(docs):
    for name, doc in docs.items():
        for p in panels(doc):
            u = p["fieldConfig"]["defaults"].get("unit")
            assert u in GRAFANA_UNITS or re.fullmatch(r"count:\w+/s", u or ""), (
                name, p["title"], u)


def test_single_metric_panels_use_the_catalogue_unit(docs):
    expected = {"seconds": "s", "bytes": "bytes", "ratio": "percentunit"}
    checked = 0
    for doc in docs.values():
        for p in panels(doc):
            exprs = [t["expr"] for t in p["targets"]]
            plain = [re.fullmatch(r"(?:max by \([^)]*\) \()?(\w+)\{[^}]*\}\)?", e) for e in exprs]
            if all(plain):
                unit = BY_NAME[plain[0].group(1)].unit.value
                if unit in expected:
                    assert p["fieldConfig"]["defaults"]["unit"] == expected[unit], p["title"]
                    checked += 1
    assert checked >= 8


def test_descriptions_carry_the_catalogue_help(docs):
    for name, doc in docs.items():
        for p in panels(doc):
            for sample in {n for t in p["targets"] for n in metric_names(t["expr"])}:
                metric = next(m for m in CATALOGUE if sample in m.sample_names)
                assert metric.help in p["description"], (name, p["title"], metric.name)


def test_every_catalogue_metric_is_on_a_dashboard(docs):
    shown = {n for doc in docs.values() for e in queries(doc) for n in metric_names(e)}
    missing = [m.name for m in CATALOGUE if not set(m.sample_names) & shown]
    assert not missing


def test_uids_tags_and_links(docs):
    uids = {doc["uid"] for doc in docs.values()}
    assert uids == {d.uid for d in gen.DASHBOARDS} and len(uids) == len(docs)
    for name, doc in docs.items():
        assert 8 <= len(doc["uid"]) <= 40 and re.fullmatch(r"[a-z0-9-]+", doc["uid"])
        assert {"pulsar", "pulsar-quota-exporter"} <= set(doc["tags"])
        targets = {link["url"].removeprefix("/d/") for link in doc["links"]}
        assert targets == uids - {doc["uid"]}, name
        assert all(link["includeVars"] and link["keepTime"] for link in doc["links"])


def test_panels_tile_the_grid(docs):
    for name, doc in docs.items():
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids)), name
        cells = set()
        for p in doc["panels"]:
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= gen.GRID_WIDTH and g["h"] >= 1, (name, p)
            area = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                    for y in range(g["y"], g["y"] + g["h"])}
            assert not area & cells, (name, p["title"], "overlaps another panel")
            cells |= area
        for p in panels(doc):
            assert [t["refId"] for t in p["targets"]] == list("ABCDEFGH"[: len(p["targets"])])


def steps_of(doc: dict, title: str) -> list[float]:
    panel = next(p for p in panels(doc) if p["title"] == title)
    return [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]]


def rendered(slug: str, thresholds) -> dict:
    return json.loads(gen.render(next(d for d in gen.DASHBOARDS if d.slug == slug), thresholds))


def test_threshold_lines_come_from_the_thresholds_object(docs):
    backlog, groups = docs["backlog-quotas.json"], docs["resource-groups.json"]
    assert steps_of(backlog, "Backlog age against the time quota") == [0.8, 1]
    assert steps_of(groups, "Utilisation per resource group and class") == [0.95, 1.1]
    assert steps_of(groups, "Usage report age per participant") == [600.0]
    assert steps_of(docs["load.json"], "Highest resource usage per broker") == [0.85]
    t = DEFAULT.with_(backlog_near_ratio=0.7, check_slow_fraction=0.25, rg_saturated_ratio=0.9,
                      overload_ratio=0.75, cycle_stalled_intervals=5)
    assert steps_of(rendered("backlog-quotas", t), "Backlog size against the size quota") == [
        0.7, 1]
    assert steps_of(rendered("resource-groups", t),
                    "Utilisation per resource group and class") == [0.9, 1.1]
    assert steps_of(rendered("load", t), "Highest resource usage per broker") == [0.75]
    # lines on the exporter's cadence are drawn from the settings it exports (dashed series)
    slow = panel_of(rendered("backlog-quotas", t), "Check duration against the check interval")
    assert steps_of(rendered("backlog-quotas", t), slow["title"]) == []
    assert [x["expr"] for x in slow["targets"]][3:] == [
        '0.25 * max(pulsar_quota_exporter_check_interval_seconds{job="pulsar-quota-exporter", '
        'cluster=~"$cluster"})',
        'max(pulsar_quota_exporter_check_interval_seconds{job="pulsar-quota-exporter", '
        'cluster=~"$cluster"})']
    stalled = panel_of(rendered("exporter-health", t), "Time since the last completed cycle")
    assert stalled["targets"][1]["expr"] == (
        '5 * max(pulsar_quota_exporter_check_interval_seconds{job="pulsar-quota-exporter", '
        'cluster=~"$cluster"})')
    assert "5 check intervals (dashed)" in stalled["description"]


def panel_of(doc: dict, title: str) -> dict:
    return next(p for p in panels(doc) if p["title"] == title)


def test_sel_refuses_what_the_catalogue_lacks():
    assert gen.sel("pulsar_storage_backlog_size", "namespace") == (
        'pulsar_storage_backlog_size{cluster=~"$cluster", namespace=~"$namespace"}')
    with pytest.raises(ValueError):
        gen.sel("pulsar_storage_backlog_sizes")
    with pytest.raises(ValueError):
        gen.sel("pulsar_load_broker_overloaded", "topic")


def test_committed_dashboards_are_what_the_templates_render():
    for d in gen.DASHBOARDS:
        assert (ROOT / "dashboards" / d.file).read_text() == gen.render(d), d.file
