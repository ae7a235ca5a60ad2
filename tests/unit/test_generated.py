"""Committed generated files are exactly what `generate` would write now."""

import pytest

from exporter.generate import checkout as checkout_module
from exporter.generate import readme
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


def test_readme_table_lists_every_catalogue_metric():
    from exporter.catalogue import CATALOGUE

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for m in CATALOGUE:
        assert f"`{m.name}`" in text, m.name


def test_check_mode_reports_a_stale_file(tmp_path):
    (tmp_path / "README.md").write_text(f"x\n{readme.BEGIN}\nold\n{readme.END}\n")
    assert generate(check=True, root=tmp_path) == 1
    assert "old" in (tmp_path / "README.md").read_text()  # check mode changes nothing
    assert generate(check=False, root=tmp_path) == 0
    assert generate(check=True, root=tmp_path) == 0


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
