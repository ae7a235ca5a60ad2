"""Evictions: move a subscription's cursor past messages the backlog quota does not allow.

Two ways to the cluster, chosen by `evictor_for(config)`:

- Admin REST (Apache Pulsar): `GET …/stats?getEarliestTimeInBacklog=true` to see the
  subscription, then `POST …/subscription/{sub}/expireMessages/{s}` or `…/skip/{n}`.
- Binary protocol (pulsar-client; works on pulsar-lite, which has no admin API): attach to
  the subscription as a `Shared` consumer, then `seek(publish_time_ms)` for a cut-off, or
  receive and individually acknowledge N messages for a skip (Shared forbids cumulative acks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from exporter.actions.admin import AdminEvictor
from exporter.actions.orders import (
    EvictionFailure,
    EvictionOrder,
    EvictionResult,
    Evictor,
    Skipped,
    unfenced,
)
from exporter.config.settings import Config
from exporter.transport.client import client_options

if TYPE_CHECKING:
    from exporter.actions.lease import EnforcerLease


class Unconfigured:
    """Neither an admin source nor a service URL: every order is Skipped(no_service_url)."""

    def perform(self, orders: Sequence[EvictionOrder],
                fence: Callable[[], bool] = unfenced) -> tuple[EvictionResult, ...]:
        return tuple(Skipped(o, EvictionFailure.NO_SERVICE_URL,
                             "configure sources.service_url or sources.admin") for o in orders)


def evictor_for(config: Config, *, timeout: float = 5.0) -> Evictor:
    """Admin REST when configured (precise, Apache Pulsar), else the binary protocol."""
    sources = config.sources
    if sources.admin is not None:
        return AdminEvictor(sources.admin)
    if sources.service_url:
        from exporter.actions.binary import BinaryEvictor  # pulsar-client: only when used

        return BinaryEvictor(sources.service_url, timeout=timeout,
                             client_options=client_options(sources))
    return Unconfigured()


def lease_for(config: Config, *, timeout: float = 5.0) -> EnforcerLease | None:
    """The enforcer lease when enforcing (through `sources.service_url`, which `enforce`
    requires); None in a dry run, where nothing needs excluding."""
    if not config.backlog_quotas.enforce or not config.sources.service_url:
        return None
    from exporter.actions.lease import EnforcerLease  # pulsar-client: only when enforcing

    return EnforcerLease(config.sources.service_url, config.backlog_quotas.lock_topic,
                         config.resource_group_engine.participant, timeout=timeout,
                         client_options=client_options(config.sources))
