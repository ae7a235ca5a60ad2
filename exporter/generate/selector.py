"""The selector every generated alert and dashboard query carries (kubernetes-mixin style).

A Pulsar >= 3.2 broker exports PIP-323 series under the very names we publish
(`pulsar_storage_backlog_age_seconds`, ...), so an expression naming them bare would also see
the broker's series (scraped under the broker's job) and fire twice, or on the broker's numbers.
Templates write bare metric names; `select` then adds the selector's matchers to every
reference to one of our series, and `unselected` (a separate, simpler scan of the result)
makes generation fail if any reference still lacks them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Set
from functools import lru_cache

from exporter.catalogue import CATALOGUE

# Every series name our expressions may select: the catalogue's samples (histograms as
# _bucket/_sum/_count, counters with their _total) and the exporter target's `up`.
NAMES: frozenset[str] = frozenset({s for m in CATALOGUE for s in m.sample_names} | {"up"})

Matcher = tuple[str, str, str]  # (label, operator, the value as quoted in PromQL)

_MATCHER = re.compile(
    r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\\n]|\\.)*")\s*'
)
# Matchers already in an expression's braces: PromQL also quotes with ' and `.
_ANY_MATCHER = re.compile(
    r"""([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)"""
)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"[0-9.][0-9a-zA-Z_.]*")  # 1e-9 stops at `-`: `9` is another number
# Words followed by a parenthesised list of label names, never of series.
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_CLOSE = {"{": "}", "[": "]", "(": ")"}


@lru_cache(maxsize=64)
def parse(selector: str) -> tuple[Matcher, ...]:
    """`job="a", env=~"p.*"` → its matchers; ValueError saying what is wrong otherwise."""
    matchers: list[Matcher] = []
    for number, part in enumerate(_split(selector), start=1):
        m = _MATCHER.fullmatch(part)
        if m is None:
            raise ValueError(
                f"selector {selector!r}: matcher {number} ({part.strip()!r}) is not "
                '`label op "value"` with op one of = != =~ !~ and the value in double quotes'
            )
        if m.group(1) == "__name__":
            raise ValueError(f"selector {selector!r}: __name__ is the metric's, not the "
                             "selector's (the generator names the metrics)")
        if any(m.group(1) == label for label, _, _ in matchers):
            raise ValueError(f"selector {selector!r}: label {m.group(1)} appears twice")
        matchers.append((m.group(1), m.group(2), m.group(3)))
    if not matchers:
        raise ValueError("the selector is empty: it needs at least one matcher (such as "
                         'job="pulsar-quota-exporter") to tell our series from the broker\'s')
    return tuple(matchers)


def _split(selector: str) -> list[str]:
    """The selector cut at the commas outside quoted values."""
    parts, start, i = [], 0, 0
    while i < len(selector):
        if selector[i] == '"':
            i = _string_end(selector, i)
            continue
        if selector[i] == ",":
            parts.append(selector[start:i])
            start = i + 1
        i += 1
    parts.append(selector[start:])
    return parts if selector.strip() else []


def text(selector: str) -> str:
    """The selector as the generator writes it: `job="a", env="b"`."""
    return ", ".join(f"{label}{op}{value}" for label, op, value in parse(selector))


def _string_end(expr: str, i: int) -> int:
    """Index after the string literal opening at `i` (to the end if it never closes)."""
    quote, i = expr[i], i + 1
    while i < len(expr):
        if expr[i] == "\\" and quote != "`":
            i += 2
        elif expr[i] == quote:
            return i + 1
        else:
            i += 1
    return len(expr)


def _group_end(expr: str, i: int) -> int:
    """Index after the bracket that closes the one at `i`, strings and nesting skipped."""
    opening, closing, depth = expr[i], _CLOSE[expr[i]], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            i = _string_end(expr, i)
            continue
        depth += (c == opening) - (c == closing)
        i += 1
        if depth == 0:
            return i
    raise ValueError(f"unbalanced {opening!r} in {expr!r}")


def _skip_space(expr: str, i: int) -> int:
    while i < len(expr) and expr[i].isspace():
        i += 1
    return i


def references(
    expr: str, names: Set[str] = NAMES,
) -> Iterator[tuple[int, int, int | None, int]]:
    """Each selection of a series in `names`: (start and end of its name, index of its `{` or
    None, index after its `}` or after the name). Skips string literals, comments, `{...}` matchers
    and `[...]` ranges, the label lists of by/without/on/ignoring/group_left/group_right,
    numbers and durations, and function names."""
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":
            i = _string_end(expr, i)
        elif c == "#":
            end = expr.find("\n", i)
            i = n if end < 0 else end
        elif c in "{[":
            i = _group_end(expr, i)
        elif (number := _NUMBER.match(expr, i)) is not None:
            i = number.end()
        elif (word := _IDENT.match(expr, i)) is not None:
            i = word.end()
            after = _skip_space(expr, i)
            nxt = expr[after] if after < n else ""
            if word.group() in _LABEL_LISTS and nxt == "(":
                i = _group_end(expr, after)
            elif word.group() in names and nxt != "(":
                if nxt == "{":
                    i = _group_end(expr, after)
                    yield word.start(), word.end(), after, i
                else:
                    yield word.start(), word.end(), None, word.end()
        else:
            i += 1


def _present(inside: str) -> set[Matcher]:
    return {(m.group(1), m.group(2), m.group(3)) for m in _ANY_MATCHER.finditer(inside)}


def select(expr: str, selector: str, names: Set[str] = NAMES) -> str:
    """`expr` with the selector's matchers in every selection of a series in `names`:
    `x` → `x{job="a"}`, `x{c="d"}` → `x{job="a", c="d"}`; one that has them is left as is.
    A selection already matching a selector label another way is refused (it would select
    nothing, or not what the selector says)."""
    wanted = parse(selector)
    written = text(selector)
    out, last = [], 0
    for start, name_end, brace, end in references(expr, names):
        if brace is None:
            out += [expr[last:name_end], "{", written, "}"]
            last = name_end
            continue
        inside = expr[brace + 1:end - 1]
        present = _present(inside)
        if set(wanted) <= present:
            continue
        clash = {label for label, _, _ in present} & {label for label, _, _ in wanted}
        if clash:
            raise ValueError(f"{expr[start:end]} already matches "
                             f"{', '.join(sorted(clash))}, which the selector {written} sets")
        out += [expr[last:brace + 1], written, ", " if inside.strip() else ""]
        last = brace + 1 + (len(inside) if not inside.strip() else 0)
    out.append(expr[last:])
    return "".join(out)


def unselected(expr: str, selector: str, names: Set[str] = NAMES) -> list[str]:
    """Every whole-word occurrence of a name in `names` outside string literals that is not
    followed by braces holding all the selector's matchers (a function call aside). A scan of
    its own, not `references`: what `select` skipped by mistake shows up here."""
    wanted = set(parse(selector))
    # string contents blanked (same length), so quoted text can neither match nor unbalance
    blank = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`',
                   lambda m: m.group()[0] + " " * (len(m.group()) - 2) + m.group()[-1], expr)
    missing = []
    for m in re.finditer(r"(?<![\w:])[a-zA-Z_:][a-zA-Z0-9_:]*(?![\w:])", blank):
        if m.group() not in names:
            continue
        after = _skip_space(blank, m.end())
        nxt = blank[after] if after < len(blank) else ""
        if nxt == "(":
            continue
        if nxt == "{":
            end = blank.find("}", after)
            if end > 0 and wanted <= _present(expr[after + 1:end]):
                continue
        missing.append(f"{m.group()} (at character {m.start()})")
    return missing
