"""The locks in requirements/ (made by `./dev lock`, uv's resolver, with hashes) against
pyproject.toml, each other and the .venv `./dev` installs from them.

pyproject.toml says which versions the project accepts; a lock says the one version of
every distribution it was tested with, and the hashes pip then checks
(`pip install --require-hashes -r`). A dependency added to pyproject.toml without
`./dev lock` fails here, not on a user's machine; so does a lock edited by hand."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {"runtime": (), "extras": ("demo", "replay"), "test": ("test",)}
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)(?: ; (.+?))?(?: \\)?$")
_HASH = re.compile(r"^    --hash=sha256:[0-9a-f]{64}(?: \\)?$")


def pins(name: str) -> dict[str, tuple[str, int, str | None]]:
    """Each locked distribution: (version, how many hashes, its environment marker)."""
    found: dict[str, tuple[str, int, str | None]] = {}
    current = ""
    for line in (ROOT / "requirements" / f"{name}.lock").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if match := _PIN.match(line):
            current = canonicalize_name(match[1])
            found[current] = (match[2], 0, match[3])
        else:
            assert _HASH.match(line), f"{name}.lock: not a pin or a hash: {line!r}"
            version, hashes, marker = found[current]
            found[current] = (version, hashes + 1, marker)
    return found


def wanted(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    return [Requirement(s) for s in specs]


@pytest.mark.parametrize("name", LOCKS)
def test_every_dependency_is_pinned_within_pyprojects_range_with_hashes(name: str) -> None:
    locked = pins(name)
    for requirement in wanted(LOCKS[name]):
        key = canonicalize_name(requirement.name)
        assert key in locked, f"{requirement} is not in {name}.lock: run ./dev lock"
        version = locked[key][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{name}.lock pins {key}=={version}, outside pyproject.toml's {requirement}: "
            "run ./dev lock")
    assert all(hashes >= 1 for _, hashes, _ in locked.values()), name
    header = (ROOT / "requirements" / f"{name}.lock").read_text().splitlines()[:2]
    assert header[1].strip() == "#    ./dev lock", header


def test_the_locks_agree_on_every_version() -> None:
    """What the image installs (runtime) is what the tests ran (test)."""
    test = pins("test")
    for name in ("runtime", "extras"):
        for key, (version, _, _) in pins(name).items():
            assert test[key][0] == version, (name, key, version, test[key][0])


def test_the_venv_holds_what_the_test_lock_names() -> None:
    """`./dev` installs from the lock whenever it changes: the tests run on those versions."""
    for key, (version, _, marker) in pins("test").items():
        if marker and not Marker(marker).evaluate():
            continue
        assert metadata.version(key) == version, key


def test_a_hand_edited_pin_outside_the_range_is_caught(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the runtime lock with pyarrow one major version back."""
    (tmp_path / "requirements").mkdir()
    text = (ROOT / "requirements" / "runtime.lock").read_text()
    version = pins("runtime")["pyarrow"][0]
    older = f"{int(version.split('.')[0]) - 1}.0.0"
    (tmp_path / "requirements" / "runtime.lock").write_text(
        text.replace(f"pyarrow=={version}", f"pyarrow=={older}"))
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=re.escape("outside pyproject.toml's pyarrow")):
        test_every_dependency_is_pinned_within_pyprojects_range_with_hashes("runtime")
