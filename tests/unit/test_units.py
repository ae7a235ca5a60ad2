"""Sizes and durations: the spellings users write, the errors they get, and exact round trips."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.units import format_duration, format_size, parse_duration, parse_size

SI = {"KB": 1000, "kB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}
IEC = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10GiB", 10 * 2**30),
        ("500MB", 500 * 10**6),
        ("1.5KiB", 1536),
        ("10KB", 10_000),
        ("0.5MiB", 2**19),
        ("100B", 100),
        ("42", 42),
        (" 7 MiB ", 7 * 2**20),
        (4096, 4096),
        (2.0, 2),
        (0, 0),
    ],
)
def test_parse_size_accepts_si_iec_and_plain_bytes(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("value", "gist"),
    [
        ("-5MB", "must not be negative"),
        (-1, "must not be negative"),
        ("1.1KiB", "not a whole number of bytes"),
        (0.5, "not a whole number of bytes"),
        ("10gb", "did you mean 'GB'"),
        ("10Mib", "did you mean 'MiB'"),
        ("ten", "not a size"),
        ("", "not a size"),
        (True, "found a boolean"),
        ([1], "expected a size"),
        (float("inf"), "expected a size"),
    ],
)
def test_parse_size_rejects_with_a_clear_message(value: object, gist: str) -> None:
    with pytest.raises(ValueError, match=gist.replace("(", r"\(")):
        parse_size(value)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0B"),
        (1023, "1023B"),
        (1024, "1KiB"),
        (1536, "1.5KiB"),
        (1500, "1.5KB"),
        (10 * 2**20, "10MiB"),
        (10**8, "100MB"),
        (2**50, "1PiB"),
        (1001, "1001B"),
        (1010, "1.01KB"),
        (1280, "1.25KiB"),
    ],
)
def test_format_size_picks_the_largest_exact_unit(n: int, text: str) -> None:
    assert format_size(n) == text


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1KiB"])
def test_format_size_rejects_non_sizes(bad: object) -> None:
    with pytest.raises(ValueError):
        format_size(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", 0.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("2m500ms", 120.5),
        ("1.5h", 5400.0),
        ("30", 30.0),
        ("0.25", 0.25),
        (60, 60.0),
        (1.5, 1.5),
        (0, 0.0),
    ],
)
def test_parse_duration_accepts_units_compounds_and_plain_seconds(
    text: object, expected: float
) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "gist"),
    [
        ("-1s", "must not be negative"),
        (-3, "must not be negative"),
        ("1m1h", "not a duration"),  # largest unit first, as in Prometheus
        ("1h1h", "not a duration"),
        ("10 m", "not a duration"),
        ("5x", "not a duration"),
        ("", "not a duration"),
        ("s", "not a duration"),
        (True, "found a boolean"),
        (float("nan"), "expected a duration"),
        ({"s": 1}, "expected a duration"),
    ],
)
def test_parse_duration_rejects_with_a_clear_message(value: object, gist: str) -> None:
    with pytest.raises(ValueError, match=gist):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (90, "1m30s"),
        (5400, "1h30m"),
        (86400, "1d"),
        (90061.5, "1d1h1m1s500ms"),
    ],
)
def test_format_duration_uses_compound_units(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True])
def test_format_duration_rejects_non_durations(bad: float) -> None:
    with pytest.raises(ValueError):
        format_duration(bad)


@given(st.integers(min_value=0, max_value=2**62))
def test_size_round_trips_through_its_formatting(n: int) -> None:
    assert parse_size(format_size(n)) == n


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted({**SI, **IEC})))
def test_a_whole_count_of_any_unit_is_that_many_bytes(count: int, unit: str) -> None:
    assert parse_size(f"{count}{unit}") == count * {**SI, **IEC}[unit]


@given(st.integers(min_value=0, max_value=10**12))
def test_whole_milliseconds_round_trip_through_formatting(millis: int) -> None:
    seconds = millis / 1000
    assert parse_duration(format_duration(seconds)) == seconds


@given(
    st.dictionaries(st.sampled_from(list(SECONDS)), st.integers(0, 10**6), min_size=1),
)
def test_compound_duration_is_the_sum_of_its_parts(parts: dict[str, int]) -> None:
    text = "".join(f"{parts[u]}{u}" for u in ("d", "h", "m", "s", "ms") if u in parts)
    expected = sum(n * SECONDS[u] for u, n in parts.items())
    assert math.isclose(parse_duration(text), expected, rel_tol=1e-12, abs_tol=1e-9)
