"""The exporter process: one check cycle (collect → pipeline → engine → actions → publish)
and the loop, server and signals around it.

Every stage is timed; the whole check is observed once into PIP-323's check-duration
histogram. A failing stage never stops the loop: a pipeline failure keeps the last good
decisions in place, a failing source keeps its last good body (sources/).
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from exporter.actions.evict import (
    EvictionOrder,
    Evictor,
    Failed,
    Performed,
    Skipped,
    evictor_for,
)
from exporter.config import Config, RetentionPolicy
from exporter.decide import Decider, Decisions
from exporter.exposition import render
from exporter.publish import CycleFacts, Tallies, build
from exporter.server import PublishedState, build_server
from exporter.sources.collector import SnapshotSource, SourceCollector
from exporter.sources.model import Snapshot
from exporter.status import view

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleReport:
    snapshot: Snapshot
    decisions: Decisions | None
    status: dict
    body: bytes


def orders_for(decisions: Decisions) -> list[EvictionOrder]:
    orders = []
    for d in decisions.topics:
        if d.quota.policy is not RetentionPolicy.CONSUMER_BACKLOG_EVICTION:
            continue
        orders += [EvictionOrder(d.topic, s.subscription, "size", messages=s.skip_messages)
                   for s in d.plan.size if s.skip_messages > 0]
        orders += [EvictionOrder(d.topic, t.subscription, "time", before_publish_time=t.cutoff)
                   for t in d.plan.time]
    return orders


class Exporter:
    def __init__(self, config: Config, *, spool_dir: str | None = None,
                 collector: SnapshotSource | None = None, evictor: Evictor | None = None,
                 state: PublishedState | None = None, clock: Callable[[], float] = time.time):
        self.config = config
        self._spool = spool_dir or tempfile.mkdtemp(prefix="pulsar-quota-exporter-")
        self.collector = collector or SourceCollector(config.sources, self._spool)
        self.evictor = evictor or evictor_for(config)
        self.state = state or PublishedState(config.check_interval)
        self.tallies = Tallies()
        self.decider = Decider(config)
        self._clock = clock
        self._last_decisions: Decisions | None = None
        self._last_success: float | None = None
        self._logged_dry_run: set[tuple[str, str]] = set()

    # --- stages -----------------------------------------------------------------------------
    def _aggregate(self, snapshot: Snapshot):
        from exporter.pipeline.aggregate import aggregate
        from exporter.pipeline.session import get_session

        spark = get_session(self.config.spark)
        return aggregate(spark, snapshot.bodies, self.config.resource_groups)

    def _act(self, decisions: Decisions) -> None:
        orders = orders_for(decisions)
        namespaces = {d.topic: d.namespace for d in decisions.topics}
        if not self.config.backlog_quotas.enforce:
            seen = set()
            for o in orders:
                key = (o.topic, o.quota_type)
                if key in seen:
                    continue
                seen.add(key)
                self.tallies.would_evict[(namespaces[o.topic], o.topic, o.quota_type)] += 1
                if key not in self._logged_dry_run:
                    log.info("dry run: would evict %s on %s (%s quota)", o.subscription,
                             o.topic, o.quota_type)
            self._logged_dry_run = seen
            return
        performed = set()
        for result in self.evictor.perform(orders):
            o = result.order
            if isinstance(result, Performed):
                performed.add((namespaces[o.topic], o.topic, o.quota_type))
                log.info("evicted %s on %s (%s quota, %s)", o.subscription, o.topic,
                         o.quota_type, result.method.value)
            elif isinstance(result, Failed | Skipped):
                self.tallies.eviction_failures[result.reason.value] += 1
                log.warning("eviction of %s on %s not performed: %s (%s)", o.subscription,
                            o.topic, result.reason.value, result.detail)
        for key in performed:  # one eviction per topic and quota type per check, as Pulsar
            self.tallies.evictions[key] += 1

    # --- one cycle ---------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        stages: dict[str, float] = {}

        @contextmanager
        def stage(name: str) -> Iterator[None]:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                stages[name] = time.perf_counter() - t0

        started = time.perf_counter()
        with stage("collect"):
            snapshot = self.collector.collect()
        now = self._clock()
        decisions = self._last_decisions
        try:
            with stage("pipeline"):
                agg = self._aggregate(snapshot)
            for row in agg.malformed.to_pylist():
                self.tallies.malformed_lines[row["source"]] += row["lines"]
            with stage("engine"):
                decisions = self.decider.decide(agg, snapshot.admin, now)
            with stage("actions"):
                self._act(decisions)
            self._last_decisions = decisions
            self._last_success = now
        except Exception:
            log.exception("check cycle failed after %s; keeping the last good decisions",
                          ", ".join(stages) or "nothing")
        self.tallies.check_duration = self.tallies.check_duration.observe(
            time.perf_counter() - started)
        with stage("publish"):
            facts = CycleFacts(self.config.cluster, now, stages, self._last_success)
            metrics = build(facts, decisions, snapshot.health, self.tallies,
                            self.decider.participant)
            body = render(metrics, topic_level=self.config.exposition.topic_level)
            status = view(self.config.cluster, now, decisions, snapshot.health, stages)
            degraded = tuple(f"source {h.source} down: {h.last_error_detail}"
                             for h in snapshot.health if not h.up)
            self.state.publish(body, status, degraded=degraded)
        return CycleReport(snapshot, decisions, status, body)

    def skipped(self, ticks: int) -> None:
        self.tallies.cycles_skipped += ticks

    def close(self) -> None:
        self.collector.close()


def run(config: Config, *, ready: Callable[[str], None] = lambda url: None,
        stop: threading.Event | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or `stop` is set). Returns the exit status."""
    from exporter.scheduler import Scheduler
    from exporter.webconfig import load_web_config

    exporter = Exporter(config)
    server = build_server(config.exposition.listen, exporter.state,
                          load_web_config(config.exposition)).start()
    scheduler = Scheduler(config.check_interval, exporter.cycle, exporter.skipped)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: scheduler.stop())
    if stop is not None:
        threading.Thread(target=lambda: (stop.wait(), scheduler.stop()), daemon=True).start()
    log.info("serving on %s", server.url)
    ready(server.url)
    try:
        scheduler.run()
    finally:
        server.shutdown()
        exporter.close()
        from exporter.pipeline.session import stop as stop_spark

        stop_spark()
    return 0
