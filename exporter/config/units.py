"""Sizes and durations as people write them in YAML, and back.

Parsing is exact (`fractions.Fraction`), so `1.5KiB` is 1536 bytes and not 1535.999…; the
formatters are lossless, so whatever they print parses back to the same value.
"""

from __future__ import annotations

import difflib
import math
import re
from fractions import Fraction

_SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 1000,
    "kB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "PB": 1000**5,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "PiB": 1024**5,
}
# Largest first; for equal magnitude prefixes IEC (1024) sorts before SI (1000).
_SIZE_FORMAT_ORDER = sorted(
    ((unit, factor) for unit, factor in _SIZE_UNITS.items() if unit != "kB"),
    key=lambda item: -item[1],
)

_DURATION_UNITS: dict[str, Fraction] = {
    "d": Fraction(86400),
    "h": Fraction(3600),
    "m": Fraction(60),
    "s": Fraction(1),
    "ms": Fraction(1, 1000),
}
_NUMBER = r"\d+(?:\.\d+)?"
_SIZE_RE = re.compile(rf"({_NUMBER})\s*([A-Za-z]*)")
_DURATION_PART_RE = re.compile(rf"({_NUMBER})(ms|[dhms])")


def _plain_number(value: object, what: str) -> Fraction | None:
    """A YAML int/float as an exact Fraction; None when `value` is not a number."""
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, found a boolean")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"expected {what}, found {value}")
        return Fraction(value)
    return None


def parse_size(value: object) -> int:
    """Bytes from `10GiB`, `500MB`, `1.5KiB`, `10KB` or a plain number of bytes.

    SI prefixes are powers of 1000, IEC prefixes (`Ki`, `Mi`, …) powers of 1024. The result
    must be a whole, non-negative number of bytes.
    """
    number = _plain_number(value, "a size")
    if number is None:
        if not isinstance(value, str):
            raise ValueError(f"expected a size such as 10GiB, found {type(value).__name__}")
        match = _SIZE_RE.fullmatch(value.strip())
        if value.strip().startswith("-"):
            raise ValueError(f"a size must not be negative, found {value}")
        if match is None:
            raise ValueError(f"'{value}' is not a size (expected e.g. 10GiB, 500MB or 1024)")
        unit = match.group(2) or "B"
        if unit not in _SIZE_UNITS:
            raise ValueError(f"unknown size unit '{unit}' in '{value}'{_size_hint(unit)}")
        number = Fraction(match.group(1)) * _SIZE_UNITS[unit]
    if number < 0:
        raise ValueError(f"a size must not be negative, found {value}")
    if number.denominator != 1:
        raise ValueError(f"'{value}' is not a whole number of bytes")
    return int(number)


def _size_hint(unit: str) -> str:
    by_case = {u.lower(): u for u in _SIZE_UNITS}
    guess = by_case.get(unit.lower())
    if guess is None:
        close = difflib.get_close_matches(unit, list(_SIZE_UNITS), n=1)
        guess = close[0] if close else None
    known = "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"
    return f" (did you mean '{guess}'?)" if guess else f" (known: {known})"


def format_size(n: int) -> str:
    """An exact spelling: the largest unit giving at most two decimals, else plain bytes."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"a size is a non-negative integer, found {n!r}")
    for unit, factor in _SIZE_FORMAT_ORDER:
        if n >= factor and (n * 100) % factor == 0:
            return _decimal(Fraction(n, factor)) + unit
    return f"{n}B"


def parse_duration(value: object) -> float:
    """Seconds from `500ms`, `90s`, `10m`, `1h`, `1d`, compounds like `1h30m`, or plain seconds.

    Compound parts must go from the largest unit to the smallest, each unit once, as in
    Prometheus durations; a duration must not be negative.
    """
    number = _plain_number(value, "a duration")
    if number is None:
        if not isinstance(value, str):
            raise ValueError(f"expected a duration such as 90s, found {type(value).__name__}")
        text = value.strip()
        if text.startswith("-"):
            raise ValueError(f"a duration must not be negative, found {value}")
        number = _parse_duration_text(text, value) if not _is_decimal(text) else Fraction(text)
    if number < 0:
        raise ValueError(f"a duration must not be negative, found {value}")
    return float(number)


def _is_decimal(text: str) -> bool:
    return re.fullmatch(_NUMBER, text) is not None


def _parse_duration_text(text: str, original: str) -> Fraction:
    units = list(_DURATION_UNITS)
    total, position, last_rank = Fraction(0), 0, -1
    for match in _DURATION_PART_RE.finditer(text):
        rank = units.index(match.group(2))
        if match.start() != position or rank <= last_rank:
            break
        total += Fraction(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position, last_rank = match.end(), rank
    if position != len(text) or not text:
        raise ValueError(
            f"'{original}' is not a duration (expected e.g. 500ms, 90s, 10m, 1h, 1d or 1h30m)"
        )
    return total


def format_duration(seconds: float) -> str:
    """Compound units down to milliseconds, e.g. `1h30m`, `2m500ms`, `0s`.

    Exact for whole milliseconds; anything finer is rounded to the nearest millisecond.
    """
    if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration is a non-negative number of seconds, found {seconds!r}")
    millis = round(Fraction(seconds) * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in _DURATION_UNITS.items():
        count, millis = divmod(millis, int(size * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _decimal(value: Fraction) -> str:
    """A Fraction with at most two decimal places, written without trailing zeros."""
    whole, cents = divmod(int(value * 100), 100)
    return f"{whole}.{cents:02d}".rstrip("0").rstrip(".")
