"""What a scraper asked for: RFC 9110 `Accept` and `Accept-Encoding`, as the /metrics
handler needs them (a format and whether to gzip). Absent or unparsable headers mean the
defaults (text 0.0.4, identity), so a plain `curl` gets what it always got."""

from __future__ import annotations

OPENMETRICS = "application/openmetrics-text"


def _qualities(header: str | None) -> dict[str, float]:
    """media-range or coding (lower case) → its q, the first entry of each winning."""
    out: dict[str, float] = {}
    for part in (header or "").split(","):
        item, *params = (p.strip() for p in part.split(";"))
        if not item:
            continue
        q = 1.0
        for p in params:
            name, _, value = p.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        out.setdefault(item.lower(), q)
    return out


def accepts_gzip(header: str | None) -> bool:
    """Accept-Encoding: an explicit gzip entry decides, else `*`; q=0 refuses."""
    verdicts = _qualities(header)
    for coding in ("gzip", "x-gzip", "*"):
        if coding in verdicts:
            return verdicts[coding] > 0
    return False


def prefers_openmetrics(header: str | None) -> bool:
    """Accept: OpenMetrics when it is asked for with a q at least that of the classic text
    format (Prometheus ≥ 2.5 sends OpenMetrics 1.0.0 first, text 0.0.4 at q=0.5)."""
    wanted = _qualities(header)
    om = wanted.get(OPENMETRICS, 0.0)
    text = max(wanted.get("text/plain", 0.0), wanted.get("text/*", 0.0),
               wanted.get("*/*", 0.0))
    return om > 0 and om >= text
