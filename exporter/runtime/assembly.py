"""The composition root: every part an `Exporter` runs with, built from one configuration,
here and nowhere else; built at start (`assemble`) and again when a reload changes what a
part depends on (`reassemble`).

The parts: the broker side (the Spark scrape, built on first use: building it starts
Spark), the admin side, the evictor and the enforcer lease, the engine's decider, the
published state the server reads, the usage exchange, the reader of the brokers' own usage
reports and the model of their quota rounds, and the recorder of `run --record.dir`. Tests
hand in their own (a scripted broker side, no admin, a simulated evictor, a clock): a part
given is used as it is, the others are built from the configuration.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from exporter.actions.evict import evictor_for, lease_for
from exporter.actions.orders import Evictor
from exporter.config.settings import Config, PolicySource
from exporter.engine.decide import Decider
from exporter.engine.groups.brokersplits import BrokerSplits, Counts, Entry, Report, java_long
from exporter.pipeline.tables import BrokerSide
from exporter.server.published import PublishedState
from exporter.sources.adminside import AdminSide, SnapshotSource
from exporter.sources.brokerreports import BrokerReports, ReceivedReport
from exporter.sources.brokerreports import broker_reports_for as reports_reader
from exporter.sources.results import Snapshot, SourceHealth
from exporter.transport.client import client_options
from exporter.transport.codec import WireReport
from exporter.transport.pulsarwire import NetworkUsage

if TYPE_CHECKING:  # pulsar-client, loaded only by an instance that enforces or exchanges
    from exporter.actions.lease import EnforcerLease
    from exporter.runtime.exchange import UsageExchange

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Body = bytes  # one broker's /metrics body (`bytes` is also a recorder's size, below)


class CycleRecorder(Protocol):
    """Where `run --record.dir` writes what each cycle saw (record/store.py's `Recorder`);
    the runtime knows it only by this."""

    @property
    def root(self) -> Path: ...

    @property
    def bytes(self) -> int: ...  # the record directory's size

    def write(self, now: float, config_text: str, snapshot: Snapshot,
              broker_health: Sequence[SourceHealth], bodies: Mapping[str, Body],
              reports: Sequence[WireReport]) -> object: ...


@dataclass(frozen=True)
class Parts:
    """What an `Exporter` runs with. Replaced whole (one reference swap) when a reload
    rebuilds any of them."""

    admin_side: SnapshotSource
    evictor: Evictor
    lease: EnforcerLease | None  # None: a dry run, or a test's evictor, which evicts alone
    state: PublishedState  # what the HTTP server serves
    decider: Decider
    exchange: UsageExchange | None  # the usage exchange with peers, when participating
    broker_reports: BrokerReports | None  # the brokers' own PIP-82 reports, read-only
    broker_splits: BrokerSplits | None  # every broker's own quota, from those reports
    brokers: BrokerSide | None  # None until first used (`broker_side_for`)
    recorder: CycleRecorder | None
    clock: Clock
    participate: bool  # joins the usage exchange (`run`); a one-off check does not


class Given(TypedDict, total=False):
    """The parts a caller may hand in instead of having them built (tests, `replay`)."""

    brokers: BrokerSide | None
    admin_side: SnapshotSource | None
    evictor: Evictor | None
    state: PublishedState | None
    exchange: UsageExchange | None
    broker_reports: BrokerReports | None
    recorder: CycleRecorder | None
    clock: Clock
    participate: bool


def assemble(config: Config, *, brokers: BrokerSide | None = None,
             admin_side: SnapshotSource | None = None, evictor: Evictor | None = None,
             state: PublishedState | None = None, exchange: UsageExchange | None = None,
             broker_reports: BrokerReports | None = None, recorder: CycleRecorder | None = None,
             clock: Clock = time.time, participate: bool = False) -> Parts:
    """The parts `config` asks for, but those given. `participate`: join the usage exchange
    and read the brokers' own reports (the `run` command); a one-off check does not, so it
    never shows up to peers as a participant."""
    if exchange is None and participate:
        exchange = exchange_for(config, clock)
    if broker_reports is None and participate:
        broker_reports = broker_reports_for(config)
    return Parts(
        admin_side=admin_side or admin_side_for(config),
        evictor=evictor or evictor_for(config),
        lease=lease_for(config) if evictor is None else None,
        state=state or PublishedState(config.check_interval),
        decider=Decider(config),
        exchange=exchange,
        broker_reports=broker_reports,
        broker_splits=broker_splits_for(config) if broker_reports is not None else None,
        brokers=brokers, recorder=recorder, clock=clock, participate=participate)


def reassemble(parts: Parts, old: Config, new: Config) -> Parts:
    """The parts after a reload from `old` to `new`: those whose settings changed are built
    anew and the ones they replace closed; the decider follows the new config in place (its
    state outlives a reload)."""
    parts.decider.reconfigure(new)
    admin_side, brokers, evictor, lease = (parts.admin_side, parts.brokers, parts.evictor,
                                           parts.lease)
    exchange, broker_reports, broker_splits = (parts.exchange, parts.broker_reports,
                                               parts.broker_splits)
    if ((new.sources, new.backlog_quotas.source, new.resource_group_engine.source)
            != (old.sources, old.backlog_quotas.source, old.resource_group_engine.source)):
        admin_side.close()
        admin_side = admin_side_for(new)
    if (new.sources.brokers, new.filters.topics) != (old.sources.brokers, old.filters.topics):
        brokers = None  # a new plan over the new endpoints, at the next cycle
    if ((new.sources, new.backlog_quotas.enforce, new.backlog_quotas.lock_topic)
            != (old.sources, old.backlog_quotas.enforce, old.backlog_quotas.lock_topic)):
        evictor = evictor_for(new)
        if lease is not None:
            lease.close()
        lease = lease_for(new)
    engine_old, engine_new = old.resource_group_engine, new.resource_group_engine
    if ((engine_new.topic, engine_new.report_interval, engine_new.report_signing,
         new.sources.service_url)
            != (engine_old.topic, engine_old.report_interval, engine_old.report_signing,
                old.sources.service_url)) and parts.participate:
        if exchange is not None:
            exchange.close()
        exchange = exchange_for(new, parts.clock)
    if ((engine_new.broker_reports_topic, engine_new.stale_after, new.sources.service_url)
            != (engine_old.broker_reports_topic, engine_old.stale_after,
                old.sources.service_url)) and parts.participate:
        if broker_reports is not None:
            broker_reports.close()
        broker_reports = broker_reports_for(new)
        broker_splits = None  # a new reader: what it hears starts afresh
    if broker_reports is None:
        broker_splits = None
    elif (broker_splits is None
          or (engine_new.report_interval, new.check_interval)
          != (engine_old.report_interval, old.check_interval)):
        broker_splits = broker_splits_for(new)
    return dataclasses.replace(
        parts, admin_side=admin_side, brokers=brokers, evictor=evictor, lease=lease,
        exchange=exchange, broker_reports=broker_reports, broker_splits=broker_splits)


def broker_side_for(config: Config, clock: Clock, *, keep_body: bool) -> BrokerSide:
    """The broker side: the Spark job over `sources.brokers` (fetch and parse in tasks).
    Building it starts Spark, so the exporter builds it on first use. `keep_body`: hand
    each body back too, for the recorder."""
    from exporter.pipeline.scrape import BrokerScrape, TaskOptions, on_spark
    from exporter.pipeline.spark.session import get_context

    sources = config.sources.brokers
    options = TaskOptions(config.filters.topics, keep_body=keep_body)
    return BrokerScrape(sources, on_spark(get_context(config.spark), sources, options), clock)


def admin_side_for(config: Config) -> AdminSide:
    """The admin side; Pulsar's quota policies and resource groups are read unless
    they come from the YAML only."""
    return AdminSide(
        config.sources, read_quotas=config.backlog_quotas.source is not PolicySource.CONFIG,
        read_groups=config.resource_group_engine.source is not PolicySource.CONFIG)


def broker_reports_for(config: Config) -> BrokerReports | None:
    engine = config.resource_group_engine
    return reports_reader(config.sources.service_url, engine.broker_reports_topic,
                          engine.stale_after, client_options=client_options(config.sources))


def broker_splits_for(config: Config) -> BrokerSplits:
    """The brokers' quota rounds, modelled from their reports. Their report interval is
    taken to be ours (`report_interval`: 60 s by default, Pulsar's
    resourceUsageTransportPublishIntervalInSecs default too); reports are drained once per
    check, so arrival times are as coarse as the check interval."""
    engine = config.resource_group_engine
    return BrokerSplits(engine.report_interval, silent_after=engine.stale_after,
                        resolution=config.check_interval)


def _counts(usage: NetworkUsage) -> Counts:
    return Counts(java_long(usage.bytes), java_long(usage.messages))


def _left_out(usage: NetworkUsage | None) -> Counts | None:
    return None if usage is None else _counts(usage)


def splits_report(received: ReceivedReport) -> Report:
    """A decoded `ResourceUsageInfo` as the quota model reads it (a left-out class: None;
    replication per remote cluster, from `replicator` entries only, as master reads it)."""
    r = received.report
    return Report(r.broker, received.at, tuple(
        Entry(u.owner, _left_out(u.publish), _left_out(u.dispatch),
              tuple((remote, _counts(n)) for remote, n in u.by_remote_cluster().items()))
        for u in r.usage))


def exchange_for(config: Config, clock: Clock) -> UsageExchange | None:
    """The usage exchange, when there is something to exchange and a broker to carry it."""
    if not config.resource_groups and config.resource_group_engine.source is PolicySource.CONFIG:
        return None
    if config.sources.service_url is None:
        log.warning("no sources.service_url: resource-group quotas are computed from this "
                    "instance's usage only")
        return None
    from exporter.runtime.exchange import UsageExchange, reporter_lease_for
    from exporter.transport.channel import UsageChannel

    engine = config.resource_group_engine
    channel = UsageChannel(config.sources.service_url, engine.topic, engine.participant,
                           client_options=client_options(config.sources))
    return UsageExchange(config, channel, clock, lease=reporter_lease_for(config))
