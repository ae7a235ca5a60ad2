"""Real Prometheus, Alertmanager and the exporter as processes on loopback, plus a webhook
receiver inside the test, for the end-to-end tests.

Each process runs in its own session (process group) with its own config and data dir under
the test's tmp dir, and is stopped by signalling that group: the exporter's JVM (Spark)
goes with it. Binaries come from the Debian packages `prometheus` and
`prometheus-alertmanager`; a missing one raises `ComponentMissing`, so the tests fail rather
than skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.harness.loopback import LoopbackHTTP
from tests.harness.pulsar import PulsarLite, free_port
from tests.replay.metrics_replay import MetricsReplayServer

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


class ComponentMissing(RuntimeError):
    """A binary the e2e tests need is not installed (Debian: `prometheus`,
    `prometheus-alertmanager`)."""


class ProcessFailed(RuntimeError):
    """A process exited or did not become ready (the message carries its log's tail)."""


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ComponentMissing(
            f"{name} not found on PATH: apt-get install prometheus prometheus-alertmanager")
    return path


def poll(probe: Callable[[], T], *, timeout: float, interval: float = 0.5,
         what: str = "condition", show: Callable[[], object] | None = None) -> T:
    """Call `probe` until it returns something truthy and return that; otherwise fail with
    `what` and, if given, `show()` (the state worth seeing when it never happened)."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"\n{show()}" if show is not None else ""
            raise AssertionError(f"{what}: not within {timeout:.0f} s{detail}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body); connection errors are status 0 so readiness polls can retry."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


# --- processes ----------------------------------------------------------------------------------
class ManagedProcess:
    """One child in its own process group, output to a log file; `stop()` ends the group."""

    def __init__(self, name: str, argv: Sequence[str], workdir: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, env=self.env, start_new_session=True)

    def wait_ready(self, url: str, timeout: float) -> None:
        def ready() -> bool:
            if not self.running:
                raise ProcessFailed(f"{self.name} exited ({self._returncode()}):\n"
                                    f"{self.log_tail()}")
            return http_get(url, timeout=2.0)[0] == 200

        try:
            poll(ready, timeout=timeout, interval=0.1, what=f"{self.name} ready at {url}")
        except AssertionError as e:
            raise ProcessFailed(f"{e}\n{self.log_tail()}") from None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the child (the exporter then stops Spark itself), then SIGKILL to
        whatever is left of its group after `grace` seconds: no JVM outlives the test."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):  # our own group (start_new_session)
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)

    def _returncode(self) -> object:
        return self._process.returncode if self._process is not None else "not started"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"({self.name}: no log)"
        return f"--- {self.name} log tail ---\n" + "\n".join(text.splitlines()[-lines:])


# --- webhook receiver ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Notification:
    """One POST from Alertmanager: the receiver path it was sent to and its JSON payload."""

    path: str
    payload: dict[str, Any]
    received_at: float  # wall clock

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return list(self.payload.get("alerts", []))


class WebhookReceiver:
    """An HTTP server collecting Alertmanager's webhook POSTs (one path per receiver)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Notification] = []
        self._server = LoopbackHTTP(self._handler())

    def url(self, path: str) -> str:
        return f"{self._server.url}/{path.lstrip('/')}"

    @property
    def received(self) -> list[Notification]:
        with self._lock:
            return list(self._received)

    def start(self) -> WebhookReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def wait_for(self, match: Callable[[Notification], bool], *, timeout: float,
                 what: str) -> Notification:
        def found() -> Notification | None:
            return next((n for n in self.received if match(n)), None)

        return poll(found, timeout=timeout, interval=0.5, what=what, show=self.summary)

    def summary(self) -> str:
        lines = [f"{len(self.received)} notification(s) received:"]
        for n in self.received:
            alerts = ", ".join(f"{a['labels'].get('alertname')}"
                               f"{{topic={a['labels'].get('topic')}}}={a.get('status')}"
                               for a in n.alerts)
            lines.append(f"  {n.path} [{n.payload.get('status')}] {alerts}")
        return "\n".join(lines)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                with receiver._lock:
                    receiver._received.append(Notification(self.path, payload, time.time()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


# --- Alertmanager -------------------------------------------------------------------------------
def alertmanager_config(example: Path, webhook: WebhookReceiver, *, group_wait: str = "1s",
                        group_interval: str = "2s") -> dict[str, Any]:
    """The example config with each notifying receiver replaced by a webhook to
    `webhook`/<receiver name> (resolved notifications on) and short grouping timers.
    Routes, matchers, grouping and inhibition stay as shipped."""
    config = yaml.safe_load(example.read_text())
    route = config["route"]
    route["group_wait"], route["group_interval"] = group_wait, group_interval
    receivers = []
    for receiver in config["receivers"]:
        notifies = any(key.endswith("_configs") for key in receiver)
        replaced = {"name": receiver["name"]}
        if notifies:
            replaced["webhook_configs"] = [{"url": webhook.url(receiver["name"]),
                                            "send_resolved": True}]
        receivers.append(replaced)
    config["receivers"] = receivers
    return config


class Alertmanager:
    def __init__(self, workdir: Path, config: Mapping[str, Any]) -> None:
        self.binary = require_binary("prometheus-alertmanager")
        self.workdir = workdir
        self.port = free_port()
        self.config_path = workdir / "alertmanager.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.process = ManagedProcess("alertmanager", [
            self.binary, f"--config.file={self.config_path}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",  # no gossip port
        ], workdir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def check_config(self) -> None:
        """amtool's verdict on the derived config, so a bad derivation fails loudly."""
        amtool = require_binary("amtool")
        done = subprocess.run([amtool, "check-config", str(self.config_path)],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise ProcessFailed(f"amtool check-config failed:\n{done.stdout}{done.stderr}")

    def start(self, timeout: float = 20.0) -> Alertmanager:
        self.check_config()
        self.process.start()
        self.process.wait_ready(f"{self.url}/-/ready", timeout)
        return self

    def stop(self) -> None:
        self.process.stop()


# --- Prometheus ---------------------------------------------------------------------------------
class Prometheus:
    """Scrapes `targets` (job → host:port list) every second, evaluates `rule_files` every
    second and sends alerts to `alertmanager` with a 1 s resend delay."""

    def __init__(self, workdir: Path, *, targets: Mapping[str, Sequence[str]],
                 rule_files: Sequence[Path], alertmanager: str) -> None:
        self.binary = require_binary("prometheus")
        self.workdir = workdir
        self.port = free_port()
        self.config_path = workdir / "prometheus.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(hosts)}]}
                               for job, hosts in targets.items()],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.process = ManagedProcess("prometheus", [
            self.binary, f"--config.file={self.config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--rules.alert.resend-delay=1s",
        ], workdir)
        self.started_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> Prometheus:
        self.process.start()
        self.started_at = time.time()
        self.process.wait_ready(f"{self.url}/-/ready", timeout)
        return self

    def stop(self) -> None:
        self.process.stop()

    # --- HTTP API ---------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns `data`, raises on an error status (bad PromQL)."""
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10.0)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {}
        if status != 200 or doc.get("status") != "success":
            raise PromQLError(f"{path} {params}: HTTP {status}: "
                              f"{doc.get('error') or body[:300]!r}")
        return doc["data"]

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)["result"]

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step=f"{step:g}")["result"]

    def series_labels(self, match: str, label: str) -> list[str]:
        """Grafana's `label_values(match, label)`: the label's values on matching series."""
        series = self.api("series", **{"match[]": match,
                                       "start": f"{(self.started_at or 0) - 60:.3f}"})
        return sorted({s[label] for s in series if label in s})

    def rule_health(self) -> list[tuple[str, str, str]]:
        """(rule name, health, last error) of every loaded rule."""
        groups = self.api("rules")["groups"]
        return [(r["name"], r["health"], r.get("lastError", ""))
                for g in groups for r in g["rules"]]


class PromQLError(RuntimeError):
    """Prometheus rejected a query (or the API failed)."""


# --- the scenario ----------------------------------------------------------------------------
def rule_files() -> list[Path]:
    """The generated alert rule files Prometheus loads."""
    files = sorted((REPO / "alerts").glob("*.rules.yaml"))
    if not files:
        raise FileNotFoundError("no alerts/*.rules.yaml: run `pulsar-quota-exporter generate`")
    return files


@dataclass(frozen=True)
class Workload:
    """Names and numbers of the e2e workload (conftest.py sets it up)."""

    cluster: str
    job: str
    tenant: str
    resource_group: str
    stalled_topic: str
    stalled_subscription: str
    stalled_messages: int
    stalled_at: float  # wall clock just before its subscription and messages were created
    time_limit_seconds: float
    held_topic: str
    sized_topic: str


@dataclass(frozen=True)
class Scenario:
    """Every running component of the e2e setup, and its workload."""

    broker: PulsarLite
    replay: MetricsReplayServer
    exporter: ExporterProcess
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: WebhookReceiver
    started_at: float  # wall clock just before Prometheus started
    workload: Workload

    def diagnostics(self) -> str:
        """What to look at when a wait fails: the processes' log tails."""
        return "\n".join(p.log_tail() for p in (
            self.exporter.process, self.prometheus.process, self.alertmanager.process))


# --- the exporter ------------------------------------------------------------------------------
class ExporterProcess:
    """`pulsar-quota-exporter run --config.file F` as a subprocess of this venv's Python."""

    def __init__(self, workdir: Path, config: Mapping[str, Any]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.config = {**config, "exposition": {"listen": f"127.0.0.1:{self.port}"}}
        self.config_path = workdir / "exporter.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        script = Path(sys.executable).parent / "pulsar-quota-exporter"
        if not script.is_file():
            raise ComponentMissing(f"{script} missing: pip install -e . into the venv")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = ManagedProcess("exporter", [
            str(script), "run", "--config.file", str(self.config_path), "--log.level", "info",
        ], workdir, env=env)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> ExporterProcess:
        """Launch only: Spark takes a while, the caller does other work meanwhile."""
        self.process.start()
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until /readyz says 200: the first cycle is published."""
        self.process.wait_ready(f"{self.url}/readyz", timeout)

    def stop(self) -> None:
        # Its own SIGTERM handling waits for the running cycle (15 s and more on a busy
        # machine); nothing here needs a graceful goodbye, so the group is killed sooner.
        self.process.stop(grace=5.0)
