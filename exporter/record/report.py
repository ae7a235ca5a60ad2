"""The replay's findings: `report.json` (each cycle in the `check` JSON format, and a
summary) and the terminal summary.

Times between cycles are attributed to the earlier one: a topic over its time quota at
one cycle is counted over it until the next (the last cycle counts the median interval).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from itertools import pairwise

HOLDING = ("producer_request_hold", "producer_exception")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _spans(nows: Sequence[float]) -> list[float]:
    gaps = [b - a for a, b in pairwise(nows)]
    return [*gaps, statistics.median(gaps) if gaps else 0.0]


def _ratio(topic: Mapping) -> float:
    """How close a topic came to its quota: the larger of age/time limit and size/limit."""
    ratios = [0.0]
    if topic.get("limit_time_seconds") and topic.get("backlog_age_seconds") is not None:
        ratios.append(topic["backlog_age_seconds"] / topic["limit_time_seconds"])
    limit = topic.get("limit_size_bytes")
    if limit and limit > 0 and topic.get("backlog_size_bytes") is not None:
        ratios.append(topic["backlog_size_bytes"] / limit)
    return max(ratios)


def summarize(cycles: Sequence[Mapping], nows: Sequence[float], *, allocator: str) -> dict:
    """The summary of replayed cycles (`cycles`: their status documents, `nows`: their
    clocks)."""
    evictions: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    first_eviction: dict[str, dict[str, int]] = defaultdict(dict)
    over: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    holds: dict[str, float] = defaultdict(float)
    closest: dict[str, float] = {}
    groups = []
    for index, (doc, span) in enumerate(zip(cycles, _spans(nows), strict=True)):
        for t in doc["topics"]:
            name = t["topic"]
            closest[name] = max(closest.get(name, 0.0), _ratio(t))
            for quota_type in t["exceeded"]:
                over[name][quota_type] += span
            if t["action"] in HOLDING and t["exceeded"]:
                holds[name] += span
            if t["action"] == "consumer_backlog_eviction":
                for cut in t["evict"] or ():
                    evictions[name][cut["quota_type"]] += 1
                    first_eviction[name].setdefault(cut["quota_type"], index)
        for g in doc["resource_groups"]:
            groups.append({"cycle": index, "checked_at": doc["checked_at"],
                           "resource_group": g["resource_group"],
                           "monitoring_class": g["monitoring_class"], "quota": g["quota"],
                           "usage": g["usage"], "local_quota": g["local_quota"],
                           "peers": g["peers"]})
    ranked = sorted(closest.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "cycles": len(cycles),
        "from": _iso(nows[0]) if nows else None,
        "to": _iso(nows[-1]) if nows else None,
        "allocator": allocator,
        "evictions": {t: dict(sorted(by.items())) for t, by in sorted(evictions.items())},
        "first_eviction_cycle": {t: dict(sorted(by.items()))
                                 for t, by in sorted(first_eviction.items())},
        "seconds_over_quota": {t: {q: round(s, 3) for q, s in sorted(by.items())}
                               for t, by in sorted(over.items())},
        "producer_hold_seconds": {t: round(s, 3) for t, s in sorted(holds.items())},
        "closest_to_quota": [{"topic": t, "ratio": round(r, 4)} for t, r in ranked[:10]],
        "resource_group_rounds": groups,
    }


def terminal(summary: Mapping, out: str) -> str:
    """A few lines for the terminal."""
    lines = [f"replayed {summary['cycles']} cycles, {summary['from']} to {summary['to']} "
             f"(allocator {summary['allocator']})"]
    evictions = summary["evictions"]
    if evictions:
        total = sum(sum(v.values()) for v in evictions.values())
        lines.append(f"evictions that would have happened: {total} on {len(evictions)} "
                     "topic(s)")
        for topic, by in list(evictions.items())[:5]:
            kinds = ", ".join(f"{q} ×{n}" for q, n in by.items())
            lines.append(f"  {topic}: {kinds}")
    else:
        lines.append("no evictions would have happened")
    if summary["producer_hold_seconds"]:
        worst = max(summary["producer_hold_seconds"].items(), key=lambda kv: kv[1])
        lines.append(f"producers held on {len(summary['producer_hold_seconds'])} topic(s); "
                     f"longest {worst[0]}: {worst[1]:.0f}s")
    if summary["closest_to_quota"]:
        top = summary["closest_to_quota"][0]
        lines.append(f"closest to its quota: {top['topic']} at {top['ratio']:.0%}")
    lines.append(f"report: {out}/report.html, {out}/report.json")
    return "\n".join(lines)
