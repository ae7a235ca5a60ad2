"""Load verdicts against the real load manager running `ThresholdShedder` (4.x's default):
a two-broker cluster whose brokers each run in a cpu + cpuacct cgroup of their own
(`ApacheCluster(own_cgroups=True)`), so each reports its own JVM's CPU usage (the JDK's
cgroupv1 metrics, which Pulsar's LinuxInfoUtils reads) rather than the host's, as pods do.
One broker is given all the traffic, so its CPU is really higher; the bundles the leader's
ThresholdShedder picks are compared with the bundles our verdict names.

Only CPU is weighed (NIC is host-wide and loopback is not counted, direct memory is off),
the history is off (`loadBalancerHistoryResourcePercentage=0`: each run sees the current
usage, as our one cycle does), the minimum throughput is 0 and the threshold 1 %: on a
2-core host the busy broker measured ~6-19 % and the idle one ~1-10 % (of 200 %), under
the default 10 % above average. Both sides then name the busy broker's largest bundle.

The leader decides on the load reports in the metadata store, we on the brokers' /metrics;
both come from each broker's once-a-minute CPU sample, but reach each side at its own time.
So the verdict compared is ours on the figures the leader logged for its run ("Attempting
to shed load on …"), not simply our latest: CI once saw the leader act on a sample that our
previous cycle had not yet read (ours then named nothing; the next cycle named its bundle).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.cluster.helpers import Unload, leader_unloads, load_exporter, produce_at, traffic_on
from tests.harness.apache_cluster import ApacheCluster
from tests.harness.pulsar import Metrics
from tests.harness.wait import poll

THRESHOLD = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
RATES = {"t-busy": 400.0, "t-calm": 100.0}  # msgs/s of SIZE bytes, all on one broker
SIZE = 20_000
CANDIDATE = "pulsar_load_bundle_unload_candidate"
# ThresholdShedder.findBundlesForUnloading, once per broker it sheds from (4.0.8 and 4.2.4).
ATTEMPT = re.compile(r"^(\S+) .*Attempting to shed load on (\S+), which has max resource usage "
                     r"above avgUsage and threshold ([\d.E-]+)% > ([\d.E-]+)% \+ ")


@pytest.fixture(scope="module")
def cgroup_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheCluster]:
    cluster = ApacheCluster(tmp_path_factory.mktemp("threshold-cluster"), own_cgroups=True,
                            broker_overrides={
        "loadBalancerLoadSheddingStrategy": THRESHOLD,
        "loadBalancerSheddingEnabled": "false",  # turned on by the test (dynamic)
        "loadBalancerSheddingIntervalMinutes": "1",
        "loadBalancerBrokerThresholdShedderPercentage": "1",
        "loadBalancerHistoryResourcePercentage": "0",
        "loadBalancerBundleUnloadMinThroughputThreshold": "0",
        "loadBalancerCPUResourceWeight": "1",
        "loadBalancerDirectMemoryResourceWeight": "0",
        "loadBalancerBandwithInResourceWeight": "0",
        "loadBalancerBandwithOutResourceWeight": "0",
        "loadBalancerReportUpdateThresholdPercentage": "1",
        "resourceUsageTransportClassName": "",
    })
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


LOAD_MANAGER = {"load_shedding_strategy": THRESHOLD, "broker_threshold_shedder_percentage": 1,
                "history_resource_percentage": 0, "bundle_unload_min_throughput_threshold": 0,
                "cpu_resource_weight": 1, "direct_memory_resource_weight": 0,
                "bandwidth_in_resource_weight": 0, "bandwidth_out_resource_weight": 0}


def test_our_threshold_verdict_names_the_bundles_the_leader_unloads(
        cgroup_cluster: ApacheCluster) -> None:
    cluster = cgroup_cluster
    busy = cluster.brokers[0]
    ns, topics, bundles = traffic_on(cluster, busy, "thr", RATES)

    stop = threading.Event()
    producers = [threading.Thread(target=produce_at, args=(busy, topics[n], rate, stop),
                                  kwargs={"size": SIZE}) for n, rate in RATES.items()]
    exporter = load_exporter(cluster, LOAD_MANAGER, "shedding-threshold.yaml")
    verdicts: list[tuple[float, set[str], dict[str, float]]] = []

    def cycle() -> None:
        metrics = Metrics(exporter.cycle().body.decode())
        cpu = {s.labels["broker"]: s.value * 100 for s in metrics.find(
            "pulsar_load_broker_resource_usage_ratio", resource="cpu")}
        verdicts.append((time.time(), {s.labels["bundle"] for s in metrics.find(
            CANDIDATE, namespace=ns) if s.value == 1}, cpu))

    def leaders_picks() -> list[Unload]:
        cycle()
        return leader_unloads(cluster.broker_named(cluster.leader()), ns, "ThresholdShedder")

    def timeline() -> list:
        return [(round(t - verdicts[0][0]), sorted(v), {b: round(c, 1) for b, c in u.items()})
                for t, v, u in verdicts]

    try:
        for thread in producers:
            thread.start()
        poll(lambda: not leaders_picks() and len(verdicts) >= 3 and verdicts[-1][1]
             and verdicts[-1][1] == verdicts[-2][1], "a steady verdict of ours", timeout=120,
             interval=5.0, show=lambda: timeline()[-3:])
        busy.admin("POST", "/admin/v2/brokers/configuration/loadBalancerSheddingEnabled/true")
        picks = poll(leaders_picks, "the leader's ThresholdShedder picking bundles",
                     timeout=240, interval=5.0, show=lambda: timeline()[-3:])
        run = [p for p in picks if p.at - picks[0].at < 5.0]
        assert {p.source for p in run} == {busy.broker_id}, run
        usage, average = _leaders_figures(cluster, busy.broker_id, run[0].at)

        def same_figures() -> set[str] | None:
            """Our verdict on the sample the leader used: already read, or read next."""
            for _, named, cpu in verdicts:
                if (abs(cpu[busy.broker_id] - usage) < 0.05
                        and abs(sum(cpu.values()) / len(cpu) - average) < 0.05):
                    return named
            cycle()
            return None

        ours = poll(same_figures, f"a cycle of ours reading the leader's figures: "
                    f"{usage:.2f} % on {busy.broker_id}, {average:.2f} % on average",
                    timeout=90, interval=5.0, until=lambda named: named is not None,
                    show=timeline)
    finally:
        stop.set()
        for thread in producers:
            thread.join(30)
        exporter.close()
    print(f"busy {busy.broker_id}; the leader picked {run} at {usage:.2f} % against "
          f"{average:.2f} %; we named {sorted(ours)}; every cycle: {timeline()}")
    traffic = set(bundles.values())
    assert {p.bundle for p in run} & traffic == ours & traffic, (bundles, ours, run)
    # It sheds (usage − average − 1 % + 5 %) of its throughput, well under t-busy's 80 %.
    assert ours & traffic == {bundles["t-busy"]}, (bundles, ours)


def _leaders_figures(cluster: ApacheCluster, broker: str, at: float) -> tuple[float, float]:
    """The usage and average (in %) the leader logged for its shedding run at `at`."""
    leader = cluster.broker_named(cluster.leader())
    assert leader.process is not None
    logged = []
    for line in leader.process.log().splitlines():
        if (match := ATTEMPT.match(line)) and match[2] == broker:
            when = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S,%f%z").timestamp()
            if when <= at:
                logged.append((when, float(match[3]), float(match[4])))
    assert logged, f"no 'Attempting to shed load on {broker}' before the unloads"
    return logged[-1][1:]
