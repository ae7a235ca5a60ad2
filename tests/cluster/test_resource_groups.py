"""A resource group split between two real brokers (PIP-82), as the brokers split it.

One group is bound to a namespace whose topics both brokers own; producers publish at known,
different rates on each; the brokers exchange their usage reports every 2 s (the harness's
`resourceUsageTransportPublishIntervalInSecs`). We read the same reports off their topic
with the exporter's own reader (`BrokerReports`, drained every 20 ms on a thread of its own)
and compute, with `engine/groups/brokersplits.py`, every broker's local quota report by report;
each broker adds its own round's quota to its `pulsar_resource_group_calculated_*`
counters, which we scrape every 0.25 s and difference. Every increment a broker made must be
a state of our model's, walked in the reports' order (`rounds.py`). Beside it, the exporter
as it runs (its own reader, drained once a cycle) publishes the same split per broker.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

from exporter.config.load import parse
from exporter.config.settings import BROKER_USAGE_TOPIC, MonitoringClass, RateLimit, ResourceGroup
from exporter.engine.groups.brokersplits import BrokerSplits, Counts, Quota, Splits
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.runtime.assembly import splits_report
from exporter.runtime.cycle import Exporter
from exporter.sources.brokerreports import BrokerReports
from exporter.transport.channel import UsageChannel
from tests.cluster.helpers import one_topic_per_broker, produce_at
from tests.cluster.rounds import Scraped, follow_rounds
from tests.harness.apache_cluster import CLUSTER, ApacheCluster, ClusterBroker
from tests.harness.pulsar import Metrics

PERIOD = 2.0  # the brokers' resourceUsageTransportPublishIntervalInSecs (harness)
RATES = (30, 10)  # messages a second on broker 1's topic, on broker 2's
OBSERVE = 40.0  # seconds of rounds compared
LAG = 2 * PERIOD  # s either side of a scrape window a broker may apply a report (rounds.py)
STEADY = 5 * PERIOD  # seconds of sends at the rates before the last round is compared
LIMITS = {"publishRateInMsgs": 1000, "publishRateInBytes": 1_000_000,
          "dispatchRateInMsgs": 500, "dispatchRateInBytes": 400_000}
CLASSES = {MonitoringClass.PUBLISH: "Publish", MonitoringClass.DISPATCH: "Dispatch"}


@dataclass(frozen=True)
class Reading:
    at: float  # when the scrape was asked for
    done: float  # when its answer was complete
    counts: dict[MonitoringClass, Counts | None]


def _calculated(broker: ClusterBroker, group: str) -> dict[MonitoringClass, Counts | None]:
    metrics = Metrics(broker.metrics_text())
    out: dict[MonitoringClass, Counts | None] = {}
    for cls, label in CLASSES.items():
        values = [metrics.value(f"pulsar_resource_group_calculated_{unit}_quota_total",
                                ResourceGroup=group, MonitoringClass=label)
                  for unit in ("bytes", "messages")]
        out[cls] = None if None in values else Counts(int(values[0]), int(values[1]))
    return out


def _exporter(cluster: ApacheCluster, group: str, ns: str) -> Exporter:
    """The exporter as it runs (in process), reading the brokers' reports itself."""
    config = parse({
        "cluster": CLUSTER, "check_interval": f"{PERIOD}s",
        "sources": {"brokers": [{"url": b.metrics_url} for b in cluster.brokers],
                    "service_url": cluster.brokers[0].service_url},
        "resource_groups": {group: {
            "publish": {"messages_per_second": LIMITS["publishRateInMsgs"],
                        "bytes_per_second": LIMITS["publishRateInBytes"]},
            "dispatch": {"messages_per_second": LIMITS["dispatchRateInMsgs"],
                         "bytes_per_second": LIMITS["dispatchRateInBytes"]},
            "namespaces": [ns]}},
        "resource_group_engine": {"report_interval": f"{PERIOD}s", "stale_after": "30s"},
    }, "rg-split.yaml")
    brokers = config.sources.brokers
    return Exporter(config, brokers=BrokerScrape(brokers, in_process(brokers)), participate=True)


def _observing(elapsed: float, timeouts: list[float]) -> bool:
    """OBSERVE's rounds and 20 s more; then, after a send timed out (a broker stalled on a
    loaded CI), until both producers have sent at their rates for STEADY seconds, so that
    the last round splits the group by those rates (a minute more at most)."""
    if elapsed < OBSERVE + 20:
        return True
    return bool(timeouts) and time.monotonic() - timeouts[-1] < STEADY and elapsed < OBSERVE + 80


def test_every_brokers_quota_as_each_broker_computes_it_round_by_round(
        apache_cluster: ApacheCluster) -> None:
    first = apache_cluster.brokers[0]
    group = f"rg-{uuid.uuid4().hex[:8]}"
    ns, mine = one_topic_per_broker(apache_cluster, "rg-split")

    reader = BrokerReports(UsageChannel(first.service_url, BROKER_USAGE_TOPIC, "cluster-splits",
                                        read_only=True), stale_after=30)
    stop = threading.Event()
    timeouts: list[float] = []  # when a producer's send timed out (a stalled broker)
    producers = [threading.Thread(target=produce_at,
                                  args=(b, mine[b.broker_id], rate, stop, 100, timeouts))
                 for b, rate in zip(apache_cluster.brokers, RATES, strict=True)]
    model = BrokerSplits(PERIOD, silent_after=30, resolution=0.05)
    limits = {group: ResourceGroup(
        group, publish=RateLimit(LIMITS["publishRateInMsgs"], LIMITS["publishRateInBytes"]),
        dispatch=RateLimit(LIMITS["dispatchRateInMsgs"], LIMITS["dispatchRateInBytes"]))}
    history: list[Splits] = []
    readings: dict[str, list[Reading]] = {b.broker_id: [] for b in apache_cluster.brokers}
    names: dict[str, str] = {}  # broker id → the name its reports carry (its service URL)
    exporter = _exporter(apache_cluster, group, ns)
    published = None
    drained = threading.Event()

    def drain() -> None:
        """Every 20 ms on its own thread: a report's arrival time is when the brokers
        got it too, give or take that (scrapes and cycles never hold it up)."""
        while not drained.is_set():
            for received in reader.take(time.time()).reports:
                model.accept(splits_report(received))
                history.append(model.splits(limits, received.at))
            drained.wait(0.02)

    drainer = threading.Thread(target=drain, name="drain-broker-reports")
    try:
        assert reader.channel.wait_connected(30)  # type: ignore[attr-defined]
        # The group exists only now: every report that names it reaches our reader.
        first.admin("PUT", f"/admin/v2/resourcegroups/{group}", LIMITS)
        first.admin("POST", f"/admin/v2/namespaces/{ns}/resourcegroup/{group}")
        for thread in producers:
            thread.start()

        drainer.start()
        began = time.monotonic()
        next_scrape = next_cycle = 0.0
        while _observing(time.monotonic() - began, timeouts):
            if time.monotonic() >= next_cycle:  # the exporter, on its own reader and clock
                next_cycle = time.monotonic() + PERIOD
                published = exporter.cycle()
            if time.monotonic() >= next_scrape:
                next_scrape = time.monotonic() + 0.25
                for broker in apache_cluster.brokers:
                    at = time.time()
                    counts = _calculated(broker, group)
                    readings[broker.broker_id].append(Reading(at, time.time(), counts))
            time.sleep(0.05)
        assert all(t.is_alive() for t in producers), "a producer died (its traceback is above)"
        assert not timeouts or time.monotonic() - timeouts[-1] >= STEADY, (
            f"a broker still stalled {OBSERVE + 80:.0f} s in: sends timed out at {timeouts}")
    finally:
        stop.set()
        drained.set()
        for thread in producers:
            thread.join(30)
        if drainer.ident is not None:  # started
            drainer.join(30)
        reader.close()
        exporter.close()
        first.admin("DELETE", f"/admin/v2/namespaces/{ns}/resourcegroup")
        first.admin("DELETE", f"/admin/v2/resourcegroups/{group}")

    for broker in apache_cluster.brokers:
        names[broker.broker_id] = broker.service_url
    heard = {s.broker for state in history for s in state.splits}
    assert set(names.values()) <= heard, (names, heard)

    compared = {b: {c: 0 for c in CLASSES} for b in names}
    for broker_id, series in readings.items():
        for cls in CLASSES:
            followed = follow_rounds(history, names[broker_id], group, cls,
                                     [Scraped(r.at, r.done, r.counts[cls]) for r in series],
                                     LAG)
            assert not followed.wrong, "\n".join(followed.wrong)
            compared[broker_id][cls] = followed.matched
    print("rounds compared (broker, class):", compared)
    last = history[-1]
    quotas = {b: last.get(names[b], group, MonitoringClass.PUBLISH) for b in names}
    print("last publish quotas:", {b: q.pulsar if isinstance(q, Quota) else q
                                   for b, q in quotas.items()})
    for broker_id in names:
        for cls in CLASSES:
            # one quota round every PERIOD: most of OBSERVE's rounds are compared
            assert compared[broker_id][cls] >= OBSERVE / PERIOD / 2, compared
    # the busier broker gets the larger share of the messages quota, and the split adds up
    q1, q2 = (quotas[b.broker_id] for b in apache_cluster.brokers)
    assert isinstance(q1, Quota) and isinstance(q2, Quota) and q1.pulsar and q2.pulsar
    assert q1.pulsar.messages > q2.pulsar.messages
    assert q1.pulsar.messages + q2.pulsar.messages <= LIMITS["publishRateInMsgs"]
    assert q1.pulsar.messages + q2.pulsar.messages >= LIMITS["publishRateInMsgs"] - 2
    # The exporter publishes the same split per broker (participant = its reports' name).
    assert published is not None
    metrics = Metrics(published.body.decode())
    for broker_id, quota in ((b.broker_id, q) for b, q in zip(apache_cluster.brokers, (q1, q2),
                                                              strict=True)):
        shown = metrics.value("pulsar_resource_group_broker_local_quota_messages_per_second",
                              resource_group=group, monitoring_class="publish",
                              participant=names[broker_id], allocator="pulsar")
        assert shown is not None and abs(shown - quota.pulsar.messages) <= 0.02 * LIMITS[
            "publishRateInMsgs"], (broker_id, shown, quota)
    for q in (q1, q2):  # the fair what-if beside it: a share of the same limit each
        assert 0 < q.fair_messages <= LIMITS["publishRateInMsgs"], q
    assert q1.fair_messages + q2.fair_messages <= LIMITS["publishRateInMsgs"] * 1.001
