"""The JSON view of one cycle: `/api/v1/status` and `check --format json` (schema in README)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from exporter.engine.backlog.check import TopicDecision
from exporter.engine.decide import Decisions, GroupResult
from exporter.exposition.build_topics import published_rows
from exporter.sources.results import SourceHealth


def _num(v: float | None) -> float | int | None:
    if v is None or not math.isfinite(v):
        return None
    return int(v) if float(v).is_integer() else round(v, 3)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def topic_view(d: TopicDecision) -> dict[str, object]:
    evict = [{"subscription": s.subscription, "quota_type": "size", "messages": s.skip_messages}
             for s in d.plan.size]
    evict += [{"subscription": t.subscription, "quota_type": "time",
               "before_publish_time": _iso(t.cutoff)} for t in d.plan.time]
    return {
        "topic": d.topic,
        "namespace": d.namespace,
        "backlog_messages": d.backlog_messages,
        "backlog_size_bytes": _num(d.backlog_bytes),
        "backlog_age_seconds": _num(d.backlog_age_seconds),
        "backlog_age_source": d.time_source.value if d.time_source else None,
        "oldest_subscription": d.holder,
        "policy": d.quota.policy.value,
        "quota_source": d.quota_source.value,
        "limit_sources": ({"size": d.limits.size.origin, "time": d.limits.time.origin}
                          if d.limits else None),
        "limit_size_bytes": d.quota.limit_size,
        "limit_time_seconds": _num(d.quota.limit_time),
        "exceeded": sorted(q.value for q in d.exceeded),
        "action": d.action.value,
        "evict": evict or None,
    }


def group_view(g: GroupResult) -> dict[str, object]:
    def usage(u):
        return None if u is None else {"messages_per_second": _num(u.messages),
                                       "bytes_per_second": _num(u.bytes)}

    return {
        "resource_group": g.resource_group,
        "monitoring_class": g.monitoring_class.value,
        "quota": usage(g.quota),
        "usage": usage(g.usage),
        "cluster_usage": usage(g.cluster_usage),
        "local_quota": usage(g.local_quota),
        "peers": {p: usage(u) for p, u in sorted(g.peers.items())},
        "throttle_delay_seconds": _num(g.throttle.delay_seconds) if g.throttle else None,
    }


def source_view(h: SourceHealth) -> dict[str, object]:
    return {
        "url": h.source,
        "kind": h.kind.value,
        "up": h.up,
        "error": None if h.up else (h.last_error_detail or (h.last_error and h.last_error.value)),
        "last_success": _iso(h.last_success) if h.last_success else None,
    }


# The most topics one document lists, whatever `filters.max_topics` says: a view is a dict
# made for each topic, on an HTTP thread, and kept with the publication, so an uncapped
# fleet would make the first status request of each cycle cost time and memory in
# proportion to the whole fleet (docs/design.md has the figures).
STATUS_TOPICS = 10_000


def view(cluster: str, checked_at: float, decisions: Decisions | None,
         health: Iterable[SourceHealth], stage_seconds: Mapping[str, float] | None = None,
         max_topics: int | None = None) -> dict[str, object]:
    """The document, its topics by name: those /metrics publishes under `filters.max_topics`
    (`published_topics`), at most STATUS_TOPICS of them, chosen as `max_topics` chooses
    (over a quota first, then the oldest and largest backlogs); `topics_dropped` counts the
    rest whenever a topic is left out."""
    listed: list = []
    if decisions:
        cap = STATUS_TOPICS if max_topics is None else min(max_topics, STATUS_TOPICS)
        rows = published_rows(decisions.topics, cap)
        listed = list(decisions.topics) if rows is None else [
            decisions.topics[k] for k in rows[:STATUS_TOPICS]]
    doc: dict[str, object] = {
        "cluster": cluster,
        "checked_at": _iso(checked_at),
        "sources": [source_view(h) for h in health],
        "stage_seconds": {k: round(v, 4) for k, v in (stage_seconds or {}).items()},
        "topics": [topic_view(d) for d in sorted(listed, key=lambda d: d.topic)],
    }
    dropped = len(decisions.topics) - len(listed) if decisions else 0
    if max_topics is not None or dropped:
        doc["topics_dropped"] = dropped
    doc["resource_groups"] = [group_view(g) for g in decisions.groups] if decisions else []
    return doc
