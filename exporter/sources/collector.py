"""One cycle's fetch: every broker /metrics and the admin REST at once, into a `Snapshot`.

The brokers and the admin walk run concurrently, so a cycle waits for the slowest source,
not their sum. Each source keeps its last good data across cycles (see `brokers.py`,
`admin.py`), so the snapshot always carries the freshest data there is, and its health
entries say which of it is stale.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from exporter.config import Sources
from exporter.sources.admin import AdminScrape, AdminScraper
from exporter.sources.brokers import BrokerScraper
from exporter.sources.model import Snapshot


class SnapshotSource(Protocol):
    """What the check loop needs from the sources (tests pass a fake)."""

    def collect(self) -> Snapshot: ...

    def close(self) -> None: ...


class SourceCollector:
    """Runs all configured sources for one cycle. `collect` is not re-entrant."""

    def __init__(
        self,
        sources: Sources,
        spool_dir: str | os.PathLike[str],
        *,
        max_workers: int = 8,
        clock: Callable[[], float] = time.time,
    ):
        self._clock = clock
        self._brokers = BrokerScraper(sources.brokers, spool_dir, max_workers=max_workers,
                                      clock=clock)
        self._admin = (AdminScraper(sources.admin, max_concurrency=max_workers, clock=clock)
                       if sources.admin else None)
        self._side = ThreadPoolExecutor(1, thread_name_prefix="admin-scrape")

    def collect(self) -> Snapshot:
        admin_future = self._side.submit(self._admin.scrape) if self._admin else None
        brokers = self._brokers.scrape()
        admin: AdminScrape | None = admin_future.result() if admin_future else None
        return Snapshot(
            taken_at=self._clock(),
            bodies=brokers.bodies,
            admin=admin.snapshot if admin else None,
            health=brokers.health + ((admin.health,) if admin else ()),
        )

    def close(self) -> None:
        self._brokers.close()
        self._side.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SourceCollector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
