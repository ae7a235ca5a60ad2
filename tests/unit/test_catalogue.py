"""The catalogue follows Prometheus naming rules and keeps PIP-323's names and labels."""

import re

from exporter.catalogue import BY_NAME, CATALOGUE, Metric, MetricType, Unit

NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
LABEL = re.compile(r"^[a-z][a-z0-9_]*$")

# PIP-323 (pip/pip-323.md in apache/pulsar, "Metrics" table) and the pre-existing
# backlog-quota gauges it names: exact names, types and label sets of the Apache Pulsar broker.
PIP_323 = {
    "pulsar_storage_backlog_age_seconds": ("gauge", {"cluster", "namespace", "topic"}),
    "pulsar_storage_backlog_quota_exceeded_evictions_total": (
        "counter",
        {"cluster", "namespace", "topic", "quota_type"},
    ),
    "pulsar_storage_backlog_quota_check_duration_seconds": ("histogram", {"cluster"}),
    "pulsar_broker_storage_backlog_quota_exceeded_evictions_total": (
        "counter",
        {"cluster", "quota_type"},
    ),
    "pulsar_storage_backlog_quota_limit": ("gauge", {"cluster", "namespace", "topic"}),
    "pulsar_storage_backlog_quota_limit_time": ("gauge", {"cluster", "namespace", "topic"}),
    "pulsar_storage_backlog_size": ("gauge", {"cluster", "namespace", "topic"}),
    # PIP-492 (Pulsar 5.0, apache/pulsar#26313): TopicStats prints it per subscription
    "pulsar_subscription_storage_backlog_age_seconds": (
        "gauge", {"cluster", "namespace", "topic", "subscription"}),
}


def test_names_are_unique_and_well_formed():
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))
    for m in CATALOGUE:
        assert NAME.match(m.name), m.name
        assert m.help and (m.help[0].isupper() or m.help[0].isdigit()), m.name
        for label in m.labels:
            assert LABEL.match(label), (m.name, label)
        assert len(set(m.labels)) == len(m.labels), m.name
        assert m.labels[0] == "cluster", f"{m.name}: every series carries cluster first"


def test_total_only_on_counters():
    for m in CATALOGUE:
        assert m.name.endswith("_total") == (m.type is MetricType.COUNTER), m.name


def _unit_suffix_ok(m: Metric) -> bool:
    base = m.name.removesuffix("_total")
    if m.unit is Unit.NONE:
        return not re.search(r"_(seconds|bytes|ratio|milliseconds|ms)$", base)
    if m.pulsar:
        return True  # Pulsar's own names (e.g. ..._quota_limit_time in seconds) are kept as-is
    return base.endswith("_" + m.unit.value)


def test_units_are_base_units_in_the_name():
    for m in CATALOGUE:
        assert _unit_suffix_ok(m), f"{m.name}: unit {m.unit!r}"
        assert "_ms" not in m.name and "milli" not in m.name, m.name


def test_histograms_have_sorted_buckets_from_5ms():
    for m in CATALOGUE:
        if m.type is MetricType.HISTOGRAM:
            assert list(m.buckets) == sorted(set(m.buckets)), m.name
            assert m.buckets[0] <= 0.005, "check duration buckets start at 5 ms (broker: 5 s)"
        else:
            assert not m.buckets


def test_pip_323_names_types_and_labels_are_pulsars():
    for name, (type_, labels) in PIP_323.items():
        m = BY_NAME[name]
        assert m.type.value == type_, name
        assert set(m.labels) == labels, name
        assert m.pulsar
    assert {m.name for m in CATALOGUE if m.pulsar} == set(PIP_323)


def test_resource_group_labels_are_snake_case_not_pulsars_camel_case():
    for m in CATALOGUE:
        if m.name.startswith("pulsar_resource_group_"):
            assert "resource_group" in m.labels and "monitoring_class" in m.labels, m.name
            assert not any(c.isupper() for c in "".join(m.labels))


def test_known_values_name_real_labels():
    for m in CATALOGUE:
        assert set(m.known_values) <= set(m.labels), m.name


def test_the_brokers_own_splits_say_who_enforces_and_which_allocator():
    for unit in ("messages", "bytes"):
        m = BY_NAME[f"pulsar_resource_group_broker_local_quota_{unit}_per_second"]
        assert m.labels == ("cluster", "resource_group", "monitoring_class", "participant",
                            "allocator")
        assert m.known_values["allocator"] == ("pulsar", "fair")
        assert "the brokers enforce, we publish" in m.help
        assert f"pulsar_resource_group_calculated_{unit}_quota" in m.help
