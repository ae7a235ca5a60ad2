"""The record directory (record/store.py) and its JSON codec (record/codec.py): complete
cycles only, retention by age and size, and records that decode to the same objects."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import MappingProxyType

import pytest

from exporter.config.settings import MonitoringClass, RetentionPolicy
from exporter.record import codec
from exporter.record.store import Recorder, RecordError, config_text, read_cycle, read_cycles
from exporter.sources.results import (
    AdminSnapshot,
    BundleOwnership,
    PulsarQuotas,
    QuotaType,
    ScrapeError,
    Snapshot,
    SourceHealth,
    SourceKind,
    SubscriptionStats,
    TopicStats,
    TypedQuota,
)
from exporter.transport.codec import Entry, Rates, WireReport

HEALTH = (SourceHealth("http://b:8080/metrics", SourceKind.BROKER, True, 10.0, None, "",
                       ((ScrapeError.TIMEOUT, 2),)),)


def snapshot(at: float = 100.0) -> Snapshot:
    quotas = PulsarQuotas(default=MappingProxyType({QuotaType.TIME: TypedQuota(
        60, RetentionPolicy.PRODUCER_EXCEPTION)}))
    admin = AdminSnapshot(
        fetched_at=at,
        topics=(TopicStats("persistent://t/n/x", 10, 5, 500, 12.5, "s",
                           (SubscriptionStats("s", 5, None, 0, 0, "Shared"),)),),
        bundles=(BundleOwnership("t/n", "0x00000000_0xffffffff", None),),
        quotas=quotas)
    return Snapshot(taken_at=at, admin=admin, health=())


REPORT = WireReport("peer-1", 7, 99.5, (Entry("rg", MonitoringClass.PUBLISH,
                                              Rates(1.5, 96.0), Rates(math.inf, 1e6)),))


def test_a_snapshot_and_a_report_decode_to_equal_objects():
    for value in (snapshot(), HEALTH, (REPORT,)):
        assert codec.loads(codec.dumps(value)) == value


def test_only_known_types_decode():
    with pytest.raises(codec.RecordFormatError, match="unknown type 'Popen'"):
        codec.loads('{"$": "Popen", "args": "sh"}')
    with pytest.raises(codec.RecordFormatError, match="untagged"):
        codec.loads('{"a": 1}')
    with pytest.raises(TypeError, match="cannot record a object"):
        codec.dumps(object())


def _write(rec: Recorder, now: float, body: bytes = b"x" * 100) -> Path:
    return rec.write(now, "cluster: c\n", snapshot(now), HEALTH,
                     {"http://b:8080/metrics": body}, (REPORT,))


def test_cycles_read_back_in_order_with_their_bodies_config_and_reports(tmp_path):
    rec = Recorder(tmp_path, max_age=1e9, max_bytes=1 << 30, clock=lambda: 0.0)
    for now in (300.0, 100.0, 200.0):
        _write(rec, now, body=str(now).encode())
    cycles = list(read_cycles(tmp_path))
    assert [c.now for c in cycles] == [100.0, 200.0, 300.0]
    assert cycles[0].body("http://b:8080/metrics") == b"100.0"
    assert cycles[0].snapshot == snapshot(100.0) and cycles[0].reports == (REPORT,)
    assert cycles[0].broker_health == HEALTH
    assert config_text(tmp_path, cycles[0].config_hash) == "cluster: c\n"
    assert [c.now for c in read_cycles(tmp_path, start=150, end=250)] == [200.0]


def test_a_half_written_cycle_is_never_read_and_is_cleaned_up(tmp_path):
    rec = Recorder(tmp_path, max_age=1e9, max_bytes=1 << 30, clock=lambda: 0.0)
    _write(rec, 100.0)
    half = tmp_path / "cycles" / ".tmp-crashed"
    half.mkdir()
    (half / "0.zst").write_bytes(b"partial")
    assert len(list(read_cycles(tmp_path))) == 1
    Recorder(tmp_path, max_age=1e9, max_bytes=1 << 30, clock=lambda: 0.0)
    assert not half.exists()


def test_retention_drops_the_oldest_by_age_and_by_size(tmp_path):
    clock = [1000.0]
    rec = Recorder(tmp_path, max_age=250, max_bytes=1 << 30, clock=lambda: clock[0])
    for now in (700.0, 800.0, 900.0, 1000.0):
        _write(rec, now)
    assert [c.now for c in read_cycles(tmp_path)] == [800.0, 900.0, 1000.0]
    one = rec.bytes / 3
    rec.max_bytes = int(2.5 * one)
    _write(rec, 1000.5)
    assert [c.now for c in read_cycles(tmp_path)] == [1000.0, 1000.5]
    assert rec.bytes <= rec.max_bytes and rec.expired == 3
    # a new recorder counts what is on disk
    assert Recorder(tmp_path, max_age=250, max_bytes=1 << 30).bytes == rec.bytes


def test_unreadable_records_are_errors_naming_the_path(tmp_path):
    rec = Recorder(tmp_path, max_age=1e9, max_bytes=1 << 30, clock=lambda: 0.0)
    path = _write(rec, 100.0)
    meta = json.loads((path / "cycle.json").read_text())
    (path / "cycle.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(RecordError, match=f"{path}: record version 99"):
        read_cycle(path)
    (path / "cycle.json").write_text('{"version": 1, "now": 1}')
    with pytest.raises(RecordError, match=f"{path}: cannot read the recorded cycle"):
        read_cycle(path)
    with pytest.raises(RecordError, match="not a record directory"):
        list(read_cycles(tmp_path / "nope"))


def _doc(at: str, topics: list[dict]) -> dict:
    return {"checked_at": at, "topics": topics, "resource_groups": []}


def _topic(name: str, *, exceeded=(), action="none", evict=None, age=None, limit=None) -> dict:
    return {"topic": name, "exceeded": list(exceeded), "action": action, "evict": evict,
            "backlog_age_seconds": age, "limit_time_seconds": limit,
            "backlog_size_bytes": None, "limit_size_bytes": None}


def test_the_summary_counts_evictions_time_over_quota_and_holds():
    from exporter.record.report import summarize, terminal

    cut = [{"subscription": "s", "quota_type": "time", "before_publish_time": "x"}]
    docs = [
        _doc("t0", [_topic("a", age=5, limit=10), _topic("h", age=1, limit=10)]),
        _doc("t1", [_topic("a", exceeded=["time"], action="consumer_backlog_eviction",
                           evict=cut, age=12, limit=10),
                    _topic("h", exceeded=["time"], action="producer_request_hold",
                           age=15, limit=10)]),
        _doc("t2", [_topic("a", exceeded=["time"], action="consumer_backlog_eviction",
                           evict=cut, age=20, limit=10),
                    _topic("h", age=2, limit=10)]),
    ]
    s = summarize(docs, [0.0, 10.0, 30.0], allocator="pulsar")
    assert s["evictions"] == {"a": {"time": 2}}
    assert s["first_eviction_cycle"] == {"a": {"time": 1}}
    # t1 counts until t2 (20 s); the last cycle counts the median interval (15 s)
    assert s["seconds_over_quota"] == {"a": {"time": 35.0}, "h": {"time": 20.0}}
    assert s["producer_hold_seconds"] == {"h": 20.0}
    assert s["closest_to_quota"][0] == {"topic": "a", "ratio": 2.0}
    text = terminal(s, "out")
    assert "evictions that would have happened: 2 on 1 topic(s)" in text
    assert "longest h: 20s" in text


def test_replay_times_are_unix_seconds_or_iso_8601():
    from exporter.record.command import parse_time

    assert parse_time("1795518720.5") == 1795518720.5
    assert parse_time("2026-11-24T10:00:00Z") == parse_time("2026-11-24T10:00:00+00:00") \
        == 1795514400.0
    with pytest.raises(ValueError, match="not a time: 'yesterday'"):
        parse_time("yesterday")
