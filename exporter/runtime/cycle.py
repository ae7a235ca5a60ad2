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
from functools import cached_property, partial
from typing import TYPE_CHECKING, NamedTuple, Unpack

from exporter.actions.plan import Enforcement, consumers_seen
from exporter.config.reload import ConfigFile, Reloaded, ReloadRejected
from exporter.config.settings import Config, ResourceGroup
from exporter.engine.attention import stats_wanted
from exporter.engine.decide import Decider, Decisions
from exporter.engine.groups.applicable import effective_groups
from exporter.engine.groups.brokersplits import Splits
from exporter.engine.groups.usage import EntryRejected
from exporter.exposition.build import CycleFacts, Tallies, build
from exporter.exposition.build_topics import as_published
from exporter.exposition.render import process_body, render
from exporter.exposition.status import view
from exporter.pipeline.merge import merge, release_unused
from exporter.pipeline.tables import BrokerData, BrokerSide
from exporter.runtime.assembly import (
    Given,
    Parts,
    assemble,
    broker_side_for,
    reassemble,
    splits_report,
)
from exporter.runtime.exchange import UsageExchange, from_wire, with_exchange
from exporter.server.published import PublishedState
from exporter.sources.brokerreports import BrokerReports, BrokerReportsView
from exporter.sources.results import Snapshot
from exporter.transport.codec import WireReport

if TYPE_CHECKING:  # pulsar-client, loaded only by an instance that enforces
    from exporter.actions.lease import EnforcerLease

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
    status_of: Callable[[], dict]  # the cycle's JSON view, made when asked (`status`)
    body: bytes

    @cached_property
    def status(self) -> dict:
        return self.status_of()


class Exporter:
    """The check loop over its parts. The parts come from the composition root
    (runtime/assembly.py): handed in whole (`parts`), or built there from `config` and
    whatever is `given` instead (tests: `brokers`, `admin_side`, `evictor`, `clock`, ...;
    `participate=True` joins the usage exchange, as `run` does)."""

    def __init__(self, config: Config, parts: Parts | None = None, *,
                 config_file: ConfigFile | None = None, **given: Unpack[Given]) -> None:
        if parts is not None and given:
            raise TypeError(f"Exporter: parts given twice: {sorted(given)}")
        self.config = config
        self.parts = parts if parts is not None else assemble(config, **given)
        self.config_file = config_file
        self.config_text = (config_file.path.read_text() if config_file is not None
                            else "# a config given in-process, not read from a file\n")
        self.tallies = Tallies()
        self._tally_lock = threading.Lock()  # the exchange thread counts too
        self.enforcement = Enforcement()
        self._side = ThreadPoolExecutor(1, thread_name_prefix="admin-scrape")
        self._cancelled = False
        self._last_decisions: Decisions | None = None
        # last cycle's topics no broker listed afresh (pipeline/lastgood.py)
        self._stale: frozenset[str] = frozenset()
        self._last_success: float | None = None
        self._filtered = self._held = 0  # topics filters.topics left out; held (lastgood.py)
        self._publish_seconds: float | None = None
        self._heard: list[WireReport] = []  # peers' reports since the last recorded cycle
        self._malformed_said: set[tuple[str, str]] = set()  # (broker, reason) logged once

    # --- the parts others read ------------------------------------------------------------
    @property
    def state(self) -> PublishedState:
        return self.parts.state

    @property
    def decider(self) -> Decider:
        return self.parts.decider

    @property
    def lease(self) -> EnforcerLease | None:
        return self.parts.lease

    @property
    def exchange(self) -> UsageExchange | None:
        return self.parts.exchange

    @property
    def broker_reports(self) -> BrokerReports | None:
        return self.parts.broker_reports

    # --- stages -----------------------------------------------------------------------------
    def broker_side(self) -> BrokerSide:
        """The broker side, built on first use: building the Spark plan starts Spark."""
        brokers = self.parts.brokers
        if brokers is None:
            brokers = broker_side_for(self.config, self.parts.clock,
                                      keep_body=self.parts.recorder is not None)
            self.parts = dataclasses.replace(self.parts, brokers=brokers)
        return brokers

    def _aggregate(self, brokers: BrokerData, snapshot: Snapshot):
        bundles = snapshot.admin.bundles if snapshot.admin is not None else ()
        agg = merge(brokers.tables, self._resource_groups(snapshot), bundles,
                    malformed=brokers.malformed)
        release_unused()
        return agg

    def _resource_groups(self, snapshot: Snapshot) -> Mapping[str, ResourceGroup]:
        """The groups in force this cycle, the YAML's and Pulsar's as `source` says
        (engine/groups/applicable.py); the decider follows when they change."""
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
        snapshot, decided, now, stages = checked
        t0 = time.perf_counter()
        # what this publication, its status view and the next cycle read of them
        decisions = None if decided is None else as_published(
            decided, self.config.filters.max_topics)
        self._last_decisions = decisions
        if self._publish_seconds is not None:  # the previous publication's: this one is not over
            stages["publish"] = self._publish_seconds
        parts = self.parts
        reports = parts.broker_reports.take(now) if parts.broker_reports else None
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
                               topic_level=self.config.exposition.topic_level,
                               max_topics=self.config.filters.max_topics,
                               record_bytes=parts.recorder.bytes if parts.recorder else None,
                               lease=parts.lease.view() if parts.lease else None,
                               reporter=parts.exchange.reporter_view() if parts.exchange
                               else None)
            metrics = build(facts, decisions, snapshot.health, self.tallies,
                            parts.decider.participant, reports, splits)
        body = render(metrics, topic_level=self.config.exposition.topic_level,
                      trailer=process_body())
        del metrics  # the body holds it all now
        # The JSON view is made when /api/v1/status asks, from these immutable parts: made
        # every cycle it cost seconds and tens of MB at 100k topics (docs/design.md).
        status = with_exchange(partial(view, self.config.cluster, now, decisions,
                                       snapshot.health, dict(stages),
                                       self.config.filters.max_topics), parts.exchange)
        degraded = tuple(f"source {h.source} down: {h.last_error_detail}"
                         for h in snapshot.health if not h.up)
        parts.state.publish(body, status, degraded=degraded)
        self._publish_seconds = time.perf_counter() - t0
        return CycleReport(snapshot, decided, status, body)

    def _broker_splits(self, reports: BrokerReportsView | None, snapshot: Snapshot,
                       now: float) -> Splits | None:
        """Every broker's quota as it computes it, after this take's reports, under the
        limits the brokers have: Pulsar's groups when the admin side read them (the YAML's
        for any it lacks)."""
        splits = self.parts.broker_splits
        if reports is None or splits is None:
            return None
        pulsar = snapshot.admin.resource_groups if snapshot.admin is not None else None
        try:
            for received in reports.reports:
                splits.accept(splits_report(received))
            return splits.splits({**self.config.resource_groups, **(pulsar or {})}, now)
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
        ours = (self.config.resource_group_engine.topic, self.config.backlog_quotas.lock_topic)
        choose = partial(stats_wanted, last, rule=rule, ours=ours,
                         stale=self._stale) if last else None
        admin = self._side.submit(self.parts.admin_side.collect, choose)  # beside the Spark job
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
        now = self.parts.clock()
        decisions = self._last_decisions
        try:
            if brokers is None:
                raise RuntimeError("no broker data this cycle")
            with stage("pipeline"):
                agg = self._aggregate(brokers, snapshot)
            self._filtered = sum(t.filtered for _, t in brokers.tables)
            # Merged: what the Aggregates do not share of the decoded tables goes now, not
            # after the decide (lastgood.py keeps each broker's packed).
            brokers = dataclasses.replace(brokers, tables=())
            self._held = brokers.held
            self._stale = brokers.stale
            self._count_malformed(agg.malformed.to_pylist())
            with stage("engine"):
                decisions = self.decider.decide(agg, snapshot.admin, now)
            with stage("actions"):
                quotas = self.config.backlog_quotas
                acted = self.enforcement.act(
                    decisions, enforce=quotas.enforce, evictor=self.parts.evictor,
                    consumers=partial(consumers_seen, agg), lease=self.parts.lease,
                    system_cursors=quotas.evict_system_cursors)
            self.tallies.count(acted)
            self._last_decisions = decisions
            self._last_success = now
            forgotten = self.tallies.forget_unseen(decisions.topics.columns.topic, now,
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
        if self.parts.recorder is not None and brokers is not None:
            with stage("record"):
                self._record(now, seen, brokers)
        self.tallies.check_duration = self.tallies.check_duration.observe(
            time.perf_counter() - started)
        return Checked(snapshot, decisions, now, stages)

    def _count_malformed(self, rows: list[dict]) -> None:
        """Lines skipped per broker: counted every cycle, logged the first time a broker
        has them for a reason (a broker that prints them prints them every cycle)."""
        for row in rows:
            source, reason, lines = row["source"], row["reason"], row["lines"]
            self.tallies.malformed_lines[source] += lines
            if lines and (source, reason) not in self._malformed_said:
                self._malformed_said.add((source, reason))
                log.warning("broker %s: %d line(s) of its metrics skipped as %s (counted in "
                            "pulsar_quota_exporter_source_malformed_lines_total; logged once)",
                            source, lines, reason)

    def cancel(self) -> None:
        """Stopping: cancel the running cycle's Spark jobs so the loop ends in seconds."""
        self._cancelled = True
        from exporter.pipeline.spark.session import cancel_running

        try:
            cancel_running()
        except Exception:  # stopping anyway; the cycle then simply runs to its end
            log.debug("could not cancel the running Spark jobs", exc_info=True)

    def skipped(self, ticks: int) -> None:
        self.tallies.cycles_skipped += ticks

    def close(self) -> None:
        """Stop cleanly: a goodbye tells peers to drop our usage at once, and a standby
        takes the enforcer lease at its next cycle."""
        parts = self.parts
        if parts.lease is not None:
            parts.lease.close()
        if parts.exchange is not None:
            parts.exchange.goodbye(parts.clock())
            parts.exchange.close()
        if parts.broker_reports is not None:
            parts.broker_reports.close()
        parts.admin_side.close()
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
        now = self.parts.clock()
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
        reports = exchange.elect(now)  # one replica of a name reports (exchange.py)
        with self.decider.lock:
            self.decider.peer.reporting = reports
        round_, dropped = self.decider.round(now)
        for peer in dropped:
            log.warning("peer %s silent for %gs: dropped", peer,
                        self.config.resource_group_engine.stale_after)
            exchange.gate.forget(peer)
        sent = bool(reports and round_ and round_.reports
                    and exchange.publish(round_.reports, now))
        with self._tally_lock:  # _record takes the heard reports under it too
            if self.parts.recorder is not None:
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
        recorder = self.parts.recorder
        assert recorder is not None
        with self._tally_lock:
            reports, self._heard = tuple(self._heard), []
        try:
            recorder.write(now, self.config_text, snapshot, brokers.health, brokers.bodies,
                           reports)
        except OSError as exc:
            self.tallies.record_failures += 1
            log.error("cannot record this cycle in %s: %s", recorder.root, exc)

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
        self.parts = reassemble(self.parts, old, new)
