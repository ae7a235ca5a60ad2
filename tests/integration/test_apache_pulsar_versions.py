"""The core of the apache tier against every Apache Pulsar version of the matrix
(tests/harness/apache_pulsar_install.py VERSIONS; docs/versions.md has the table).

The tests are the apache tier's own, imported from their modules and run again here with
`apache_pulsar` overridden by the session fixture `apache_pulsar_of` (tests/conftest.py),
one broker per version, started when the first of its tests needs it and stopped before
the next version's starts. What runs on every version: PIP-323 families and counts, quota
resolution per type and level, backlog age and batching, evictions for the four
subscription types, subscription ages, resource groups and their namespace and topic
bindings read from the admin REST, the OpenTelemetry families. What does not: the tests of
the harness itself, of failure handling (outage, authorization, TLS), of the exporter
process and of replication, whose subject is our code rather than the broker's
behaviour, and which would add a broker start each (docs/versions.md has the module's
time). On the default version the broker is `apache_pulsar` itself, and the imported tests
are left out (tests/conftest.py, `_run_already`): the apache tier runs them there already.
The tests below the imports assert what differs between versions (docs/versions.md lists
it), on every version.

3.3.6 is not in the matrix: Maven Central, as reachable here, serves its `pulsar-broker`
but neither `pulsar-opentelemetry:3.3.6` nor `jetcd-core-shaded:3.3.6`
(apache_pulsar_install.UNAVAILABLE), and a broker assembled with another version's module
would not be 3.3.6.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from tests.harness.apache_pulsar import ApachePulsar, poll
from tests.integration.test_apache_pulsar import (  # noqa: F401 (collected here again)
    test_admin_scraper_reads_backlogs_and_oldest_age,
    test_backlog_quota_set_over_rest_is_read_back,
    test_broker_exposes_pip323_families_and_counts_its_evictions,
    test_usage_reports_are_published_for_a_bound_resource_group,
)
from tests.integration.test_apache_pulsar_batching import (  # noqa: F401
    test_a_batched_backlog_is_not_read_as_younger,
)
from tests.integration.test_apache_pulsar_evictions import (  # noqa: F401
    stalled,
    test_a_slow_connected_consumer_is_evicted_and_stays_connected,
    test_size_goes_down_to_ninety_percent_of_the_limit,
    test_time_expires_what_is_older_than_the_cut,
)
from tests.integration.test_apache_pulsar_groups import (  # noqa: F401
    test_a_topic_bound_to_a_group_of_its_own_counts_there_alone,
    test_pulsars_groups_and_bindings_are_the_ones_computed,
)
from tests.integration.test_apache_pulsar_otel import (  # noqa: F401
    _rows,
    _tables,
    scenario,
    test_otel_backlog_series_as_the_broker_prints_them,
    test_otel_entities_equal_the_classic_ones,
)
from tests.integration.test_apache_pulsar_quotas import (  # noqa: F401
    test_published_backlog_age_agrees_with_the_brokers,
    test_pulsar_quotas_resolve_per_type_as_the_broker_applies_them,
)
from tests.integration.test_apache_pulsar_subscription_ages import (  # noqa: F401
    test_two_subscriptions_of_one_topic_at_their_own_ages,
)


@pytest.fixture(scope="session")
def apache_pulsar(apache_pulsar_of: ApachePulsar) -> ApachePulsar:
    """The imported tests' broker, here the matrix's version under test."""
    return apache_pulsar_of


def _major_minor(broker: ApachePulsar) -> tuple[int, int]:
    major, minor, _ = broker.version.split(".")
    return int(major), int(minor)


def _family_types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def test_the_broker_is_the_version_asked_for(apache_pulsar: ApachePulsar) -> None:
    """`GET /admin/v2/brokers/version` names the version the lib/ was built from, and the
    harness's figures (start time, resident memory once ready) are measured."""
    with urllib.request.urlopen(apache_pulsar.web_url + "/admin/v2/brokers/version",
                                timeout=10) as resp:
        assert resp.read().decode().strip().strip('"') == apache_pulsar.version
    assert apache_pulsar.start_seconds is not None and apache_pulsar.start_seconds > 0
    assert apache_pulsar.ready_rss_bytes is not None and apache_pulsar.ready_rss_bytes > 0
    print(f"Apache Pulsar {apache_pulsar.version}: ready in {apache_pulsar.start_seconds:.1f} s,"
          f" {apache_pulsar.ready_rss_bytes / 2**20:.0f} MiB resident once ready")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_metrics_content_type_and_redirect(apache_pulsar: ApachePulsar) -> None:
    """/metrics answers with a redirect to /metrics/: 302 on 4.0.8, 301 on 4.2.4 (both
    followed by urllib and by Prometheus). The body's Content-Type is the same on both,
    Prometheus text format 0.0.4, whatever the Accept header asks for (OpenMetrics too)."""
    redirect = {(4, 0): 302, (4, 2): 301}[_major_minor(apache_pulsar)]
    opener = urllib.request.build_opener(_NoRedirect())
    with pytest.raises(urllib.error.HTTPError) as answer:
        opener.open(apache_pulsar.metrics_url, timeout=30)
    assert answer.value.code == redirect
    assert answer.value.headers["Location"].endswith("/metrics/")
    for accept in ("*/*", "application/openmetrics-text; version=1.0.0"):
        request = urllib.request.Request(apache_pulsar.metrics_url + "/",
                                         headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert _family_types(resp.read().decode()).get("pulsar_topics_count") == "gauge"


# Families only one version of the matrix has, in one body or the other (the others are the
# same in both): 4.2 bounds the topic-list requests it holds in memory (ServiceConfiguration
# maxTopicListInFlight*, new since 4.0.8), and the Prometheus exporter of its OpenTelemetry
# SDK no longer adds `_ratio` to the names of unit-1 instruments.
ONLY_IN = {
    (4, 0): ({"jetty_async_dispatches", "jetty_expires"},
             {"jvm_cpu_recent_utilization_ratio", "jvm_system_cpu_utilization_ratio",
              "pulsar_broker_consumer_blocked_ratio", "jvm_buffer_memory_usage_bytes"}),
    (4, 2): ({"pulsar_broker_topic_list_heap_memory_used_bytes",
              "pulsar_broker_topic_list_direct_memory_used_bytes"},
             {"jvm_cpu_recent_utilization", "jvm_system_cpu_utilization",
              "pulsar_broker_consumer_blocked", "jvm_buffer_memory_used_bytes",
              "jvm_file_descriptor_count", "topic_list_heap_memory_used_bytes"}),
}


def test_families_that_differ_between_versions(apache_pulsar: ApachePulsar) -> None:
    """Each version has its own families of ONLY_IN and not the other version's; the
    families the exporter reads are the same (the imported tests above)."""
    classic = set(_family_types(apache_pulsar.metrics_text()))
    otel = set(_family_types(apache_pulsar.otel_metrics_text()))
    mine = _major_minor(apache_pulsar)
    for version, (classic_only, otel_only) in ONLY_IN.items():
        assert (classic_only <= classic) is (version == mine), (version, classic_only - classic)
        assert (otel_only <= otel) is (version == mine), (version, otel_only - otel)
        assert not (classic_only & classic) or version == mine
        assert not (otel_only & otel) or version == mine


def test_custom_topic_labels_pip447(apache_pulsar: ApachePulsar) -> None:
    """PIP-447 (4.2): with exposeCustomTopicMetricLabelsEnabled and the property key
    allowed (VERSION_OVERRIDES), the topic property `team` becomes a label of the topic's
    series; other properties do not. 4.0.8 has neither key and adds no label.
    The product still reads the topic's backlog age from the labelled body."""
    namespace = apache_pulsar.create_namespace("labels")
    topic = f"persistent://{namespace}/orders"
    apache_pulsar.admin("PUT", f"/admin/v2/persistent/{namespace}/orders",
                        {"team": "payments", "other": "x"})
    apache_pulsar.create_subscription(topic, "stalled")
    apache_pulsar.produce(topic, 5)
    metrics = poll(lambda: (m := apache_pulsar.metrics())
                   and (m.value("pulsar_storage_backlog_age_seconds", topic=topic) or 0) >= 1
                   and m, f"{topic}: aged past 1 s")
    (series,) = metrics.find("pulsar_storage_backlog_age_seconds", topic=topic)
    labelled = _major_minor(apache_pulsar) >= (4, 2)
    assert series.labels.get("team") == ("payments" if labelled else None)
    assert "other" not in series.labels
    rows = _rows(_tables(metrics.text), (topic,))
    assert rows[topic]["backlog_age_seconds"] == series.value
