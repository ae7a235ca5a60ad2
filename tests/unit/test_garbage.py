"""Full collections between cycles (runtime/garbage.py): CPython's own are off, ours run
when due, and collect what only a full collection finds."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from exporter.runtime.garbage import SPACING, FullCollections


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _full_collections() -> tuple[list[int], object]:
    seen: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(count)
    return seen, count


def test_a_cycle_in_the_oldest_generation_is_freed_by_after_cycle_only() -> None:
    collections = FullCollections()
    collections.start()
    try:
        node = Node()
        gc.collect(1)  # survives the young generations: now in the oldest
        gone = weakref.ref(node)
        del node
        gc.collect(1)  # what CPython's young sweeps do: not enough
        assert gone() is not None
        assert collections.after_cycle()
        assert gone() is None
    finally:
        collections.stop()


def test_a_full_collection_runs_once_due_after_spacing_times_the_last_one() -> None:
    now = [1000.0]
    collections = FullCollections(clock=lambda: now[0])
    seen, callback = _full_collections()
    try:
        assert collections.after_cycle()  # the first cycle: due
        assert len(seen) == 1
        due = collections._due
        assert now[0] < due <= now[0] + SPACING * 60  # it took more than 0 s, less than 60
        now[0] = due - 1e-6
        assert not collections.after_cycle()
        assert len(seen) == 1
        now[0] = due
        assert collections.after_cycle()
        assert len(seen) == 2
    finally:
        gc.callbacks.remove(callback)


def test_stop_restores_the_thresholds_start_found() -> None:
    before = gc.get_threshold()
    collections = FullCollections()
    collections.start()
    assert gc.get_threshold() == (*before[:2], 2**31 - 1)
    collections.stop()
    assert gc.get_threshold() == before
    collections.stop()  # twice: no harm
    assert gc.get_threshold() == before


# What a cycle's numpy leaves with glibc: blocks freed, kept resident. The thresholds are
# fixed so that the blocks come from the heap and free() hands nothing back itself (glibc
# moves its mmap threshold up to 32 MB once a large block is freed, as a decide's are).
_FREED_IN_A_CYCLE = """
import ctypes
from pathlib import Path

import numpy as np

from exporter.runtime.garbage import FullCollections

libc = ctypes.CDLL(None)
assert libc.mallopt(-1, 1 << 30) and libc.mallopt(-3, 1 << 30)  # M_TRIM_, M_MMAP_THRESHOLD


def resident_mb():
    line = next(line for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


collections = FullCollections(clock=lambda: 0.0)
collections.after_cycle()  # the first is due: the next is not, at this clock
blocks = [np.ones(1 << 17) for _ in range(200)]  # 200 MB, written
del blocks
kept = resident_mb()
assert not collections.after_cycle()
print(kept, resident_mb())
"""


def test_after_a_cycle_the_pages_it_freed_are_handed_back() -> None:
    """Every cycle, a full collection due or not."""
    done = subprocess.run([sys.executable, "-c", _FREED_IN_A_CYCLE], capture_output=True,
                          text=True, check=True, timeout=120)
    kept, after = map(float, done.stdout.split())
    assert kept - after > 150, (kept, after)


# Where glibc puts an 8 MiB numpy array once it has freed a 16 MiB one (its mmap threshold
# raised to 16 MiB: it raises it up to 32), with the exporter's collections started or not:
# the bytes glibc has mapped apart while the array lives (mallinfo2's hblkhd), over those
# before.
_LARGE_BLOCK = """
import ctypes
import sys

import numpy as np

from exporter.runtime.garbage import FullCollections


class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "started":
    FullCollections().start()
big = np.ones(2 << 20)  # 16 MiB, mapped: freed, it raises glibc's threshold to its size
del big
before = libc.mallinfo2().hblkhd
block = np.ones(1 << 20)  # 8 MiB
print(libc.mallinfo2().hblkhd - before)
"""


@pytest.mark.parametrize(("how", "mapped"), [("started", True), ("not started", False)])
def test_from_start_blocks_of_4_mib_or_more_are_mapped_apart(how: str, mapped: bool) -> None:
    """numpy asks for huge pages for such an array: in the heap it marks that stretch of
    the heap for good (the module docstring). Not started, glibc serves it from the heap."""
    done = subprocess.run([sys.executable, "-c", _LARGE_BLOCK, how], capture_output=True,
                          text=True, check=True, timeout=120)
    assert (int(done.stdout) >= 8 << 20) is mapped, done.stdout
