"""Pulsar's resource groups and their bindings over the admin REST, cached.

Endpoints (Pulsar's `admin/v2` resources):
  GET /admin/v2/resourcegroups            → ["name", …]
  GET /admin/v2/resourcegroups/{name}     → {"publishRateInMsgs": 50, "publishRateInBytes": …,
                                             "dispatchRateInMsgs": …, "dispatchRateInBytes": …,
                                             "replicationDispatchRateInMsgs": …, …InBytes}
                                             (`ResourceGroup`; null or left out = -1, unlimited,
                                             as `ResourceGroup.setResourceGroupConfigParameters`;
                                             the replication pair is Pulsar master's, 4.0.8 has
                                             none. Master's per-remote-cluster
                                             `replicatorDispatchRate` entries are not read:
                                             all remote clusters are one pool here)
  GET /admin/v2/namespaces/{t}/{ns}       → the namespace's `Policies`; `resource_group_name`
                                             is its binding (`namespaces set-resource-group`)
  GET /admin/v2/persistent/{t}/{ns}/{topic}/resourceGroup
                                          → the topic's own binding (Pulsar master,
                                             `TopicPolicies.resourceGroupName`): the name as
                                             raw text, 204 (no body) when unset. 4.0.8 has no
                                             such resource: Jetty's HTML 404 (measured)
Pulsar 4.0 binds groups to namespaces over the admin REST only (`TenantInfo` has no resource
group), so groups read from Pulsar bind no tenants. A broker without resource groups (404,
405: pulsar-lite, say) has none. Like backlog-quota policies (policies.py), groups and
namespace bindings are re-read at most every `refresh_seconds`; a failed read keeps what was
cached. Topic bindings: `TopicBindings`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar
from urllib.parse import quote

from exporter.config.settings import RateLimit, ResourceGroup
from exporter.sources.brokers import FetchFailure
from exporter.sources.results import ScrapeError

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
                           _rate(doc, "dispatchRateInBytes", where)),
        replication_dispatch=RateLimit(_rate(doc, "replicationDispatchRateInMsgs", where),
                                       _rate(doc, "replicationDispatchRateInBytes", where)))


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


def topic_binding_from_text(topic: str, body: str) -> str | None:
    """`GET …/{topic}/resourceGroup`'s body → the group's name, None when unset. Pulsar
    writes a `String` resource raw (Jackson leaves `String` to JAX-RS' own writer), but a
    JSON string is taken too."""
    text = body.strip()
    if text.startswith('"'):
        try:
            text = json.loads(text)
        except json.JSONDecodeError:
            raise FetchFailure(ScrapeError.MALFORMED, f"{topic} resource group: bad JSON") from None
    if not isinstance(text, str) or not _GROUP_NAME.fullmatch(text):
        raise FetchFailure(ScrapeError.MALFORMED, f"{topic} resource group: not a group name")
    return text or None


def _no_such_resource(exc: FetchFailure) -> bool:
    """A broker without topic bindings (4.0.8): its web server's own 404 or 405, not one of
    Pulsar's JSON refusals (`{"reason": "Topic not found"}`: a topic deleted since listed)."""
    cause = exc.__cause__
    return (isinstance(cause, urllib.error.HTTPError) and cause.code in (404, 405)
            and "json" not in (cause.headers.get("Content-Type") or ""))


_UNSUPPORTED = object()
_GROUP_NAME = re.compile(r"[-=:.\w]*")  # Pulsar's NamedEntity.checkName


class TopicBindings:
    """Each topic's own group, on brokers that have them. Nothing tells us a binding was set
    (the broker prints none), so each topic is read when first seen, then again at least
    every `rolling_seconds`, a share of the topics each walk (never all at once); a bound
    topic every `refresh_seconds`, so a removed binding goes as fast as a namespace's. A
    broker answering the first read with no such resource has none, and a role refused it
    may read none: asked again only after `refresh_seconds`, one request."""

    def __init__(self, refresh_seconds: float = 60.0, rolling_seconds: float = 600.0):
        self.refresh_seconds = refresh_seconds
        self.rolling_seconds = rolling_seconds
        self._read: dict[str, tuple[float, str | None]] = {}  # topic → (when, group)
        self._none_since: float | None = None  # the broker had no such resource then
        self._last_walk: float | None = None

    def read(self, each: Each, get_text: Callable[[str], str], topics: Sequence[str],
             now: float, *, complete: bool) -> Mapping[str, str]:
        """`topics` as the walk listed them (partitioned topics by their own name)."""
        elapsed = self.rolling_seconds if self._last_walk is None else now - self._last_walk
        self._last_walk = now
        if self._none_since is not None and now - self._none_since < self.refresh_seconds:
            return {}
        wanted = self._due(topics, now, elapsed)
        if wanted and (self._none_since is not None or not self._read):  # probe with one
            if self._read_some(each, get_text, wanted[:1], now) is _UNSUPPORTED:
                return {}
            wanted = wanted[1:]
        self._read_some(each, get_text, wanted, now)
        if complete:
            listed = set(topics)
            self._read = {t: v for t, v in self._read.items() if t in listed}
        return {t: g for t, (_, g) in sorted(self._read.items()) if g is not None}

    def _due(self, topics: Sequence[str], now: float, elapsed: float) -> list[str]:
        first, bound, idle = [], [], []
        for topic in topics:
            seen = self._read.get(topic)
            if seen is None:
                first.append(topic)
            elif seen[1] is not None:
                if now - seen[0] >= self.refresh_seconds:
                    bound.append(topic)
            elif now - seen[0] >= self.rolling_seconds:
                idle.append((seen[0], topic))
        share = math.ceil(len(topics) * max(elapsed, 0.0) / self.rolling_seconds)
        return first + bound + [t for _, t in sorted(idle)[:share]]

    def _read_some(self, each: Each, get_text: Callable[[str], str], topics: Sequence[str],
                   now: float) -> object:
        def one(topic: str) -> tuple[str, object]:
            scheme, _, rest = topic.partition("://")
            path = f"/admin/v2/{scheme}/" + "/".join(quote(p, safe="") for p in rest.split("/"))
            try:
                return topic, topic_binding_from_text(topic, get_text(f"{path}/resourceGroup"))
            except FetchFailure as exc:
                if _no_such_resource(exc):
                    return topic, _UNSUPPORTED
                if exc.failure.reason is ScrapeError.AUTH:
                    refused.append(topic)
                raise

        refused: list[str] = []
        answers = each(one, topics)
        if refused or any(group is _UNSUPPORTED for _, group in answers):
            # none here, or not for this role (tenant admin; counted once as `auth`)
            self._none_since, self._read = now, {}
            return _UNSUPPORTED
        self._none_since = None
        for topic, group in answers:
            self._read[topic] = (now, group)
        return None


class GroupCache:
    """Pulsar's resource groups with their bindings; used by one admin walk at a time."""

    def __init__(self, refresh_seconds: float = 60.0):
        self.refresh_seconds = refresh_seconds
        self._at: float | None = None
        self._groups: dict[str, ResourceGroup] = {}
        self._bindings: dict[str, str | None] = {}  # namespace → group
        self._topics = TopicBindings(refresh_seconds)
        self._topic_bindings: Mapping[str, str] = {}  # topic → group

    def read(self, each: Each, get: Get, namespaces: Sequence[str], now: float, *,
             complete: bool = True, topics: Sequence[str] = (),
             get_text: Callable[[str], str] | None = None) -> Mapping[str, ResourceGroup]:
        """`namespaces` and `topics` as the walk listed them; `each` runs a function over
        items, leaving out (and recording) those that failed; `get_text` reads topic
        bindings (none without it). Bindings of what was not listed are forgotten only
        after a `complete` listing."""
        if self._at is None or now - self._at >= self.refresh_seconds:
            self._refresh(each, get, namespaces, now)
        else:  # a namespace first seen is read at once
            self._read_bindings(each, get, [ns for ns in namespaces if ns not in self._bindings])
        if complete:
            listed = set(namespaces)
            self._bindings = {ns: g for ns, g in self._bindings.items() if ns in listed}
        if get_text is not None and self._groups:
            self._topic_bindings = self._topics.read(each, get_text, topics, now,
                                                     complete=complete)
        return self.snapshot()

    def _refresh(self, each: Each, get: Get, namespaces: Sequence[str], now: float) -> None:
        listed = each(lambda path: _names(get, path), ["/admin/v2/resourcegroups"])
        if not listed:  # the failure is recorded; the cache stays, retried next cycle
            return
        names = listed[0]
        read = dict(each(lambda n: (n, group_from_json(
            n, get(f"/admin/v2/resourcegroups/{quote(n, safe='')}"))), names))
        self._groups = {n: read[n] if n in read else self._groups[n] for n in names
                        if n in read or n in self._groups}
        self._read_bindings(each, get, namespaces)
        self._at = now

    def _read_bindings(self, each: Each, get: Get, namespaces: Sequence[str]) -> None:
        for ns, group in each(lambda ns: (ns, _binding(get, ns)), namespaces):
            self._bindings[ns] = group

    def snapshot(self) -> Mapping[str, ResourceGroup]:
        namespaces: dict[str, list[str]] = {}
        for ns, group in sorted(self._bindings.items()):
            if group is not None:
                namespaces.setdefault(group, []).append(ns)
        topics: dict[str, list[str]] = {}
        for topic, group in self._topic_bindings.items():
            topics.setdefault(group, []).append(topic)
        return MappingProxyType({name: dataclasses.replace(
            g, namespaces=tuple(namespaces.get(name, ())), topics=tuple(topics.get(name, ())))
            for name, g in sorted(self._groups.items())})
