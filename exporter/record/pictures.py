"""The replay's pictures (PNG, matplotlib) and `report.html`, which bundles them with the
summary's tables for a browser. matplotlib is the `replay` extra: `pip install
'pulsar-quota-exporter[replay]'`; without it the report is JSON only and says so."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from exporter.config.settings import Allocator, Config
from exporter.record.store import RecordedCycle

TOPICS_PLOTTED = 5
GROUPS_PLOTTED = 6  # group × class rows of the allocator comparison


def _times(nows: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t, UTC) for t in nows]


def _series(docs: Sequence[Mapping], topic: str, key: str) -> list[float | None]:
    out = []
    for doc in docs:
        row = next((t for t in doc["topics"] if t["topic"] == topic), None)
        out.append(None if row is None else row.get(key))
    return out


def _backlog_plot(plt, path: Path, docs, nows, topics, value: str, limit: str, unit: str):
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    times = _times(nows)
    for index, topic in enumerate(topics):
        color = f"C{index}"
        ax.plot(times, [v if v is not None else float("nan")
                        for v in _series(docs, topic, value)], color=color, label=topic)
        limits = _series(docs, topic, limit)
        if any(v for v in limits):
            ax.plot(times, [v if v else float("nan") for v in limits], color=color,
                    linestyle="--", linewidth=1)
    ax.set_ylabel(unit)
    ax.set_title(f"{value.replace('_', ' ')} (dashed: its limit)")
    ax.legend(fontsize="small", loc="upper left")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _group_plot(plt, path: Path, runs: Mapping[str, Sequence[Mapping]], nows) -> bool:
    """Usage and local quota per group and class (rows, at most GROUPS_PLOTTED), one column
    per allocator."""
    groups = sorted({(g["resource_group"], g["monitoring_class"])
                     for docs in runs.values() for d in docs for g in d["resource_groups"]})
    if not groups:
        return False
    groups = groups[:GROUPS_PLOTTED]
    fig, axes = plt.subplots(len(groups), len(runs), figsize=(5 * len(runs), 3.2 * len(groups)),
                             dpi=100, sharey="row", squeeze=False)
    times = _times(nows)
    for row, (group, cls) in zip(axes, groups, strict=True):
        for ax, (allocator, docs) in zip(row, runs.items(), strict=True):
            usage, local = [], []
            for d in docs:
                g = next((x for x in d["resource_groups"]
                          if (x["resource_group"], x["monitoring_class"]) == (group, cls)), None)
                usage.append((g["usage"] or {}).get("messages_per_second") if g else None)
                local.append((g["local_quota"] or {}).get("messages_per_second") if g else None)
            ax.plot(times, [v if v is not None else float("nan") for v in usage], label="usage")
            ax.plot(times, [v if v is not None else float("nan") for v in local],
                    linestyle="--", label="local quota")
            ax.set_title(f"{group} {cls}: {allocator}", fontsize="medium")
            ax.set_ylabel("messages/s")
            ax.legend(fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_pictures(out: Path, docs: Sequence[Mapping], nows: Sequence[float],
                   summary: Mapping, config: Config, cycles: Sequence[RecordedCycle],
                   tables) -> list[str]:
    """The PNGs and report.html; the file names written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        (out / "report.html").write_text(_page(summary, [], note=(
            "matplotlib is not installed: pip install 'pulsar-quota-exporter[replay]' "
            "for the pictures.")))
        return ["report.html"]
    topics = [c["topic"] for c in summary["closest_to_quota"][:TOPICS_PLOTTED]]
    images = []
    if topics:
        _backlog_plot(plt, out / "backlog_age.png", docs, nows, topics,
                      "backlog_age_seconds", "limit_time_seconds", "seconds")
        _backlog_plot(plt, out / "backlog_size.png", docs, nows, topics,
                      "backlog_size_bytes", "limit_size_bytes", "bytes")
        images += ["backlog_age.png", "backlog_size.png"]
    if any(d["resource_groups"] for d in docs):
        from exporter.record.replay import replay_cycles

        runs = {}
        for allocator in Allocator:
            engine = dataclasses.replace(config.resource_group_engine, allocator=allocator)
            what = dataclasses.replace(config, resource_group_engine=engine)
            runs[allocator.value] = (docs if allocator is config.resource_group_engine.allocator
                                     else [r.status for r in replay_cycles(what, cycles, tables)])
        if _group_plot(plt, out / "resource_groups.png", runs, nows):
            images.append("resource_groups.png")
    (out / "report.html").write_text(_page(summary, images))
    return [*images, "report.html"]


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(summary: Mapping, images: Sequence[str], note: str = "") -> str:
    evictions = [(t, q, n, summary["first_eviction_cycle"][t][q])
                 for t, by in summary["evictions"].items() for q, n in by.items()]
    over = [(t, q, s) for t, by in summary["seconds_over_quota"].items() for q, s in by.items()]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>pulsar-quota-exporter replay</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
        "img{max-width:100%;display:block;margin:1em 0}</style></head><body>",
        "<h1>Replay</h1>",
        f"<p>{summary['cycles']} cycles from {summary['from']} to {summary['to']}, "
        f"allocator {html.escape(summary['allocator'])}.</p>",
        f"<p class='note'>{html.escape(note)}</p>" if note else "",
        "<h2>Evictions that would have happened</h2>",
        _table(("topic", "quota type", "cycles", "first at cycle"), evictions)
        if evictions else "<p>None.</p>",
        "<h2>Time over quota</h2>",
        _table(("topic", "quota type", "seconds"), over) if over else "<p>None.</p>",
        "<h2>Closest to their quotas</h2>",
        _table(("topic", "share of the quota"),
               [(c["topic"], f"{c['ratio']:.0%}") for c in summary["closest_to_quota"]]),
        *(f"<img src='{html.escape(i)}' alt='{html.escape(i)}'>" for i in images),
        # for a headless browser's check: how many pictures actually decoded
        "<script>window.addEventListener('load',()=>{document.body.dataset.imagesLoaded="
        "[...document.images].filter(i=>i.complete&&i.naturalWidth>0).length})</script>",
        "</body></html>",
    ]
    return "\n".join(parts)
