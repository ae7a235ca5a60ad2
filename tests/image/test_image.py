"""The OCI image as an operator runs it (issue 59): configured from the Dockerfile, tini as
PID 1, uid 65534 on a read-only root, serving a broker's backlog ages, naming its revision,
and stopping cleanly on SIGTERM. Fixtures: conftest.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.harness import image_build
from tests.image.conftest import TOPIC, Bundle, Container, run_container, scrape

# The first test's setup builds the image: from an empty cache, debootstrap and apt take
# most of it (README.md, "The container image", gives the measured time).
pytestmark = pytest.mark.timeout(900)

LABELS = ("title", "description", "source", "licenses", "version", "revision", "created")


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_the_image_carries_the_dockerfiles_configuration(image: image_build.Build,
                                                         bundle: Bundle) -> None:
    """The OCI configuration is the Dockerfile's final stage, and umoci's runtime bundle
    carries it into config.json: what a container engine would run."""
    said = image_build.image_config(image_build.DOCKERFILE.read_text(), image_build.build_args())
    config = bundle.image["config"]
    assert config["Entrypoint"][:2] == ["/usr/bin/tini", "--"]  # tini as PID 1
    assert (config["Entrypoint"], config["Cmd"]) == (list(said.entrypoint), list(said.cmd))
    assert config["User"] == said.user == "65534:65534"
    assert config["WorkingDir"] == said.workdir
    assert sorted(config["Env"]) == sorted(f"{k}={v}" for k, v in said.env)
    assert list(config["ExposedPorts"]) == list(said.exposed) == ["10049/tcp"]
    assert config["Labels"] == dict(said.labels)
    assert sorted(config["Labels"]) == sorted(f"org.opencontainers.image.{k}" for k in LABELS)
    assert all(config["Labels"].values())
    revision = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    assert config["Labels"]["org.opencontainers.image.revision"] == revision
    process = bundle.spec["process"]
    assert process["args"] == config["Entrypoint"] + config["Cmd"]
    # umoci adds TERM=xterm (runtime-spec's terminal default) and sets HOME from /etc/passwd
    # over the image's; conftest.py's run puts the image's back, as Docker would. Nothing else
    # differs, each variable once.
    assert set(config["Env"]) - set(process["env"]) == {"HOME=/tmp"}
    assert set(process["env"]) - set(config["Env"]) == {"TERM=xterm", "HOME=/nonexistent"}
    assert len({e.split("=")[0] for e in process["env"]}) == len(process["env"])
    assert (process["user"]["uid"], process["user"]["gid"], process["cwd"]) == \
        (65534, 65534, said.workdir)
    assert image.sizes["layers"] > 0 and image.sizes["root"] > image.sizes["layers"]


def test_runs_as_nobody_under_tini_on_a_read_only_root(container: Container) -> None:
    """PID 1 of the container's PID namespace is tini, the exporter its child, both uid
    65534; `/` refuses a write, /tmp (the tmpfs) takes one; the JVM finds the class-data
    archive the build made and Python its .pyc files (an unpacked image keeps the files'
    times they are checked against: image/prune-venv.sh)."""
    pid1 = container.pid1()
    assert Path(f"/proc/{pid1}/comm").read_text().strip() == "tini"
    status = _status(pid1)
    assert status["NSpid"].split()[-1] == "1", status["NSpid"]
    assert status["Uid"].split() == ["65534"] * 4
    children = Path(f"/proc/{pid1}/task/{pid1}/children").read_text().split()
    assert len(children) == 1
    child = _status(int(children[0]))
    assert child["Uid"].split() == ["65534"] * 4
    assert "pulsar-quota-exporter" in Path(f"/proc/{children[0]}/cmdline").read_text()
    refused = container.exec("touch", "/probe")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    assert container.exec("touch", "/tmp/probe").returncode == 0
    found = container.exec("python", "-c", "from exporter.pipeline.spark.jvmarchive import "
                           "archive_path; p = archive_path(); print(p, p.exists())")
    assert found.stdout.strip().endswith(" True"), found
    # The .pyc files the build compiled still match their sources' times (bytes 8-12 of a
    # .pyc, PEP 552): a read-only root could not rewrite stale ones, each start would
    # compile them again.
    stale = container.exec("python", "-c", "import importlib.util as u, pathlib, sys\n"
                           "site = pathlib.Path(u.find_spec('pyspark').origin).parents[1]\n"
                           "pairs = [(s, pathlib.Path(u.cache_from_source(s))) for s in "
                           "site.rglob('*.py')]\n"
                           "pairs = [(s, c) for s, c in pairs if c.exists()]\n"
                           "print(len(pairs), sum(int.from_bytes(c.read_bytes()[8:12], "
                           "'little') != int(s.stat().st_mtime) for s, c in pairs))")
    checked, mismatched = map(int, stale.stdout.split())
    assert checked > 500 and mismatched == 0, stale


def test_serves_the_brokers_backlog_age(container: Container) -> None:
    body = scrape()
    up = [line for line in body.splitlines()
          if line.startswith('pulsar_quota_exporter_source_up{cluster="image-check"')]
    assert up and all(float(line.rsplit(" ", 1)[1]) == 1 for line in up), up
    short = TOPIC.rsplit("/", 1)[1]
    ages = [line for line in body.splitlines()
            if line.startswith("pulsar_storage_backlog_age_seconds{") and short in line]
    assert ages and float(ages[0].rsplit(" ", 1)[1]) >= 0, ages


def test_version_names_the_images_revision(bundle: Bundle, tmp_path: Path) -> None:
    """`docker run IMAGE --version`: the revision the build wrote into exporter/REVISION
    (no git checkout in the image), and the image's Python, PySpark and Java."""
    (tmp_path / "config.yaml").write_text("{}\n")  # mounted as the run's; --version reads none
    run = run_container(bundle, tmp_path, "pqe-image-version", ["--version"])
    try:
        assert run.process.wait(timeout=120) == 0, run.log.read_text()
    finally:
        subprocess.run(["runc", "delete", "--force", run.id], capture_output=True, check=False)
    text = run.log.read_text()
    revision = bundle.image["config"]["Labels"]["org.opencontainers.image.revision"]
    version = bundle.image["config"]["Labels"]["org.opencontainers.image.version"]
    assert f"version {version} (revision: {revision})" in text, text
    assert re.search(r"python version:\s+3\.11\.\d+", text), text  # bookworm's python3
    assert re.search(r"pyspark version:\s+4\.\d+\.\d+", text), text
    assert re.search(r"java version:\s+\"?17\.", text), text  # openjdk-17-jre-headless


def test_sigterm_to_pid_1_stops_the_exporter_cleanly(container: Container) -> None:
    """tini passes SIGTERM on to the exporter, which stops (Spark too) and exits 0; tini
    exits with its child's status, and runc with tini's. Runs last in this file: it ends
    the container the other tests share."""
    subprocess.run(["runc", "kill", container.id, "TERM"], check=True, capture_output=True)
    code = container.process.wait(timeout=60)
    log = container.log.read_text()
    assert code == 0, (code, log[-3000:])
    assert "Traceback" not in log, log[-3000:]
