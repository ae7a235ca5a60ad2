"""Record a live run against pulsar-lite (a stalled subscription), replay it: with the
recorded config the replay decides exactly what the live run did, backlog ages included;
with a tighter time quota it reports the evictions the live run did not perform, at the
cycles where the recorded age passed the tighter limit. Then the `replay` command writes
report.json, the plots and report.html, which a real headless Chromium loads."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pulsar
import pytest
import yaml

from exporter.config.load import parse
from exporter.demo.embedded import EmbeddedBroker
from exporter.pipeline.spark.session import get_context
from exporter.record.replay import parse_all, replay_cycles
from exporter.record.store import Recorder, read_cycles
from exporter.runtime.cycle import Exporter
from tests.harness.exporter_process import run_cli

# A live run against pulsar-lite, recorded and replayed with Spark.
pytestmark = [pytest.mark.timeout(600), pytest.mark.lite, pytest.mark.spark]
TOPIC = "persistent://public/replay/stalled"
CYCLES = 6
GAP = 2.0  # seconds between recorded cycles
TIGHT = 5.0  # the what-if time quota, in seconds


def _config_map(broker: EmbeddedBroker, limit_time: str) -> dict:
    return {
        "cluster": "replay",
        "check_interval": "5s",
        "sources": {"brokers": [{"url": broker.metrics_url, "timeout": "3s"}],
                    "service_url": broker.service_url},
        "backlog_quotas": {"namespaces": {"public/replay": {
            "limit_time": limit_time, "policy": "consumer_backlog_eviction"}}},
        "resource_groups": {"rg-replay": {"publish": {"messages_per_second": 100},
                                          "namespaces": ["public/replay"]}},
        "spark": {"master": "local[2]"},
    }


def _decisions(doc: dict) -> list[dict]:
    keys = ("topic", "backlog_messages", "backlog_size_bytes", "backlog_age_seconds",
            "exceeded", "action", "evict", "limit_time_seconds")
    return [{k: t[k] for k in keys} for t in doc["topics"]]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A live run of CYCLES cycles, recorded; its status documents and config map."""
    root = tmp_path_factory.mktemp("replay")
    with EmbeddedBroker.start_new() as broker:
        client = pulsar.Client(broker.service_url)
        try:
            client.subscribe(TOPIC, "stalled-sub", consumer_type=pulsar.ConsumerType.Shared
                             ).close()
            producer = client.create_producer(TOPIC)
            for i in range(30):
                producer.send(f"m{i}".encode() * 10)
        finally:
            client.close()
        live_map = _config_map(broker, "1h")  # never exceeded: nothing evicted live
        recorder = Recorder(root / "record", max_age=3600, max_bytes=1 << 30)
        exporter = Exporter(parse(live_map, "live.yaml"), recorder=recorder)
        docs = []
        try:
            for _ in range(CYCLES):
                started = time.monotonic()
                docs.append(exporter.cycle().status)
                time.sleep(max(0.0, GAP - (time.monotonic() - started)))
        finally:
            exporter.close()
    return root, live_map, docs


def _replay(config_map: dict, record: Path) -> list[dict]:
    config = parse(config_map, "whatif.yaml")
    cycles = list(read_cycles(record))
    tables = parse_all(cycles, config.filters.topics, get_context(config.spark))
    return [r.status for r in replay_cycles(config, cycles, tables)]


def test_the_record_holds_every_cycle_complete(recorded):
    root, _, _ = recorded
    cycles = list(read_cycles(root / "record"))
    assert len(cycles) == CYCLES
    assert all(len(c.bodies) == 1 and c.body(next(iter(c.bodies)))[:4] == b"\x28\xb5\x2f\xfd"
               for c in cycles)  # zstd frames
    assert [c.now for c in cycles] == sorted(c.now for c in cycles)


def test_replay_with_the_recorded_config_reproduces_the_live_decisions(recorded):
    root, live_map, live = recorded
    replayed = _replay(live_map, root / "record")
    assert [_decisions(d) for d in replayed] == [_decisions(d) for d in live]
    ages = [next(t["backlog_age_seconds"] for t in d["topics"] if t["topic"] == TOPIC)
            for d in replayed]
    assert ages[-1] is not None and ages[-1] >= (CYCLES - 2) * GAP  # the estimate moved


def test_a_tighter_quota_evicts_where_the_recorded_age_passed_it(recorded):
    root, live_map, live = recorded
    tight = {**live_map, "backlog_quotas": {"namespaces": {"public/replay": {
        "limit_time": f"{TIGHT}s", "policy": "consumer_backlog_eviction"}}}}
    replayed = _replay(tight, root / "record")
    live_ages = [next(t["backlog_age_seconds"] for t in d["topics"] if t["topic"] == TOPIC)
                 for d in live]
    expected = [age is not None and age > TIGHT for age in live_ages]
    evicting = [any(t["topic"] == TOPIC and t["action"] == "consumer_backlog_eviction"
                    and t["evict"] for t in d["topics"]) for d in replayed]
    assert any(expected), live_ages  # the recording is long enough to pass the limit
    assert evicting == expected, (live_ages, evicting)
    assert not any(t["evict"] for d in live for t in d["topics"])  # live evicted nothing


def test_the_replay_command_writes_the_report_and_a_browser_loads_it(recorded, tmp_path,
                                                                     chromium):
    root, live_map, _ = recorded
    whatif = tmp_path / "whatif.yaml"
    whatif.write_text(yaml.safe_dump({**live_map, "backlog_quotas": {"namespaces": {
        "public/replay": {"limit_time": f"{TIGHT}s", "policy": "consumer_backlog_eviction"}}}}))
    out = tmp_path / "out"
    done = run_cli("replay", "--config.file", whatif, "--record.dir", root / "record",
                   "--out", out, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "evictions that would have happened" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert len(report["cycles"]) == CYCLES
    assert report["summary"]["evictions"][TOPIC]["time"] >= 1
    for picture in ("backlog_age.png", "backlog_size.png", "resource_groups.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rounds = report["summary"]["resource_group_rounds"]
    assert {r["resource_group"] for r in rounds} == {"rg-replay"}
    publish = [r for r in rounds if r["monitoring_class"] == "publish"]
    assert [r["cycle"] for r in publish] == list(range(CYCLES))
    assert publish[-1]["local_quota"]["messages_per_second"] == 100  # alone: the whole quota
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         "--virtual-time-budget=5000", "--dump-dom", (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert 'data-images-loaded="3"' in dom.stdout, (dom.stdout[-2000:], dom.stderr[-2000:])
    assert TOPIC in dom.stdout


def test_replay_refuses_a_directory_that_is_not_a_record(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"cluster": "c", "sources": {"brokers": [
        {"url": "http://127.0.0.1:9/metrics"}]}}))
    done = run_cli("replay", "--config.file", config, "--record.dir", tmp_path / "nothing",
                   "--out", tmp_path / "out")
    assert done.returncode == 2
    assert "not a record directory" in done.stderr


def test_bad_retention_flags_exit_2_naming_the_flag(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"cluster": "c", "sources": {"brokers": [
        {"url": "http://127.0.0.1:9/metrics"}]}}))
    done = run_cli("run", "--config.file", config, "--record.dir", tmp_path / "r",
                   "--record.retention.size", "lots")
    assert done.returncode == 2
    assert done.stderr.startswith("pulsar-quota-exporter: --record.retention.size:")

