"""The exporter as a real process: `pulsar-quota-exporter run --config.file F`, the console
script of this venv, in its own process group (tests/harness/process.py). The one way tests
start it (the e2e scenario, the process tests, the fleet of tests/harness/fleet.py) and run
its CLI once (`run_cli`).

The config is written by the harness, as YAML, with `exposition.listen` set to a free
loopback port; tests that exercise reloads edit `config_path` themselves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from exporter.demo.embedded import free_port
from tests.harness.process import ComponentMissing, ManagedProcess, http_get
from tests.harness.pulsar import Metrics

__all__ = ["CLI", "ExporterProcess", "run_cli"]

CLI = Path(sys.executable).with_name("pulsar-quota-exporter")

_LOGFMT_MSG = re.compile(r' msg=("(?:[^"\\]|\\.)*"|\S+)')


def _cli() -> str:
    if not CLI.is_file():
        raise ComponentMissing(f"{CLI} missing: pip install -e . into the venv")
    return str(CLI)


def run_cli(*args: str | Path, cwd: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`pulsar-quota-exporter ARGS` run to completion, its output captured as text."""
    return subprocess.run([_cli(), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


class ExporterProcess:
    """`pulsar-quota-exporter run` on `config` (a config mapping; `exposition.listen` is
    set to 127.0.0.1:`port`, a free port unless given), with its config at
    `workdir/<name>.yaml` and its log at `workdir/<name>.log`; `env`: variables added to
    this process's environment (what `--config.expand-env` reads). Not started until
    `start()`."""

    def __init__(self, workdir: Path, config: Mapping[str, Any], *, name: str = "exporter",
                 port: int | None = None, log_level: str = "info",
                 log_format: str = "logfmt", extra_args: tuple[str, ...] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.port = port or free_port()
        self.config_path = workdir / f"{name}.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.write_config(config)
        self.process = ManagedProcess(name, [
            _cli(), "run", "--config.file", self.config_path, "--log.level", log_level,
            "--log.format", log_format, *extra_args,
        ], workdir, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def write_config(self, config: Mapping[str, Any]) -> None:
        """Replace the config file at once (as a ConfigMap update does), listening on `port`."""
        data = {**config, "exposition": {**config.get("exposition", {}),
                                         "listen": self.address}}
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))
        os.replace(tmp, self.config_path)

    # --- where it serves ------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    # --- lifecycle ------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running

    def start(self) -> ExporterProcess:
        """Launch only: Spark's start takes a while, the caller may do other work meanwhile."""
        self.process.start()
        return self

    def wait_ready(self, timeout: float) -> list[int]:
        """Until /readyz answers 200 (the first cycle is published); every status it answered
        on the way. Exiting first raises ProcessFailed; both failures show the log's tail."""
        return self.process.wait_ready(f"{self.url}/readyz", timeout, interval=0.2)

    def signal(self, signum: int, *, group: bool = False) -> None:
        self.process.signal(signum, group=group)

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.process.wait_exit(timeout)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL to the group after `grace` s (0: at once). The exporter's own
        SIGTERM handling waits for the running cycle (15 s and more on a busy machine), so the
        default grace is short: a test that needs a graceful stop signals and waits itself."""
        self.process.stop(grace=grace)

    def group_members(self) -> list[int]:
        return self.process.group_members()

    # --- what it serves -------------------------------------------------------------------
    def get(self, path: str, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of GET `path`; nothing listening raises OSError."""
        return http_get(self.url + path, timeout=timeout)

    def scrape(self) -> Metrics:
        """/metrics, parsed; anything but 200 raises (OSError)."""
        return Metrics(self._ok("/metrics").decode())

    def status(self) -> dict[str, Any]:
        """/api/v1/status; anything but 200 raises (OSError)."""
        return json.loads(self._ok("/api/v1/status"))

    def _ok(self, path: str) -> bytes:
        status, _, body = self.get(path)
        if status != 200:
            raise ConnectionError(f"GET {self.url}{path}: HTTP {status}: {body[:200]!r}")
        return body

    # --- its log --------------------------------------------------------------------------
    def log(self) -> str:
        return self.process.log()

    def log_messages(self) -> list[str]:
        """The `msg` of each logfmt line of the log (--log.format logfmt), unescaped."""
        out = []
        for line in self.log().splitlines():
            match = _LOGFMT_MSG.search(line) if line.startswith("time=") else None
            if match:
                raw = match.group(1)
                out.append(json.loads(raw) if raw.startswith('"') else raw)
        return out

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)
