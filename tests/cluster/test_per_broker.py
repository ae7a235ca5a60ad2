"""The chart's per-broker mode on the real cluster: one exporter process per broker, each
configured by the chart's own ConfigMap (`perBroker.enabled`: its broker's /metrics and its
participant name read from the environment with `--config.expand-env`), exchanging usage over
the usage topic. Their split of a resource group agrees with the split the brokers computed
themselves from their own reports (their `pulsar_resource_group_calculated_*` counters);
an exporter killed without a goodbye expires on the other, which then takes the whole quota.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.chart.test_helm_chart import render
from tests.cluster.helpers import one_topic_per_broker, produce_at
from tests.harness.apache_cluster import CLUSTER, ApacheCluster, ClusterBroker
from tests.harness.exporter_process import ExporterProcess
from tests.harness.pulsar import Metrics
from tests.harness.wait import poll

# Exporter processes (Spark) configured by the chart as Helm renders it.
pytestmark = [pytest.mark.spark, pytest.mark.tools]

LIMIT = 1000  # the group's messages per second
RATES = (30.0, 10.0)  # produced on broker 1's topic, on broker 2's
PERIOD = 2  # seconds: the brokers' report interval (harness), and the exporters'
STALE_AFTER = 16  # seconds: > report_interval × (max_suppressed_rounds 5 + 1), the default
# The exporters report every round here (max_suppressed_rounds 0), so a killed one's last
# report is at most a round old and its expiry can be timed from the kill; with suppression
# it may be up to 6 rounds old (CI once saw the peer expire 12 s after the kill).
TOLERANCE = 0.1 * LIMIT  # two measurements of the same rates over different windows


def _chart_config(service_url: str, group: str, ns: str) -> dict:
    """The config.yaml the chart renders for per-broker mode (its ConfigMap), unexpanded."""
    docs = render({
        "perBroker": {"enabled": True, "brokers": 2,
                      "metricsUrl": "http://127.0.0.1:${BROKER_WEB_PORT}/metrics"},
        "config": {
            "cluster": CLUSTER, "check_interval": f"{PERIOD}s",
            "sources": {"service_url": service_url},
            "resource_groups": {group: {"publish": {"messages_per_second": LIMIT},
                                        "namespaces": [ns]}},
            "resource_group_engine": {"report_interval": f"{PERIOD}s",
                                      "stale_after": f"{STALE_AFTER}s", "allocator": "pulsar",
                                      "max_suppressed_rounds": 0},
            "spark": {"master": "local[1]"},
        }})
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"
                     and "config.yaml" in d.get("data", {})]
    return yaml.safe_load(config_map["data"]["config.yaml"])


def _brokers_quota(broker: ClusterBroker, group: str, seconds: float) -> float:
    """What `broker` computed for itself: its calculated-messages counter's mean increment
    per quota round over `seconds`."""
    def read() -> float:
        return Metrics(broker.metrics_text()).value(
            "pulsar_resource_group_calculated_messages_quota_total",
            ResourceGroup=group, MonitoringClass="Publish") or 0.0

    first = read()
    time.sleep(seconds)
    return (read() - first) / round(seconds / PERIOD)


def _local_quota(exporter: ExporterProcess, group: str) -> float | None:
    for g in exporter.status().get("resource_groups", []):
        if g["resource_group"] == group and g["monitoring_class"] == "publish":
            quota = (g.get("local_quota") or {}).get("messages_per_second")
            return float(quota) if quota is not None else None
    return None


def test_per_broker_exporters_split_a_group_as_the_brokers_do(
        apache_cluster: ApacheCluster, tmp_path: Path) -> None:
    first = apache_cluster.brokers[0]
    group = f"rg-{uuid.uuid4().hex[:8]}"
    ns, owned = one_topic_per_broker(apache_cluster, "per-broker")
    mine = [owned[b.broker_id] for b in apache_cluster.brokers]
    first.admin("PUT", f"/admin/v2/resourcegroups/{group}",
                {"publishRateInMsgs": LIMIT, "publishRateInBytes": -1,
                 "dispatchRateInMsgs": -1, "dispatchRateInBytes": -1})
    first.admin("POST", f"/admin/v2/namespaces/{ns}/resourcegroup/{group}")

    config = _chart_config(first.service_url, group, ns)
    assert config["sources"]["brokers"] == [
        {"url": "http://127.0.0.1:${BROKER_WEB_PORT}/metrics"}]
    assert config["resource_group_engine"]["participant"] == "${POD_NAME}"
    exporters = []
    for index, broker in enumerate(apache_cluster.brokers):
        exporters.append(ExporterProcess(
            tmp_path, config, name=f"exporter-{index}", extra_args=("--config.expand-env",),
            env={"POD_NAME": f"pqe-{index}", "POD_INDEX": str(index),
                 "BROKER_WEB_PORT": str(broker.web_port)}))
    stop = threading.Event()
    producers = [threading.Thread(target=produce_at, args=(b, t, rate, stop))
                 for b, t, rate in zip(apache_cluster.brokers, mine, RATES, strict=True)]
    try:
        for thread in producers:
            thread.start()
        for exporter in exporters:
            exporter.start()
        for exporter in exporters:
            exporter.wait_ready(240)

        def split() -> tuple[float, float] | None:
            quotas = [_local_quota(e, group) for e in exporters]
            if None in quotas or abs(sum(quotas) - LIMIT) > 2:  # type: ignore[arg-type]
                return None
            return quotas[0], quotas[1]  # type: ignore[return-value]

        ours = poll(split, "both exporters splitting the group between them", timeout=120,
                    interval=1.0, show=lambda: [e.status().get("resource_groups")
                                                for e in exporters])
        # Each broker recomputes on its own period: read until both have heard the other's
        # usage (their quotas sum to the limit), not once.
        theirs = poll(lambda: [_brokers_quota(b, group, 5 * PERIOD)
                               for b in apache_cluster.brokers],
                      "the brokers splitting the group between them", timeout=120, interval=0,
                      until=lambda q: abs(sum(q) - LIMIT) <= TOLERANCE and min(q) > 0)
        print(f"split of {LIMIT} msg/s at {RATES}: exporters {ours}, brokers {theirs}")
        expected = [LIMIT * r / sum(RATES) for r in RATES]
        for got, brokers, want in zip(ours, theirs, expected, strict=True):
            assert abs(got - brokers) <= TOLERANCE, (ours, theirs)
            assert abs(got - want) <= TOLERANCE, (ours, expected)

        exporters[1].signal(signal.SIGKILL, group=True)  # no goodbye
        killed = time.monotonic()
        poll(lambda: (q := _local_quota(exporters[0], group)) is not None and q >= LIMIT - 1,
             "the survivor taking the whole quota once its peer expires",
             timeout=STALE_AFTER + 6 * PERIOD + 30, interval=1.0)
        took = time.monotonic() - killed
        print(f"the killed peer expired after {took:.0f} s (stale_after {STALE_AFTER} s)")
        # it expired, it was not dropped at once: its last report came ≤ a round before the
        # kill (a round's slack more for a slow cycle on 2 busy cores)
        assert took >= STALE_AFTER - 2 * PERIOD
    finally:
        stop.set()
        for thread in producers:
            thread.join(30)
        for exporter in exporters:
            exporter.stop()
        first.admin("DELETE", f"/admin/v2/namespaces/{ns}/resourcegroup")
        first.admin("DELETE", f"/admin/v2/resourcegroups/{group}")
