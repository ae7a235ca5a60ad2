"""Committed generated files are exactly what `generate` would write now."""

from exporter.generate import readme
from exporter.generate.all import ROOT, generate, outputs


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
