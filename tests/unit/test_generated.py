"""Committed generated files are exactly what `generate` would write now."""

import pytest

from exporter.generate import checkout as checkout_module
from exporter.generate import metrics, runbooks
from exporter.generate.all import ROOT, generate, outputs
from exporter.generate.checkout import NotACheckout, checkout


def test_committed_generated_files_are_current():
    stale = [
        p
        for p, make in outputs().items()
        if make(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")
    ]
    assert not stale, f"run `pulsar-quota-exporter generate`: {stale}"
    assert generate(check=True) == 0


def test_every_generated_file_is_listed():
    made = {str(p.relative_to(ROOT)) for p in outputs()}
    assert {str(metrics.OUTPUT), str(runbooks.OUTPUT)} <= made
    for folder, suffix in [("alerts", ".yaml"), ("dashboards", ".json"),
                           ("helm/pulsar-quota-exporter/files", "")]:
        committed = {str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob(f"*{suffix}")
                     if p.is_file() and "templates" not in p.parts and "tests" not in p.parts
                     and "schema" not in p.parts}
        assert committed <= made, committed - made


def test_metric_reference_lists_every_catalogue_metric():
    from exporter.catalogue import CATALOGUE

    text = (ROOT / metrics.OUTPUT).read_text(encoding="utf-8")
    for m in CATALOGUE:
        assert f"| `{m.name}`" in text, m.name


def test_check_mode_reports_each_stale_file(tmp_path, capsys):
    assert generate(check=True, root=tmp_path) == 1  # nothing there yet: every file is missing
    assert list(tmp_path.iterdir()) == []  # check mode writes nothing
    assert generate(check=False, root=tmp_path) == 0
    assert generate(check=True, root=tmp_path) == 0
    made = list(outputs(tmp_path))
    for path in made:  # each one stale: --check names every one of them
        path.write_text(path.read_text(encoding="utf-8") + "stale\n", encoding="utf-8")
    capsys.readouterr()
    assert generate(check=True, root=tmp_path) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"out of date: {p.relative_to(tmp_path)}" for p in made]
    assert all(p.read_text(encoding="utf-8").endswith("stale\n") for p in made)


def test_the_checkout_is_found_where_this_code_lives():
    assert checkout() == ROOT


@pytest.mark.parametrize("pyproject", [None, "[project]\nname = 'other'\n", "not toml ["])
def test_a_directory_without_this_projects_pyproject_is_not_a_checkout(tmp_path, pyproject):
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    with pytest.raises(NotACheckout, match=r"pyproject\.toml"):
        checkout(tmp_path)


def test_a_checkout_without_templates_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'pulsar-quota-exporter'\n")
    with pytest.raises(NotACheckout, match="dashboards/templates"):
        checkout(tmp_path)


def test_generate_refuses_with_2_outside_a_checkout(tmp_path, monkeypatch, capsys):
    # As from an installed wheel: the package's would-be checkout has no templates.
    monkeypatch.setattr(checkout_module, "ROOT", tmp_path)
    assert generate(check=False, root=tmp_path) == 2
    assert "not a pulsar-quota-exporter checkout" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


def _committed_texts() -> dict:
    return {p: p.read_text(encoding="utf-8") for p in outputs()}


def test_generate_with_a_selector_writes_rules_and_dashboards_elsewhere(tmp_path, capsys):
    import json

    import yaml

    from exporter import cli
    from exporter.generate import alerts, dashboards

    before = _committed_texts()
    out = tmp_path / "mine"
    assert cli.main(["generate", "--selector", 'job="pulsar-exporter",env="prod"',
                     "--out", str(out)]) == 0
    assert _committed_texts() == before  # the committed files are untouched
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted([f"alerts/{f}" for _, f in alerts.RULE_FILES.values()]
                             + [f"dashboards/{d.file}" for d in dashboards.DASHBOARDS])
    assert "wrote: alerts/backlog.rules.yaml" in capsys.readouterr().err
    exprs = [r["expr"] for _, f in alerts.RULE_FILES.values()
             for g in yaml.safe_load((out / "alerts" / f).read_text())["groups"]
             for r in g["rules"]]
    exprs += [t["expr"] for d in dashboards.DASHBOARDS
              for p in json.loads((out / "dashboards" / d.file).read_text())["panels"]
              for t in p.get("targets", [])]
    assert exprs and all('{job="pulsar-exporter", env="prod"' in e for e in exprs)
    assert not any("pulsar-quota-exporter" in e for e in exprs)
    # current now: --check agrees, and a second run writes nothing
    assert generate(check=True, selector='job="pulsar-exporter",env="prod"', out=out) == 0


@pytest.mark.parametrize("argv", [
    ["generate", "--selector", "job=pulsar-exporter", "--out", "{out}"],  # unquoted value
    ["generate", "--selector", 'job="pulsar-exporter"'],  # would overwrite the committed files
])
def test_generate_refuses_a_bad_selector_or_one_without_out(argv, tmp_path, capsys):
    from exporter import cli

    before = _committed_texts()
    assert cli.main([a.replace("{out}", str(tmp_path / "o")) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "selector" in err and ('label op "value"' in err or "--out" in err)
    assert _committed_texts() == before
    assert not (tmp_path / "o").exists()
