"""`pulsar-quota-exporter replay`: recorded cycles → OUT/report.json, plots, report.html."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

from exporter.config.settings import Config
from exporter.record.report import summarize, terminal
from exporter.record.store import RecordError, read_cycles


def parse_time(text: str) -> float:
    """Unix seconds or an ISO 8601 time (`2026-11-24T10:00:00Z`); ValueError otherwise."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"not a time: {text!r} (unix seconds or ISO 8601, e.g. "
                         "2026-11-24T10:00:00Z)") from None


def replay(config: Config, record_dir: str, out: str, start: float | None = None,
           end: float | None = None) -> int:
    from exporter.pipeline.spark.session import get_context
    from exporter.record.replay import parse_all, replay_cycles

    try:
        cycles = list(read_cycles(record_dir, start, end))
    except RecordError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    if not cycles:
        print(f"replay: no recorded cycle in {record_dir} in the range given", file=sys.stderr)
        return 2
    started = time.perf_counter()
    tables = parse_all(cycles, config.filters.topics, get_context(config.spark))
    parsed = time.perf_counter()
    docs = [report.status for report in replay_cycles(config, cycles, tables)]
    done = time.perf_counter()
    nows = [c.now for c in cycles]
    summary = summarize(docs, nows, allocator=config.resource_group_engine.allocator.value)
    summary["seconds"] = {"parse": round(parsed - started, 3), "engine": round(done - parsed, 3)}
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    (target / "report.json").write_text(json.dumps({"cycles": docs, "summary": summary},
                                                   indent=1))
    from exporter.record.pictures import write_pictures

    write_pictures(target, docs, nows, summary, config, cycles, tables)
    print(terminal(summary, out))
    return 0
