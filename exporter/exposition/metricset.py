"""One cycle's samples (`MetricSet`), checked against the catalogue as they are added
(`MetricSetBuilder`); exposition/render.py writes them out as the /metrics body.

The check loop fills a `MetricSetBuilder`, freezes it, and renders the body once per cycle;
scrapes only serve the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, product
from types import MappingProxyType

from exporter.catalogue import CATALOGUE, Metric, MetricType

Labels = tuple[str, ...]

class ExpositionError(ValueError):
    """A sample that does not fit the catalogue: a bug in the caller, so it fails loudly."""


@dataclass(frozen=True, slots=True)
class HistogramValue:
    """Cumulative histogram state: `counts[i]` observations ≤ `bounds[i]`; +Inf is `count`.

    Immutable so the loop can keep the lifetime value between cycles and hand the same object
    to each cycle's builder.
    """

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds):
            raise ExpositionError(f"{len(self.counts)} counts for {len(self.bounds)} buckets")
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ExpositionError(f"bucket bounds not strictly ascending: {self.bounds}")
        previous = 0.0
        for c in (*self.counts, self.count):
            if not c >= previous:  # also rejects NaN
                raise ExpositionError(f"bucket counts not cumulative: {self.counts}, {self.count}")
            previous = c

    @classmethod
    def empty(cls, bounds: Sequence[float]) -> HistogramValue:
        return cls(tuple(bounds), (0.0,) * len(bounds))

    def observe(self, value: float) -> HistogramValue:
        """A new value with one more observation (NaN lands only in +Inf, like client_golang)."""
        pairs = zip(self.bounds, self.counts, strict=True)
        counts = tuple(c + 1 if value <= b else c for b, c in pairs)
        return HistogramValue(self.bounds, counts, self.sum + value, self.count + 1)


@dataclass(frozen=True, eq=False)
class MetricSet:
    """A finished cycle's samples, keyed by catalogue name then by label values in catalogue
    label order. Built only by `MetricSetBuilder`, which validated every key."""

    metrics: Mapping[str, Metric]
    samples: Mapping[str, Mapping[Labels, float]]
    histograms: Mapping[str, Mapping[Labels, HistogramValue]]

    def __len__(self) -> int:
        """Number of series (a histogram's label set counts once)."""
        return sum(map(len, self.samples.values())) + sum(map(len, self.histograms.values()))

    def value(self, name: str, labels: Labels) -> float | HistogramValue | None:
        """The sample for one series, or None when the series is absent."""
        table = self.histograms if name in self.histograms else self.samples
        return table.get(name, {}).get(labels)


class MetricSetBuilder:
    """Mutable, single-use collector for one cycle; `build()` hands its tables over without a
    copy, after which the builder refuses further use."""

    def __init__(self, catalogue: Sequence[Metric] = CATALOGUE) -> None:
        self._metrics: dict[str, Metric] = {m.name: m for m in catalogue}
        self._samples: dict[str, dict[Labels, float]] = {}
        self._histograms: dict[str, dict[Labels, HistogramValue]] = {}
        self._seeds: dict[str, list[Labels]] = {}
        self._built = False
        # Each counter's and gauge's label count: `add`, called for every series (~4 a
        # topic), checks what `_check` does without three calls a sample.
        self._arity = {m.name: len(m.labels) for m in catalogue
                       if m.type is not MetricType.HISTOGRAM}

    # --- samples ---------------------------------------------------------------------------
    def add(self, name: str, labels: Labels, value: float) -> None:
        """One counter or gauge sample; a series may be added once per cycle."""
        fits = not self._built and type(labels) is tuple \
            and len(labels) == self._arity.get(name, -1)
        if fits:
            for v in labels:
                if type(v) is not str:
                    fits = False
                    break
        if not fits:
            self._check(name, labels, histogram=False)  # raises, saying what does not fit
        table = self._samples.get(name)
        if table is None:
            table = self._samples[name] = {}
        elif labels in table:
            raise ExpositionError(f"{name}{_show(self._metrics[name], labels)}: added twice")
        table[labels] = float(value)

    def add_all(self, name: str, keys: Sequence[Labels], values: Sequence[float]) -> None:
        """`add` of many series of one family: a family of every topic is checked as a whole,
        by C loops over the keys (`_check_all`), not by a call a series."""
        self._check_all(name, keys)
        if len(keys) != len(values):
            raise ExpositionError(f"{name}: {len(keys)} series, {len(values)} values")
        table = self._samples.setdefault(name, {})
        had = len(table)
        table.update(zip(keys, map(float, values), strict=True))
        if len(table) != had + len(keys):
            raise ExpositionError(f"{name}: a series added twice")

    def _check_all(self, name: str, keys: Sequence[Labels]) -> None:
        """`_check` of a counter's or gauge's label sets, as a whole: `set(map(...))` runs
        in C; a key that does not fit is then found one by one, and named."""
        self._assert_open()
        arity = self._arity.get(name)
        if arity is None:
            self._check(name, (), histogram=False)  # raises: not in the catalogue, or a histogram
        if not (set(map(type, keys)) <= {tuple} and set(map(len, keys)) <= {arity}
                and set(map(type, chain.from_iterable(keys))) <= {str}):
            for labels in keys:
                self._check(name, labels, histogram=False)  # raises, saying what does not fit

    def observe_histogram(self, name: str, labels: Labels, value: float) -> None:
        """Record one observation into this cycle's value of a histogram series."""
        metric = self._check(name, labels, histogram=True)
        table = self._histograms.setdefault(name, {})
        current = table.get(labels) or HistogramValue.empty(metric.buckets)
        table[labels] = current.observe(float(value))

    def set_histogram(self, name: str, labels: Labels, value: HistogramValue) -> None:
        """Publish a histogram's whole (lifetime, cumulative) state for one series."""
        metric = self._check(name, labels, histogram=True)
        if value.bounds != metric.buckets:
            raise ExpositionError(f"{name}: buckets {value.bounds} != catalogue {metric.buckets}")
        table = self._histograms.setdefault(name, {})
        if labels in table:
            raise ExpositionError(f"{name}{_show(metric, labels)}: set twice")
        table[labels] = value

    # --- zero seeding ------------------------------------------------------------------------
    def seed(self, name: str, /, **labels: str) -> None:
        """Make the series exist at 0 unless added: for every combination of the metric's
        `known_values` for the labels not given. Seeds never override an added sample."""
        metric = self._metric(name)
        if metric.type is MetricType.HISTOGRAM:
            raise ExpositionError(f"{name}: histograms are seeded with set_histogram")
        unknown = set(labels) - set(metric.labels)
        if unknown:
            raise ExpositionError(f"{name}: no label(s) {sorted(unknown)}")
        axes: list[tuple[str, ...]] = []
        for label in metric.labels:
            if label in labels:
                axes.append((labels[label],))
            elif label in metric.known_values:
                axes.append(tuple(metric.known_values[label]))
            else:
                raise ExpositionError(f"{name}: label {label!r} has no known values; give it")
        keys = [tuple(k) for k in product(*axes)]
        for key in keys:
            self._check(name, key, histogram=False)
        self._seeds.setdefault(name, []).extend(keys)

    def seed_all(self, name: str, keys: Sequence[Labels]) -> None:
        """`seed` of whole label sets, known values included: the eviction counters of every
        topic whose policy evicts, where a `seed` call a topic was too slow at a large fleet
        (docs/design.md, "Publishing the decisions")."""
        self._check_all(name, keys)
        self._seeds.setdefault(name, []).extend(keys)

    def seed_counters(self, **labels: str) -> None:
        """Seed every counter whose labels are fully determined by `labels` plus its known
        values, e.g. `seed_counters(cluster=c)` for the cluster-wide counters and
        `seed_counters(cluster=c, source=s)` for one source's error counters too."""
        for metric in self._metrics.values():
            if metric.type is not MetricType.COUNTER:
                continue
            if all(lb in labels or lb in metric.known_values for lb in metric.labels):
                given = {lb: labels[lb] for lb in metric.labels if lb in labels}
                self.seed(metric.name, **given)

    def build(self) -> MetricSet:
        self._assert_open()
        self._built = True
        for name, keys in self._seeds.items():
            table = self._samples.setdefault(name, {})
            for key in keys:
                table.setdefault(key, 0.0)
        ordered = {n: m for n, m in self._metrics.items()}
        return MetricSet(
            MappingProxyType(ordered),
            MappingProxyType(self._samples),
            MappingProxyType(self._histograms),
        )

    # --- validation ----------------------------------------------------------------------
    def _assert_open(self) -> None:
        if self._built:
            raise ExpositionError("builder already built; start a new one per cycle")

    def _metric(self, name: str) -> Metric:
        self._assert_open()
        metric = self._metrics.get(name)
        if metric is None:
            raise ExpositionError(f"{name}: not in the catalogue")
        return metric

    def _check(self, name: str, labels: Labels, *, histogram: bool) -> Metric:
        metric = self._metric(name)
        if (metric.type is MetricType.HISTOGRAM) != histogram:
            raise ExpositionError(f"{name}: is a {metric.type}")
        if type(labels) is not tuple or len(labels) != len(metric.labels):
            raise ExpositionError(f"{name}: labels must be a tuple of {metric.labels}, "
                                  f"got {labels!r}")
        for v in labels:
            if type(v) is not str:
                raise ExpositionError(f"{name}: label value {v!r} is not a str")
        return metric


def _show(metric: Metric, labels: Labels) -> str:
    return "{" + ",".join(f"{n}={v!r}" for n, v in zip(metric.labels, labels, strict=False)) + "}"
