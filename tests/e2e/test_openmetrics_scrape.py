"""The real Prometheus of the e2e scenario scrapes the exporter in OpenMetrics: it asks for
it first (2.42 sends OpenMetrics 1.0.0 before text 0.0.4), and its metadata shows families
as only an OpenMetrics parse names them: counters without `_total`, `_info` as type info."""

from __future__ import annotations

from tests.e2e.scenario import Scenario
from tests.harness.wait import poll


def test_prometheus_reads_the_exporter_as_openmetrics(scenario: Scenario) -> None:
    prometheus = scenario.prometheus
    job = scenario.workload.job

    def metadata() -> dict | None:
        found = prometheus.api("targets/metadata", match_target=f'{{job="{job}"}}')
        return {m["metric"]: m["type"] for m in found} or None

    families = poll(metadata, "Prometheus has the exporter's metadata", timeout=30)
    assert families.get("pulsar_storage_backlog_quota_exceeded_evictions") == "counter"
    assert "pulsar_storage_backlog_quota_exceeded_evictions_total" not in families
    assert families.get("pulsar_quota_exporter_build") == "info"
    # One scrape past the 1 s timeout reads 0: wait for a good one rather than sample one.
    poll(lambda: prometheus.instant(f'up{{job="{job}"}} == 1'), f"{job} scraped with up 1",
         timeout=30)
