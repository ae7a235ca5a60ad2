"""tests/harness/wait.py's `poll`: what it returns, and how it fails."""

from __future__ import annotations

import itertools

import pytest

from tests.harness.wait import poll


def test_returns_the_first_value_that_holds() -> None:
    counter = itertools.count()
    assert poll(lambda: next(counter), "a positive count", timeout=5, interval=0) == 1
    values = iter(["a", "bb", "ccc"])
    assert poll(lambda: next(values), "three letters", timeout=5, interval=0,
                until=lambda v: len(v) == 3) == "ccc"


def test_fails_naming_what_was_awaited_the_last_value_and_the_shown_state() -> None:
    counter = itertools.count(1)  # even a poll stalled past its deadline calls it once
    with pytest.raises(AssertionError) as failed:
        poll(lambda: next(counter), "a count past a million", timeout=0.05, interval=0.01,
             until=lambda n: n > 1_000_000, show=lambda: "the state worth seeing")
    message = str(failed.value)
    assert message.startswith("a count past a million: not met within 0.05 s; last: ")
    last = int(message.split("last: ")[1].splitlines()[0])
    assert last >= 1
    assert message.endswith("\nthe state worth seeing")


def test_an_exception_from_the_probe_propagates_at_once() -> None:
    calls = []

    def probe() -> bool:
        calls.append(1)
        raise TypeError("a bug in the probe")

    with pytest.raises(TypeError, match="a bug in the probe"):
        poll(probe, "anything", timeout=10, interval=0.01, ignore=(OSError,))
    assert len(calls) == 1


def test_exceptions_the_caller_names_are_not_yet_and_the_last_one_is_reported() -> None:
    attempts = iter([ConnectionRefusedError("refused"), KeyError("peer"), "there"])

    def probe() -> str:
        outcome = next(attempts)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert poll(probe, "an answer", timeout=5, interval=0, ignore=(OSError, KeyError)) == "there"

    def refused() -> bool:
        raise ConnectionRefusedError("down")

    with pytest.raises(AssertionError, match=r"last: raised ConnectionRefusedError\('down'\)"):
        poll(refused, "a listener", timeout=0.05, interval=0.01, ignore=(OSError,))
