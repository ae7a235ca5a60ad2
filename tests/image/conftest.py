"""The image tier: the OCI image built (tests/harness/image_build.py, its root filesystem
cached under .cache/image/), unpacked by umoci into a runtime bundle, and run by runc as a
container engine would run it: the bundle's own config.json (args, env, user, cwd) unchanged
but for what `docker run --read-only --tmpfs /tmp -v config.yaml:...:ro --network host` adds:
a read-only root, a tmpfs on /tmp, the config file mounted read-only, an /etc/hosts naming
the container's host name (Spark resolves it), and the host's network (the broker is on its
loopback). Needs root (debootstrap, chroot, runc); a missing tool fails, never skips."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import image_build
from tests.harness.pulsar import PulsarLite, pulsar_lite_fixture
from tests.harness.wait import poll

pulsar_lite = pulsar_lite_fixture(scope="package", cluster="image-check")
TOPIC = "persistent://public/default/image-check"
LISTEN = "127.0.0.1:10149"
CONFIG = "/etc/pulsar-quota-exporter/config.yaml"  # where the image's CMD reads it


@dataclass(frozen=True)
class Bundle:
    path: Path
    layout: Path
    image: dict  # the image's configuration blob (config.Entrypoint, Cmd, Env, Labels...)
    spec: dict  # the bundle's config.json, as umoci unpack wrote it

    def run_spec(self, workdir: Path, args: list[str] | None = None) -> dict:
        """config.json plus what the engine adds (module docstring); `args` as
        `docker run IMAGE ARGS...` replaces the image's Cmd."""
        spec = json.loads(json.dumps(self.spec))
        spec["root"] = {"path": str(self.path / "rootfs"), "readonly": True}
        spec["process"]["terminal"] = False
        if args is not None:
            spec["process"]["args"] = list(self.image["config"]["Entrypoint"]) + args
        # The image's Env over what umoci's config.json says, as Docker and CRI runtimes merge
        # them: umoci sets HOME from /etc/passwd (nobody's /nonexistent) over the image's.
        env = dict(e.split("=", 1) for e in spec["process"]["env"])
        env.update(e.split("=", 1) for e in self.image["config"]["Env"])
        spec["process"]["env"] = [f"{k}={v}" for k, v in env.items()]
        hosts = workdir / "hosts"
        hosts.write_text(f"127.0.0.1 localhost {spec.get('hostname', '')}\n")
        spec["mounts"] += [
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": CONFIG, "type": "bind", "source": str(workdir / "config.yaml"),
             "options": ["rbind", "ro"]},
            {"destination": "/etc/hosts", "type": "bind", "source": str(hosts),
             "options": ["rbind", "ro"]},
        ]
        spec["linux"]["namespaces"] = [ns for ns in spec["linux"]["namespaces"]
                                       if ns["type"] != "network"]
        return spec


@dataclass
class Container:
    id: str
    process: subprocess.Popen[bytes]  # `runc run`: exits with the container's PID 1
    log: Path

    def pid1(self) -> int:
        """PID 1's pid on the host (`runc state`)."""
        state = subprocess.run(["runc", "state", self.id], capture_output=True, check=True)
        return int(json.loads(state.stdout)["pid"])

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """`runc exec`: the container's own process spec (user, env, cwd) running `argv`."""
        return subprocess.run(["runc", "exec", self.id, *argv], capture_output=True,
                              text=True, timeout=60, check=False)


def _config(workdir: Path, broker: PulsarLite) -> None:
    (workdir / "config.yaml").write_text(
        f"cluster: image-check\ncheck_interval: 5s\n"
        f"sources:\n  brokers: [{{url: \"{broker.metrics_url}\"}}]\n"
        "backlog_quotas:\n  default: {limit_time: 1h}\n"
        f"exposition:\n  listen: {LISTEN}\nspark:\n  master: local[1]\n")
    os.chmod(workdir / "config.yaml", 0o644)


@pytest.fixture(scope="package")
def image() -> image_build.Build:
    """The image, packed afresh from the cached root filesystem."""
    assert os.geteuid() == 0, "the image tier needs root: debootstrap, chroot, runc"
    return image_build.build()


@pytest.fixture(scope="package")
def bundle(image: image_build.Build) -> Bundle:
    path = image_build.CACHE / "bundle"
    image_build.unpack(image.layout, path)
    return Bundle(path, image.layout, image_build.oci_config(image.layout),
                  json.loads((path / "config.json").read_text()))


def run_container(bundle: Bundle, workdir: Path, name: str,
                  args: list[str] | None = None) -> Container:
    """`runc run` of the bundle as the module docstring says, in the background."""
    run = workdir / name
    run.mkdir()
    (run / "config.json").write_text(json.dumps(bundle.run_spec(workdir, args)))
    subprocess.run(["runc", "delete", "--force", name], capture_output=True, check=False)
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(["runc", "run", "--bundle", str(run), name],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    return Container(name, process, log)


@pytest.fixture(scope="package")
def workdir(tmp_path_factory: pytest.TempPathFactory, pulsar_lite: PulsarLite) -> Path:
    path = tmp_path_factory.mktemp("image-run")
    _config(path, pulsar_lite)
    pulsar_lite.create_subscription(TOPIC, "stalled")
    pulsar_lite.produce(TOPIC, 5)
    return path


def scrape() -> str:
    with urllib.request.urlopen(f"http://{LISTEN}/metrics", timeout=5) as resp:
        return resp.read().decode()


@pytest.fixture(scope="package")
def container(bundle: Bundle, workdir: Path) -> Iterator[Container]:
    """The exporter from the image, running, its first scrape served."""
    running = run_container(bundle, workdir, "pqe-image-check")

    def up() -> str | None:
        assert running.process.poll() is None, \
            f"the container exited {running.process.returncode}:\n{running.log.read_text()}"
        body = scrape()
        return body if 'pulsar_quota_exporter_source_up{cluster="image-check"' in body else None

    try:
        poll(up, "the exporter in the container serving the broker's metrics", timeout=120,
             interval=1, ignore=(OSError,), show=lambda: running.log.read_text()[-4000:])
        yield running
    finally:
        if running.process.poll() is None:
            subprocess.run(["runc", "kill", running.id, "KILL"], capture_output=True,
                           check=False)
            running.process.wait(timeout=30)
        subprocess.run(["runc", "delete", "--force", running.id], capture_output=True,
                       check=False)
