"""Waiting in tests: `poll`, the one polling loop of the test suite.

Every wait for something outside the test's control (a process to serve, a broker to refresh
its gauges, Prometheus to evaluate a rule) goes through it, so that each one fails the same
way: saying what was awaited, for how long, and the last value seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll"]

T = TypeVar("T")


def poll(probe: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.5, *,
         until: Callable[[T], object] = bool, show: Callable[[], object] | None = None,
         ignore: tuple[type[Exception], ...] = ()) -> T:
    """Call `probe` every `interval` seconds until `until(value)` holds (by default: until it
    returns something truthy) and return that value.

    After `timeout` seconds raise AssertionError naming `what`, the timeout and the last value
    `probe` returned (or the last exception it raised), followed by `show()` if given: the
    state worth seeing when it never happened. An exception from `probe` propagates at once,
    unless it is an instance of one of `ignore`: then it counts as "not yet".
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except ignore as error:
            last: object = error
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            seen = f"raised {last!r}" if isinstance(last, BaseException) else repr(last)
            detail = f"\n{show()}" if show is not None else ""
            raise AssertionError(f"{what}: not met within {timeout:g} s; last: {seen}{detail}")
        time.sleep(interval)
