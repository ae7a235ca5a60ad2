"""Reading the repository's Markdown as GitHub renders it: heading anchors and relative links.

Used by the docs tests (every relative link and anchor resolves) and the runbook tests (every
alert's `runbook_url` lands on its heading in RUNBOOK.md).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_EXPLICIT = re.compile(r'<a\s+(?:name|id)="([^"]+)"')
# [text](target) and ![alt](target); the text may span lines, a title may follow the target.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


@dataclass(frozen=True)
class Heading:
    line: int  # 0-based
    level: int
    text: str
    anchor: str


def _slug(text: str) -> str:
    """GitHub's heading id: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def headings(markdown: str) -> list[Heading]:
    """Every heading outside code fences, with its anchor (`-1`, `-2` … on repeats)."""
    found, seen, fenced = [], Counter[str](), False
    for number, line in enumerate(markdown.splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m is None:
            continue
        slug = _slug(m.group(2))
        found.append(Heading(number, len(m.group(1)), m.group(2),
                             f"{slug}-{seen[slug]}" if seen[slug] else slug))
        seen[slug] += 1
    return found


def anchors(markdown: str) -> set[str]:
    """Every fragment a link into this file may name: headings and explicit `<a id>`s."""
    return {h.anchor for h in headings(markdown)} | set(_EXPLICIT.findall(markdown))


def _prose(markdown: str) -> str:
    """The text with code fences and inline code blanked (same length, newlines kept)."""
    out, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
            out.append("\n")
            continue
        out.append("\n" if fenced else re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group()), line))
    return "".join(out)


def links(markdown: str) -> list[tuple[int, str]]:
    """(1-based line, target) of every inline link and image outside code."""
    prose = _prose(markdown)
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(prose)]
