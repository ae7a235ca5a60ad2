"""What a cycle leaves in memory, tidied between cycles: CPython's full garbage collections,
and the heap's free pages.

A cycle makes many tracked objects that live for a while: the publication's label tuples,
and the decisions made when read (engine/backlog/topicdecisions.py). CPython 3.11 runs a full
collection whenever the objects that survived into its oldest generation have grown by a
quarter since the last one, and a full collection walks every live object. When the
decisions were objects kept between cycles, that was twice in every decide at 100k topics,
a fifth of the cycle's driver work (`tests.bench.pipeline --engine`). It finds next to
nothing: those objects hold no cycles, and go by their reference counts. Since the
decisions became columns, the collection between cycles is cheap, while CPython's own
would take seconds inside a cycle that publishes every topic at 1M topics (docs/design.md,
"Garbage collection between cycles").

So CPython's own full collections are off while the exporter runs, and `after_cycle`
makes one between cycles, when at least `SPACING` times as long as the last one took has
passed since it: at most 1/`SPACING` of the time goes to them, whatever the fleet (at 1k
topics, a few ms every cycle). The young generations still collect as CPython decides:
they hold the short-lived cycles (an exception and its frames).

Then, every cycle, the pages the allocator keeps free are handed back to the OS
(`release_unused`: `malloc_trim` under Arrow's system pool). The cycle does so after the
merge, but the decide and the publication free as much again after it, and glibc keeps it
resident until the next cycle's merge: handed back, the driver holds a third less or more
between cycles at a large fleet, for a fraction of a second (`tests.bench.steady`;
docs/design.md, "The driver once every age table is full").

And from `start` on, every block of `MAPPED_FROM` bytes or more is mapped apart and unmapped
when freed (glibc's mmap threshold, fixed). numpy asks for huge pages for every array of
4 MiB or more (`madvise(MADV_HUGEPAGE)` over its pages), and glibc serves blocks of up to
32 MiB from its heap once it has freed one that large (it raises its threshold to the size
of each mapped block freed): an array there marks that stretch of the heap for good, and
every small block glibc places in it later faults in 2 MiB, not 4 KiB. Which stretches an
array lands on is the luck of a process's allocations, and two runs of the same cycles
held very different amounts between cycles, the trim handing little back (docs/design.md,
"The driver once every age table is full").
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable

from exporter.pipeline.merge import release_unused

SPACING = 20
MAPPED_FROM = 4 << 20  # numpy's huge-page threshold (HUGEPAGE_THRESHOLD, numpy's alloc.c)
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
_NEVER = 2**31 - 1  # the oldest's count grows by one a middle sweep: never this far


class FullCollections:
    """Between `start` and `stop`, the only full collections are `after_cycle`'s."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due = float("-inf")  # the first cycle's end collects
        self._thresholds: tuple[int, int, int] | None = None

    def start(self) -> None:
        self._thresholds = gc.get_threshold()
        gc.set_threshold(*self._thresholds[:2], _NEVER)
        map_large_blocks()

    def stop(self) -> None:
        """CPython's thresholds as they were (`run` may be called again in one process)."""
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def after_cycle(self) -> bool:
        """A full collection if one is due, whether it ran; then the free pages handed back."""
        due = self._clock() >= self._due
        if due:
            started = time.perf_counter()
            gc.collect()
            took = time.perf_counter() - started
            self._due = self._clock() + SPACING * took
        release_unused()
        return due


def map_large_blocks() -> bool:
    """From now on, blocks of `MAPPED_FROM` bytes or more mapped apart (the module
    docstring), for the life of the process (glibc has no way to read the threshold back).
    False where the C library is not glibc: it keeps its own ways."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return bool(mallopt is not None and mallopt(_M_MMAP_THRESHOLD, MAPPED_FROM))
