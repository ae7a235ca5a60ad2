"""An embedded pulsar-lite broker for the demo (and the tests): the bundled binary started on
loopback ports we choose, with its own TOML, so /metrics lands on a known address.

`pulsar_lite.start_broker` cannot choose the metrics address (notes/pulsar-lite.md), and its
default would listen on 0.0.0.0:8080; hence the binary.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary() -> Path:
    """The pulsar-lite binary of the installed package; raises (never skips) when missing."""
    import pulsar_lite

    path = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"pulsar-lite binary not found or not executable: {path}")
    return path


@dataclass
class EmbeddedBroker:
    """A pulsar-lite process. `restart()` keeps the data dir, so topics and cursors survive."""

    port: int
    metrics_port: int
    data_dir: Path
    cluster: str = "pulsar-lite"
    process: subprocess.Popen | None = None
    _owns_dir: bool = False

    @classmethod
    def start_new(cls, port: int | None = None, metrics_port: int | None = None,
                  data_dir: str | None = None, timeout: float = 30.0) -> EmbeddedBroker:
        owns = data_dir is None
        b = cls(port or free_port(), metrics_port or free_port(),
                Path(data_dir or tempfile.mkdtemp(prefix="pulsar-lite-")), _owns_dir=owns)
        b.start(timeout)
        return b

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, timeout: float = 30.0) -> None:
        conf = self.data_dir / "pulsar-lite.toml"
        conf.write_text(f'cluster = "{self.cluster}"\n\n[metrics]\nenabled = true\n'
                        f'addr = "127.0.0.1:{self.metrics_port}"\n')
        log = open(self.data_dir / "pulsar-lite.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [str(binary()), "--config", str(conf), "--addr", f"127.0.0.1:{self.port}",
             "--db-path", str(self.data_dir / "db")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pulsar-lite exited with {self.process.returncode}; "
                                   f"see {self.data_dir / 'pulsar-lite.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                with urllib.request.urlopen(self.metrics_url, timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"pulsar-lite not ready on {self.service_url} within {timeout}s")

    def stop(self, timeout: float = 5.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def restart(self, timeout: float = 30.0) -> None:
        self.stop()
        self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
