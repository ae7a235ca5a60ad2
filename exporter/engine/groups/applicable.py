"""Which resource groups apply: the YAML's, Pulsar's (admin REST), or both.

Under `both` Pulsar's groups are the base and the YAML overrides them: a YAML group replaces
Pulsar's group of the same name whole (limits and bindings), and a tenant, namespace or topic
the YAML binds leaves whatever Pulsar group it was bound to, since each belongs to one group
only (`ResourceGroupService` keeps one group per namespace, `TopicPolicies` one per topic).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from exporter.config.settings import PolicySource, ResourceGroup


def effective_groups(yaml: Mapping[str, ResourceGroup],
                     pulsar: Mapping[str, ResourceGroup] | None,
                     source: PolicySource) -> Mapping[str, ResourceGroup]:
    """`pulsar` is None until the admin source has been read once: the YAML's meanwhile."""
    if source is PolicySource.CONFIG or pulsar is None:
        return yaml
    if source is PolicySource.PULSAR:
        return pulsar
    tenants = {t for g in yaml.values() for t in g.tenants}
    namespaces = {ns for g in yaml.values() for ns in g.namespaces}
    topics = {t for g in yaml.values() for t in g.topics}
    out = {name: dataclasses.replace(
               g, tenants=tuple(t for t in g.tenants if t not in tenants),
               namespaces=tuple(ns for ns in g.namespaces if ns not in namespaces),
               topics=tuple(t for t in g.topics if t not in topics))
           for name, g in pulsar.items() if name not in yaml}
    out.update(yaml)
    return MappingProxyType(dict(sorted(out.items())))
