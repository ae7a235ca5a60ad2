"""Runs the check cycle every interval; a cycle never overlaps the next.

Ticks are aligned to the start time (like Pulsar's scheduleAtFixedRate for
backlogQuotaCheckIntervalInSeconds): a cycle that overruns makes the scheduler skip the ticks it
covered, and those skips are counted rather than queued, so a slow cluster never builds up a
backlog of checks. CPython's full garbage collections run between cycles, not inside them
(garbage.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from exporter.runtime.garbage import FullCollections

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, interval: float, cycle: Callable[[], object],
                 on_skipped: Callable[[int], None] = lambda n: None,
                 clock: Callable[[], float] = time.monotonic):
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._interval = interval
        self._cycle = cycle
        self._on_skipped = on_skipped
        self._clock = clock
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the loop to end after the running cycle (safe from a signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        collections = FullCollections()
        collections.start()
        try:
            self._loop(collections)
        finally:
            collections.stop()

    def _loop(self, collections: FullCollections) -> None:
        start = self._clock()
        tick = 0
        while not self._stop.is_set():
            try:
                self._cycle()
            except Exception:  # a failed cycle is logged; the next tick tries again
                log.exception("check cycle failed")
            collections.after_cycle()
            elapsed = self._clock() - start
            next_tick = int(elapsed // self._interval) + 1
            skipped = next_tick - tick - 1
            if skipped > 0:
                log.warning("check cycle overran: skipped %d tick(s)", skipped)
                self._on_skipped(skipped)
            tick = next_tick
            self._stop.wait(max(0.0, start + tick * self._interval - self._clock()))
