"""Broker bodies fetched and parsed in Spark tasks: one job per cycle, nothing on disk.

The plan is an RDD of broker endpoint indexes, one partition (so one task) per endpoint
up to twice the task slots, mapped with `mapPartitions`: each task streams its broker's
/metrics (sources/brokers.py), parses it piece by piece as it arrives (parse.py), builds
that broker's per-entity tables (tables.py) and hands them back as zstd-compressed Arrow
IPC payloads — a handful of byte strings per broker whatever its size, so the JVM never
converts a sample. The driver collects them with one `collect()` and keeps only
per-entity results. The same code runs under `local[*]`, `spark://` and `k8s://`: a task
needs network access to its broker and this package in its Python, nothing shared with
the driver. (The plan was once a DataFrame mapped with `mapInArrow`, its results the same
payloads in an Arrow column: Spark SQL around them cost the first cycle seconds and the JVM
memory; docs/design.md, "Start-up and memory", session.py.)

The RDD is built once per set of endpoints and collected again every cycle: it has no
shuffle and no cache, so each run fetches afresh, and its tasks' function is pickled once.
A fetch that fails is reported by its task with a reason; the driver then keeps that
broker's last good tables in use (stale) and its `SourceHealth` says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark import RDD, SparkContext

from exporter.config.settings import KEEP_ALL, BrokerSource, TopicFilter
from exporter.pipeline.labelsets import SeenSets
from exporter.pipeline.lastgood import LastGood
from exporter.pipeline.packed import decoded, encoded
from exporter.pipeline.parse import parse_text
from exporter.pipeline.pieces import whole_lines
from exporter.pipeline.slices import PADDING
from exporter.pipeline.tables import BrokerData, SourceTables, source_tables
from exporter.sources.brokers import FetchFailed, HealthLedger, classify, stream
from exporter.sources.results import ScrapeError, SourceKind

# A body is parsed in pieces of this size as it streams in: memory stays bounded by the
# piece, not the body, and parsing overlaps the transfer.
PIECE_BYTES = 16 << 20
# A task's result for one broker: its URL and its parts, each "status" (JSON) or one of
# TABLES (Arrow IPC, packed.py) or "body" (zstd), with its bytes.
Parts = tuple[tuple[str, bytes], ...]
TaskResult = tuple[str, Parts]


# --- in the executor -------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskOptions:
    """What a task does besides fetch and parse: the topic filter, and whether it hands
    the body back too (zstd, for `run --record.dir`)."""

    rule: TopicFilter = KEEP_ALL
    keep_body: bool = False


DEFAULT_TASK = TaskOptions()


def scrape_endpoints(sources: Sequence[BrokerSource], options: TaskOptions,
                     ids: Iterable[int]) -> Iterator[TaskResult]:
    """mapPartitions function over endpoint indexes: an index → that broker's result."""
    for i in ids:
        yield scrape_one(sources[i], options)


def parsed_pieces(chunks: Iterable[bytes], rule: TopicFilter,
                  body: pa.NativeFile | None = None) -> tuple[list[tuple[str, bytes]], dict]:
    """One body's chunks as they come → its tables as task parts, and the status facts;
    the body is also written to `body` when given. It is parsed in whole-line pieces of
    PIECE_BYTES, each joined with the padding the parse reads into (one copy of the text,
    not two). Shared with the replay's tasks."""
    size, parsed, seen = 0, [], SeenSets()
    for piece in whole_lines(chunks, PIECE_BYTES, PADDING):
        text = memoryview(piece)[:len(piece) - PADDING]
        size += len(text)
        parsed.append(parse_text(piece, seen, PADDING))
        if body is not None:
            body.write(text)
    tables = source_tables(parsed, rule)
    parts = list(encoded(tables).items())
    return parts, {"bytes": size, "malformed": dict(tables.malformed),
                   "filtered": tables.filtered}


def scrape_one(source: BrokerSource, options: TaskOptions = DEFAULT_TASK) -> TaskResult:
    """Fetch and parse one broker; a failure of any kind becomes a status row."""
    started = time.monotonic()
    status: dict = {"up": False}
    parts: list[tuple[str, bytes]] = []
    try:
        sink = pa.BufferOutputStream() if options.keep_body else None
        body = pa.CompressedOutputStream(sink, "zstd") if sink is not None else None
        parts, facts = parsed_pieces(stream(source, started + source.timeout), options.rule,
                                     body)
        if sink is not None and body is not None:  # both or neither
            body.close()
            parts.append(("body", sink.getvalue().to_pybytes()))
        status = {"up": True, "fetched_at": time.time(), **facts,
                  "seconds": time.monotonic() - started}
    except Exception as exc:  # never fatal: the source is down this cycle, and says why
        failure = classify(exc)
        status = {"up": False, "reason": failure.reason.value, "detail": failure.detail}
    return task_result(source.url, status, parts)


def task_result(source: str, status: Mapping, parts: Sequence[tuple[str, bytes]]
                ) -> TaskResult:
    """A task's result for one body: its status (JSON) and its parts."""
    return source, (("status", json.dumps(status).encode()), *parts)


# --- on the driver ---------------------------------------------------------------------------
def endpoints_plan(context: SparkContext, sources: Sequence[BrokerSource],
                   options: TaskOptions = DEFAULT_TASK) -> RDD[TaskResult]:
    """The cycle's plan: endpoint indexes (a `range`: each task makes its own, nothing is
    sent to it but the function), mapped by `scrape_endpoints` with the endpoints
    themselves carried in the function. One task per endpoint up to twice the task slots,
    then consecutive endpoints share a task: a Python task costs tens of milliseconds of
    scheduling whatever its body, which a hundred small brokers would pay a hundred times."""
    n = len(sources)
    tasks = max(1, min(n, 2 * context.defaultParallelism))
    return context.parallelize(range(n), tasks).mapPartitions(
        partial(scrape_endpoints, tuple(sources), options))


def on_spark(context: SparkContext, sources: Sequence[BrokerSource],
             options: TaskOptions = DEFAULT_TASK) -> Callable[[], list[TaskResult]]:
    """The cycle's job: the plan, run and collected once."""
    plan = endpoints_plan(context, sources, options) if sources else None
    return plan.collect if plan is not None else list


def in_process(sources: Sequence[BrokerSource],
               options: TaskOptions = DEFAULT_TASK) -> Callable[[], list[TaskResult]]:
    """The same task code run here, one endpoint after the other: for tests of what the
    driver does with the tasks' results, without a Spark context."""
    return lambda: list(scrape_endpoints(tuple(sources), options, range(len(sources))))


def tables_of(parts: Mapping[str, bytes], status: Mapping) -> SourceTables:
    """One broker's tables from its task's parts and status (here and in the replay)."""
    return decoded(parts, status["malformed"], status["filtered"])


class BrokerScrape:
    """Runs the job every cycle and keeps what the driver must remember per broker: its
    last good tables (and a restarted broker's held topics: lastgood.py) and its health
    ledger."""

    def __init__(self, sources: Sequence[BrokerSource], job: Callable[[], list[TaskResult]],
                 clock: Callable[[], float] = time.time):
        urls = [s.url for s in sources]
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate broker source URLs: {urls}")
        self._sources = tuple(sources)
        self._job = job
        self._clock = clock
        self._ledgers = {u: HealthLedger(u, SourceKind.BROKER) for u in urls}
        self._last_good = LastGood()

    def run(self) -> BrokerData:
        """One job; when the job itself fails (executors lost, cancelled), every broker is
        down this cycle, with the reason, and the last good tables stay in use.

        Each broker's payloads are kept (packed.py) and its tables are the cycle's."""
        job_failure: str | None = None
        try:
            collected = self._job()
        except Exception as exc:
            collected = []
            job_failure = f"the cycle's Spark job failed: {classify(exc).detail}"
        by_source = {url: dict(parts) for url, parts in collected}
        del collected  # its payloads live on in by_source, a broker at a time
        bodies = {url: parts["body"] for url, parts in by_source.items() if "body" in parts}
        malformed: dict[str, Mapping[str, int]] = {}

        def fresh() -> Iterator[tuple[str, SourceTables, Mapping[str, bytes]]]:
            for source in self._sources:
                parts = by_source.pop(source.url, {})
                tables = self._take(source, parts, job_failure)
                if tables is not None:
                    malformed[source.url] = tables.malformed
                    yield source.url, tables, parts  # kept packed as they came

        current = self._last_good.update(fresh())
        return BrokerData(
            tables=self._last_good.tables([s.url for s in self._sources], current),
            health=tuple(self._ledgers[s.url].health() for s in self._sources),
            malformed=malformed,
            bodies=bodies,
            stale=self._last_good.stale(current),
            held=self._last_good.held(),
        )

    def _take(self, source: BrokerSource, parts: Mapping[str, bytes],
              job_failure: str | None) -> SourceTables | None:
        """Record one broker's outcome; its tables when it was fetched afresh."""
        ledger = self._ledgers[source.url]
        status: dict[str, Any] = json.loads(parts["status"]) if "status" in parts else {
            "up": False, "reason": ScrapeError.OTHER.value,
            "detail": job_failure or "no result from its task"}
        if not status["up"]:
            failure = FetchFailed(ScrapeError(status["reason"]), status["detail"])
            ledger.record(up=False, at=self._clock(), errors=(failure,))
            return None
        ledger.record(up=True, at=self._clock())
        return tables_of(parts, status)
