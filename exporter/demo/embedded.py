"""An embedded pulsar-lite broker: the bundled binary on loopback ports we choose, with its own
TOML, so /metrics lands on a known address. The demo runs one; the test harness
(tests/harness/pulsar.py) builds its workload and /metrics helpers on this class.

`pulsar_lite.start_broker` cannot choose the metrics address (pulsar-lite 0.2), and its
default would listen on 0.0.0.0:8080; hence the binary. Everything about the process
(binary lookup, TOML, free ports, start / wait-ready / stop / restart) lives here, once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Self

from exporter.server.http import listened


class BinaryMissing(FileNotFoundError):
    """The pulsar-lite binary is not installed: install the `demo` or `test` extra.
    Raised, never skipped over: a test that cannot start its broker fails."""


class BrokerFailed(RuntimeError):
    """The broker did not come up; the message carries the tail of its log."""


def find_binary() -> Path:
    """The pulsar-lite binary of the installed package."""
    try:
        import pulsar_lite
    except ImportError as exc:
        raise BinaryMissing("pulsar-lite is not installed (pip install pulsar-lite)") from exc
    return _executable(Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite")


def _executable(path: Path) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BinaryMissing(f"pulsar-lite binary missing or not executable: {path}")
    return path


def free_ports(count: int) -> tuple[int, ...]:
    """`count` distinct free loopback ports (all sockets held open together, so the kernel
    cannot hand out one port twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return tuple(sock.getsockname()[1] for sock in socks)


def free_port() -> int:
    return free_ports(1)[0]


class EmbeddedBroker:
    """One pulsar-lite process working in `workdir` (its TOML, log and `db/`).

    Ports left at 0 are picked at the first start and kept afterwards, so `restart()` (same
    db, same ports) brings topics, cursors and backlogs back at the same addresses.
    """

    def __init__(self, workdir: str | os.PathLike[str], *, port: int = 0, metrics_port: int = 0,
                 cluster: str = "pulsar-lite", log_level: str | None = None,
                 binary: Path | None = None, owns_workdir: bool = False) -> None:
        self.workdir = Path(workdir)
        self.port = port
        self.metrics_port = metrics_port
        self.cluster = cluster  # pulsar-lite labels its series "pulsar-lite" whatever this says
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None
        self._binary = binary
        self._owns_workdir = owns_workdir

    @classmethod
    def start_new(cls, port: int | None = None, metrics_port: int | None = None,
                  data_dir: str | None = None, timeout: float = 30.0) -> EmbeddedBroker:
        """Start a broker in `data_dir`, or in a temporary folder removed by `close()`."""
        owns = data_dir is None
        broker = cls(data_dir or tempfile.mkdtemp(prefix="pulsar-lite-"), port=port or 0,
                     metrics_port=metrics_port or 0, owns_workdir=owns)
        return broker.start(timeout)

    # --- where things are -----------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.workdir / "pulsar-lite.toml"

    @property
    def log_path(self) -> Path:
        return self.workdir / "pulsar-lite.log"

    @property
    def db_path(self) -> Path:
        return self.workdir / "db"

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> Self:
        """Start and wait until both the binary protocol and /metrics answer; on failure the
        process is stopped and `BrokerFailed` says why."""
        binary = _executable(self._binary) if self._binary is not None else find_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Another broker on a given port would answer the readiness probe below for ours.
        for port in (self.port, self.metrics_port):
            if port and listened("127.0.0.1", port):
                raise BrokerFailed(f"127.0.0.1:{port} is in use: another broker listens there")
        if not (self.port and self.metrics_port):
            picked = iter(free_ports(2))
            self.port = self.port or next(picked)
            self.metrics_port = self.metrics_port or next(picked)
        self.config_path.write_text(
            f'cluster = "{self.cluster}"\n\n[metrics]\nenabled = true\n'
            f'addr = "127.0.0.1:{self.metrics_port}"\n')
        argv = [str(binary), "--config", str(self.config_path),
                "--addr", f"127.0.0.1:{self.port}", "--db-path", str(self.db_path)]
        if self.log_level is not None:
            argv += ["--log-level", self.log_level]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, start_new_session=True)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerFailed(
                    f"pulsar-lite exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                with urllib.request.urlopen(self.metrics_url, timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise BrokerFailed(f"pulsar-lite not ready on {self.service_url} within {timeout} s:\n"
                           f"{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (pulsar-lite takes about 1 s to flush and exit), then SIGKILL."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def restart(self, timeout: float = 30.0) -> Self:
        """Same db and ports; retried while the old listener lingers for a moment."""
        self.stop()
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.start(timeout=max(1.0, deadline - time.monotonic()))
            except BrokerFailed:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        """Stop, and remove the working folder when `start_new` made it."""
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
