"""The exporter process: one check cycle (collect → pipeline → engine → actions → publish)
and the loop, server and signals around it.

Every stage is timed; the whole check is observed once into PIP-323's check-duration
histogram. A failing stage never stops the loop: a pipeline failure keeps the last good
decisions in place, a failing source keeps its last good body (sources/).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import pyarrow as pa

from exporter.actions.evict import evictor_for, lease_for
from exporter.actions.orders import Evictor
from exporter.actions.plan import Enforcement, consumers_seen
from exporter.config.model import Config, ResourceGroup
from exporter.config.reload import ConfigFile, Reloaded, ReloadRejected
from exporter.engine.attention import stats_wanted
from exporter.engine.brokersplits import Splits
from exporter.engine.decide import Decider, Decisions
from exporter.engine.groups import effective_groups
from exporter.engine.usage import EntryRejected
from exporter.exposition.build import CycleFacts, Tallies, build
from exporter.exposition.metricset import process_body, render
from exporter.exposition.status import view
from exporter.pipeline.merge import merge
from exporter.pipeline.tables import BrokerData, BrokerSide
from exporter.record.store import Recorder
from exporter.runtime.assembly import (
    admin_side_for,
    broker_reports_for,
    broker_splits_for,
    exchange_for,
    splits_report,
)
from exporter.runtime.exchange import UsageExchange, from_wire
from exporter.server.http import PublishedState
from exporter.sources.adminside import SnapshotSource
from exporter.sources.brokerreports import BrokerReports, BrokerReportsView
from exporter.sources.model import Snapshot
from exporter.transport.codec import WireReport

log = logging.getLogger(__name__)


class Checked(NamedTuple):
    """One check before publication: what it saw, decided (or the last good decisions),
    its clock and its stages' seconds (mutable: publication adds its own)."""

    snapshot: Snapshot
    decisions: Decisions | None
    now: float
    stages: dict[str, float]


@dataclass(frozen=True)
class CycleReport:
    snapshot: Snapshot
    decisions: Decisions | None
    status: dict
    body: bytes


class Exporter:
    def __init__(self, config: Config, *, brokers: BrokerSide | None = None,
                 admin_side: SnapshotSource | None = None, evictor: Evictor | None = None,
                 state: PublishedState | None = None, clock: Callable[[], float] = time.time,
                 exchange: UsageExchange | None = None, config_file: ConfigFile | None = None,
                 participate: bool = False, broker_reports: BrokerReports | None = None,
                 recorder: Recorder | None = None):
        """`participate`: join the usage exchange (the `run` command); a one-off check
        does not, so it never shows up to peers as a participant. `brokers` (default: the
        Spark job over `config.sources.brokers`, started on first use) and `admin_side` (the
        admin side) are what tests replace."""
        self.config = config
        self._brokers = brokers
        self._side = ThreadPoolExecutor(1, thread_name_prefix="admin-scrape")
        self.admin_side = admin_side or admin_side_for(config)
        self.evictor = evictor or evictor_for(config)
        self.lease = lease_for(config) if evictor is None else None  # a test's evicts alone
        self.state = state or PublishedState(config.check_interval)
        self.tallies = Tallies()
        self.decider = Decider(config)
        self._clock = clock
        self.exchange = exchange
        if exchange is None and participate:
            self.exchange = exchange_for(config, clock)
        self._participate = participate
        self.broker_reports = broker_reports  # the brokers' own PIP-82 reports, read-only
        if broker_reports is None and participate:
            self.broker_reports = broker_reports_for(config)
        # every broker's own quota, computed from those reports (the brokers enforce)
        self.broker_splits = (broker_splits_for(config) if self.broker_reports is not None
                              else None)
        self._tally_lock = threading.Lock()  # the exchange thread counts too
        self._cancelled = False
        self.config_file = config_file
        self._last_decisions: Decisions | None = None
        # last cycle's topics, and those of them no broker listed afresh (pipeline/lastgood.py)
        self._seen: tuple[pa.ChunkedArray | pa.Array, frozenset[str]] = (
            pa.array([], pa.string()), frozenset())
        self._last_success: float | None = None
        self._filtered = self._held = 0  # topics filters.topics left out; held (lastgood.py)
        self._publish_seconds: float | None = None
        self.enforcement = Enforcement()
        self.recorder = recorder  # run --record.dir: what each cycle saw, for `replay`
        self.config_text = (config_file.path.read_text() if config_file is not None
                            else "# a config given in-process, not read from a file\n")
        self._heard: list[WireReport] = []  # peers' reports since the last recorded cycle

    # --- stages -----------------------------------------------------------------------------
    def broker_side(self) -> BrokerSide:
        """The broker side, built on first use: building the Spark plan starts Spark."""
        if self._brokers is None:
            from exporter.pipeline.scrape import BrokerScrape, TaskOptions, on_spark
            from exporter.pipeline.session import get_session

            sources = self.config.sources.brokers
            options = TaskOptions(self.config.filters.topics, keep_body=self.recorder is not None)
            job = on_spark(get_session(self.config.spark), sources, options)
            self._brokers = BrokerScrape(sources, job, self._clock)
        return self._brokers

    def _aggregate(self, brokers: BrokerData, snapshot: Snapshot):
        bundles = snapshot.admin.bundles if snapshot.admin is not None else ()
        return merge(brokers.tables, self._resource_groups(snapshot), bundles,
                     malformed=brokers.malformed)

    def _resource_groups(self, snapshot: Snapshot) -> Mapping[str, ResourceGroup]:
        """The groups in force this cycle, the YAML's and Pulsar's as `source` says
        (engine/groups.py); the decider follows when they change."""
        pulsar = snapshot.admin.resource_groups if snapshot.admin is not None else None
        groups = effective_groups(self.config.resource_groups, pulsar,
                                  self.config.resource_group_engine.source)
        if groups != self.decider.config.resource_groups:
            self.decider.reconfigure(dataclasses.replace(self.config, resource_groups=groups))
        return groups

    # --- one cycle ---------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        """One check, then published: the /metrics body and /api/v1/status."""
        checked = self.check()
        snapshot, decisions, now, stages = checked
        t0 = time.perf_counter()
        if self._publish_seconds is not None:  # the previous publication's: this one is not over
            stages["publish"] = self._publish_seconds
        reports = self.broker_reports.take(now) if self.broker_reports else None
        splits = self._broker_splits(reports, snapshot, now)
        with self._tally_lock:
            if self.tallies.exchange_seconds is not None:
                stages["transport"] = self.tallies.exchange_seconds
            engine = self.config.resource_group_engine
            facts = CycleFacts(self.config.cluster, now, stages, self._last_success,
                               self.config.check_interval, engine.report_interval,
                               engine.max_report_gap, self.config.backlog_quotas.enforce,
                               topics_filtered=self._filtered, topics_held=self._held,
                               subscription_ages=self.config.exposition.subscription_backlog_age,
                               max_topics=self.config.filters.max_topics,
                               record_bytes=self.recorder.bytes if self.recorder else None,
                               lease=self.lease.view() if self.lease else None)
            metrics = build(facts, decisions, snapshot.health, self.tallies,
                            self.decider.participant, reports, splits)
        body = render(metrics, topic_level=self.config.exposition.topic_level)
        body += process_body()
        status = view(self.config.cluster, now, decisions, snapshot.health, stages)
        degraded = tuple(f"source {h.source} down: {h.last_error_detail}"
                         for h in snapshot.health if not h.up)
        self.state.publish(body, status, degraded=degraded)
        self._publish_seconds = time.perf_counter() - t0
        return CycleReport(snapshot, decisions, status, body)

    def _broker_splits(self, reports: BrokerReportsView | None, snapshot: Snapshot,
                       now: float) -> Splits | None:
        """Every broker's quota as it computes it, after this take's reports, under the
        limits the brokers have: Pulsar's groups when the admin side read them (the YAML's
        for any it lacks)."""
        if reports is None or self.broker_splits is None:
            return None
        pulsar = snapshot.admin.resource_groups if snapshot.admin is not None else None
        try:
            for received in reports.reports:
                self.broker_splits.accept(splits_report(received))
            return self.broker_splits.splits({**self.config.resource_groups, **(pulsar or {})},
                                             now)
        except Exception:  # never costs the cycle its publication
            log.exception("the brokers' quota model failed; their splits are not published")
            return None

    def check(self) -> Checked:
        """Collect, decide, act and record: a cycle but its publication (`replay` runs
        this). On failure the last good decisions stay, as published."""
        stages: dict[str, float] = {}

        @contextmanager
        def stage(name: str) -> Iterator[None]:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                stages[name] = stages.get(name, 0.0) + time.perf_counter() - t0

        started = time.perf_counter()
        self._reload()
        # Stats of the topics needing them (engine/attention.py); the first cycle: every one's.
        last, rule = self._last_decisions, self.config.filters.topics
        choose = partial(stats_wanted, last, rule=rule, seen=self._seen[0],
                         stale=self._seen[1]) if last else None
        admin = self._side.submit(self.admin_side.collect, choose)  # beside the Spark job
        brokers: BrokerData | None = None
        with stage("pipeline"):  # broker fetches, parse and per-broker tables: Spark tasks
            try:
                brokers = self.broker_side().run()
            except Exception:
                if not self._cancelled:
                    log.exception("broker scrape failed")
        with stage("collect"):  # what is left of the admin walk
            snapshot = admin.result()
        seen = snapshot
        if brokers is not None:
            snapshot = dataclasses.replace(snapshot, health=brokers.health + snapshot.health)
        now = self._clock()
        decisions = self._last_decisions
        try:
            if brokers is None:
                raise RuntimeError("no broker data this cycle")
            with stage("pipeline"):
                agg = self._aggregate(brokers, snapshot)
            self._filtered = sum(t.filtered for _, t in brokers.tables)
            self._held = brokers.held
            self._seen = (agg.topics["topic"], brokers.stale)  # a set only if the walk asks
            for row in agg.malformed.to_pylist():
                self.tallies.malformed_lines[row["source"]] += row["lines"]
            with stage("engine"):
                decisions = self.decider.decide(agg, snapshot.admin, now)
            with stage("actions"):
                self.enforcement.act(decisions, enforce=self.config.backlog_quotas.enforce,
                                     evictor=self.evictor, tallies=self.tallies,
                                     consumers=lambda: consumers_seen(agg), lease=self.lease,
                                     system_cursors=self.config.backlog_quotas.evict_system_cursors)
            self._last_decisions = decisions
            self._last_success = now
            forgotten = self.tallies.forget_unseen((d.topic for d in decisions.topics), now,
                                                   self.config.exposition.forget_after)
            if forgotten:
                log.info("forgot the eviction counters of %d topic(s) unseen for %gs",
                         forgotten, self.config.exposition.forget_after)
        except Exception:
            if self._cancelled:
                log.info("check cycle cancelled: stopping")
            else:
                log.exception("check cycle failed after %s; keeping the last good decisions",
                              ", ".join(stages) or "nothing")
        if self.recorder is not None and brokers is not None:
            with stage("record"):
                self._record(now, seen, brokers)
        self.tallies.check_duration = self.tallies.check_duration.observe(
            time.perf_counter() - started)
        return Checked(snapshot, decisions, now, stages)

    def cancel(self) -> None:
        """Stopping: cancel the running cycle's Spark jobs so the loop ends in seconds."""
        self._cancelled = True
        from exporter.pipeline.session import cancel_running

        try:
            cancel_running()
        except Exception:  # stopping anyway; the cycle then simply runs to its end
            log.debug("could not cancel the running Spark jobs", exc_info=True)

    def skipped(self, ticks: int) -> None:
        self.tallies.cycles_skipped += ticks

    def close(self) -> None:
        """Stop cleanly: a goodbye tells peers to drop our usage at once, and a standby
        takes the enforcer lease at its next cycle."""
        if self.lease is not None:
            self.lease.close()
        if self.exchange is not None:
            self.exchange.goodbye(self._clock())
            self.exchange.close()
        if self.broker_reports is not None:
            self.broker_reports.close()
        self.admin_side.close()
        self._side.shutdown(wait=False, cancel_futures=True)

    # --- usage exchange and reload -------------------------------------------------------
    def exchange_round(self) -> None:
        """One usage-report round: take in what peers sent, drop the silent ones, publish
        ours. Runs on its own timer (`report_interval`), so a slow check cycle (Spark on a
        big fleet) delays neither our reports nor our reading of the others'."""
        exchange = self.exchange
        if exchange is None:
            return
        t0 = time.perf_counter()
        now = self._clock()
        inbound = exchange.receive(now)
        received, malformed = 0, 0
        for report in inbound.admitted:  # in arrival order: a goodbye, then a restart
            if report.goodbye:
                if self.decider.forget(report.participant):
                    log.info("peer %s said goodbye", report.participant)
                exchange.gate.forget(report.participant)
                continue
            received += 1
            for entry in from_wire(report):
                malformed += isinstance(self.decider.accept(entry, now), EntryRejected)
        if inbound.spoofed:
            self.decider.report_all_next()
        round_, dropped = self.decider.round(now)
        for peer in dropped:
            log.warning("peer %s silent for %gs: dropped", peer,
                        self.config.resource_group_engine.stale_after)
            exchange.gate.forget(peer)
        sent = bool(round_ and round_.reports and exchange.publish(round_.reports, now))
        with self._tally_lock:  # _record takes the heard reports under it too
            if self.recorder is not None:
                self._heard += [r for r in inbound.admitted if not r.goodbye]
            t = self.tallies
            t.reports_rejected.update(inbound.rejected)
            t.reports_rejected["malformed"] += malformed
            t.reports_received += received
            t.peers_dropped += len(dropped)
            t.reports_suppressed += round_.suppressed if round_ else 0
            t.reports_sent += sent
            t.exchange_seconds = time.perf_counter() - t0

    def _record(self, now: float, snapshot: Snapshot, brokers: BrokerData) -> None:
        """Write what this cycle saw; a failure (disk full) is counted, never fatal."""
        assert self.recorder is not None
        with self._tally_lock:
            reports, self._heard = tuple(self._heard), []
        try:
            self.recorder.write(now, self.config_text, snapshot, brokers.health,
                                brokers.bodies, reports)
        except OSError as exc:
            self.tallies.record_failures += 1
            log.error("cannot record this cycle in %s: %s", self.recorder.root, exc)

    def _reload(self) -> None:
        if self.config_file is None:
            return
        outcome = self.config_file.poll()
        if isinstance(outcome, ReloadRejected):
            self.tallies.reloads["failure"] += 1
        elif isinstance(outcome, Reloaded):
            self.tallies.reloads["success"] += 1
            self._apply(outcome.config)

    def _apply(self, new: Config) -> None:
        old, self.config = self.config, new
        if self.config_file is not None:
            self.config_text = self.config_file.path.read_text()
        self.decider.reconfigure(new)
        if ((new.sources, new.backlog_quotas.source, new.resource_group_engine.source)
                != (old.sources, old.backlog_quotas.source, old.resource_group_engine.source)):
            self.admin_side.close()
            self.admin_side = admin_side_for(new)
        if ((new.sources.brokers, new.filters.topics) != (old.sources.brokers, old.filters.topics)
                and self._brokers is not None):
            self._brokers = None  # a new plan over the new endpoints, at the next cycle
        if ((new.sources, new.backlog_quotas.enforce, new.backlog_quotas.lock_topic)
                != (old.sources, old.backlog_quotas.enforce, old.backlog_quotas.lock_topic)):
            self.evictor = evictor_for(new)
            if self.lease is not None:
                self.lease.close()
            self.lease = lease_for(new)
        engine_old, engine_new = old.resource_group_engine, new.resource_group_engine
        if ((engine_new.topic, engine_new.report_interval, engine_new.report_signing,
             new.sources.service_url)
                != (engine_old.topic, engine_old.report_interval, engine_old.report_signing,
                    old.sources.service_url)):
            if self.exchange is not None:
                self.exchange.close()
            self.exchange = exchange_for(new, self._clock)
        if ((engine_new.broker_reports_topic, engine_new.stale_after, new.sources.service_url)
                != (engine_old.broker_reports_topic, engine_old.stale_after,
                    old.sources.service_url)) and self._participate:
            if self.broker_reports is not None:
                self.broker_reports.close()
            self.broker_reports = broker_reports_for(new)
            self.broker_splits = None  # a new reader: what it hears starts afresh
        if self.broker_reports is None:
            self.broker_splits = None
        elif (self.broker_splits is None
              or (engine_new.report_interval, new.check_interval)
              != (engine_old.report_interval, old.check_interval)):
            self.broker_splits = broker_splits_for(new)
