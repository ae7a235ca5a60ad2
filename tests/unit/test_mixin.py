"""mixin.libsonnet, evaluated by go-jsonnet (tests/harness/go_tools.py): with its defaults it is
the committed rules and dashboards, and with another selector in `_config` it is what
`generate --selector … --out DIR` writes for that selector."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.generate import alerts, dashboards, mixin
from exporter.generate.all import deployment_outputs
from exporter.generate.thresholds import DEFAULT
from tests.harness import go_tools

pytestmark = pytest.mark.tools
ROOT = Path(__file__).resolve().parents[2]
OTHER = 'job="pqe-prod",env=~"prod|staging"'  # two matchers, one a regex with a |


def evaluate(config: dict[str, str] | None = None) -> dict[str, Any]:
    """The mixin's rule groups and dashboards, as a jsonnet user would mix it in."""
    tool = go_tools.jsonnet()
    if not tool.is_file():
        pytest.fail(f"{tool} is not built: `python -m tests.harness.go_tools` builds it")
    code = (f"local m = (import '{mixin.FILE}') + {{ _config+:: {json.dumps(config or {})} }};"
            " { groups: m.prometheusAlerts.groups, dashboards: m.grafanaDashboards }")
    done = subprocess.run([str(tool), "-J", str(ROOT), "-e", code], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def files(root: Path) -> dict[str, Any]:
    """The rule groups and dashboards under `root`, laid out as in the repository."""
    groups = [g for _, name in alerts.RULE_FILES.values()
              for g in yaml.safe_load((root / "alerts" / name).read_text())["groups"]]
    boards = {d.file: json.loads((root / "dashboards" / d.file).read_text())
              for d in dashboards.DASHBOARDS}
    return {"groups": groups, "dashboards": boards}


def test_the_mixin_is_the_committed_rules_and_dashboards() -> None:
    made = evaluate()
    assert made == files(ROOT)
    assert sum(len(g["rules"]) for g in made["groups"]) == len(alerts.alerts())


def test_the_mixin_with_another_selector_is_what_generate_writes_for_it(tmp_path: Path) -> None:
    thresholds = DEFAULT.with_(selector=OTHER)
    for path, make in deployment_outputs(tmp_path, thresholds).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make(""))
    made = evaluate({"pulsarQuotaExporterSelector": thresholds.selector_text})
    written = files(tmp_path)
    assert made == written
    exprs = [r["expr"] for g in made["groups"] for r in g["rules"]]
    assert all('job="pqe-prod", env=~"prod|staging"' in e for e in exprs)
    assert not any(DEFAULT.selector_text in e for e in exprs)
