"""The scheduler never overlaps cycles and counts the ticks an overrun skips."""

import threading
import time

from exporter.runtime.scheduler import Scheduler


def test_fast_cycles_run_every_interval_and_skip_nothing():
    runs, skipped = [], []
    s = Scheduler(0.05, lambda: runs.append(time.monotonic()), skipped.append)
    t = threading.Thread(target=s.run)
    t.start()
    time.sleep(0.32)
    s.stop()
    t.join(2)
    assert not t.is_alive()
    assert 5 <= len(runs) <= 8
    assert skipped == []


def test_an_overrunning_cycle_skips_ticks_and_never_overlaps():
    skipped, runs = [], []

    def cycle():
        runs.append(1)
        time.sleep(0.25 if len(runs) == 1 else 0.0)  # first cycle covers ~5 ticks

    s = Scheduler(0.05, cycle, skipped.append)
    t = threading.Thread(target=s.run)
    started = time.monotonic()
    t.start()
    time.sleep(0.45)
    s.stop()
    t.join(2)
    ticks = (time.monotonic() - started) / 0.05
    assert skipped and skipped[0] >= 4
    # The ticks the long cycle overran were skipped, not made up by a burst of catch-up
    # cycles: every tick was either run or counted as skipped, never both.
    assert len(runs) >= 2 and len(runs) + sum(skipped) <= ticks + 1


def test_a_failing_cycle_does_not_stop_the_loop():
    calls = []

    def cycle():
        calls.append(1)
        raise RuntimeError("boom")

    s = Scheduler(0.02, cycle)
    t = threading.Thread(target=s.run)
    t.start()
    time.sleep(0.15)
    s.stop()
    t.join(2)
    assert len(calls) >= 3
