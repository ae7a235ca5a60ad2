"""The docs hold together: every relative link and anchor in the Markdown resolves, the README
stays a front page that links to every doc, every doc links back to it, and the README's
configs load."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.harness import markdown

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / name for name in ("README.md", "RUNBOOK.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    + list((ROOT / "docs").glob("*.md"))
)
README_MAX_LINES = 300


def _name(path: Path, root: Path = ROOT) -> str:
    return str(path.relative_to(root))


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `path` whose file (inside `root`) or anchor does not exist."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for line, target in markdown.links(text):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue  # an absolute URL: not ours to check offline
        where = f"{_name(path, root)}:{line}: {target}"
        dest = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if not dest.is_relative_to(root) or not dest.exists():
            broken.append(f"{where}: no such file")
            continue
        if not parts.fragment:
            continue
        if dest.suffix != ".md":
            broken.append(f"{where}: an anchor into a file that is not Markdown")
        elif parts.fragment not in markdown.anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{where}: {_name(dest, root)} has no heading or anchor "
                          f"#{parts.fragment}")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_every_relative_link_and_anchor_resolves(path):
    assert markdown.links(path.read_text(encoding="utf-8")), f"{_name(path)} links nowhere"
    assert broken_links(path) == []


def test_a_dead_link_or_anchor_is_found(tmp_path):
    (tmp_path / "b.md").write_text("# Title\n\n## Sub section\n\n<a id=\"here\"></a>\n")
    (tmp_path / "a.md").write_text(
        "[ok](b.md#sub-section) [ok](b.md#here) [ok](#top)\n\n# Top\n\n"
        "```\n[not a link](nowhere.md)\n```\n`[nor this](nowhere.md)`\n"
        "[gone](c.md) [no anchor](b.md#title-2)\n[split\nacross lines](#nope)\n"
        "[outside](../x.md)\n"
    )
    assert broken_links(tmp_path / "a.md", root=tmp_path) == [
        "a.md:9: c.md: no such file",
        "a.md:9: b.md#title-2: b.md has no heading or anchor #title-2",
        "a.md:10: #nope: a.md has no heading or anchor #nope",
        "a.md:12: ../x.md: no such file",
    ]


def test_the_readme_is_a_front_page_that_links_to_every_doc():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    # the two commands, as they are: .ci/run runs the test one
    assert "\n./dev demo " in text and "\n./dev test " in text
    targets = {urlsplit(t).path for _, t in markdown.links(text)}
    for doc in DOCS:
        if doc.name != "README.md":
            assert _name(doc) in targets, f"README.md does not link to {_name(doc)}"
    assert "LICENSE" in targets


@pytest.mark.parametrize("path", [d for d in DOCS if d.name != "README.md"], ids=_name)
def test_every_doc_links_back_to_the_readme(path):
    readme = (ROOT / "README.md").resolve()
    targets = [urlsplit(t).path for _, t in markdown.links(path.read_text(encoding="utf-8"))]
    assert any(t and (path.parent / t).resolve() == readme for t in targets)


def test_every_config_in_the_readme_validates(tmp_path):
    """The README's YAML blocks that are exporter configs (they name a `cluster`) load as
    `validate-config` loads them: a first config copied from the front page works."""
    from exporter.config.load import load

    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, flags=re.M | re.S)
    configs = [b for b in blocks if re.search(r"^cluster:", b, flags=re.M)]
    assert configs, "the README shows no config"
    for i, block in enumerate(configs):
        path = tmp_path / f"readme-{i}.yaml"
        path.write_text(block)
        config = load(path)
        assert config.cluster and config.sources.brokers
