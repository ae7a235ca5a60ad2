"""Pulsar's own topics and cursors, which a backlog quota never touches.

System topics: the broker loads them as `SystemTopic` (`BrokerService.isSystemTopic`:
`NamespaceService.isSystemServiceNamespace` or `SystemTopicNames.isSystemTopic`), whose
`isSizeBacklogExceeded` and `checkTimeBacklogExceeded` always answer false: the broker's
quota check visits them and never holds, fails or evicts anything there. They carry topic
policies (`__change_events`) and transaction state; evicting them loses that state.

System cursors: `__compaction` is a subscription in the stats and on /metrics (the
compacted view is built from it); replicator (`pulsar.repl.<cluster>`) and deduplication
(`pulsar.dedup`) cursors are not subscriptions, but an admin `skip` on a name starting
`pulsar.repl` reaches the replicator (`PersistentTopicsBase.internalSkipMessages`). The
broker's size eviction would skip whichever durable cursor is slowest, these included (a
comment in `BacklogQuotaManager.dropBacklogForSizeLimit` says so); we never do by default.
"""

from __future__ import annotations

import re

# NamespaceService.HEARTBEAT_NAMESPACE_PATTERN(_V2) and SLA_NAMESPACE_PATTERN, whole match
SLA_OR_HEARTBEAT = (
    re.compile(r"sla-monitor/[^/]+/([^:]+:\d+)"),
    re.compile(r"pulsar/[^/]+/([^:]+:\d+)"),
    re.compile(r"pulsar/([^:]+:\d+)"),
)
_SYSTEM_TENANTS = ("sla-monitor/", "pulsar/")  # the tenants SLA_OR_HEARTBEAT can match
SYSTEM_NAMESPACE = "pulsar/system"  # NamespaceName.SYSTEM_NAMESPACE
# SystemTopicNames.EVENTS_TOPIC_NAMES
_EVENTS_TOPICS = frozenset({
    "__change_events", "__transaction_buffer_snapshot",
    "__transaction_buffer_snapshot_segments", "__transaction_buffer_snapshot_indexes",
})
_PARTITION = re.compile(r"-partition-\d+$")
SYSTEM_CURSOR_PREFIXES = ("__compaction", "pulsar.repl", "pulsar.dedup")


def is_system_namespace(namespace: str) -> bool:
    """A heartbeat, SLA-monitor or `pulsar/system` namespace (Pulsar's patterns). Every
    pattern starts with its tenant, so other namespaces are told apart without them: the
    engine asks once per topic."""
    return namespace == SYSTEM_NAMESPACE or (
        namespace.startswith(_SYSTEM_TENANTS)
        and any(p.fullmatch(namespace) for p in SLA_OR_HEARTBEAT))


def is_system_topic(topic: str) -> bool:
    """`persistent://t/ns/x` is one of Pulsar's system topics (module docstring); a
    partition is one when its partitioned topic is. Every name of a system topic outside a
    system namespace contains `__`, and every system namespace is of a tenant in
    `_SYSTEM_TENANTS`: most topics are told apart by three substring searches (the engine
    asks for every topic)."""
    if "__" not in topic and "pulsar/" not in topic and "sla-monitor/" not in topic:
        return False
    _, _, rest = topic.partition("://")
    namespace, _, local = rest.rpartition("/")
    if is_system_namespace(namespace):
        return True
    if "__" not in local:
        return False
    local = _PARTITION.sub("", local)
    return local in _EVENTS_TOPICS or local.endswith("__transaction_pending_ack")


def is_system_cursor(subscription: str) -> bool:
    return subscription.startswith(SYSTEM_CURSOR_PREFIXES)
