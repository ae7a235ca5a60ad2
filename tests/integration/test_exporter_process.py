"""`pulsar-quota-exporter run` as a real process against a real pulsar-lite broker: it becomes
ready after its first good cycle, serves the PIP-323 families, and stops cleanly on SIGTERM
(what an orchestrator sends), on SIGINT to its process group (Ctrl-C in a terminal, which
also reaches the Spark JVM) and on SIGTERM to its group (systemd's stop); a config error
exits 2 naming the file and the key path.

The exporter runs in its own process group (tests/harness/exporter_process.py); whatever of
that group outlives a test is killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.demo.embedded import BrokerFailed, EmbeddedBroker, free_port
from exporter.record.store import config_text, read_cycles
from tests.harness.exporter_process import CLI, ExporterProcess, run_cli
from tests.harness.process import ManagedProcess
from tests.harness.pulsar import Metrics, PulsarLite, pulsar_lite_fixture
from tests.harness.wait import poll

# The exporter processes start Spark (one test only checks a config error).
pytestmark = pytest.mark.spark

pulsar_lite = pulsar_lite_fixture()

NAMESPACE = "public/proc"
LIMIT_SIZE = 1024 * 1024  # the config's 1MiB
LIMIT_TIME = 3600  # the config's 1h
CLUSTER = "process-test"
READY_WITHIN = 180.0  # Spark's start (about 10 s) and first job dominate; generous on purpose
EXIT_WITHIN = 30.0

# PIP-323's families (Pulsar's names and types), per topic and cluster-wide.
PIP_323_TYPES = {
    "pulsar_storage_backlog_age_seconds": "gauge",
    "pulsar_storage_backlog_size": "gauge",
    "pulsar_storage_backlog_quota_limit": "gauge",
    "pulsar_storage_backlog_quota_limit_time": "gauge",
    "pulsar_storage_backlog_quota_check_duration_seconds": "histogram",
    "pulsar_broker_storage_backlog_quota_exceeded_evictions_total": "counter",
}


@pytest.fixture(scope="module")
def topic(pulsar_lite: PulsarLite) -> str:
    """A topic with a stalled subscription, so the per-topic families have a series."""
    name = f"persistent://{NAMESPACE}/stalled-{uuid.uuid4().hex[:8]}"
    pulsar_lite.create_subscription(name, "stalled")
    pulsar_lite.produce(name, 5, size=100)
    pulsar_lite.wait_for_backlog(name, "stalled", 5)
    return name


def _config(broker: PulsarLite) -> dict[str, Any]:
    return {
        "cluster": CLUSTER,
        "check_interval": "2s",
        "sources": {"brokers": [{"url": broker.metrics_url, "timeout": "1s"}]},
        "backlog_quotas": {"namespaces": {NAMESPACE: {"limit_size": "1MiB",
                                                      "limit_time": "1h"}}},
        "spark": {"master": "local[2]"},
    }


@pytest.fixture
def exporter(pulsar_lite: PulsarLite, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[ExporterProcess]:
    """The exporter process; `--log.format` from an indirect parameter (default logfmt)."""
    proc = ExporterProcess(tmp_path, _config(pulsar_lite),
                           log_format=getattr(request, "param", "logfmt"),
                           extra_args=("--record.dir", str(tmp_path / "record"))).start()
    try:
        yield proc
    finally:
        proc.stop(grace=0)  # the tests signal it themselves: kill whatever is left


def _assert_serves_pip_323(proc: ExporterProcess, topic: str) -> None:
    # The backlog age is absent until a second cycle has seen the publish counter (it
    # cannot be known before): wait for it, then check the whole body of that scrape.
    def scraped() -> tuple[dict[str, str], Metrics]:
        status, headers, body = proc.get("/metrics")
        assert status == 200
        return headers, Metrics(body.decode())

    headers, metrics = poll(
        scraped, f"a backlog age for {topic} on /metrics", READY_WITHIN, interval=1,
        until=lambda s: s[1].value("pulsar_storage_backlog_age_seconds", topic=topic) is not None,
        show=proc.log_tail)
    age = metrics.value("pulsar_storage_backlog_age_seconds", topic=topic)
    assert age is not None and age >= 0
    assert headers["Content-Type"].startswith("text/plain")
    for family, kind in PIP_323_TYPES.items():
        assert f"# TYPE {family} {kind}\n" in metrics.text, family
    assert metrics.value("pulsar_storage_backlog_quota_limit", topic=topic) == LIMIT_SIZE
    assert metrics.value("pulsar_storage_backlog_quota_limit_time", topic=topic) == LIMIT_TIME
    assert (metrics.value("pulsar_storage_backlog_size", topic=topic) or 0) > 0
    checks = metrics.value("pulsar_storage_backlog_quota_check_duration_seconds_count",
                           cluster=CLUSTER)
    assert checks is not None and checks >= 2
    for quota_type in ("size", "time"):  # exported at 0 before any eviction
        assert metrics.value("pulsar_broker_storage_backlog_quota_exceeded_evictions_total",
                             cluster=CLUSTER, quota_type=quota_type) == 0
    # the cadence the alert rules compare with: this config's, not the defaults
    assert metrics.value("pulsar_quota_exporter_check_interval_seconds", cluster=CLUSTER) == 2
    assert metrics.value("pulsar_quota_exporter_usage_report_interval_seconds",
                         cluster=CLUSTER) == 60
    assert metrics.value("pulsar_quota_exporter_usage_report_max_gap_seconds",
                         cluster=CLUSTER) == 360


@pytest.mark.parametrize(("exporter", "signum", "to_group"), [
    pytest.param("logfmt", signal.SIGTERM, False, id="SIGTERM-to-the-process-logfmt"),
    pytest.param("json", signal.SIGINT, True, id="SIGINT-to-its-group-json"),
    # systemd's stop (KillMode=control-group): the JVM gets it too, and may die first
    pytest.param("logfmt", signal.SIGTERM, True, id="SIGTERM-to-its-group-logfmt"),
], indirect=["exporter"])
def test_run_becomes_ready_serves_and_stops_cleanly_on_a_signal(
        exporter: ExporterProcess, topic: str, signum: signal.Signals, to_group: bool,
        request: pytest.FixtureRequest) -> None:
    seen = exporter.wait_ready(READY_WITHIN)
    # The server answers before the first cycle is published, and not ready until then.
    assert seen[0] == 503 and seen[-1] == 200, seen
    _assert_serves_pip_323(exporter, topic)

    exporter.signal(signum, group=to_group)
    status = exporter.wait_exit(EXIT_WITHIN)

    log = exporter.log()
    assert status == 0, log[-4000:]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", exporter.port), timeout=2).close()
    assert "Traceback" not in log, log[-4000:]
    # py4j's retry to a JVM gone logs on the root logger, at info (logs.py holds it back)
    assert not re.search(r'logger=root|"logger": "root"', log), log[-4000:]
    _assert_log_format(log, request.node.callspec.params["exporter"])
    # run --record.dir: every cycle it completed is on disk, complete and readable
    recorded = list(read_cycles(exporter.config_path.parent / "record"))
    assert len(recorded) >= 2 and all(c.bodies for c in recorded)
    assert config_text(exporter.config_path.parent / "record", recorded[-1].config_hash) == \
        exporter.config_path.read_text()
    # Nothing of the exporter outlives it (the Spark JVM exits with its parent).
    poll(exporter.group_members, "nothing left of the exporter's process group", EXIT_WITHIN,
         interval=0.2, until=lambda members: members == [])


def _assert_log_format(log: str, fmt: str) -> None:
    """Our lines (the Spark JVM's own are in log4j's format) are all in `fmt`, and the
    last says the exporter stopped cleanly."""
    ours = r'^time=\S+Z level=(debug|info|warn|error) logger=(exporter|py4j|pulsar)\S* msg='
    if fmt == "logfmt":
        assert re.search(r'^time=\S+Z level=info logger=exporter\.runtime\.serve '
                         r'msg="stopped cleanly"$', log, re.M), log[-4000:]
        assert not any(line.startswith('{"time"') for line in log.splitlines())
        return
    records = [json.loads(line) for line in log.splitlines() if line.startswith('{"time"')]
    assert records and all(set(r) >= {"time", "level", "logger", "msg"} for r in records)
    stopped = {"logger": "exporter.runtime.serve", "msg": "stopped cleanly", "level": "info"}
    assert any(stopped.items() <= r.items() for r in records), records[-3:]
    assert not re.search(ours, log, re.M), log[-4000:]


def test_config_error_exits_2_naming_the_file_and_each_key_path(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "broken.yaml"
    config.write_text(
        f"cluster: c\ncheck_interval: soon\nsources:\n  brokers:\n"
        f"    - url: http://127.0.0.1:9/metrics\n      timout: 3s\n"
        f"exposition: {{listen: '127.0.0.1:{port}'}}\n")
    done = run_cli("run", "--config.file", config)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    errors = done.stderr.splitlines()
    assert [line.split(": ", 2)[:2] for line in errors] == [
        [str(config), "check_interval"], [str(config), "sources.brokers[0].timout"]], errors
    assert "timeout" in errors[1]  # the did-you-mean


def test_files_the_config_names_are_checked_before_anything_starts(tmp_path: Path) -> None:
    """A TLS certificate that is not there, a key that is not the certificate's, an empty
    admin token and a CA file that is no CA: `validate-config` and `run` both exit 2 with
    one line per key path, without a traceback and without starting Spark (`run` answers
    in the time `validate-config` takes)."""
    from tests.harness.fixtures import THROWAWAY_CERT

    other_key = tmp_path / "other.key"
    other_key.write_text("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEG\n"
                         "-----END PRIVATE KEY-----\n")
    (tmp_path / "empty-token").write_text("\n")
    (tmp_path / "not-a-ca.pem").write_text("hello\n")
    config = tmp_path / "files.yaml"
    config.write_text(
        "cluster: c\nsources:\n  brokers: [{url: 'http://127.0.0.1:9/metrics'}]\n"
        f"  admin: {{url: 'http://127.0.0.1:9', token_file: '{tmp_path / 'empty-token'}', "
        f"ca_file: '{tmp_path / 'not-a-ca.pem'}'}}\n"
        f"exposition: {{listen: '127.0.0.1:{free_port()}', tls: {{cert_file: "
        f"'{tmp_path / 'missing.crt'}', key_file: '{other_key}'}}}}\n")
    expected = ["sources.admin.token_file", "sources.admin.ca_file", "exposition.tls.cert_file"]
    started = time.monotonic()
    for command in (("validate-config", config), ("run", "--config.file", config)):
        done = run_cli(*command, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        lines = done.stderr.splitlines()
        assert [line.split(": ", 2)[1] for line in lines] == expected, lines
    assert time.monotonic() - started < 20  # no Spark JVM was started (it takes longer)
    config.write_text(config.read_text().replace(str(tmp_path / "missing.crt"),
                                                 str(THROWAWAY_CERT)))
    done = run_cli("validate-config", config, timeout=60)
    assert "exposition.tls: the certificate and key do not load together" in done.stderr


def test_a_listen_address_in_use_exits_1_saying_so_before_spark_starts(
        tmp_path: Path) -> None:
    """Another exporter (or anything) on the port: one error record naming the address and
    the key, exit 1, no traceback, and no Spark JVM started for nothing."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        config = tmp_path / "c.yaml"
        config.write_text("cluster: c\nsources:\n  brokers:\n"
                          f"    - url: http://127.0.0.1:9/metrics\n"
                          f"exposition: {{listen: '{listen}'}}\n")
        done = run_cli("run", "--config.file", config, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        line for line in done.stderr.splitlines() if line.startswith("time=")], done.stderr
    assert f'level=error logger=exporter.cli msg="cannot listen on {listen} ' \
           '(exposition.listen): in use"' in done.stderr


@pytest.mark.lite  # the demo's embedded broker, when the ports are free
@pytest.mark.parametrize("port", [16650, 10049], ids=["broker-port", "exporter-port"])
def test_a_second_demo_says_the_first_holds_its_ports_and_starts_nothing(
        tmp_path: Path, port: int) -> None:
    """The demo's fixed ports held (a demo left running in another terminal): it said
    nothing clear, produced into the other demo's broker, printed a traceback and aborted
    (exit 134), at times leaving its own broker running."""
    assert _demo_brokers() == [], "a demo broker is already running"
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = run_cli("demo", "--duration", "5", cwd=tmp_path, timeout=60)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"demo: 127.0.0.1:{port} in use: is another demo running?" in done.stderr
    assert "Traceback" not in done.stderr and "Spark" not in done.stdout + done.stderr
    assert _demo_brokers() == []


@pytest.mark.lite
def test_an_embedded_broker_refuses_a_given_port_another_listens_on(tmp_path: Path) -> None:
    """Refused by name before the broker starts: another broker there (a demo left
    running) would answer the readiness probe meant for this one."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerFailed, match=f"127.0.0.1:{port} is in use"):
            EmbeddedBroker.start_new(port, free_port(), str(tmp_path / "db"))
    assert not list((tmp_path / "db").glob("pulsar-lite.log"))  # never started


def _reloads(proc: ExporterProcess, result: str) -> float:
    return proc.scrape().value("pulsar_quota_exporter_config_reloads_total",
                               cluster=CLUSTER, result=result) or 0.0


def _wait_until(what: str, predicate, proc: ExporterProcess) -> None:
    poll(predicate, what, 60, show=proc.log_tail)


def test_sighup_reloads_a_bad_edit_is_refused_and_a_good_one_applied(
        exporter: ExporterProcess, topic: str) -> None:
    exporter.wait_ready(READY_WITHIN)
    exporter.signal(signal.SIGHUP)  # same content: reloaded on request
    _wait_until("SIGHUP reload counted", lambda: _reloads(exporter, "success") == 1, exporter)

    good = exporter.config_path.read_text()
    assert "limit_size: 1MiB\n" in good
    exporter.config_path.write_text(good.replace("limit_size: 1MiB", "limit_size: one MiB"))
    _wait_until("bad edit refused", lambda: _reloads(exporter, "failure") == 1, exporter)
    assert exporter.running
    assert exporter.scrape().value("pulsar_storage_backlog_quota_limit",
                                   topic=topic) == LIMIT_SIZE  # the running config stays
    assert any('backlog_quotas.namespaces["public/proc"].limit_size' in m
               for m in exporter.log_messages()), exporter.log_tail()

    exporter.config_path.write_text(good.replace("limit_size: 1MiB", "limit_size: 2MiB"))

    def new_limit() -> bool:
        return exporter.scrape().value("pulsar_storage_backlog_quota_limit",
                                       topic=topic) == 2 * LIMIT_SIZE

    _wait_until("the edited limit applied without a restart", new_limit, exporter)
    assert _reloads(exporter, "success") == 2
    exporter.signal(signal.SIGTERM)
    assert exporter.wait_exit(EXIT_WITHIN) == 0


def _demo_brokers() -> list[int]:
    """Live pulsar-lite processes serving the demo's address (exporter/data/demo.yaml)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (state != "Z" and any(a.endswith(b"pulsar-lite") for a in argv)
                and b"127.0.0.1:16650" in argv):
            found.append(int(entry.name))
    return found


@pytest.mark.lite  # the demo's embedded broker
def test_the_demo_stops_its_embedded_broker_on_sigterm(tmp_path: Path) -> None:
    """As a service manager (or `timeout -s TERM`) stops it: the demo exits 143 and its
    broker, in a process group of its own, goes with it. A `--duration` far off does not
    hold the exit (its timer once kept the process alive until then)."""
    assert _demo_brokers() == [], "a demo broker is already running"
    demo = ManagedProcess("demo", [CLI, "demo", "--duration", "600"], tmp_path,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}).start()
    try:
        poll(lambda: "starting Spark" in demo.log() and _demo_brokers(),
             "the demo's broker serving", timeout=90, show=demo.log_tail)
        brokers = _demo_brokers()
        demo.signal(signal.SIGTERM)  # the demo's process only, not its group
        assert demo.wait_exit(90) == 128 + signal.SIGTERM
        assert _demo_brokers() == [], f"the demo's broker {brokers} outlived it"
    finally:
        demo.stop(grace=0)
        for pid in _demo_brokers():
            os.kill(pid, signal.SIGKILL)
