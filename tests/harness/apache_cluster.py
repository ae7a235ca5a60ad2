"""A real Apache Pulsar cluster for tests: ZooKeeper, one bookie and several brokers, each its
own JVM from the 4.0.8 distribution the standalone tests use, all on loopback, as on hosts of
their own (`bin/pulsar zookeeper | initialize-cluster-metadata | bookie | broker`).

Facts measured on 4.0.8 that the code accounts for (shared/notes/apache-pulsar.md):
- the bookie reads `PULSAR_BOOKKEEPER_CONF` (any other variable: the shipped file, which dials
  localhost:2181); bookkeeper.conf is read by commons-configuration, where a key present twice
  becomes a list, so every key we set replaces the shipped line; a loopback bookie needs
  `allowLoopback=true`;
- ZooKeeper's shipped file serves Prometheus on 8000, as does the bookie's: ours writes a file
  of its own, without the metrics provider;
- the shipped broker.conf ends without a newline (an appended key would glue onto its last
  line): every file here is rebuilt line by line;
- a broker answers ready before the bookie has registered: the cluster is ready once
  `/admin/v2/bookies/all` lists the bookie and every broker is in `/admin/v2/brokers/C`;
- a broker whose bookie is gone can hang on shutdown: SIGTERM, then SIGKILL after a grace.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

import pytest

from exporter.demo.embedded import free_ports
from tests.harness import jvmlogs
from tests.harness.apache_pulsar import (
    STANDALONE_OVERRIDES,
    TRANSPORT,
    ApachePulsarMissing,
    BrokerWeb,
)
from tests.harness.apache_pulsar_install import VERSION, home, installed
from tests.harness.process import ManagedProcess
from tests.harness.wait import poll
from tests.harness.workload import Workload

__all__ = ["ApacheCluster", "ClusterBroker", "apache_cluster_fixture", "while_moving"]

CLUSTER = "cluster-a"
T = TypeVar("T")
# What a broker answers while a bundle changes hands (`NamespaceService`, `OwnershipCache`).
_MOVING = re.compile(r"Failed to acquire ownership|currently being unloaded|Please redo the lookup")
_GC = "-XX:+UseG1GC -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1 -XX:+PerfDisableSharedMem"
# The standalone's test keys that are a broker's (the rest are its embedded bookie's).
_BROKER_KEYS = {k: v for k, v in STANDALONE_OVERRIDES.items()
                if k not in ("clusterName", "listeningInterface") and not k.startswith("dbStorage")}


def while_moving(call: Callable[[], T], what: str, timeout: float = 60) -> T:
    """`call()`'s answer, asked again while the broker answers 500/503 with a message of a
    bundle changing hands (`_MOVING`): Pulsar's own clients redo the call then. Any other
    error fails at once."""
    def attempt() -> tuple[T] | urllib.error.HTTPError:
        try:
            return (call(),)
        except urllib.error.HTTPError as answer:
            if answer.code in (500, 503) and _MOVING.search(answer.msg or ""):
                return answer
            raise

    done = poll(attempt, what, timeout, 0.5, until=lambda v: isinstance(v, tuple))
    assert isinstance(done, tuple)
    return done[0]


def _conf(shipped: Path, keys: Mapping[str, str], target: Path) -> Path:
    """`shipped` with every key of `keys` removed, then `keys` appended, one per line."""
    kept = [line for line in shipped.read_text().splitlines()
            if line.split("=", 1)[0].strip() not in keys]
    target.write_text("\n".join([*kept, "", "# pulsar-quota-exporter test harness",
                                 *(f"{k}={v}" for k, v in keys.items())]) + "\n")
    return target


def _env(workdir: Path, memory: str, **conf: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSAR_", "OTEL_",
                                                                    "BOOKIE_"))}
    env.update(PULSAR_LOG_DIR=str(workdir / "logs"), PULSAR_MEM=memory, PULSAR_GC=_GC,
               **{k: str(v) for k, v in conf.items()})
    return env


# The JVM's container metrics (jdk.internal.platform, which Pulsar's LinuxInfoUtils uses
# when the provider is cgroupv1/v2) read the process's own cgroup: a broker moved into a
# cpu + cpuacct cgroup of its own reports its own CPU usage, not the host's, as in a pod.
_OWN_CGROUP = """set -e; name=$1; shift
for c in cpu cpuacct; do
  mkdir -p /sys/fs/cgroup/$c/$name; echo $$ > /sys/fs/cgroup/$c/$name/cgroup.procs
done
exec "$@"
"""


class ClusterBroker(BrokerWeb, Workload):
    """One broker of the cluster, in `workdir`; its ports are fixed at construction, so a
    restart comes back at the same address (as a broker host would)."""

    client_timeout = 30
    consume_idle = 2.0

    def __init__(self, cluster: ApacheCluster, name: str, *, heap: str = "512m",
                 direct_memory: str = "512m", overrides: Mapping[str, str] | None = None,
                 own_cgroup: bool = False):
        self.cluster, self.name = cluster, name
        self.own_cgroup = own_cgroup
        self.workdir = cluster.workdir / name
        self.port, self.web_port = free_ports(2)
        self.heap, self.direct_memory = heap, direct_memory
        self.overrides = dict(overrides or {})
        self.process: ManagedProcess | None = None

    @property
    def broker_id(self) -> str:
        """How Pulsar names this broker: `host:webServicePort` (brokers list, leader, usage
        reports' sender), the lookup's `httpUrl` without its scheme."""
        return f"127.0.0.1:{self.web_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def start(self) -> Self:
        """Launch; `wait_ready` waits."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        zk = self.cluster.metadata_store
        keys = {**_BROKER_KEYS, "clusterName": CLUSTER, "metadataStoreUrl": zk,
                "configurationMetadataStoreUrl": zk, "brokerServicePort": str(self.port),
                "webServicePort": str(self.web_port), "bindAddress": "127.0.0.1",
                "advertisedAddress": "127.0.0.1", "functionsWorkerEnabled": "false",
                "resourceUsageTransportClassName": TRANSPORT, **self.overrides}
        conf = _conf(self.cluster.home / "conf" / "broker.conf", keys,
                     self.workdir / "broker.conf")
        memory = f"-Xms64m -Xmx{self.heap} -XX:MaxDirectMemorySize={self.direct_memory}"
        command: list[str | Path] = [self.cluster.home / "bin" / "pulsar", "broker"]
        if self.own_cgroup:  # its own cpu/cpuacct cgroup (v1): see _OWN_CGROUP
            command = ["sh", "-c", _OWN_CGROUP, "sh", self._cgroup, *command]
        self.process = ManagedProcess(
            "broker", command, self.workdir,
            env=_env(self.workdir, memory, PULSAR_BROKER_CONF=conf)).start()
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        assert self.process is not None
        self.process.wait_ready(self.web_url + "/admin/v2/brokers/ready", timeout, 0.25)

    def stop(self, grace: float = 10.0) -> None:
        if self.process is not None:
            self.process.stop(grace)
        if self.own_cgroup:  # empty once the JVM is gone; a restart makes it again
            for controller in ("cpu", "cpuacct"):
                with contextlib.suppress(OSError):
                    os.rmdir(f"/sys/fs/cgroup/{controller}/{self._cgroup}")

    @property
    def _cgroup(self) -> str:
        return f"pqe-{os.getpid()}-{self.web_port}"

    def kill(self) -> None:
        """SIGKILL, as a host that dies: no goodbye, its metadata session lingers."""
        if self.process is not None and self.process.running:
            self.process.signal(signal.SIGKILL, group=True)
            self.process.wait_exit(30)

    def rss_bytes(self) -> int:
        return self.cluster.rss_of(self.process)


class ApacheCluster:
    """ZooKeeper, a bookie and `brokers` brokers in `workdir`. `start()` waits until every
    part serves; `stop()` stops them in reverse order."""

    def __init__(self, workdir: Path, *, brokers: int = 2, pulsar_home: Path | None = None,
                 broker_overrides: Mapping[str, str] | None = None,
                 own_cgroups: bool = False) -> None:
        self.workdir = Path(workdir)
        self.home = pulsar_home or home()
        self.zk_port, self.bookie_port, self.bookie_stats_port = free_ports(3)
        self.zookeeper: ManagedProcess | None = None
        self.bookie: ManagedProcess | None = None
        self.brokers = [ClusterBroker(self, f"broker-{i + 1}", overrides=broker_overrides,
                                      own_cgroup=own_cgroups) for i in range(brokers)]
        self.start_seconds: float | None = None

    @property
    def metadata_store(self) -> str:
        return f"zk:127.0.0.1:{self.zk_port}"

    def broker_named(self, broker_id: str) -> ClusterBroker:
        return next(b for b in self.brokers if b.broker_id == broker_id)

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 240.0) -> Self:
        if not installed(self.home):
            raise ApachePulsarMissing(
                f"Apache Pulsar {VERSION} is not installed at {self.home}: run ./dev test")
        began = time.monotonic()
        try:
            self._start_zookeeper(timeout)
            self._initialize_metadata()
            self._start_bookie()
            for broker in self.brokers:
                broker.start()
            for broker in self.brokers:
                broker.wait_ready(max(1.0, began + timeout - time.monotonic()))
            self.wait_members(timeout=max(1.0, began + timeout - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _start_zookeeper(self, timeout: float) -> None:
        work = self.workdir / "zookeeper"
        work.mkdir(parents=True, exist_ok=True)
        conf = work / "zk.conf"
        conf.write_text("\n".join([
            "tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={work / 'data'}",
            f"clientPort={self.zk_port}", "clientPortAddress=127.0.0.1",
            "admin.enableServer=false", "4lw.commands.whitelist=ruok", "forceSync=no", ""]))
        self.zookeeper = ManagedProcess(
            "zookeeper", [self.home / "bin" / "pulsar", "zookeeper"], work,
            env=_env(work, "-Xms32m -Xmx128m", PULSAR_ZK_CONF=conf)).start()

        def imok() -> bool:
            assert self.zookeeper is not None
            if not self.zookeeper.running:
                raise AssertionError(f"ZooKeeper exited:\n{self.zookeeper.log_tail()}")
            with socket.create_connection(("127.0.0.1", self.zk_port), timeout=2) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"

        poll(imok, "ZooKeeper answering ruok", timeout, 0.25, ignore=(OSError,))

    def _initialize_metadata(self) -> None:
        first = self.brokers[0]
        work = self.workdir / "metadata-setup"
        work.mkdir(parents=True, exist_ok=True)
        argv = [str(self.home / "bin" / "pulsar"), "initialize-cluster-metadata",
                "--cluster", CLUSTER, "--metadata-store", self.metadata_store,
                "--configuration-metadata-store", self.metadata_store,
                "--web-service-url", first.web_url, "--broker-service-url", first.service_url]
        done = subprocess.run(argv, cwd=work, env=_env(work, "-Xms32m -Xmx256m"),
                              capture_output=True, text=True, timeout=180, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            raise AssertionError(f"initialize-cluster-metadata exited {done.returncode}:\n{tail}")

    def _start_bookie(self) -> None:
        work = self.workdir / "bookie"
        work.mkdir(parents=True, exist_ok=True)
        keys = {"bookiePort": str(self.bookie_port), "zkServers": f"127.0.0.1:{self.zk_port}",
                "metadataServiceUri": f"zk+null://127.0.0.1:{self.zk_port}/ledgers",
                "journalDirectory": str(work / "journal"),
                "ledgerDirectories": str(work / "ledgers"),
                "advertisedAddress": "127.0.0.1", "allowLoopback": "true",
                "prometheusStatsHttpAddress": "127.0.0.1",
                "prometheusStatsHttpPort": str(self.bookie_stats_port),
                "httpServerEnabled": "false", "journalSyncData": "false",
                "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16",
                "dbStorage_rocksDB_blockCacheSize": str(16 * 1024 * 1024)}
        conf = _conf(self.home / "conf" / "bookkeeper.conf", keys, work / "bookkeeper.conf")
        self.bookie = ManagedProcess(
            "bookie", [self.home / "bin" / "pulsar", "bookie"], work,
            env=_env(work, "-Xms64m -Xmx256m -XX:MaxDirectMemorySize=256m",
                     PULSAR_BOOKKEEPER_CONF=conf)).start()

    def wait_members(self, timeout: float = 120.0) -> None:
        """Every running broker listed by the cluster and the bookie registered."""
        admin = next(b for b in self.brokers if b.running)
        want = {b.broker_id for b in self.brokers if b.running}

        def members() -> bool:
            assert self.bookie is not None
            if not self.bookie.running:
                raise AssertionError(f"the bookie exited:\n{self.bookie.log_tail()}")
            listed = set(admin.admin("GET", f"/admin/v2/brokers/{CLUSTER}", timeout=5))
            bookies = admin.admin("GET", "/admin/v2/bookies/all", timeout=5) or {}
            return want <= listed and bool(bookies.get("bookies"))

        poll(members, "brokers listed and the bookie registered", timeout, 0.5,
             ignore=(OSError, ValueError))

    def stop(self) -> None:
        for broker in reversed(self.brokers):
            broker.stop()
        for part in (self.bookie, self.zookeeper):
            if part is not None:
                part.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what tests ask -------------------------------------------------------------------
    def owner(self, topic: str) -> str:
        """The broker id that owns `topic` now (a lookup: loads it if nobody does).

        Asked again while the bundle changes hands: just after an unload, the broker the load
        manager picks can lose the bundle's lock and answer 500 "Failed to acquire ownership"
        (`NamespaceService.searchForCandidateBroker`), or 503 while it is still unloading, and
        Pulsar's own clients redo the lookup then. Any other error fails at once."""
        path = topic.replace("://", "/", 1)
        found = while_moving(lambda: self.any_broker().admin(
            "GET", f"/lookup/v2/topic/{path}", timeout=30), f"an owner of {topic}")
        return found["httpUrl"].split("://", 1)[1].rstrip("/")

    def bundle_of(self, topic: str) -> str:
        """The hash range of the bundle holding `topic` (answered as plain text)."""
        path = topic.replace("://", "/", 1)
        url = f"{self.any_broker().web_url}/lookup/v2/topic/{path}/bundle"
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.read().decode().strip()

    def any_broker(self) -> ClusterBroker:
        return next(b for b in self.brokers if b.running)

    def leader(self) -> str:
        found = self.any_broker().admin("GET", "/admin/v2/brokers/leaderBroker")
        return found["serviceUrl"].split("://", 1)[1].rstrip("/")

    def rss_of(self, process: ManagedProcess | None) -> int:
        """Resident bytes of `process`'s group (the JVM `bin/pulsar` execs)."""
        total = 0
        for pid in process.group_members() if process is not None else ():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def _parts(self) -> list[tuple[str, ManagedProcess]]:
        """Every started part's process, by name: ZooKeeper, the bookie, the brokers."""
        parts = [("zookeeper", self.zookeeper), ("bookie", self.bookie),
                 *((b.broker_id, b.process) for b in self.brokers)]
        return [(name, process) for name, process in parts if process is not None]

    def rss_bytes(self) -> int:
        return sum(self.rss_of(process) for _, process in self._parts())

    def logs_since(self, began: float) -> str:
        """What a failing test shows (tests/cluster/conftest.py): every part's warnings,
        errors and long pauses since the test `began` (epoch seconds; jvmlogs.py)."""
        return "\n".join(jvmlogs.since(name, process.log_path, began)
                         for name, process in self._parts())


def apache_cluster_fixture(scope: str = "session", **options: Any):
    """A pytest fixture running one cluster per `scope`."""

    @pytest.fixture(scope=scope)
    def _fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheCluster]:
        cluster = ApacheCluster(tmp_path_factory.mktemp("apache-cluster"), **options)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()

    return _fixture
