"""Replay recorded cycles under another configuration: what would these quotas have done?

Every recorded body is parsed in one Spark job (all snapshots in one plan, `local[*]` or a
cluster: the bodies travel in the plan, so executors need no access to the record), with
the what-if config's topic filter. Then the driver runs the exporter's own cycle
(`Exporter.cycle`: merge, engine, actions, exposition) over the snapshots in time order,
with each cycle's recorded clock, admin snapshot and broker health. Between two cycles
the usage-report rounds run as live, every `report_interval` (the exchange's own timer),
each taking the peers' recorded reports sent by then: one round per cycle instead would
let this participant's own suppressed entry go stale in a replay where it never did live.
So the decisions are the live code's, on the live inputs; only the world does not answer
back: an eviction decided here does not shorten the backlogs recorded after it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

import pyarrow as pa
from pyspark import SparkContext

from exporter.actions.orders import (
    Completion,
    EvictionMethod,
    EvictionOrder,
    Performed,
    unfenced,
)
from exporter.config.settings import Config, TopicFilter
from exporter.exposition.status import view
from exporter.pipeline.lastgood import LastGood
from exporter.pipeline.scrape import PIECE_BYTES, TaskResult, parsed_pieces, tables_of, task_result
from exporter.pipeline.tables import BrokerData, SourceTables
from exporter.record.store import RecordedCycle
from exporter.runtime.cycle import CycleReport, Exporter
from exporter.runtime.exchange import from_wire
from exporter.sources.results import Snapshot
from exporter.transport.codec import WireReport


# --- in the executor -------------------------------------------------------------------------
def parse_recorded(rule: TopicFilter, row: tuple[int, str, bytes]) -> tuple[int, TaskResult]:
    """One (cycle, source, zstd body) row → its cycle and the scrape task's result."""
    cycle, source, body = row
    stream = pa.CompressedInputStream(pa.BufferReader(body), "zstd")
    parts, facts = parsed_pieces(iter(partial(stream.read, PIECE_BYTES), b""), rule)
    return cycle, task_result(source, facts, parts)


# --- on the driver ---------------------------------------------------------------------------
def parse_all(cycles: Sequence[RecordedCycle], rule: TopicFilter,
              context: SparkContext) -> dict[tuple[int, str], SourceTables]:
    """Every recorded body's tables, keyed by (cycle index, broker URL): one Spark job."""
    rows = [(i, url, c.body(url)) for i, c in enumerate(cycles) for url in sorted(c.bodies)]
    if not rows:
        return {}
    tasks = max(1, min(len(rows), 2 * context.defaultParallelism))
    result = context.parallelize(rows, tasks).map(partial(parse_recorded, rule)).collect()
    tables = {}
    for cycle, (source, parts) in result:
        found = dict(parts)
        tables[cycle, source] = tables_of(found, json.loads(found["status"]))
    return tables


class ReplayBrokers:
    """The broker side of each replayed cycle: the recorded health, the tables parsed by
    the batch job, and a broker's last good tables where its fetch had failed and its held
    topics after it came back (lastgood.py, as live)."""

    def __init__(self, cycles: Sequence[RecordedCycle],
                 tables: Mapping[tuple[int, str], SourceTables]):
        self._cycles = cycles
        self._tables = tables
        self._last_good = LastGood()
        self.index = -1

    def run(self) -> BrokerData:
        cycle = self._cycles[self.index]
        fresh = {url: t for url in cycle.bodies
                 if (t := self._tables.get((self.index, url))) is not None}
        urls = [h.source for h in cycle.broker_health]
        current = self._last_good.update(fresh)
        return BrokerData(tables=self._last_good.tables(urls, current),
                          health=cycle.broker_health,
                          malformed={url: t.malformed for url, t in fresh.items()})


class RecordedAdmin:
    """The admin side of each replayed cycle: what the live one collected."""

    def __init__(self, cycles: Sequence[RecordedCycle], brokers: ReplayBrokers):
        self._cycles = cycles
        self._brokers = brokers

    def collect(self, choose: object = None) -> Snapshot:
        """The recorded snapshot: the stats it has are those read when it was recorded."""
        return self._cycles[self._brokers.index].snapshot

    def close(self) -> None:
        pass


class SimulatedEvictor:
    """A stand-in for the cluster under `backlog_quotas.enforce: true`: every order is
    taken as done, as a working broker connection would; the backlog it would have cut
    stays in the recorded bodies that follow."""

    def __init__(self) -> None:
        self.orders: list[EvictionOrder] = []

    def perform(self, orders: Sequence[EvictionOrder],
                fence: Callable[[], bool] = unfenced) -> tuple[Performed, ...]:
        self.orders += orders
        return tuple(Performed(o, EvictionMethod.SEEK, o.messages, Completion.CONFIRMED)
                     for o in orders)


@dataclasses.dataclass
class _Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def replay_cycles(config: Config, cycles: Sequence[RecordedCycle],
                  tables: Mapping[tuple[int, str], SourceTables]) -> Iterator[CycleReport]:
    """The exporter's cycle over each recorded one, in order (see the module docstring)."""
    brokers = ReplayBrokers(cycles, tables)
    clock = _Clock()
    exporter = Exporter(config, brokers=brokers, admin_side=RecordedAdmin(cycles, brokers),
                        evictor=SimulatedEvictor(), clock=clock)
    period = config.resource_group_engine.report_interval
    last_round: float | None = None
    try:
        for index, cycle in enumerate(cycles):
            brokers.index = index
            clock.now = cycle.now
            pending = sorted(cycle.reports, key=lambda r: r.sent_at)
            for at in _round_times(last_round, cycle.now, period):
                while pending and pending[0].sent_at <= at:
                    _accept(exporter, pending.pop(0), at)
                exporter.decider.round(at)
                last_round = at
            for report in pending:  # arrived after the last round, before the cycle
                _accept(exporter, report, cycle.now)
            # The check only: a replay serves no /metrics, so nothing is rendered.
            seen, decisions, now, stages = exporter.check()
            yield CycleReport(seen, decisions,
                              partial(view, config.cluster, now, decisions, seen.health, stages),
                              b"")
    finally:
        exporter.close()


# Rounds replayed between two cycles at most: a record with a gap of days runs the last ones.
_MAX_ROUNDS = 1000


def _round_times(last: float | None, now: float, period: float) -> list[float]:
    """The exchange's rounds after `last` up to `now`, every `period`; one at `now` when
    there was none before."""
    if last is None or now - last < period:
        return [now] if last is None else []
    count = min(int((now - last) // period), _MAX_ROUNDS)
    start = last + period * (int((now - last) // period) - count + 1)
    return [start + period * k for k in range(count)]


def _accept(exporter: Exporter, report: WireReport, now: float) -> None:
    for entry in from_wire(report):
        exporter.decider.accept(entry, now)
