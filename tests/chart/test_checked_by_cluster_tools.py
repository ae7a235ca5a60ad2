"""The rules and the chart's custom resources, checked by the tools the clusters that run them
have: promtool 3 (`check rules --lint=all --lint-fatal`, `test rules`), cloudflare's `pint`
(its offline checks), and prometheus-operator's own CRD schemas for the ServiceMonitor and
PrometheusRule the chart renders. All three come from the Go module proxy
(tests/harness/go_tools.py, run by ./dev test); each is also shown refusing a broken input,
so a pass means something. The VictoriaMetrics operator's schemas for the VMServiceScrape and
VMRule are kept in tests/chart/crds/ (the proxy refuses its modules), and no field of any of
these resources is one the API server would prune.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.test_helm_chart import ALL_ON, one, render
from tests.harness import go_tools

pytestmark = pytest.mark.tools
ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "alerts").glob("*.rules.yaml"))
CHART_RULES = sorted((ROOT / "helm" / "pulsar-quota-exporter" / "files" / "rules").glob("*.yaml"))
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.test.yaml"))
ENABLED_ONLY = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
BROKEN_TEMPLATE = """groups:
  - name: g
    rules:
      - alert: Broken
        expr: sum(rate(foo_total[5m])) > 0
        annotations:
          summary: "{{ $labels.instance }} is broken"
"""


@pytest.fixture(scope="module")
def tools() -> Path:
    """`.cache/go/` with promtool 3, pint and the CRDs; missing, the test fails (never skips)."""
    if not go_tools.installed():
        pytest.fail("promtool 3, pint or the CRD schemas are not built: "
                    "run `python -m tests.harness.go_tools` (./dev test does)")
    return go_tools.HOME


def _run(argv: list[str | Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120,
                          check=False)


# --- promtool 3 ------------------------------------------------------------------------------

def test_promtool_3_lints_every_rule_file_clean(tools: Path) -> None:
    version = _run([go_tools.promtool3(tools), "--version"])
    assert version.returncode == 0 and "promtool" in version.stdout
    done = _run([go_tools.promtool3(tools), "check", "rules", "--lint=all", "--lint-fatal",
                 *RULE_FILES, *CHART_RULES])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(RULE_FILES) + len(CHART_RULES)


def test_promtool_3_runs_the_rule_tests(tools: Path) -> None:
    done = _run([go_tools.promtool3(tools), "test", "rules", *RULE_TESTS])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(RULE_TESTS)


def test_promtool_3_lint_refuses_a_duplicate_rule(tools: Path, tmp_path: Path) -> None:
    rules = yaml.safe_load(RULE_FILES[0].read_text())
    group = rules["groups"][0]
    group["rules"].append(copy.deepcopy(group["rules"][0]))
    path = tmp_path / "dup.rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = _run([go_tools.promtool3(tools), "check", "rules", "--lint=all", "--lint-fatal", path])
    assert done.returncode != 0 and "duplicate" in (done.stdout + done.stderr).lower()


# --- pint ------------------------------------------------------------------------------------

def _pint(tools: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return _run([go_tools.pint(tools), "--offline", "--no-color", "lint", "--min-severity=info",
                 "--fail-on=info", *files])


def test_pint_finds_nothing_in_the_rules(tools: Path) -> None:
    done = _pint(tools, *RULE_FILES, *CHART_RULES)
    assert done.returncode == 0, done.stderr
    rules = sum(len(group["rules"]) for path in (*RULE_FILES, *CHART_RULES)
                for group in yaml.safe_load(path.read_text())["groups"])
    assert f"entries={rules} " in done.stderr  # every rule was read and checked


def test_pint_refuses_a_template_naming_a_label_the_query_drops(tools: Path,
                                                                tmp_path: Path) -> None:
    path = tmp_path / "broken.rules.yaml"
    path.write_text(BROKEN_TEMPLATE)
    done = _pint(tools, path)
    assert done.returncode != 0
    assert "The template is using `instance` label" in done.stderr, done.stderr


# --- prometheus-operator's CRD schemas -------------------------------------------------------

def _schema(tools: Path, plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((go_tools.crd_dir(tools) / f"monitoring.coreos.com_{plural}.yaml")
                         .read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return served["schema"]["openAPIV3Schema"]


def _errors(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(doc)]


@pytest.mark.parametrize(("kind", "plural"), [("ServiceMonitor", "servicemonitors"),
                                              ("PrometheusRule", "prometheusrules")])
@pytest.mark.parametrize("values", [ENABLED_ONLY, ALL_ON], ids=["enabled-only", "all-on"])
def test_the_charts_custom_resources_match_the_operators_schema(
        tools: Path, kind: str, plural: str, values: dict[str, Any]) -> None:
    doc = one(render(values), kind)
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert _errors(_schema(tools, plural), doc) == []


def pruned(schema: dict[str, Any], doc: Any, path: str = "") -> list[str]:
    """Fields the API server would drop without a word: a structural schema prunes every key
    its `properties` do not name (unless it keeps unknown fields), so a misspelt key
    validates and is lost; jsonschema alone never says so."""
    if isinstance(doc, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return []
        known = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        found = []
        for key, value in doc.items():
            where = f"{path}.{key}" if path else key
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue  # the API server's own, whatever the CRD says of them
            if key in known:
                found += pruned(known[key], value, where)
            elif isinstance(extra, dict):
                found += pruned(extra, value, where)
            else:
                found.append(where)
        return found
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        return [f for i, item in enumerate(doc)
                for f in pruned(schema["items"], item, f"{path}.{i}")]
    return []


@pytest.mark.parametrize(("kind", "plural"), [("ServiceMonitor", "servicemonitors"),
                                              ("PrometheusRule", "prometheusrules")])
def test_no_field_of_the_charts_custom_resources_is_pruned(tools: Path, kind: str,
                                                          plural: str) -> None:
    assert pruned(_schema(tools, plural), one(render(ALL_ON), kind)) == []


def test_the_operators_schema_refuses_what_the_operator_would(tools: Path) -> None:
    monitor = copy.deepcopy(one(render(ALL_ON), "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"  # not a Prometheus duration
    monitor["spec"]["endpoints"][0]["scheme"] = "ftp"
    found = _errors(_schema(tools, "servicemonitors"), monitor)
    assert any(e.startswith("spec.endpoints.0.interval:") for e in found), found
    assert any(e.startswith("spec.endpoints.0.scheme:") for e in found), found


# --- VictoriaMetrics operator's CRD schemas --------------------------------------------------

VM_CRDS = ROOT / "tests" / "chart" / "crds" / "victoriametrics-operator.yaml"


def _vm_schema(kind: str) -> dict[str, Any]:
    (crd,) = [d for d in yaml.safe_load_all(VM_CRDS.read_text())
              if d["spec"]["names"]["kind"] == kind]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return served["schema"]["openAPIV3Schema"]


VM_ON = {"victoriaMetrics": {"serviceScrape": {"enabled": True}, "rule": {"enabled": True}}}


@pytest.mark.parametrize("kind", ["VMServiceScrape", "VMRule"])
@pytest.mark.parametrize("values", [VM_ON, ALL_ON], ids=["enabled-only", "all-on"])
def test_the_charts_victoria_metrics_resources_match_the_operators_schema(
        kind: str, values: dict[str, Any]) -> None:
    doc = one(render(values), kind)
    assert doc["apiVersion"] == "operator.victoriametrics.com/v1beta1"
    schema = _vm_schema(kind)
    assert _errors(schema, doc) == []
    assert pruned(schema, doc) == []


def test_the_victoria_metrics_schema_prunes_prometheus_operators_spelling() -> None:
    """The one difference between a VMServiceScrape and its ServiceMonitor twin: written the
    ServiceMonitor's way, the relabelling would be valid and silently dropped."""
    scrape = copy.deepcopy(one(render(ALL_ON), "VMServiceScrape"))
    endpoint = scrape["spec"]["endpoints"][0]
    endpoint["relabelings"] = endpoint.pop("relabelConfigs")
    schema = _vm_schema("VMServiceScrape")
    assert _errors(schema, scrape) == []
    assert pruned(schema, scrape) == ["spec.endpoints.0.relabelings"]
