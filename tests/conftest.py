"""Fixtures shared by every test directory, the test tiers, and the Hypothesis profiles.

Tiers. Each test is marked with every component it starts (TIERS), derived at collection from
what it uses, so that nothing has to be remembered test by test:
- the fixtures it requests, directly or through other fixtures (FIXTURE_TIERS);
- the folder it lives in (FOLDER_TIERS);
- where a module starts a component itself rather than through one of those fixtures, its
  own declaration: `pytestmark = pytest.mark.spark` (or a mark on the one test that does).
An unmarked test is pure Python: no JVM, no broker, no program from apt or Maven. That is
checked, not assumed: a test that starts a program its marks do not declare (PROGRAMS) fails.
The check sees what the test process starts; what a child starts (the Spark of an exporter
process) is the module's to declare.

Selection, in the manner of pyarrow's test groups (`./dev test` passes these through):
  pytest                       everything: what CI runs; nothing deselected, nothing skipped
  pytest --fast                the unmarked tests only, Hypothesis profile `dev` (`./dev test
                               --fast` runs them on a worker more than the cores)
  pytest --only-lite           the tests marked lite (`--only-X` repeats: their union)
  pytest --disable-spark       all but the tests marked spark
  pytest --fast --enable-tools the unmarked tests and those that need tools and nothing else
  pytest -m "tools and not spark"   any marker expression
A test runs when every tier it is marked with is enabled (all are, unless `--fast`; `--only-X`
and `--enable-X` enable X, `--disable-X` disables it) and, given `--only-X`, it is marked with
one of those. The rest is deselected, never skipped; a selected test whose component is
missing fails, and a skip is turned into a failure.

Hypothesis: profiles `ci` (today's 200 examples per property) and `dev` (10), chosen by the
HYPOTHESIS_PROFILE environment variable, else `dev` under `--fast` and `ci` otherwise
(`--hypothesis-profile` wins over both).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.harness.apache_pulsar import ApachePulsar, apache_pulsar_fixture
from tests.harness.apache_pulsar_install import VERSION, VERSION_OVERRIDES, VERSIONS
from tests.harness.process import require_binary

TESTS = Path(__file__).resolve().parent

TIERS: dict[str, str] = {
    "spark": "starts Spark: a SparkContext's JVM, a Spark cluster, or an exporter process "
             "(whose first cycle starts one)",
    "lite": "starts a pulsar-lite broker",
    "apache": "starts a real Apache Pulsar standalone broker (a JVM; fetched from Maven "
              "Central by ./dev test)",
    "cluster": "starts the real Apache Pulsar cluster of tests/cluster/",
    "tools": "runs a program ./dev test installs: promtool, amtool, Prometheus, Alertmanager, "
             "chromium, openssl (Debian), or Helm (helm-python-sdk's native library)",
    "e2e": "tests/e2e/: pulsar-lite, the exporter process, Prometheus and Alertmanager",
    "install": "builds the wheel and installs it with its dependencies from the package index "
               "into a fresh virtualenv",
    "image": "tests/image/: builds the OCI image (debootstrap, apt, umoci; needs root) and runs "
             "it with runc against pulsar-lite",
}

# Fixtures that start a component, by name: requesting one (even through another fixture)
# marks the test.
FIXTURE_TIERS: dict[str, tuple[str, ...]] = {
    "apache_pulsar": ("apache",),
    "apache_pulsar_of": ("apache",),
    "apache_cluster": ("cluster",),
    "pulsar_lite": ("lite",),
    "promtool": ("tools",),
    "amtool": ("tools",),
    "prometheus_alertmanager": ("tools",),
    "openssl": ("tools",),
    "chromium": ("tools",),
}

# Folders under tests/ whose every test starts these.
FOLDER_TIERS: dict[str, tuple[str, ...]] = {
    "cluster": ("cluster",),
    "chart": ("tools",),
    "e2e": ("e2e", "lite", "spark", "tools"),
    "image": ("image", "lite", "spark"),
}

# Programs a test may start only when marked with one of these tiers (the executable's name;
# Apache Pulsar's is bin/pulsar).
PROGRAMS: dict[str, tuple[str, ...]] = {
    "java": ("spark", "apache", "cluster"),
    "spark-submit": ("spark",),
    "spark-class": ("spark",),
    "pulsar-lite": ("lite",),
    "pulsar": ("apache", "cluster"),
    "mvn": ("apache", "cluster"),
    "promtool": ("tools",),
    "amtool": ("tools",),
    "prometheus": ("tools",),
    "prometheus-alertmanager": ("tools",),
    "chromium": ("tools",),
    "openssl": ("tools",),
    "helm": ("tools",),
    "debootstrap": ("image",),
    "umoci": ("image",),
    "runc": ("image",),
}

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=10, deadline=None)


# --- fixtures --------------------------------------------------------------------------------

# One real Apache Pulsar standalone broker per session (about 15 s to start, 0.5 GB resident),
# started only when a test asks for it; a missing install fails that test, never skips it.
# OpenTelemetry on (its Prometheus exporter on a port of its own, otel_metrics_url), for the
# tests of pipeline/otel.py: measured on 2 cores, no start time beyond the noise (15.1 s
# against 16.4 s, medians of 3) and about 25 MiB more resident (480 MiB against 453).
apache_pulsar = apache_pulsar_fixture(scope="session", otel=True)


@pytest.fixture(scope="session", params=VERSIONS)
def apache_pulsar_of(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApachePulsar]:
    """A standalone of each version of the matrix (tests/integration/
    test_apache_pulsar_versions.py), configured as `apache_pulsar` plus the version's own
    keys (VERSION_OVERRIDES). pytest orders the tests by this session parameter and
    finalizes one version's broker before it starts the next: one runs at a time. The
    default version with no keys of its own is `apache_pulsar` itself: the same broker."""
    if request.param == VERSION and not VERSION_OVERRIDES.get(VERSION):
        yield request.getfixturevalue("apache_pulsar")
        return
    broker = ApachePulsar(tmp_path_factory.mktemp(f"apache-pulsar-{request.param}"),
                          version=request.param, otel=True,
                          overrides=VERSION_OVERRIDES.get(request.param))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _program(name: str):
    """A session fixture giving the path of the program `name`; a missing one fails the
    tests that request it (tests/harness/process.py says which package to install)."""

    @pytest.fixture(scope="session", name=name.replace("-", "_"))
    def _fixture() -> str:
        return require_binary(name)

    return _fixture


promtool = _program("promtool")
amtool = _program("amtool")
prometheus_alertmanager = _program("prometheus-alertmanager")
openssl = _program("openssl")
chromium = _program("chromium")


# --- tiers: options, marks, selection --------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tiers", "test tiers (tests/conftest.py)")
    group.addoption("--fast", action="store_true",
                    help="only the unmarked (pure Python) tests, Hypothesis profile dev")
    for tier in TIERS:
        group.addoption(f"--enable-{tier}", action="store_true",
                        help=f"with --fast, also run the tests marked {tier}")
        group.addoption(f"--disable-{tier}", action="store_true",
                        help=f"deselect the tests marked {tier}")
        group.addoption(f"--only-{tier}", action="store_true",
                        help=f"run only the tests marked {tier} (repeatable)")


def pytest_configure(config: pytest.Config) -> None:
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {what}")
    if not config.getoption("--hypothesis-profile"):
        fallback = "dev" if config.getoption("--fast") else "ci"
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or fallback)


def pytest_report_header(config: pytest.Config) -> str:
    enabled, only = _selection(config)
    tiers = ", ".join(t for t in TIERS if t in enabled) or "none"
    return (f"tiers enabled: {tiers}{'; only ' + ', '.join(only) if only else ''}; "
            f"hypothesis profile {settings.get_current_profile_name()!r} "
            f"({settings.default.max_examples} examples)")


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers `item` is marked with (after collection: derived ones included)."""
    return {mark.name for mark in item.iter_markers() if mark.name in TIERS}


def _derived(item: pytest.Item) -> set[str]:
    derived = {tier for name in getattr(item, "fixturenames", ())
               for tier in FIXTURE_TIERS.get(name, ())}
    return derived | set(FOLDER_TIERS.get(_folder(item), ()))


def _folder(item: pytest.Item) -> str:
    return item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""


# What a test under tests/unit/ may be marked with: a program used as an instrument (openssl
# making a certificate, promtool checking a generated file), never a JVM, broker or cluster:
# those tests live in tests/integration/ (one component), tests/chart/ (the Helm chart) and
# the folders of their own tier.
UNIT_TIERS = {"tools"}


def _selection(config: pytest.Config) -> tuple[set[str], list[str]]:
    """(the enabled tiers, the --only tiers)."""
    only = [t for t in TIERS if config.getoption(f"--only-{t}")]
    enabled = set() if config.getoption("--fast") else set(TIERS)
    enabled |= {t for t in TIERS if config.getoption(f"--enable-{t}")} | set(only)
    enabled -= {t for t in TIERS if config.getoption(f"--disable-{t}")}
    return enabled, only


def _run_already(item: pytest.Item) -> bool:
    """The versions matrix's copy, on the default version, of a test imported from the
    apache tier: the same test on the same broker (`apache_pulsar_of`), which the apache
    tier runs where it is defined."""
    function = getattr(item, "function", None)
    callspec = getattr(item, "callspec", None)
    return (item.path.name == "test_apache_pulsar_versions.py" and function is not None
            and function.__module__ != item.module.__name__ and callspec is not None
            and callspec.params.get("apache_pulsar_of") == VERSION
            and not VERSION_OVERRIDES.get(VERSION))


@pytest.hookimpl(tryfirst=True)  # before `-m` reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for tier in sorted(_derived(item) - tiers_of(item)):
            item.add_marker(tier)
    misplaced = [f"{item.nodeid} ({', '.join(sorted(tiers_of(item) - UNIT_TIERS))})"
                 for item in items if _folder(item) == "unit" and tiers_of(item) - UNIT_TIERS]
    if misplaced:
        raise pytest.UsageError("tests/unit/ holds tests that start no JVM, broker or cluster; "
                                "move these to the folder of their tier (tests/conftest.py, "
                                "UNIT_TIERS): " + "; ".join(misplaced))
    enabled, only = _selection(config)
    selected, deselected = [], []
    for item in items:
        tiers = tiers_of(item)
        wanted = (tiers <= enabled and (not only or bool(tiers & set(only)))
                  and not _run_already(item))
        (selected if wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


# --- no skips, no undeclared programs ---------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} skipped ({why}): tests here never skip, a missing "
                           "component fails them")
    return report


class UndeclaredProgram(RuntimeError):
    """A test started a program that its tier marks do not declare."""


_running: list[pytest.Item] = []  # the test whose setup, call or teardown runs now


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def _program_name(executable: object, argv: object) -> str:
    if executable is None and isinstance(argv, Iterable) and not isinstance(argv, str | bytes):
        executable = next(iter(argv), "")
    return os.path.basename(os.fsdecode(executable)) if executable is not None else ""


def _audit(event: str, args: tuple) -> None:
    """Fail a test, in its own thread, that starts one of PROGRAMS undeclared."""
    if event != "subprocess.Popen" or not _running:
        return
    if threading.current_thread() is not threading.main_thread():
        return  # a component's own background thread: not the test's doing
    program = _program_name(args[0], args[1])
    needs = PROGRAMS.get(program)
    item = _running[-1]
    if needs and not tiers_of(item) & set(needs):
        raise UndeclaredProgram(
            f"{item.nodeid} starts {program}, which needs the mark {' or '.join(needs)}: "
            "request the fixture that starts it, or declare it in the module "
            f"(`pytestmark = pytest.mark.{needs[0]}`); tests/conftest.py lists the tiers")


sys.addaudithook(_audit)
