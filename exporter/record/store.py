"""The record directory: what each cycle saw, one directory per cycle, bounded in size and age.

    DIR/configs/<hash>.yaml                 the config text cycles ran with, once per hash
    DIR/cycles/<ms>-<seq>/cycle.json        time, config hash, admin snapshot, broker health,
                                            peer usage reports, which body file is whose
    DIR/cycles/<ms>-<seq>/<n>.zst           one broker body each, zstd, as the task fetched it

A cycle is written into `DIR/cycles/.tmp-…` and renamed into place when complete (a
directory rename is atomic), so a crash leaves at most a `.tmp-` directory, which readers
skip and the next recorder removes: a half-written cycle is never readable. Retention, as
Prometheus' TSDB: cycles older than `max_age` or beyond `max_bytes` in total go, oldest
first, after each write.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.record import codec
from exporter.sources.results import Snapshot, SourceHealth
from exporter.transport.codec import WireReport

VERSION = 1
CYCLE_FILE = "cycle.json"


@dataclass(frozen=True)
class RecordedCycle:
    """One recorded cycle, as the replay reads it (bodies stay on disk until needed)."""

    path: Path
    now: float  # the cycle's clock: what `now` was for its decisions
    config_hash: str
    snapshot: Snapshot  # the admin side's snapshot (admin stats, policies, its health)
    broker_health: tuple[SourceHealth, ...]
    bodies: Mapping[str, str]  # broker URL → body file name, for brokers fetched afresh
    reports: tuple[WireReport, ...]  # peers' usage reports admitted since the last cycle

    def body(self, url: str) -> bytes:
        return (self.path / self.bodies[url]).read_bytes()


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Recorder:
    """Writes one cycle per `write`; never raises into the cycle (a full disk is logged by
    the caller and counted, and the exporter goes on)."""

    def __init__(self, directory: str | Path, *, max_age: float, max_bytes: int,
                 clock=time.time) -> None:
        self.root = Path(directory)
        self.cycles = self.root / "cycles"
        self.configs = self.root / "configs"
        self.cycles.mkdir(parents=True, exist_ok=True)
        self.configs.mkdir(exist_ok=True)
        self.max_age = max_age
        self.max_bytes = max_bytes
        self._clock = clock
        self._sequence = 0
        for stale in self.cycles.glob(".tmp-*"):  # a crash mid-write
            shutil.rmtree(stale, ignore_errors=True)
        self._kept: deque[tuple[Path, float, int]] = deque(
            (p, _start_of(p), _size(p)) for p in _complete(self.cycles))
        self.bytes = sum(size for _, _, size in self._kept)
        self.written = 0
        self.expired = 0

    def write(self, now: float, config_text: str, snapshot: Snapshot,
              broker_health: Sequence[SourceHealth], bodies: Mapping[str, bytes],
              reports: Sequence[WireReport]) -> Path:
        digest = config_hash(config_text)
        config_file = self.configs / f"{digest}.yaml"
        if not config_file.exists():
            _atomic_write(config_file, config_text.encode("utf-8"))
        self._sequence += 1
        final = self.cycles / f"{int(now * 1000):015d}-{self._sequence:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.cycles))
        try:
            names = {}
            for index, (url, body) in enumerate(sorted(bodies.items())):
                names[url] = f"{index}.zst"
                (tmp / names[url]).write_bytes(body)
            meta = {"version": VERSION, "now": now, "config": digest,
                    "snapshot": codec.encode(snapshot),
                    "broker_health": codec.encode(tuple(broker_health)),
                    "bodies": names, "reports": codec.encode(tuple(reports))}
            (tmp / CYCLE_FILE).write_text(json.dumps(meta, separators=(",", ":")))
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        size = _size(final)
        self._kept.append((final, now, size))
        self.bytes += size
        self.written += 1
        self._expire(self._clock())
        return final

    def _expire(self, now: float) -> None:
        while self._kept and (now - self._kept[0][1] > self.max_age
                              or (self.bytes > self.max_bytes and len(self._kept) > 1)):
            path, _, size = self._kept.popleft()
            shutil.rmtree(path, ignore_errors=True)
            self.bytes -= size
            self.expired += 1


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _complete(cycles: Path) -> list[Path]:
    return sorted(p for p in cycles.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and (p / CYCLE_FILE).exists())


def _start_of(path: Path) -> float:
    return int(path.name.split("-", 1)[0]) / 1000


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


class RecordError(ValueError):
    """A record directory or cycle that cannot be read; the message names the path."""


def read_cycles(directory: str | Path, start: float | None = None,
                end: float | None = None) -> Iterator[RecordedCycle]:
    """The complete cycles recorded in [start, end], oldest first."""
    cycles = Path(directory) / "cycles"
    if not cycles.is_dir():
        raise RecordError(f"{directory}: not a record directory (no cycles/ in it)")
    for path in _complete(cycles):
        at = _start_of(path)
        if (start is not None and at < start) or (end is not None and at > end):
            continue
        yield read_cycle(path)


def read_cycle(path: Path) -> RecordedCycle:
    try:
        meta = json.loads((path / CYCLE_FILE).read_text())
        if meta.get("version") != VERSION:
            raise RecordError(f"{path}: record version {meta.get('version')!r}, this exporter "
                              f"reads {VERSION}")
        return RecordedCycle(
            path=path, now=float(meta["now"]), config_hash=meta["config"],
            snapshot=codec.decode(meta["snapshot"]),
            broker_health=codec.decode(meta["broker_health"]),
            bodies=dict(meta["bodies"]), reports=codec.decode(meta["reports"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"{path}: cannot read the recorded cycle: {exc}") from None


def config_text(directory: str | Path, digest: str) -> str | None:
    path = Path(directory) / "configs" / f"{digest}.yaml"
    return path.read_text() if path.exists() else None
