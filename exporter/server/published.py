"""What the check loop publishes and the HTTP server serves: one cycle's `Publication`.

The check loop renders the body once per cycle and `publish()`es it; the body, its gzip and
the status JSON travel together in one frozen `Publication` swapped in by a single reference
assignment, so a scrape never sees half a cycle and never renders anything itself. The status
JSON is made from that cycle's immutable view on the first request of the cycle, then kept
with it: most cycles nobody asks, and at a large fleet it costs seconds (docs/design.md,
"Publishing the decisions"). The server (server/http.py) only reads this module's state.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from exporter.exposition.render import openmetrics

GZIP_LEVEL = 3  # much faster than 6 on exposition text for a few more bytes (docs/design.md)

T = TypeVar("T")


class _Once(Generic[T]):
    """A value of one publication made on its first call, by one thread while others wait,
    then kept with that publication (and gone with it)."""

    __slots__ = ("_lock", "_make", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make: Callable[[], T] | None = make
        self._value: T | None = None
        self._lock = threading.Lock()

    def __call__(self) -> T:
        with self._lock:
            if self._make is not None:
                self._value, self._make = self._make(), None
            return self._value  # type: ignore[return-value]  # made above


@dataclass(frozen=True)
class Publication:
    """Everything a scrape can see of one cycle."""

    cycle: int
    body: bytes
    body_gzip: bytes
    status: _Once[bytes]  # the status JSON, made on the cycle's first request
    # the body as OpenMetrics, plain and gzipped: made with the publication, since
    # Prometheus (2.x and 3.x) asks for it first; made on a scrape, the first of each cycle
    # paid for it and the other scrapers of an HA pair waited (tests.bench.prometheus_pair)
    openmetrics: _Once[tuple[bytes, bytes]]
    degraded: tuple[str, ...]  # e.g. "source broker-1 down, serving data 240s old"
    published_at: float  # the state's monotonic clock

    @property
    def status_json(self) -> bytes:
        return self.status()


class Health(Enum):
    OK = "ok"
    STARTING = "starting"  # no cycle yet, still within the startup grace
    STALE = "stale"  # the last cycle is older than the allowed age
    NEVER_PUBLISHED = "never_published"  # startup grace over, still no cycle


class PublishedState:
    """The current `Publication` plus what /healthz needs to judge it.

    "Recently" means within `(missed_cycles + 1) × check_interval`: with the default 2, two
    whole ticks may be missed (one overrunning cycle skips a tick, see
    cycles_skipped_total) before the exporter calls itself unhealthy. Before the first cycle
    `startup_grace` more is allowed for Spark to start (seconds here).
    """

    def __init__(self, check_interval: float, *, missed_cycles: int = 2,
                 startup_grace: float = 60.0, gzip_level: int = GZIP_LEVEL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if check_interval <= 0:
            raise ValueError("check_interval must be positive")
        self.max_age = (missed_cycles + 1) * check_interval
        self.startup_grace = startup_grace
        self._gzip_level = gzip_level
        self._clock = clock
        self._started = clock()
        self._current: Publication | None = None
        self._cycles = 0

    def _gzip(self, body: bytes) -> bytes:
        return gzip.compress(body, compresslevel=self._gzip_level, mtime=0)

    def _openmetrics(self, body: bytes) -> tuple[bytes, bytes]:
        converted = openmetrics(body)
        return converted, self._gzip(converted)

    @property
    def current(self) -> Publication | None:
        return self._current

    def publish(self, body: bytes, status: Callable[[], Mapping[str, object]], *,
                degraded: tuple[str, ...] = ()) -> Publication:
        """Compress off the scrape path, then swap in one assignment; `status` is called
        on the cycle's first /api/v1/status request, if any. Called from the check loop
        only (one writer)."""
        self._cycles += 1
        converted = self._openmetrics(body)
        publication = Publication(
            cycle=self._cycles,
            body=body,
            body_gzip=self._gzip(body),
            status=_Once(lambda: json.dumps(status(), sort_keys=True, default=str).encode()),
            openmetrics=_Once(lambda: converted),
            degraded=tuple(degraded),
            published_at=self._clock(),
        )
        self._current = publication
        return publication

    def health(self) -> tuple[Health, str]:
        now, current = self._clock(), self._current
        if current is None:
            waited = now - self._started
            limit = self.startup_grace + self.max_age
            if waited <= limit:
                return Health.STARTING, f"starting: no cycle finished yet ({waited:.1f}s " \
                                        f"since start, limit {limit:g}s)"
            return Health.NEVER_PUBLISHED, f"unhealthy: no cycle finished in {waited:.1f}s " \
                                           f"since start (limit {limit:g}s)"
        age = now - current.published_at
        if age <= self.max_age:
            return Health.OK, f"ok: cycle {current.cycle} finished {age:.1f}s ago"
        return Health.STALE, f"unhealthy: last cycle ({current.cycle}) finished {age:.1f}s " \
                             f"ago, limit {self.max_age:g}s"
