"""The scheduler never overlaps cycles and counts the ticks an overrun skips.

The loop runs on a fake time (`FakeTime`: its clock and its stop event at once, a wait moves
the clock on at once), so the exact tick arithmetic is checked with no thread scheduling in
it; one test runs the real loop on a thread to see `stop` end it.
"""

from __future__ import annotations

import logging
import threading

import pytest

from exporter.runtime.scheduler import Scheduler


class FakeTime:
    """Clock and stop event in one: `wait(t)` moves the clock t on; after `waits` waits
    the loop is told to stop, as `Scheduler.stop` would."""

    def __init__(self, waits: int) -> None:
        self.now = 0.0
        self.left = waits
        self.stopped = False

    def __call__(self) -> float:
        return self.now

    def set(self) -> None:
        self.stopped = True

    def is_set(self) -> bool:
        return self.stopped

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        self.left -= 1
        self.stopped = self.stopped or self.left <= 0
        return self.stopped


def scheduler(interval: float, cycle, waits: int, skipped: list[int] | None = None,
              ) -> tuple[Scheduler, FakeTime]:
    fake = FakeTime(waits)
    s = Scheduler(interval, cycle, (skipped if skipped is not None else []).append, clock=fake)
    s._stop = fake  # the loop's only other notion of time
    return s, fake


def test_fast_cycles_run_on_every_tick_and_skip_nothing():
    runs: list[float] = []
    skipped: list[int] = []
    s, fake = scheduler(0.05, lambda: runs.append(fake.now), waits=6, skipped=skipped)
    s.run()
    assert runs == pytest.approx([0.0, 0.05, 0.10, 0.15, 0.20, 0.25])
    assert skipped == []


def test_an_overrunning_cycle_skips_the_ticks_it_covered_and_never_bursts():
    runs: list[float] = []
    skipped: list[int] = []

    def cycle() -> None:
        runs.append(fake.now)
        if len(runs) == 1:
            fake.now += 0.27  # past ticks 1 to 5: the next cycle is on tick 6

    s, fake = scheduler(0.05, cycle, waits=3, skipped=skipped)
    s.run()
    assert skipped == [5]
    # aligned to the start, not to the overrun's end; no catch-up cycles in between
    assert runs == pytest.approx([0.0, 0.30, 0.35])


def test_a_failing_cycle_is_logged_and_the_next_tick_runs(caplog: pytest.LogCaptureFixture):
    calls: list[float] = []

    def cycle() -> None:
        calls.append(fake.now)
        raise RuntimeError("boom")

    s, fake = scheduler(0.02, cycle, waits=3)
    with caplog.at_level(logging.ERROR, logger="exporter.runtime.scheduler"):
        s.run()
    assert calls == pytest.approx([0.0, 0.02, 0.04])
    assert [r.getMessage() for r in caplog.records] == ["check cycle failed"] * 3


def test_stop_from_another_thread_ends_the_real_loop():
    ran = threading.Event()
    s = Scheduler(3600.0, ran.set)  # one cycle, then an hour's wait that stop cuts short
    t = threading.Thread(target=s.run)
    t.start()
    assert ran.wait(30)
    s.stop()
    t.join(30)
    assert not t.is_alive() and s.stopping


def test_full_collections_are_the_loops_own_while_it_runs_and_cpythons_after():
    """garbage.py: no full collection of CPython's during a cycle; thresholds restored."""
    import gc

    before = gc.get_threshold()
    during: list[tuple[int, int, int]] = []
    s, _ = scheduler(0.05, lambda: during.append(gc.get_threshold()), waits=2)
    s.run()
    assert during == [(*before[:2], 2**31 - 1)] * 2
    assert gc.get_threshold() == before
