"""Real Prometheus and Alertmanager on loopback (Debian packages `prometheus` and
`prometheus-alertmanager`), each in its own process group with its config and data under a
work dir (tests/harness/process.py), plus a webhook receiver inside the test for
Alertmanager's notifications. The one launcher of both: the e2e scenario and the alert tests
use it. A missing binary raises `ComponentMissing`: the tests fail rather than skip.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from exporter.demo.embedded import free_port
from tests.harness.loopback import LoopbackHTTP
from tests.harness.process import ManagedProcess, ProcessFailed, http_get, require_binary
from tests.harness.wait import poll

__all__ = ["Alertmanager", "Notification", "PromQLError", "Prometheus", "WebhookReceiver",
           "alertmanager_config"]


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

        return poll(found, what, timeout, interval=0.5, show=self.summary)

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
    """Alertmanager on `config`: a file used as it is, or a mapping written to
    `workdir/alertmanager.yml`. No gossip port; its data under `workdir/data`."""

    def __init__(self, workdir: Path, config: Path | Mapping[str, Any]) -> None:
        self.binary = require_binary("prometheus-alertmanager")
        self.workdir = workdir
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        if isinstance(config, Path):
            self.config_path = config
        else:
            self.config_path = workdir / "alertmanager.yml"
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
        """amtool's verdict on the config, so a bad one (or a bad derivation) fails loudly."""
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
class PromQLError(RuntimeError):
    """Prometheus rejected a query (or the API failed)."""


class Prometheus:
    """Scrapes `targets` (job → host:port list) every second, evaluates `rule_files` every
    second and sends alerts to `alertmanager` with a 1 s resend delay. `scrape_options`:
    keys added to a job's scrape config (scheme, tls_config, basic_auth)."""

    def __init__(self, workdir: Path, *, targets: Mapping[str, Sequence[str]],
                 rule_files: Sequence[Path], alertmanager: str,
                 scrape_options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
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
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(hosts)}],
                                **(scrape_options or {}).get(job, {})}
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
        """GET /api/v1/<path>; returns `data`, raises PromQLError on an error status (bad
        PromQL) or when Prometheus does not answer."""
        query = urllib.parse.urlencode(params)
        try:
            status, _, body = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10.0)
        except OSError as e:
            raise PromQLError(f"{path} {params}: no answer: {e}") from e
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
