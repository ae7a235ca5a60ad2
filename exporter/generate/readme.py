"""The README's metric table, rendered from the catalogue between two marker lines."""

from __future__ import annotations

from exporter.catalogue import CATALOGUE, Domain

BEGIN = "<!-- BEGIN GENERATED METRIC TABLE (pulsar-quota-exporter generate) -->"
END = "<!-- END GENERATED METRIC TABLE -->"

_TITLES = {
    Domain.BACKLOG: "Backlog quotas (PIP-323)",
    Domain.RESOURCE_GROUPS: "Resource groups (PIP-82)",
    Domain.LOAD: "Load",
    Domain.EXPORTER: "Exporter health",
}


def metric_table() -> str:
    lines = [BEGIN]
    for domain, title in _TITLES.items():
        lines += ["", f"#### {title}", "", "| metric | type | labels | unit | help |",
                  "| --- | --- | --- | --- | --- |"]
        for m in CATALOGUE:
            if m.domain is not domain:
                continue
            name = f"`{m.name}`" + (" ¹" if m.pulsar else "")
            labels = ", ".join(m.labels)
            help_ = m.help.replace("|", "\\|")
            unit = m.unit.value or "—"
            lines.append(f"| {name} | {m.type.value} | {labels} | {unit} | {help_} |")
    lines += ["", "¹ Same name and labels as the Apache Pulsar broker's metric.", END]
    return "\n".join(lines)


def update(readme_text: str) -> str:
    """Replace the table between the markers; the markers must exist exactly once."""
    head, sep, rest = readme_text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError("README.md lacks the generated-table markers")
    return head + metric_table() + tail
