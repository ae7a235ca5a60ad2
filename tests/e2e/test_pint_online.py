"""cloudflare's `pint` with its online checks, against the e2e scenario's real Prometheus:
the one that scrapes the exporter under the generated rules' job name and evaluates those
rules. Offline, pint sees only the rules' text (tests/chart/test_checked_by_cluster_tools.py);
online it also asks this Prometheus whether every selector returns series (`promql/series`:
a misspelt metric or a job label the deployment does not use), whether rate windows cover
its scrape interval (`promql/rate`), whether joins match (`promql/vector_matching`), and
whether a counter is read as one (`promql/counter`, from the scrape's metadata). The config is
the one README.md shows operators, pointed at this Prometheus.

Families that appear only after the workload has run a few cycles (evictions, the peer's
usage) are absent for the first seconds, so the clean report is awaited, within a deadline;
a rule that never comes clean fails with pint's last report. A mutated rule file shows the
online checks are really asking this Prometheus.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.scenario import REPO, Scenario, rule_files
from tests.harness import go_tools
from tests.harness.wait import poll

CHART_RULES = sorted((REPO / "helm" / "pulsar-quota-exporter" / "files" / "rules")
                     .glob("*.rules.yaml"))
CLEAN_WITHIN = 120.0  # seconds: the scenario's first cycles, a few times over


def _pint(config: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    pint = go_tools.pint()
    if not pint.is_file():
        pytest.fail(f"{pint} is not built: `python -m tests.harness.go_tools` builds it")
    return subprocess.run([str(pint), "--no-color", "-c", str(config), "lint",
                           "--min-severity=info", "--fail-on=info", *map(str, files)],
                          capture_output=True, text=True, timeout=300, check=False)


def readme_config() -> str:
    """The pint config README.md shows operators, one block of hcl."""
    blocks = re.findall(r"```hcl\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert len(blocks) == 1, "README.md shows one pint config"
    return blocks[0]


@pytest.fixture
def config(scenario: Scenario, tmp_path: Path) -> Path:
    """README's pint config, its server renamed `e2e` and pointed at the scenario's
    Prometheus (`required`: an API error is a Bug)."""
    text, named = re.subn(r'prometheus "\w+"', 'prometheus "e2e"', readme_config())
    text, pointed = re.subn(r'uri\s*=\s*"[^"]*"', f'uri = "{scenario.prometheus.url}"', text)
    assert named == pointed == 1 and "required = true" in text, text
    path = tmp_path / "pint.hcl"
    path.write_text(text)
    return path


@pytest.mark.parametrize("where", ["alerts", "chart"])
def test_pint_online_finds_nothing_in_the_rules(config: Path, where: str) -> None:
    """Each set alone, as it is deployed: together, every rule is its own duplicate."""
    files = rule_files() if where == "alerts" else CHART_RULES
    assert len(files) == len(rule_files())
    done = poll(lambda: _pint(config, *files), "pint online clean", timeout=CLEAN_WITHIN,
                interval=5,
                until=lambda d: d.returncode == 0 and "Problems found" not in d.stderr)
    assert "online=true" in done.stderr, done.stderr  # the checks that ask Prometheus ran


@pytest.mark.parametrize(("old", "new", "selector"), [
    ("pulsar_quota_exporter_source_up{", "pulsar_quota_exporter_sources_up{",
     "pulsar_quota_exporter_sources_up"),
    ('job="pulsar-quota-exporter"', 'job="pqe"', "up"),
], ids=["misspelt-metric", "other-job"])
def test_pint_online_finds_a_selector_this_prometheus_has_no_series_for(
        scenario: Scenario, config: Path, tmp_path: Path, old: str, new: str,
        selector: str) -> None:
    source = REPO / "alerts" / "exporter.rules.yaml"
    text = source.read_text()
    assert old in text
    broken = tmp_path / "exporter.rules.yaml"
    broken.write_text(text.replace(old, new))
    done = _pint(config, broken)
    assert done.returncode != 0
    report = " ".join(done.stderr.split())  # pint writes its problems to stderr
    assert "Bug: query on nonexistent series (promql/series)" in report, done.stderr
    # pint words it "didn't have any series for the `m` metric", or, once it has seen the
    # metric with the label, "has the `m` metric with the `job` label but no series matching"
    assert f"`e2e` Prometheus server at {scenario.prometheus.url}" in report, done.stderr
    assert f"`{selector}` metric" in report, done.stderr
