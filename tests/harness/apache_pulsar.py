"""A real Apache Pulsar standalone broker for tests (`bin/pulsar standalone -nfw -nss`).

Installed by `./dev test` (tests/harness/apache_pulsar_install.py), 4.0.8 unless `version`
names another of its VERSIONS; a missing install raises
`ApachePulsarMissing` and fails the fixture, never skips. Facts measured on 4.0.8 that the
code accounts for:
- `bin/pulsar` changes to the install directory before starting the JVM, so relative data
  paths would land inside the install and be shared by every run: every data directory is
  passed as an absolute path under the broker's own fresh working directory (an existing
  `data/standalone/zookeeper` would also switch `PulsarStandalone` to ZooKeeper mode).
- `ResourceUsageTopicTransportManager` (PIP-82 usage reports) cannot start on a fresh
  standalone: `PulsarService.start()` builds it, and it creates the `pulsar` tenant, before
  `PulsarStandalone` has created its cluster, so the broker dies with "Clusters do not exist".
  With `resource_usage_transport` the broker is therefore started once without it (which
  creates the cluster, `public/default` and `pulsar/system`), stopped, and started again.
- With `preciseTimeBasedBacklogQuotaCheck`, a size eviction by the broker itself
  (`consumer_backlog_eviction` on `destination_storage`) stalls for 30 s: the check reads the
  oldest entry, and its continuation, on a BookKeeper ordered-executor thread, calls
  `BacklogQuotaManager.dropBacklogForSizeLimit`, whose blocking `ManagedCursorImpl.skipEntries`
  waits for a callback due on that very thread. Admin calls on topics served by that thread
  hang meanwhile. Tests here let the broker evict by time only.
- Ready means `GET /admin/v2/clusters` lists the cluster and `GET /admin/v2/brokers/ready`
  answers 200: the web service answers the former while the broker is still starting.
  Each launch also waits for `public/default`: `PulsarStandalone` creates the `public` tenant
  only after that, and a namespace created under it before then gets 404 "Tenant not found".
- With `otel=True` the broker also serves OpenTelemetry's Prometheus exposition, on a port of
  its own (`otel_metrics_url`; ready once it answers too). `OTEL_*` variables of the
  caller's environment never reach the broker, with or without it.
The configuration is the shipped `conf/standalone.conf` with our keys replacing its own
(`STANDALONE_OVERRIDES`): loopback, one bookie, no default backlog quota, backlog-quota
checks every 2 s in precise time mode (PIP-323), topic-level metrics, small caches.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

import pytest

from exporter.demo.embedded import BrokerFailed, free_ports
from tests.harness.apache_pulsar_install import VERSION, home, installed
from tests.harness.pulsar import Metrics
from tests.harness.wait import poll
from tests.harness.workload import Workload

__all__ = ["OTEL_ENV", "STANDALONE_OVERRIDES", "VERSION", "ApachePulsar", "ApachePulsarMissing",
           "BrokerFailed", "apache_pulsar_fixture", "poll"]

T = TypeVar("T")
# What every launch waits for before it is handed out (module docstring: the race on `public`).
DEFAULT_NAMESPACES = ("public/default",)
TRANSPORT = "org.apache.pulsar.broker.resourcegroup.ResourceUsageTopicTransportManager"
STANDALONE_OVERRIDES: Mapping[str, str] = {
    "clusterName": "standalone",
    "bindAddress": "127.0.0.1",
    "advertisedAddress": "127.0.0.1",
    "listeningInterface": "lo",  # BookKeeper key: the bookie binds 0.0.0.0 without it
    "managedLedgerDefaultEnsembleSize": "1",
    "managedLedgerDefaultWriteQuorum": "1",
    "managedLedgerDefaultAckQuorum": "1",
    "backlogQuotaDefaultLimitGB": "-1",  # shipped: 10 GB producer_request_hold
    "backlogQuotaCheckIntervalInSeconds": "2",
    "preciseTimeBasedBacklogQuotaCheck": "true",  # the estimate ignores the open ledger
    "exposeTopicLevelMetricsInPrometheus": "true",  # backlog age is topic-level only
    "exposePreciseBacklogInPrometheus": "true",
    "statsUpdateFrequencyInSecs": "2",
    "statsUpdateInitialDelayInSecs": "1",
    "resourceUsageTransportPublishIntervalInSecs": "2",
    "brokerDeleteInactiveTopicsEnabled": "false",  # tests leave topics idle on purpose
    "keepAliveIntervalSeconds": "5",  # a hung client's producers go in ~10 s, not ~60 s
    "webSocketServiceEnabled": "false",
    "managedLedgerCacheSizeMB": "32",
    "dbStorage_writeCacheMaxSizeMb": "16",
    "dbStorage_readAheadCacheMaxSizeMb": "16",
    "dbStorage_rocksDB_blockCacheSize": str(16 * 1024 * 1024),
}


# OpenTelemetry (PIP-264), off unless asked for: Pulsar's OpenTelemetryService defaults
# `otel.sdk.disabled` to true and reads the rest through the SDK's autoconfiguration, so
# the JVM's environment turns it on. Metrics only, served by the SDK's Prometheus exporter
# on loopback (the port is added per broker); no traces or logs exported anywhere.
OTEL_ENV: Mapping[str, str] = {
    "OTEL_SDK_DISABLED": "false",
    "OTEL_METRICS_EXPORTER": "prometheus",
    "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}


class ApachePulsarMissing(FileNotFoundError):
    """No Apache Pulsar install: run `./dev test` (or `python -m
    tests.harness.apache_pulsar_install`). Raised, never skipped over."""


class _KeepMethodRedirect(urllib.request.HTTPRedirectHandler):
    """A cluster's broker answers a request for a topic or bundle it does not own with a 307
    to the owner, for PUT and POST too, which urllib follows only for GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        if code in (307, 308):
            return urllib.request.Request(newurl, data=req.data, method=req.get_method(),
                                          headers=dict(req.header_items()))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_FOLLOW = urllib.request.build_opener(_KeepMethodRedirect())


class BrokerWeb:
    """A broker's addresses and web port as the tests use them: admin REST calls and /metrics
    (standalone and cluster brokers alike), on loopback at `port` and `web_port`."""

    port: int  # the binary protocol's
    web_port: int

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def metrics_url(self) -> str:
        """What an operator types: the broker redirects it to /metrics/ (302; 4.2: 301)."""
        return f"{self.web_url}/metrics"

    def admin(self, method: str, path: str, body: object = None, timeout: float = 10) -> Any:
        """One admin REST call; JSON in and out (None for an empty answer). HTTP errors
        propagate as `urllib.error.HTTPError` with the broker's reason in the message."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json",
                                                  "Accept": "application/json"})
        try:
            with _FOLLOW.open(request, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            exc.msg = f"{exc.msg}: {exc.read().decode(errors='replace')[:500]}"
            raise
        return json.loads(raw) if raw.strip() else None

    def create_namespace(self, prefix: str, tenant: str = "public") -> str:
        """A fresh namespace `tenant/prefix-<random>`, so tests sharing the broker never
        see each other's quotas or topics."""
        namespace = f"{tenant}/{prefix}-{uuid.uuid4().hex[:8]}"
        self.admin("PUT", f"/admin/v2/namespaces/{namespace}")
        return namespace

    def topic_stats(self, topic: str) -> dict[str, Any]:
        path = topic.replace("persistent://", "/admin/v2/persistent/", 1)
        return self.admin("GET", f"{path}/stats?getEarliestTimeInBacklog=true")

    def metrics_text(self) -> str:
        """The broker's /metrics body. A 5xx is asked again, for up to 30 s: a broker just
        restarted once answered 500 in CI, half a second after the exporter's own fetch
        got the body. What the tests read here is their oracle, not the
        product under test; the product's handling of a 5xx is tested on its own."""

        def fetch() -> str | urllib.error.HTTPError:
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=30) as resp:
                    return resp.read().decode("utf-8")
            except urllib.error.HTTPError as answer:
                if answer.code >= 500:
                    return answer
                raise

        body = poll(fetch, f"{self.metrics_url} answered", 30, 0.5,
                    until=lambda v: isinstance(v, str))
        assert isinstance(body, str)
        return body

    def metrics(self) -> Metrics:
        return Metrics(self.metrics_text())


class ApachePulsar(BrokerWeb, Workload):
    """One standalone broker working in `workdir` (its conf, log, data). Ports are picked
    at the first start; `stop()` kills the whole process group and leaves `workdir` alone."""

    client_timeout = 30
    consume_idle = 2.0

    def __init__(self, workdir: Path, *, version: str = VERSION,
                 pulsar_home: Path | None = None, heap: str = "1g",
                 direct_memory: str = "1g", resource_usage_transport: bool = True,
                 otel: bool = False, overrides: Mapping[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.version = version
        self.home = pulsar_home or home(version)
        self.heap, self.direct_memory = heap, direct_memory
        self.resource_usage_transport = resource_usage_transport
        self.otel = otel
        self.overrides = dict(overrides or {})
        self.cluster = self.overrides.get("clusterName", STANDALONE_OVERRIDES["clusterName"])
        self.port = self.web_port = self.bookie_port = self.otel_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None  # the last start(), both phases
        self.ready_rss_bytes: int | None = None  # the JVM's resident memory once ready

    # --- where things are -----------------------------------------------------------------
    @property
    def otel_metrics_url(self) -> str:
        """The OpenTelemetry SDK's Prometheus exporter (`otel=True` only)."""
        if not self.otel:
            raise ValueError("this broker runs without OpenTelemetry (otel=False)")
        return f"http://127.0.0.1:{self.otel_port}/metrics"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_bytes(self) -> int | None:
        """Resident memory of the broker JVM (`bin/pulsar` execs java, so it is our child)."""
        if not self.running:
            return None
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> Self:
        """Start (twice with the usage transport, see the module docstring) and wait until
        ready; on failure the process group is stopped and `BrokerFailed` carries the log."""
        if not installed(self.home):
            raise ApachePulsarMissing(
                f"Apache Pulsar {self.version} is not installed at {self.home}: run ./dev test, or "
                "python -m tests.harness.apache_pulsar_install (Maven and a JDK >= 17)")
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port, self.web_port, self.bookie_port, self.otel_port = free_ports(4)
        deadline = began + timeout
        fresh = not (self.workdir / "data").exists()
        if self.resource_usage_transport and fresh:
            self._launch(transport=False, deadline=deadline,
                         namespaces=(*DEFAULT_NAMESPACES, "pulsar/system"))
            self.stop()
        self._launch(transport=self.resource_usage_transport, deadline=deadline)
        self.start_seconds = time.monotonic() - began
        self.ready_rss_bytes = self.rss_bytes()
        return self

    def _conf(self, transport: bool) -> Path:
        keys = {**STANDALONE_OVERRIDES, **self.overrides, "brokerServicePort": str(self.port),
                "webServicePort": str(self.web_port)}
        if transport:
            keys["resourceUsageTransportClassName"] = TRANSPORT
        shipped = (self.home / "conf" / "standalone.conf").read_text().splitlines()
        kept = [line for line in shipped if line.split("=", 1)[0].strip() not in keys]
        path = self.workdir / "standalone.conf"
        path.write_text("\n".join([*kept, "", "# pulsar-quota-exporter test harness",
                                   *(f"{k}={v}" for k, v in keys.items())]) + "\n")
        return path

    def _launch(self, *, transport: bool, deadline: float,
                namespaces: tuple[str, ...] = DEFAULT_NAMESPACES) -> None:
        """Start the broker and wait for it and `namespaces`; on failure (a timeout too)
        stop it, so that no caller leaks a running broker."""
        data = self.workdir / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSAR_", "OTEL_"))}
        if self.otel:
            env.update(OTEL_ENV, OTEL_EXPORTER_PROMETHEUS_PORT=str(self.otel_port))
        env.update(
            PULSAR_STANDALONE_CONF=str(self._conf(transport)),
            PULSAR_LOG_DIR=str(self.workdir / "logs"),
            PULSAR_MEM=f"-Xms128m -Xmx{self.heap} -XX:MaxDirectMemorySize={self.direct_memory}",
            PULSAR_GC="-XX:+UseG1GC -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1 "
                      "-XX:+PerfDisableSharedMem",
        )
        argv = [str(self.home / "bin" / "pulsar"), "standalone", "-nfw", "-nss",
                "-a", "127.0.0.1", "--bookkeeper-port", str(self.bookie_port),
                "--metadata-dir", str(data / "metadata"),
                "--bookkeeper-dir", str(data / "standalone" / "bookkeeper"),
                "--zookeeper-dir", str(data / "standalone" / "zookeeper")]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.workdir,
                                            env=env, start_new_session=True)
        try:
            self._wait_ready(deadline)
            for namespace in namespaces:
                self._wait_for_namespace(namespace, deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, deadline: float) -> None:
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerFailed(f"Apache Pulsar exited with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                if (self.cluster in self.admin("GET", "/admin/v2/clusters", timeout=2)
                        and self._answers(self.web_url + "/admin/v2/brokers/ready")
                        and self._answers(self.metrics_url)
                        and (not self.otel or self._answers(self.otel_metrics_url))):
                    return
            if time.monotonic() >= deadline:
                raise BrokerFailed(f"Apache Pulsar not ready on {self.web_url} in time (GET "
                                   f"/admin/v2/clusters, /admin/v2/brokers/ready, /metrics):\n"
                                   f"{self.log_tail()}")
            time.sleep(0.25)

    @staticmethod
    def _answers(url: str) -> bool:
        """200 from `url`. The web service answers /admin/v2/clusters before
        `PulsarService.start()` has finished (state Init, seconds more with the usage
        transport); /admin/v2/brokers/ready says 200 only once it is Started."""
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def _wait_for_namespace(self, namespace: str, deadline: float) -> None:
        """PulsarStandalone creates its namespaces just after the web service is up."""
        tenant = namespace.split("/", 1)[0]
        while True:
            with contextlib.suppress(OSError, ValueError):
                if namespace in self.admin("GET", f"/admin/v2/namespaces/{tenant}", timeout=2):
                    return
            if time.monotonic() >= deadline:
                raise BrokerFailed(f"{namespace} was not created:\n{self.log_tail()}")
            time.sleep(0.25)

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the process group (the broker closes its bookie and metadata store),
        SIGKILL to what is left after `grace`."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever the JVM left in its group
        process.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def otel_metrics_text(self) -> str:
        with urllib.request.urlopen(self.otel_metrics_url, timeout=30) as resp:
            return resp.read().decode("utf-8")

    def otel_metrics(self) -> Metrics:
        return Metrics(self.otel_metrics_text())


def apache_pulsar_fixture(scope: str = "session", **options: Any):
    """A pytest fixture running one broker per `scope` (tests/conftest.py: session)."""

    @pytest.fixture(scope=scope)
    def _fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApachePulsar]:
        broker = ApachePulsar(tmp_path_factory.mktemp("apache-pulsar"), **options)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()

    return _fixture
