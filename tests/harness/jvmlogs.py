"""What a failing test shows of a Pulsar JVM's logs: its warnings and errors, and its long
pauses, from the moment the test began.

A cluster test once failed because a broker answered nothing for over 30 s (its clients'
send timeout and keep-alive), and the CI output held no line of the broker's to say why: a
long collection, a safepoint, or a wait on the bookie. Each part's console log (log4j's
pattern, `2026-11-29T03:05:11,569+0000 [thread] WARN ...`) and the GC log Pulsar's scripts
write beside it (`logs/pulsar_gc_<pid>.log`, the JVM's unified logging with its `time`
decoration) answer that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

_CONSOLE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3}[+-]\d{4}) \[[^\]]*\] (WARN|ERROR) ")
_GC = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d{4})\]")
# A collection's pause ("... 9M->8M(66M) 79.493ms") or a safepoint's ("... Total: 81712987 ns")
_TOOK = re.compile(r"(?:Pause .* ([0-9.]+)ms|Total: (\d+) ns)$")
SLOWEST = 0.5  # seconds: a pause or safepoint this long is shown


def notable(lines: Iterable[str], since: float, slowest: float = SLOWEST) -> list[str]:
    """The lines from `since` (epoch seconds) on that are a console log's WARN or ERROR, or a
    GC log's pause or safepoint of `slowest` seconds or more. Lines without a time of their
    own (a stack trace's) are left out: the line that begins the entry says what happened."""
    kept = []
    for line in lines:
        if (console := _CONSOLE.match(line)) is not None:
            at = datetime.strptime(console[1], "%Y-%m-%dT%H:%M:%S,%f%z").timestamp()
            if at >= since:
                kept.append(line)
        elif (gc := _GC.match(line)) is not None and (took := _TOOK.search(line)) is not None:
            at = datetime.strptime(gc[1], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
            seconds = float(took[1]) / 1e3 if took[1] is not None else int(took[2]) / 1e9
            if at >= since and seconds >= slowest:
                kept.append(line)
    return kept


def since(name: str, console: Path, after: float, lines: int = 40) -> str:
    """`notable` lines of one part's console log and of the GC logs beside it (the last
    `lines` of each file), under a heading naming the part."""
    shown = [f"--- {name}: warnings, errors and pauses of {SLOWEST} s or more ---"]
    for path in (console, *sorted(console.parent.glob("logs/*gc*.log"))):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        found = notable(text.splitlines(), after)
        if len(found) > lines:
            shown.append(f"({path.name}: {len(found)} lines, the last {lines})")
        shown += found[-lines:]
    return "\n".join(shown)
