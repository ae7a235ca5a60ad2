"""One enforcer at a time on the real two-broker cluster (actions/lease.py): two enforcing
exporters, each reaching the cluster through a different broker, agree on one holder; the
lock topic's bundle moving to the other broker (an unload, as the load manager sheds) leaves
exactly one holder at every cycle; and the holder's evictions reach a topic owned by the
other broker (the admin REST redirects to the owner), cutting it once.
"""

from __future__ import annotations

from exporter.actions.orders import LeaseState
from exporter.runtime.cycle import Exporter
from tests.cluster.helpers import exporter_for, namespace, one_topic_per_broker, unload
from tests.harness.apache_cluster import ApacheCluster
from tests.harness.wait import poll

MESSAGES = 100


def _states(exporters: list[Exporter]) -> list[LeaseState]:
    for exporter in exporters:
        exporter.cycle()
    return [e.lease.state if e.lease else LeaseState.STANDING_BY for e in exporters]


def test_one_holder_through_a_bundle_move_and_one_cut_across_brokers(
        apache_cluster: ApacheCluster) -> None:
    _, owned = one_topic_per_broker(apache_cluster, "enforcer")
    far = owned[apache_cluster.brokers[1].broker_id]  # owned by the broker not asked
    apache_cluster.brokers[0].produce(far, MESSAGES, 200)
    size = apache_cluster.brokers[0].topic_stats(far)["subscriptions"]["s"]["backlogSize"]
    limit = int(size / MESSAGES * 20.5)
    # what the broker's rule leaves (int)((size − 0.9 × limit) / size × entries) skipped
    left = MESSAGES - int((size - 0.9 * limit) / size * MESSAGES)
    lock_ns = namespace(apache_cluster, "lock", bundles=1)
    lock = f"persistent://{lock_ns}/enforcer"
    quotas = {"enforce": True, "lock_topic": lock, "topics": {
        far: {"limit_size": limit, "policy": "consumer_backlog_eviction"}}}
    exporters = [exporter_for(apache_cluster, admin_from=i, quotas=quotas) for i in (0, 1)]
    try:
        states = poll(lambda: (s := _states(exporters)) and LeaseState.HOLDING in s and s,
                      "one exporter holding the lease", timeout=60, interval=0.5)
        assert sorted(states) == [LeaseState.HOLDING, LeaseState.STANDING_BY], states
        poll(lambda: _states(exporters) and apache_cluster.brokers[0].topic_stats(far)[
            "subscriptions"]["s"]["msgBacklog"] == left, "the holder's cut of the far topic",
             timeout=60, interval=0.5)

        before = apache_cluster.owner(lock)
        other = next(b.broker_id for b in apache_cluster.brokers if b.broker_id != before)
        unload(apache_cluster, lock, apache_cluster.bundle_of(lock), other)
        seen = [_states(exporters) for _ in range(10)]

        def one_holder() -> bool:
            """Ten cycles are time, not a condition: the holder's producer reconnects
            through lookups that may meet the bundle still landing (clients back off)."""
            seen.append(_states(exporters))
            return seen[-1].count(LeaseState.HOLDING) == 1

        poll(one_holder, "one exporter holding the lease after the move", timeout=60)
        print(f"lock topic moved {before} -> {apache_cluster.owner(lock)}; states {seen}")
        assert all(s.count(LeaseState.HOLDING) <= 1 for s in seen), seen
        assert sum(e.lease.acquired for e in exporters if e.lease) <= 2
        assert apache_cluster.brokers[0].topic_stats(far)["subscriptions"]["s"][
            "msgBacklog"] == left  # cut once, by one of them
    finally:
        for exporter in exporters:
            exporter.close()
