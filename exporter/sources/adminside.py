"""One cycle's admin side: the admin REST walk, into a `Snapshot`.

The walk lists namespaces, topics and bundles every cycle and reads policies on their own
period, but a topic's stats only when the check loop's `choose` picks it (the topics that
need them: engine/attention.py), so a cycle's requests grow with namespaces, brokers and
the topics needing attention, not with the topics there are.

Broker /metrics are fetched where they are parsed, inside the cycle's Spark job
(pipeline/scrape.py); the admin walk runs beside that job, so a cycle waits for the slower
of the two, not their sum. The admin source keeps its last good data across cycles
(`admin.py`), so the snapshot always carries the freshest data there is, and its health
entry says whether it is stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from exporter.config.settings import Sources
from exporter.sources.admin import AdminScraper, StatsChoice
from exporter.sources.policies import PolicyCache
from exporter.sources.resourcegroups import GroupCache
from exporter.sources.results import Snapshot


class SnapshotSource(Protocol):
    """What the check loop needs from the admin side (tests pass a fake). `choose`: which
    listed topics to read the stats of; None: every one."""

    def collect(self, choose: StatsChoice | None = None) -> Snapshot: ...

    def close(self) -> None: ...


class AdminSide:
    """Runs the admin source, when configured, for one cycle. Not re-entrant."""

    def __init__(self, sources: Sources, *, max_workers: int = 8,
                 clock: Callable[[], float] = time.time, read_quotas: bool = False,
                 read_groups: bool = False):
        """`read_quotas`, `read_groups`: read Pulsar's backlog-quota policies, its
        resource groups and their bindings too (`backlog_quotas.source`,
        `resource_group_engine.source` other than `config`)."""
        self._clock = clock
        self._admin = (AdminScraper(sources.admin, max_concurrency=max_workers, clock=clock,
                                    policies=PolicyCache() if read_quotas else None,
                                    groups=GroupCache() if read_groups else None)
                       if sources.admin else None)

    def collect(self, choose: StatsChoice | None = None) -> Snapshot:
        admin = self._admin.scrape(choose) if self._admin else None
        return Snapshot(
            taken_at=self._clock(),
            admin=admin.snapshot if admin else None,
            health=(admin.health,) if admin else (),
        )

    def close(self) -> None:
        """Nothing held open between cycles (the admin client connects per walk)."""

    def __enter__(self) -> AdminSide:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
