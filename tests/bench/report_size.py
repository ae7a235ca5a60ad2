"""Benchmark: bytes on the wire per usage report and per resource-group entry.

Not a test: prints tables. Reports are built from seeded random but realistic data:
group names `tenant-NNNNN-rg` drawn from 100,000 (so a report's names are spread, as a
broker's are), both classes, message rates log-uniform over 1–10,000 msg/s, message
sizes 100 B–10 KiB, a local limit 1–3 × usage, a 50-character broker id.

- raw: `codec.encode` output, what a report costs before compression;
- zlib: the same bytes through zlib (level 6), *an indication only*: the channel sends
  with pulsar-client's LZ4, which cannot be measured from here without a broker round
  trip, and LZ4 usually compresses less than zlib;
- per RG: (size with n groups − size with none) / n, so the fixed header is left out;
  per entry: per RG / 2 (one entry per monitoring class);
- pulsar proto: the size of Pulsar's own `ResourceUsageInfo` protobuf for the same usage
  (per-period counts over 60 s, no limits, no sequence), computed field by field from
  `ResourceUsage.proto` (tag bytes, varint lengths), for comparison;
- PIP-82's estimate: 32 bytes of usage per RG, 80 bytes of name: 112 per RG.

The fleet scenario is PIP-82's: 100 participants, 100,000 groups, each group on 5
participants, so each participant reports 5,000 groups per round; fleet-wide bytes per
round = 100 reports published, and each read by all 100 readers.

    .venv/bin/python -m tests.bench.report_size
"""

from __future__ import annotations

import math
import random
import time
import timeit
import zlib

from exporter.config.settings import MonitoringClass
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.decoder import decode
from exporter.transport.gate import initial_sequence

GROUPS_IN_FLEET = 100_000
PARTICIPANTS = 100
PER_GROUP = 5
PERIOD = 60.0
PARTICIPANT = "pulsar-broker-042.pulsar-broker.pulsar.svc.cluster"  # 50 characters
PIP82_USAGE, PIP82_NAME = 32, 80


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def build(count: int, *, limits: bool = True, seed: int = 42) -> WireReport:
    rng = random.Random(seed)
    names = sorted(f"tenant-{n:05d}-rg" for n in rng.sample(range(GROUPS_IN_FLEET), count))
    entries = []
    for name in names:
        for cls in (MonitoringClass.PUBLISH, MonitoringClass.DISPATCH):
            messages = _log_uniform(rng, 1, 10_000)
            usage = Rates(messages, messages * _log_uniform(rng, 100, 10_240))
            factor = rng.uniform(1.0, 3.0)
            limit = Rates(usage.messages * factor, usage.bytes * factor) if limits else None
            entries.append(Entry(name, cls, usage, limit))
    now = time.time()
    return WireReport(PARTICIPANT, initial_sequence(now), now, tuple(entries))


# --- Pulsar's protobuf, sized by hand -----------------------------------------------------------


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _field_len(payload: int) -> int:
    """A length-delimited field with a one-byte tag."""
    return 1 + _varint_len(payload) + payload


def pulsar_proto_size(report: WireReport) -> int:
    """ResourceUsageInfo{broker, repeated ResourceUsage{owner, publish, dispatch}}."""
    size = _field_len(len(report.participant.encode()))
    groups: dict[str, list[Entry]] = {}
    for entry in report.entries:
        groups.setdefault(entry.resource_group, []).append(entry)
    for name, entries in groups.items():
        usage = _field_len(len(name.encode()))
        for entry in entries:
            per_period_bytes = round(entry.usage.bytes * PERIOD)
            per_period_messages = round(entry.usage.messages * PERIOD)
            network = 1 + _varint_len(per_period_bytes) + 1 + _varint_len(per_period_messages)
            usage += _field_len(network)
        size += _field_len(usage)
    return size


# --- tables -----------------------------------------------------------------------------------


def _sizes(count: int, limits: bool) -> tuple[int, int, int]:
    payload = encode(build(count, limits=limits))
    return len(payload), len(zlib.compress(payload, 6)), pulsar_proto_size(build(count,
                                                                                 limits=limits))


def table(limits: bool) -> float:
    """Print one table; return the raw bytes per RG at 1000 groups."""
    base_raw, base_zlib, base_proto = _sizes(0, limits)
    title = "with limits" if limits else "without limits (usage only, as Pulsar and PIP-82)"
    print(f"\nBytes per report, both classes, {title}")
    print(f"{'RGs':>6} {'raw':>9} {'zlib':>9} {'raw/RG':>8} {'raw/entry':>9} {'zlib/RG':>8} "
          f"{'pulsar proto/RG':>16} {'PIP-82 est./RG':>15}")
    per_rg = 0.0
    for count in (1, 10, 100, 1000):
        raw, packed, proto = _sizes(count, limits)
        per_rg = (raw - base_raw) / count
        print(f"{count:>6} {raw:>9,} {packed:>9,} {per_rg:>8.1f} {per_rg / 2:>9.1f} "
              f"{(packed - base_zlib) / count:>8.1f} {(proto - base_proto) / count:>16.1f} "
              f"{PIP82_USAGE + PIP82_NAME:>15}")
    print(f"  header (no groups): raw {base_raw} B, pulsar proto {base_proto} B")
    return per_rg


def fleet(per_rg: float) -> None:
    groups_each = GROUPS_IN_FLEET * PER_GROUP // PARTICIPANTS
    header = len(encode(build(0)))
    computed = header + groups_each * per_rg
    measured = encode(build(groups_each))
    packed = len(zlib.compress(measured, 6))
    pip82_each = groups_each * (PIP82_USAGE + PIP82_NAME)
    print(f"\nPIP-82 fleet scenario: {PARTICIPANTS} participants, {GROUPS_IN_FLEET:,} groups, "
          f"{PER_GROUP} participants per group → {groups_each:,} groups per report, with limits")
    print(f"{'':34} {'per report':>12} {'published/round':>16} {'read/round':>12}")
    rows = (
        ("computed from measured RG size", computed),
        ("measured (encoded 5,000-RG report)", len(measured)),
        ("zlib of that (indication of LZ4)", packed),
        ("PIP-82 estimate (32 + 80 B per RG)", pip82_each),
    )
    for label, each in rows:
        published = each * PARTICIPANTS
        print(f"{label:34} {_human(each):>12} {_human(published):>16} "
              f"{_human(published * PARTICIPANTS):>12}")
    print("  read/round: every report read by every participant (non-persistent topic fan-out).")
    print("  Suppression (need_to_report) lowers both further; not modelled here.")
    decode_seconds = min(timeit.repeat(lambda: decode(measured), number=1, repeat=5))
    print(f"  decode (pure Python, this machine): {decode_seconds * 1000:.0f} ms per "
          f"{groups_each:,}-group report, {decode_seconds * PARTICIPANTS:.1f} s per round "
          f"for one participant reading all {PARTICIPANTS} reports")


def _human(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    raise AssertionError


def main() -> None:
    per_rg = table(limits=True)
    table(limits=False)
    fleet(per_rg)


if __name__ == "__main__":
    main()
