"""The /metrics body: valid text format 0.0.4 (promtool and prometheus-client's parser agree),
values exact, catalogue HELP/TYPE, zero-seeded counters, topic-level switch, and fast."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from itertools import product
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import BY_NAME, CATALOGUE, Domain, Metric, MetricType, Unit
from exporter.exposition.metricset import ExpositionError, HistogramValue, MetricSetBuilder
from exporter.exposition.render import _line_writer, format_value, render

AGE = "pulsar_storage_backlog_age_seconds"
EVICTIONS = "pulsar_storage_backlog_quota_exceeded_evictions_total"
WOULD_EVICT = "pulsar_storage_backlog_quota_would_evict_total"
CHECK = "pulsar_storage_backlog_quota_check_duration_seconds"
SCRAPE_ERRORS = "pulsar_quota_exporter_source_scrape_errors_total"
PEERS = "pulsar_quota_exporter_usage_peers"

label_text = st.text(max_size=12)  # any Unicode (no surrogates), incl. \\ " \n
any_float = st.floats(allow_nan=True, allow_infinity=True)


def parse(body: bytes) -> dict[tuple[str, tuple], float]:
    """Every sample as (sample name, sorted labels) -> value, via prometheus-client."""
    out: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def check_metrics(promtool: str) -> Callable[[bytes], subprocess.CompletedProcess]:
    """`promtool check metrics` of a body."""

    def check(body: bytes) -> subprocess.CompletedProcess:
        return subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                              timeout=60, check=False)

    return check


def full_set(extra_label: str = "v"):
    """One series for every catalogue metric (label values with characters to escape)."""
    b = MetricSetBuilder()
    expected = {}
    for i, m in enumerate(CATALOGUE):
        labels = tuple(f'{extra_label}-{lb}\\"\n{i}' for lb in m.labels)
        if m.type is MetricType.HISTOGRAM:
            h = HistogramValue.empty(m.buckets).observe(0.02).observe(7.5)
            b.set_histogram(m.name, labels, h)
            expected[m.name] = (labels, h)
        else:
            b.add(m.name, labels, i + 0.5)
            expected[m.name] = (labels, i + 0.5)
    return b, expected


# --- round trips ---------------------------------------------------------------------------
@given(st.dictionaries(st.tuples(label_text, label_text, label_text), any_float, max_size=8))
def test_label_values_and_floats_round_trip_exactly(series):
    b = MetricSetBuilder()
    for key, value in series.items():
        b.add(AGE, key, value)
    got = parse(render(b.build(), topic_level=True))
    assert len(got) == len(series)
    for (c, ns, t), value in series.items():
        key = (AGE, tuple(sorted({"cluster": c, "namespace": ns, "topic": t}.items())))
        assert same(got[key], value), (key, got[key], value)


@given(any_float)
def test_format_value_parses_back_to_the_same_float(v):
    text = format_value(v)
    assert same(float(text), v)


def test_special_float_spellings():
    assert [format_value(v) for v in (math.inf, -math.inf, math.nan)] == ["+Inf", "-Inf", "NaN"]
    assert format_value(3.0) == "3" and format_value(-0.0) == "0"
    assert format_value(1e300) == repr(1e300)


def test_help_text_is_escaped_and_parses_back(check_metrics):
    odd = Metric("odd_metric", MetricType.GAUGE, 'Has a \\ backslash,\na newline and "quotes".',
                 ("cluster",), Unit.NONE, Domain.EXPORTER)
    b = MetricSetBuilder((odd,))
    b.add("odd_metric", ("c",), 1)
    body = render(b.build(), topic_level=True)
    assert body.count(b"\n") == 3  # HELP, TYPE, sample: the newline in HELP is escaped
    (family,) = text_string_to_metric_families(body.decode())
    assert family.documentation == odd.help
    assert check_metrics(body).returncode == 0


def test_every_catalogue_metric_renders_with_catalogue_help_and_type():
    b, expected = full_set()
    body = render(b.build(), topic_level=True)
    lines = body.decode().splitlines()
    for m in CATALOGUE:  # counters keep _total in HELP/TYPE, as prometheus-client's 0.0.4
        assert f"# TYPE {m.name} {m.type}" in lines, m.name
        help_line = f"# HELP {m.name} " + m.help.replace("\\", "\\\\").replace("\n", "\\n")
        assert help_line in lines, m.name
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for m in CATALOGUE:
        family = families[m.name.removesuffix("_total")]
        assert family.type == m.type.value
        labels, value = expected[m.name]
        want = dict(zip(m.labels, labels, strict=True))
        if m.type is MetricType.HISTOGRAM:
            assert [s.name for s in family.samples][-2:] == [f"{m.name}_sum", f"{m.name}_count"]
        else:
            (sample,) = family.samples
            assert sample.name == m.name and sample.labels == want and sample.value == value


def test_promtool_accepts_the_whole_catalogue_both_ways(check_metrics):
    b, _ = full_set()
    b.seed_counters(cluster="c", source="s")
    ms = b.build()
    for topic_level in (True, False):
        result = check_metrics(render(ms, topic_level=topic_level))
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout + result.stderr == b""  # no lint findings either


def test_promtool_rejects_a_broken_body(check_metrics):
    """The promtool check is not vacuous."""
    assert check_metrics(b'm{a="x} 1\n').returncode != 0


def test_a_body_of_many_batches_is_every_line_once_in_order_then_the_trailer():
    """Lines are written out in batches (8,192 samples, 1,024 histogram series): a body
    crossing many batch boundaries, escapes included, is the same text, line for line."""
    b = MetricSetBuilder()
    # A few label values to escape, in some batches only; values of every spelling.
    ages = [(f"ns-{i % 7}", f'persistent://t/ns/{i}' + ('-"q"' if i % 9_000 == 17 else ""))
            for i in range(20_000)]
    values = [(i + 0.5, float(i), math.nan, math.inf, -math.inf, 1e16, -0.0, 1e-7)[i % 8]
              for i in range(20_000)]
    for (ns, topic), value in zip(ages, values, strict=True):
        b.add(AGE, ("c", ns, topic), value)
    for i in range(3_000):
        b.observe_histogram(CHECK, (f"c{i}",), 0.02 * i)
    trailer = b"# the process's own\n"
    body = render(b.build(), topic_level=True, trailer=trailer)
    lines = body.decode("utf-8").split("\n")
    escaped = [(ns, topic.replace('"', '\\"')) for ns, topic in ages]
    assert [line for line in lines if line.startswith(AGE + "{")] == [
        f'{AGE}{{cluster="c",namespace="{ns}",topic="{topic}"}} {format_value(value)}'
        for (ns, topic), value in zip(escaped, values, strict=True)]
    counts = [line for line in lines if line.startswith(CHECK + "_count")]
    assert counts == [f'{CHECK}_count{{cluster="c{i}"}} 1' for i in range(3_000)]
    assert body.endswith(b"\n" + trailer)
    assert len(parse(body[:-len(trailer)])) == 20_000 + 3_000 * (len(BY_NAME[CHECK].buckets) + 3)


def test_label_values_that_look_like_code_are_text_and_only_grammar_names_compile():
    """Each family's lines are written by an f-string compiled for its names: a label
    value is data whatever it holds, and a name outside the text format's grammar is
    refused before anything is compiled."""
    odd = ("{k0}", "'}; raise SystemExit #", '{v}"\\\n\'\'\'')
    b = MetricSetBuilder()
    b.add(AGE, odd, 2.5)
    body = render(b.build(), topic_level=True).decode()
    escaped = [v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               for v in odd]
    assert f'{AGE}{{cluster="{escaped[0]}",namespace="{escaped[1]}",topic="{escaped[2]}"}} 2.5' \
        in body.split("\n")
    assert parse(body.encode())[(AGE, tuple(zip(("cluster", "namespace", "topic"), odd,
                                                strict=True)))] == 2.5
    for name, labels in (("m'", ("a",)), ("m", ("a'",)), ("m{a}", ()), ("m", ("1a",)),
                         ("m", ("a=\"x\"} 1\nm",))):
        with pytest.raises(ExpositionError, match="not a metric or label name"):
            _line_writer(name, labels)


# --- histograms --------------------------------------------------------------------------------
@given(st.lists(st.floats(-10, 1000, allow_nan=False), max_size=30))
def test_histogram_buckets_are_cumulative_counts_of_observations(observations):
    b = MetricSetBuilder()
    b.set_histogram(CHECK, ("c0",), HistogramValue.empty(BY_NAME[CHECK].buckets))
    for x in observations:
        b.observe_histogram(CHECK, ("c1",), x)
    got = parse(render(b.build(), topic_level=True))
    bounds = BY_NAME[CHECK].buckets
    for cluster, obs in (("c0", []), ("c1", observations)):
        if cluster == "c1" and not observations:
            continue
        for bound in bounds:
            key = (f"{CHECK}_bucket", (("cluster", cluster), ("le", repr(float(bound)))))
            assert got[key] == sum(1 for x in obs if x <= bound)
        assert got[(f"{CHECK}_bucket", (("cluster", cluster), ("le", "+Inf")))] == len(obs)
        assert got[(f"{CHECK}_count", (("cluster", cluster),))] == len(obs)
        total = 0.0
        for x in obs:
            total += x
        assert got[(f"{CHECK}_sum", (("cluster", cluster),))] == total


def test_histogram_value_rejects_non_cumulative_counts_and_foreign_buckets():
    with pytest.raises(ExpositionError):
        HistogramValue((1.0, 2.0), (3.0, 2.0), 0.0, 3.0)
    with pytest.raises(ExpositionError):
        HistogramValue((1.0, 2.0), (1.0, 2.0), 0.0, 1.0)  # +Inf below the last bucket
    with pytest.raises(ExpositionError):
        MetricSetBuilder().set_histogram(CHECK, ("c",), HistogramValue.empty((1.0, 2.0)))


def test_histogram_value_is_immutable_across_cycles():
    h0 = HistogramValue.empty(BY_NAME[CHECK].buckets)
    h1 = h0.observe(0.2)
    assert h0.count == 0 and h1.count == 1 and h1.sum == 0.2


# --- topic level switch ---------------------------------------------------------------------
series_strategy = st.lists(
    st.tuples(st.sampled_from(["t/a", "t/b", "u/c"]), st.integers(0, 5),
              st.sampled_from(["time", "size"]), st.integers(0, 1000)),
    max_size=30, unique_by=lambda s: s[:3])


@given(series_strategy)
def test_without_topic_level_fallback_counters_sum_per_namespace(rows):
    b = MetricSetBuilder()
    expected: dict[tuple[str, str], float] = {}
    for ns, t, qt, value in rows:
        topic = f"persistent://{ns}/t{t}"
        b.add(EVICTIONS, ("c", ns, topic, qt), value)
        if qt == "time":
            b.add(AGE, ("c", ns, topic), value)
        expected[(ns, qt)] = expected.get((ns, qt), 0) + value
    b.add(PEERS, ("c",), 3)
    ms = b.build()
    got = parse(render(ms, topic_level=False))
    assert all("topic" not in dict(labels) for _, labels in got)
    assert not any(name == AGE for name, _ in got)  # no fallback: dropped
    assert got.pop((PEERS, (("cluster", "c"),))) == 3
    want = {(EVICTIONS, (("cluster", "c"), ("namespace", ns), ("quota_type", qt))): v
            for (ns, qt), v in expected.items()}
    assert got == want
    topic_level = parse(render(ms, topic_level=True))
    assert sum(1 for name, _ in topic_level if name == EVICTIONS) == len(rows)


# --- zero seeding ------------------------------------------------------------------------------
def test_seed_counters_makes_every_determined_counter_exist_at_zero():
    b = MetricSetBuilder()
    b.add(SCRAPE_ERRORS, ("c", "broker-1", "timeout"), 4)
    b.seed_counters(cluster="c", source="broker-1")
    b.seed_counters(cluster="c", source="broker-2")
    got = parse(render(b.build(), topic_level=True))
    for m in CATALOGUE:
        if m.type is not MetricType.COUNTER:
            continue
        free = [lb for lb in m.labels if lb not in ("cluster", "source")]
        series = {k: v for k, v in got.items() if k[0] == m.name}
        if any(lb not in m.known_values for lb in free):
            assert series == {}, m.name  # e.g. per-topic counters need namespace/topic
            continue
        sources = ["broker-1", "broker-2"] if "source" in m.labels else [None]
        combos = list(product(sources, *(m.known_values[lb] for lb in free)))
        assert len(series) == len(combos), m.name
        for source, *known in combos:
            labels = {"cluster": "c", **dict(zip(free, known, strict=True))}
            if source:
                labels["source"] = source
            value = series[(m.name, tuple(sorted(labels.items())))]
            is_added = m.name == SCRAPE_ERRORS and source == "broker-1" and known == ["timeout"]
            assert value == (4 if is_added else 0)


def test_seed_never_overrides_and_needs_labels_without_known_values():
    b = MetricSetBuilder()
    b.seed(EVICTIONS, cluster="c", namespace="t/n", topic="persistent://t/n/x")
    b.add(EVICTIONS, ("c", "t/n", "persistent://t/n/x", "size"), 2)  # after the seed
    ms = b.build()
    assert ms.value(EVICTIONS, ("c", "t/n", "persistent://t/n/x", "size")) == 2
    assert ms.value(EVICTIONS, ("c", "t/n", "persistent://t/n/x", "time")) == 0
    with pytest.raises(ExpositionError):
        MetricSetBuilder().seed(EVICTIONS, cluster="c")  # namespace/topic unknown
    with pytest.raises(ExpositionError):
        MetricSetBuilder().seed(EVICTIONS, cluster="c", nope="x")


def test_seeding_whole_label_sets_at_once_is_seeding_each():
    topics = [("t/n", f"persistent://t/n/{i}") for i in range(3)]
    one, all_ = MetricSetBuilder(), MetricSetBuilder()
    for builder in (one, all_):
        builder.add(EVICTIONS, ("c", "t/n", "persistent://t/n/1", "time"), 2)
    for ns, topic in topics:
        one.seed(EVICTIONS, cluster="c", namespace=ns, topic=topic)
    kinds = BY_NAME[EVICTIONS].known_values["quota_type"]  # in the order `seed` takes them
    all_.seed_all(EVICTIONS, [("c", ns, topic, kind) for ns, topic in topics for kind in kinds])
    assert render(all_.build(), topic_level=True) == render(one.build(), topic_level=True)


# --- builder validation --------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda b: b.add("pulsar_no_such_metric", ("c",), 1),
    lambda b: b.add(PEERS, ("c", "extra"), 1),
    lambda b: b.add(PEERS, ["c"], 1),
    lambda b: b.add(PEERS, (3,), 1),
    lambda b: b.add(CHECK, ("c",), 1),
    lambda b: b.observe_histogram(PEERS, ("c",), 1),
    lambda b: (b.add(PEERS, ("c",), 1), b.add(PEERS, ("c",), 2)),
    lambda b: b.add_all("pulsar_no_such_metric", [], []),
    lambda b: b.seed_all(CHECK, []),
    lambda b: b.seed_all(EVICTIONS, [("c", "t/n", "persistent://t/n/x")]),
    lambda b: b.add_all(CHECK, [], []),
    lambda b: b.add_all(PEERS, [("c",), ("c", "extra")], [1, 2]),
    lambda b: b.add_all(PEERS, [("c",), ["d"]], [1, 2]),
    lambda b: b.add_all(PEERS, [("c",), (3,)], [1, 2]),
    lambda b: b.add_all(PEERS, [("c",), ("d",)], [1]),
    lambda b: b.add_all(PEERS, [("c",), ("c",)], [1, 2]),
    lambda b: (b.add(PEERS, ("c",), 1), b.add_all(PEERS, [("d",), ("c",)], [1, 2])),
])
def test_builder_rejects_what_does_not_fit_the_catalogue(call):
    with pytest.raises(ExpositionError):
        call(MetricSetBuilder())


@given(st.dictionaries(st.tuples(label_text, label_text, label_text), any_float, max_size=8))
def test_adding_a_family_at_once_is_adding_each_series(series):
    one, all_ = MetricSetBuilder(), MetricSetBuilder()
    for key, value in series.items():
        one.add(AGE, key, value)
    all_.add_all(AGE, list(series), list(series.values()))
    assert render(all_.build(), topic_level=True) == render(one.build(), topic_level=True)


def test_built_set_is_frozen_and_the_builder_single_use():
    b = MetricSetBuilder()
    b.add(PEERS, ("c",), 1)
    ms = b.build()
    assert isinstance(ms.samples, MappingProxyType)
    with pytest.raises(TypeError):
        ms.samples[PEERS] = {}  # type: ignore[index]
    with pytest.raises(ExpositionError):
        b.add(PEERS, ("d",), 1)
    with pytest.raises(ExpositionError):
        b.add_all(PEERS, [("d",)], [1])
    with pytest.raises(ExpositionError):
        b.build()
    assert len(ms) == 1


# --- exactness at size --------------------------------------------------------------
def big_set(n: int):
    b = MetricSetBuilder()
    values = {}
    for i in range(n):
        ns = f"tenant-{i % 40}/ns-{i % 400}"
        key = ("prod", ns, f"persistent://{ns}/topic-{i}")
        v = (i * 7919 % 100003) / 7.0 if i % 3 else float(i)
        b.add(AGE, key, v)
        values[key] = v
    return b.build(), values


def test_medium_body_matches_exactly_under_both_parsers(check_metrics):
    ms, values = big_set(5000)
    body = render(ms, topic_level=True)
    got = parse(body)
    assert len(got) == len(values)
    for (c, ns, t), v in values.items():
        assert got[(AGE, (("cluster", c), ("namespace", ns), ("topic", t)))] == v
    result = check_metrics(body)
    assert result.returncode == 0, result.stderr


def test_a_100k_series_body_is_exact_across_the_render_batches():
    """The render writes lines in batches: every value survives their boundaries. (Its
    speed is measured, not asserted: `tests.bench.pipeline --engine`.)"""
    ms, values = big_set(100_000)
    body = render(ms, topic_level=True)
    assert body.count(b"\n") == 100_002
    got = parse(body)
    assert len(got) == len(values)
    assert all(got[(AGE, (("cluster", c), ("namespace", ns), ("topic", t)))] == v
               for (c, ns, t), v in values.items())


# --- the brokers' own splits --------------------------------------------------------------
def test_each_brokers_split_is_published_per_allocator_and_absent_when_unknown():
    from exporter.config.settings import MonitoringClass
    from exporter.engine.groups.brokersplits import Counts, Quota, Splits, Unknowable, Unknown
    from exporter.exposition.build import CycleFacts, Tallies, build

    pub, dis = MonitoringClass.PUBLISH, MonitoringClass.DISPATCH
    splits = Splits(5.0, (
        Quota("g", pub, "pulsar://b1:6650", Counts(750, 75), 480.0, 48.0),
        Quota("g", dis, "pulsar://b1:6650", Counts(-1, -1), -1.0, -1.0),  # no limit
        Quota("g", pub, "pulsar://b3:6650", None, math.nan, 5.0),  # Pulsar threw
        Unknowable("g", pub, "pulsar://b2:6650", Unknown.UNHEARD),
    ))
    facts = CycleFacts("c", 5.0, {}, None, 60.0, 60.0, 360.0)
    got = parse(render(build(facts, None, (), Tallies(), "me", None, splits), topic_level=True))
    units = {f"pulsar_resource_group_broker_local_quota_{u}_per_second": u
             for u in ("messages", "bytes")}
    series = {(units[name], dict(labels)["participant"], dict(labels)["monitoring_class"],
               dict(labels)["allocator"]): v
              for (name, labels), v in got.items() if name in units}
    assert series == {
        ("messages", "pulsar://b1:6650", "publish", "pulsar"): 75,
        ("bytes", "pulsar://b1:6650", "publish", "pulsar"): 750,
        ("messages", "pulsar://b1:6650", "publish", "fair"): 48.0,
        ("bytes", "pulsar://b1:6650", "publish", "fair"): 480.0,
        ("messages", "pulsar://b3:6650", "publish", "fair"): 5.0,
    }
