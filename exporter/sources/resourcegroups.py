"""Pulsar's resource groups and their namespace bindings over the admin REST, cached.

Endpoints (Pulsar's `admin/v2` resources):
  GET /admin/v2/resourcegroups            → ["name", …]
  GET /admin/v2/resourcegroups/{name}     → {"publishRateInMsgs": 50, "publishRateInBytes": …,
                                             "dispatchRateInMsgs": …, "dispatchRateInBytes": …}
                                             (`ResourceGroup`; null or left out = -1, unlimited,
                                             as `ResourceGroup.setResourceGroupConfigParameters`)
  GET /admin/v2/namespaces/{t}/{ns}       → the namespace's `Policies`; `resource_group_name`
                                             is its binding (`namespaces set-resource-group`)
Pulsar 4.0 binds groups to namespaces over the admin REST only (`TenantInfo` has no resource
group), so groups read from Pulsar bind no tenants. A broker without resource groups (404,
405: pulsar-lite, say) has none. Like backlog-quota policies (policies.py), everything is
re-read at most every `refresh_seconds`; a failed read keeps what was cached.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar
from urllib.parse import quote

from exporter.config.model import RateLimit, ResourceGroup
from exporter.sources.brokers import FetchFailure
from exporter.sources.model import ScrapeError

A = TypeVar("A")
T = TypeVar("T")
Each = Callable[[Callable[[A], T], Sequence[A]], list[T]]
Get = Callable[[str], object]


def _rate(doc: Mapping, key: str, where: str) -> int:
    value = doc.get(key)
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: {key!r} is not an integer")
    return value if value >= 0 else -1


def group_from_json(name: str, doc: object) -> ResourceGroup:
    """One `GET /admin/v2/resourcegroups/{name}` answer → its limits (no bindings yet)."""
    where = f"resource group {name!r}"
    if not isinstance(doc, Mapping):
        raise FetchFailure(ScrapeError.MALFORMED, f"{where}: expected a JSON object")
    return ResourceGroup(
        name=name,
        publish=RateLimit(_rate(doc, "publishRateInMsgs", where),
                          _rate(doc, "publishRateInBytes", where)),
        dispatch=RateLimit(_rate(doc, "dispatchRateInMsgs", where),
                           _rate(doc, "dispatchRateInBytes", where)))


def binding_from_json(namespace: str, doc: object) -> str | None:
    """A namespace's `Policies` → the resource group it is bound to, if any."""
    if not isinstance(doc, Mapping):
        raise FetchFailure(ScrapeError.MALFORMED, f"{namespace} policies: expected an object")
    name = doc.get("resource_group_name")
    if name is not None and not isinstance(name, str):
        raise FetchFailure(ScrapeError.MALFORMED,
                           f"{namespace} policies: resource_group_name is not a string")
    return name or None


def _none_here(exc: FetchFailure) -> bool:
    cause = exc.__cause__
    return isinstance(cause, urllib.error.HTTPError) and cause.code in (404, 405)


def _names(get: Get, path: str) -> list[str]:
    try:
        names = get(path)
    except FetchFailure as exc:
        if _none_here(exc):
            return []
        raise
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise FetchFailure(ScrapeError.MALFORMED, "resource groups: expected a list of names")
    return names


def _binding(get: Get, namespace: str) -> str | None:
    path = "/".join(quote(part, safe="") for part in namespace.split("/"))
    try:
        return binding_from_json(namespace, get(f"/admin/v2/namespaces/{path}"))
    except FetchFailure as exc:
        if _none_here(exc):  # deleted since it was listed
            return None
        raise


class GroupCache:
    """Pulsar's resource groups with their bindings; used by one admin walk at a time."""

    def __init__(self, refresh_seconds: float = 60.0):
        self.refresh_seconds = refresh_seconds
        self._at: float | None = None
        self._groups: dict[str, ResourceGroup] = {}
        self._bindings: dict[str, str | None] = {}  # namespace → group

    def read(self, each: Each, get: Get, namespaces: Sequence[str], now: float, *,
             complete: bool = True) -> Mapping[str, ResourceGroup]:
        """`namespaces` as the walk listed them; `each` runs a function over items, leaving
        out (and recording) those that failed. Bindings of namespaces not listed are
        forgotten only after a `complete` listing."""
        if self._at is None or now - self._at >= self.refresh_seconds:
            self._refresh(each, get, namespaces, now)
        else:  # a namespace first seen is read at once
            self._read_bindings(each, get, [ns for ns in namespaces if ns not in self._bindings])
        if complete:
            listed = set(namespaces)
            self._bindings = {ns: g for ns, g in self._bindings.items() if ns in listed}
        return self.snapshot()

    def _refresh(self, each: Each, get: Get, namespaces: Sequence[str], now: float) -> None:
        listed = each(lambda path: _names(get, path), ["/admin/v2/resourcegroups"])
        if not listed:  # the failure is recorded; the cache stays, retried next cycle
            return
        names = listed[0]
        read = dict(each(lambda n: (n, group_from_json(
            n, get(f"/admin/v2/resourcegroups/{quote(n, safe='')}"))), names))
        self._groups = {n: read.get(n, self._groups.get(n)) for n in names
                        if n in read or n in self._groups}
        self._read_bindings(each, get, namespaces)
        self._at = now

    def _read_bindings(self, each: Each, get: Get, namespaces: Sequence[str]) -> None:
        for ns, group in each(lambda ns: (ns, _binding(get, ns)), namespaces):
            self._bindings[ns] = group

    def snapshot(self) -> Mapping[str, ResourceGroup]:
        bound: dict[str, list[str]] = {}
        for ns, group in sorted(self._bindings.items()):
            if group is not None:
                bound.setdefault(group, []).append(ns)
        return MappingProxyType({name: ResourceGroup(
            name, g.publish, g.dispatch, namespaces=tuple(bound.get(name, ())))
            for name, g in sorted(self._groups.items())})
