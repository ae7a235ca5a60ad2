"""A child process of a test, run the one way every harness runs one: in its own session
(process group), output to a log file in its work dir, readiness polled over HTTP, stopped by
SIGTERM and then SIGKILL to its whole group, so nothing it started (the exporter's Spark JVM)
outlives the test. What the exporter, Prometheus and Alertmanager harnesses are built on."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.harness.wait import poll

__all__ = ["PACKAGES", "ComponentMissing", "ManagedProcess", "ProcessFailed", "group_members",
           "http_get", "require_binary"]


class ComponentMissing(RuntimeError):
    """A program the tests need is not installed: the test fails, it is never skipped."""


class ProcessFailed(RuntimeError):
    """A process exited when it should be serving (the message carries its log's tail)."""


# The Debian package of each program the tests run (`./dev test` installs them as root).
PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus",
            "prometheus-alertmanager": "prometheus-alertmanager",
            "amtool": "prometheus-alertmanager", "openssl": "openssl", "chromium": "chromium"}


def require_binary(name: str) -> str:
    """The path of `name` on PATH; missing, ComponentMissing naming its Debian package."""
    path = shutil.which(name)
    if path is None:
        raise ComponentMissing(f"{name} not found on PATH: apt-get install -y "
                               f"--no-install-recommends {PACKAGES.get(name, name)} "
                               "(./dev test does it)")
    return path


def http_get(url: str, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body): an HTTP error status is an answer, not an exception; nothing
    listening raises OSError."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


class ManagedProcess:
    """`argv` run in `workdir` (also its cwd), in its own process group, its output appended
    to `workdir/<name>.log` (one log across restarts)."""

    def __init__(self, name: str, argv: Sequence[str | Path], workdir: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    # --- state ----------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group's id."""
        if self._process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def group_members(self) -> list[int]:
        """What is still alive of the child's process group (the child included)."""
        return group_members(self.pid) if self._process is not None else []

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> ManagedProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, env=self.env, start_new_session=True)
        return self

    def wait_ready(self, url: str, timeout: float, interval: float = 0.1) -> list[int]:
        """Poll `url` until it answers 200; the statuses it answered on the way (connection
        refused is "not yet"). Exiting meanwhile raises ProcessFailed, a timeout
        AssertionError; both carry the log's tail."""
        seen: list[int] = []

        def ready() -> bool:
            if not self.running:
                raise ProcessFailed(f"{self.name} exited ({self._returncode()}) before "
                                    f"{url} answered 200:\n{self.log_tail()}")
            seen.append(http_get(url, timeout=2.0)[0])
            return seen[-1] == 200

        def answers() -> str:
            return (f"{len(seen)} answer(s), statuses {sorted(set(seen))}\n"
                    f"{self.log_tail()}")

        poll(ready, f"{self.name} ready at {url}", timeout, interval, ignore=(OSError,),
             show=answers)
        return seen

    def signal(self, signum: int, *, group: bool = False) -> None:
        """`signum` to the child, or to its whole process group (as Ctrl-C in a terminal)."""
        if group:
            os.killpg(self.pid, signum)
        else:
            os.kill(self.pid, signum)

    def wait_exit(self, timeout: float) -> int:
        """The child's exit status once it has exited (after a signal)."""
        assert self._process is not None, f"{self.name} is not started"
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running {timeout:g} s after the signal:\n"
                                 f"{self.log_tail()}") from None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the child and `grace` seconds to exit (none if 0), then SIGKILL to
        whatever is left of its group. Safe to call on an exited or unstarted child."""
        process, self._process = self._process, None
        if process is None:
            return
        if grace > 0 and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):  # our own group (start_new_session)
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    # --- its log --------------------------------------------------------------------------
    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        text = self.log()
        if not text:
            return f"({self.name}: empty or no log at {self.log_path})"
        return f"--- {self.name} log tail ---\n" + "\n".join(text.splitlines()[-lines:])

    def _returncode(self) -> object:
        return self._process.returncode if self._process is not None else "not started"


class InstallFailed(RuntimeError):
    """A tool the test command installs (Apache Pulsar, the Go tools) could not be fetched or
    built; the message carries the command's output's tail."""


def run_or_fail(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                cwd: Path | None = None) -> str:
    """Run an install step; its stdout, or InstallFailed with the last 20 lines."""
    done = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd,
                          check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise InstallFailed(f"{' '.join(argv)} exited with {done.returncode}:\n{tail}")
    return done.stdout
