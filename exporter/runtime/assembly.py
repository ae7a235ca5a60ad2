"""Which parts a configuration asks for: the admin side, the usage exchange, the reader
of the brokers' own usage reports and the model of their quota rounds. Built at start and
again when a reload changes them."""

from __future__ import annotations

import logging
from collections.abc import Callable

from exporter.config.model import Config, PolicySource
from exporter.engine.brokersplits import BrokerSplits, Counts, Entry, Report, java_long
from exporter.runtime.exchange import UsageExchange
from exporter.sources.adminside import AdminSide
from exporter.sources.brokerreports import BrokerReports, ReceivedReport
from exporter.sources.brokerreports import broker_reports_for as reports_reader
from exporter.transport.client import client_options
from exporter.transport.pulsarwire import NetworkUsage

log = logging.getLogger(__name__)


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


def _counts(usage: NetworkUsage | None) -> Counts | None:
    return None if usage is None else Counts(java_long(usage.bytes), java_long(usage.messages))


def splits_report(received: ReceivedReport) -> Report:
    """A decoded `ResourceUsageInfo` as the quota model reads it (a left-out class: None;
    replication per remote cluster, from `replicator` entries only, as master reads it)."""
    r = received.report
    return Report(r.broker, received.at, tuple(
        Entry(u.owner, _counts(u.publish), _counts(u.dispatch),
              tuple((remote, _counts(n)) for remote, n in u.by_remote_cluster().items()))
        for u in r.usage))


def exchange_for(config: Config, clock: Callable[[], float]) -> UsageExchange | None:
    """The usage exchange, when there is something to exchange and a broker to carry it."""
    if not config.resource_groups and config.resource_group_engine.source is PolicySource.CONFIG:
        return None
    if config.sources.service_url is None:
        log.warning("no sources.service_url: resource-group quotas are computed from this "
                    "instance's usage only")
        return None
    from exporter.transport.channel import UsageChannel

    engine = config.resource_group_engine
    channel = UsageChannel(config.sources.service_url, engine.topic, engine.participant,
                           client_options=client_options(config.sources))
    return UsageExchange(config, channel, clock)
