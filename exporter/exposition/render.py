"""A cycle's `MetricSet` as the /metrics body: Prometheus' text format 0.0.4, and
OpenMetrics 1.0.0 from it.

Rendering is hand-written string building, because prometheus-client's `generate_latest`
is several times slower (`tests.bench.scrape_latency`); Arrow's string kernels joining label
columns were slower than the templates too: Python's strings cost more to convert than to
format (docs/design.md, "Publishing the decisions"). Lines are joined and encoded in batches
into one buffer handed over without a copy: rendered as one list joined into one str, then
encoded, the body was held three times over at its peak.
"""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from exporter.catalogue import Metric, MetricType
from exporter.exposition.metricset import ExpositionError, HistogramValue, Labels, MetricSet
from exporter.pulsarnames import LABEL_NAME, METRIC_NAME

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def format_value(v: float) -> str:
    """Go-compatible sample value: `+Inf`, `-Inf`, `NaN`; integral values without `.0`;
    everything else as Python's shortest round-trip repr (exact when parsed back)."""
    if v != v:
        return "NaN"
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v.is_integer() and -1e15 < v < 1e15:
        return str(int(v))
    return repr(v)


def _format_bound(b: float) -> str:
    """`le` values as the Java and Python clients write them ("1.0"), i.e. like the broker."""
    return "+Inf" if b == math.inf else repr(float(b))


def escape_label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _fold_topic(labels: Labels, series: Mapping) -> tuple[Labels, dict]:
    """Sum series over the `topic` label: the namespace-level aggregate Pulsar publishes when
    topic-level metrics are off."""
    i = labels.index("topic")
    folded: dict = {}
    for key, value in series.items():
        k = key[:i] + key[i + 1:]
        prev = folded.get(k)
        if prev is None:
            folded[k] = value
        elif isinstance(value, HistogramValue):
            folded[k] = HistogramValue(
                prev.bounds, tuple(a + b for a, b in zip(prev.counts, value.counts, strict=True)),
                prev.sum + value.sum, prev.count + value.count)
        else:
            folded[k] = prev + value
    return labels[:i] + labels[i + 1:], folded


class _Body:
    """The body as it is rendered: lines gathered as str and written out as UTF-8 every
    `BATCH` lines, so that at most a batch of them is held twice."""

    BATCH = 8192
    __slots__ = ("_out", "lines")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._out = io.BytesIO()

    def flush(self) -> None:
        self._out.write("".join(self.lines).encode("utf-8"))
        self.lines.clear()

    def value(self, trailer: bytes) -> bytes:
        self.flush()
        self._out.write(trailer)
        return self._out.getvalue()  # BytesIO hands its buffer over: no copy


# The names a compiled line writer may hold: the text format's own (the catalogue's all fit).
_METRIC_NAME, _LABEL_NAME = re.compile(METRIC_NAME), re.compile(LABEL_NAME)
LineWriter = Callable[[Sequence[Labels], Sequence[str]], list[str]]


@functools.cache
def _line_writer(name: str, labels: Labels) -> LineWriter:
    """A function writing a family's lines from label values (escaped) and values (as
    text): one f-string compiled for the family, as `dataclasses` compiles an `__init__`.
    CPython builds an f-string's pieces in one step, where `template % (...)` parses its
    template and packs a tuple every line, twice the time a line
    (docs/design.md, "Publishing the decisions").
    Only names of the text format's grammar are compiled in, so nothing else can be code."""
    if not _METRIC_NAME.fullmatch(name) or not all(map(_LABEL_NAME.fullmatch, labels)):
        raise ExpositionError(f"{name}{{{','.join(labels)}}}: not a metric or label name")
    pairs = ",".join(f'{label}="{{k{i}}}"' for i, label in enumerate(labels))
    keys = "".join(f"k{i}," for i in range(len(labels)))
    source = (f"lambda keys, values: [f'{name}{{{{{pairs}}}}} {{v}}\\n' "
              f"for ({keys}), v in zip(keys, values, strict=True)]")
    return eval(source, {})  # only grammar-checked names are compiled in


def _render_samples(body: _Body, name: str, labels: Labels,
                    series: Mapping[Labels, float]) -> None:
    """A family's lines, a batch at a time: its label values searched for characters to
    escape in one string, its values formatted inline (`format_value` but for NaN and the
    infinities), its lines written by `_line_writer`: at 100k topics a call, a search and a
    `%` a series were most of the render."""
    fmt, batch, inf = format_value, _Body.BATCH, math.inf
    if not labels:
        body.lines += [f"{name} {fmt(value)}\n" for value in series.values()]
        return
    lines = _line_writer(name, labels)
    keys, values = list(series), list(series.values())
    for at in range(0, len(keys), batch):
        some, joined = keys[at:at + batch], "".join(chain.from_iterable(keys[at:at + batch]))
        if "\\" in joined or '"' in joined or "\n" in joined:
            some = [tuple(map(escape_label_value, key)) for key in some]
        body.lines += lines(some, [
            str(int(v)) if v.is_integer() and -1e15 < v < 1e15
            else repr(v) if -inf < v < inf else fmt(v) for v in values[at:at + batch]])
        body.flush()


def _render_histograms(body: _Body, name: str, labels: Labels,
                       series: Mapping[Labels, HistogramValue]) -> None:
    fmt, append = format_value, body.lines.append
    for i, (key, h) in enumerate(series.items(), 1):
        pairs = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(labels, key, strict=True))
        braces = "{" + pairs + "}" if pairs else ""
        bucket = f"{name}_bucket{{{pairs}{',' if pairs else ''}le=\""
        for b, c in zip(h.bounds, h.counts, strict=True):
            append(f'{bucket}{_format_bound(b)}"}} {fmt(float(c))}\n')
        append(f'{bucket}+Inf"}} {fmt(float(h.count))}\n')
        append(f"{name}_sum{braces} {fmt(float(h.sum))}\n")
        append(f"{name}_count{braces} {fmt(float(h.count))}\n")
        if not i % 1024:  # a dozen lines a series
            body.flush()


def _families(metric_set: MetricSet, topic_level: bool) -> Iterator[tuple[Metric, Labels, Mapping]]:
    for name, metric in metric_set.metrics.items():
        hist = metric.type is MetricType.HISTOGRAM
        series = (metric_set.histograms if hist else metric_set.samples).get(name)
        if not series:
            continue
        labels = metric.labels
        if not topic_level and metric.topic_level:
            if not metric.namespace_fallback:
                continue
            labels, series = _fold_topic(labels, series)
        yield metric, labels, series


def render(metric_set: MetricSet, *, topic_level: bool, trailer: bytes = b"") -> bytes:
    """The whole /metrics body, then `trailer` (text already rendered: the process's own
    series). Families follow catalogue order, series insertion order; empty families are
    left out. With `topic_level=False` series with a `topic` label are dropped, and
    `namespace_fallback` metrics are summed per namespace instead."""
    body = _Body()
    for metric, labels, series in _families(metric_set, topic_level):
        name = metric.name
        body.lines.append(
            f"# HELP {name} {escape_help(metric.help)}\n# TYPE {name} {metric.type}\n")
        if metric.type is MetricType.HISTOGRAM:
            _render_histograms(body, name, labels, series)
        else:
            _render_samples(body, name, labels, series)
    return body.value(trailer)


# The process's own metrics, as every Prometheus client library exports them (CPU, memory,
# file descriptors, start time; python_info): prometheus-client's collectors, kept in a
# registry of their own, since the rest of the body is rendered from the catalogue.
_PROCESS = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=_PROCESS)
PlatformCollector(registry=_PROCESS)


def process_body() -> bytes:
    """This process's `process_*` and `python_info` series, text format 0.0.4."""
    return generate_latest(_PROCESS)


# OpenMetrics names a counter family without `_total` and an info family without `_info`
# (their samples keep the suffix: the samples are the same bytes), and escapes `"` in HELP.
_SUFFIXED_FAMILY = re.compile(rb"^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*?)(_total|_info) (.*)\n"
                              rb"# TYPE \1\2 (counter|gauge)$", re.MULTILINE)
_HELP = re.compile(rb"^(# HELP [a-zA-Z_:][a-zA-Z0-9_:]* )(.*)$", re.MULTILINE)
_HELP_ESCAPE = re.compile(rb'\\.|"')


def _family(m: re.Match[bytes]) -> bytes:
    name, suffix, text, kind = m.groups()
    if (suffix, kind) not in ((b"_total", b"counter"), (b"_info", b"gauge")):
        return m.group(0)
    om_kind = b"counter" if kind == b"counter" else b"info"
    return b"# HELP " + name + b" " + text + b"\n# TYPE " + name + b" " + om_kind


def _header(lines: bytes) -> bytes:
    """A family's `# HELP …` line and the line after it, as OpenMetrics writes them."""
    lines = _SUFFIXED_FAMILY.sub(_family, lines)
    return _HELP.sub(lambda m: m.group(1) + _HELP_ESCAPE.sub(
        lambda e: b'\\"' if e.group() == b'"' else e.group(), m.group(2)), lines)


def openmetrics(body: bytes) -> bytes:
    """A text-format 0.0.4 body (ours and prometheus-client's: each family's HELP line
    right before its TYPE line) as OpenMetrics 1.0.0, ending in `# EOF`. Only the families'
    header lines differ, so only they are rewritten: found by a byte search (no sample line
    starts with `#`), the samples between them copied once, as they are."""
    pieces: list[bytes | memoryview] = []
    view = memoryview(body)
    copied = 0
    at = 0 if body.startswith(b"# HELP ") else _next_help(body, 0)
    while at >= 0:
        help_end = body.find(b"\n", at)
        end = body.find(b"\n", help_end + 1) if help_end >= 0 else -1
        end = len(body) if end < 0 else end
        pieces += [view[copied:at], _header(body[at:end])]
        copied = end
        at = _next_help(body, end)
    pieces += [view[copied:], b"# EOF\n"]
    return b"".join(pieces)


def _next_help(body: bytes, start: int) -> int:
    """Where the next line starting `# HELP ` begins, at or after `start`; -1: none."""
    found = body.find(b"\n# HELP ", start)
    return found + 1 if found >= 0 else -1
