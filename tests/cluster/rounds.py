"""A broker's PIP-82 quota rounds, as its counters show them, matched against our model.

Each round a broker adds the quota it computed to `pulsar_resource_group_calculated_*`;
scraped and differenced, the counters give one increment per round. The broker computes from
the reports it has applied, in the usage topic's order (its own read back off the topic too,
`ResourceUsageReader`), the order our reader applies them in. So a broker's increments, taken
in time, must walk forward through our model's states (`BrokerSplits.splits` after each
report): never back to a state older than the one an earlier increment matched. When it
applied a report is looser: on a loaded machine a broker's reader, or ours, runs late, and
Pulsar itself drops a report older than 2 × P at receipt, so a round may use a state in force
up to `lag` seconds either side of the scrape window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.config.settings import MonitoringClass
from exporter.engine.groups.brokersplits import Counts, Quota, Splits

DIMENSIONS = ("bytes", "messages")


@dataclass(frozen=True)
class Scraped:
    at: float  # when the scrape was asked for
    done: float  # when its answer was complete
    counts: Counts | None  # the counters then; None: not exposed yet


@dataclass(frozen=True)
class Followed:
    matched: int  # increments found in our model, in order
    unknowable: int  # increments in a window holding a state we could not know
    wrong: tuple[str, ...]  # the others, described


def follow_rounds(history: Sequence[Splits], broker: str, group: str, cls: MonitoringClass,
                  scraped: Sequence[Scraped], lag: float) -> Followed:
    """Walk `broker`'s increments of class `cls` through `history` (oldest first, each state
    in force until the next). Per dimension: a scrape can fall between a round's bytes and
    its messages increments, which then land in two windows."""
    values = [s.get(broker, group, cls) for s in history]
    increments = [v.increment if isinstance(v, Quota) else None for v in values]
    starts = [s.at for s in history]
    ends = [*starts[1:], math.inf]
    earliest = dict.fromkeys(DIMENSIONS, 0)  # per dimension: the state last matched
    matched = unknowable = 0
    wrong: list[str] = []
    for before, after in itertools.pairwise(scraped):
        if before.counts is None or after.counts is None or before.counts == after.counts:
            continue
        window = [i for i, (s, e) in enumerate(zip(starts, ends, strict=True))
                  if s <= after.done + lag and e > before.at - lag]
        found: dict[str, int | None] = {}
        for dim in DIMENSIONS:
            moved = getattr(after.counts, dim) - getattr(before.counts, dim)
            if moved:
                found[dim] = next((i for i in window if i >= earliest[dim]
                                   and (c := increments[i]) is not None
                                   and getattr(c, dim) == moved), None)
        if None not in found.values():
            earliest.update({d: i for d, i in found.items() if i is not None})
            matched += 1
        elif any(increments[i] is None for i in window):
            unknowable += 1  # e.g. before the broker's first report reached us
        else:
            wrong.append(f"{broker} {cls.value} at {after.done:.3f}: moved "
                         f"{after.counts.bytes - before.counts.bytes} B, "
                         f"{after.counts.messages - before.counts.messages} msgs; ours, from "
                         f"state {min(earliest.values())}: "
                         f"{[(i, increments[i]) for i in window]}")
    return Followed(matched, unknowable, tuple(wrong))
