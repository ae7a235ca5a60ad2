"""Apache Pulsar admin REST v2: topic stats (the age its backlog-quota check measured), bundles
and their owners.

The broker's /metrics lacks what only the admin API has: `oldestBacklogMessageAgeSeconds`
(PIP-323, brokers >= 3.2) and bundle boundaries and ownership. One fetch walks
tenants → namespaces → persistent topics with bounded concurrency and converts Pulsar's
JSON into the model's dataclasses here, at the boundary. With `AdminSource.namespaces`
the walk starts from those namespaces instead: listing tenants needs a superuser
(`TenantsBase.getTenants`), a tenant's namespaces its admin (`NamespacesBase.
internalGetTenantNamespaces`), a namespace's topics, their stats and its bundles only
`produce` or `consume` there (`PulsarAuthorizationProvider.allowNamespaceOperationAsync`,
`canLookupAsync`), which is what a role without admin rights has.

What is read when: `fetch(choose)` reads the stats of the topics `choose` picks from the
listing (the check loop's: those needing them, engine/attention.py), every topic's when
None; a tenant's namespaces, a namespace's partitioned topics and the clusters are re-read
at most once a period (`_Memo`), the rest every walk.

Failure granularity: if the walk cannot start (tenant list, or every configured namespace's
topic listing: refused, auth, timeout, bad JSON) the fetch fails and the last good
`AdminSnapshot` stays in use; a failure below that (one namespace listing, one topic's
stats, bundle owners, policies a role may not read) is counted by reason (401/403: `auth`)
and that item is left out, and the rest of the snapshot is still used.

Endpoints (Pulsar's `admin/v2` resources):
  GET /admin/v2/tenants                                  → ["public", ...]
  GET /admin/v2/namespaces/{tenant}                      → ["public/default", ...]
  GET /admin/v2/persistent/{tenant}/{ns}                 → every persistent topic, partitions
                                                           included ("…-partition-0")
  GET /admin/v2/persistent/{tenant}/{ns}/partitioned     → partitioned topics (parent names)
  GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats   → TopicStats
  GET …/{topic}/partitioned-stats?perPartition=true      → PartitionedTopicStats, with
                                                           `partitions` keyed by partition name
  GET /admin/v2/namespaces/{tenant}/{ns}/bundles         → {"boundaries": [...], "numBundles"}
  GET /admin/v2/clusters, /admin/v2/brokers/{cluster},
      /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces → {"t/ns/0x…_0x…": {...}}
  Backlog-quota policies: policies.py (on their own period, with the walk's listings).
HTTP (token, TLS, redirects to the owner broker, no proxies) is exporter/adminhttp.py's.
`AdminSource.timeout` bounds each request (each socket operation), not the whole walk.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote

from exporter.adminhttp import AdminHttp, CaFileError, TokenFileError
from exporter.config.settings import AdminSource
from exporter.pulsarnames import partitioned_parent
from exporter.sources.adminjson import (
    bundles_from_json,
    object_of,
    partitioned_stats_from_json,
    strings_of,
    subscription_from_json,
    topic_stats_from_json,
)
from exporter.sources.brokers import FetchFailed, FetchFailure, HealthLedger, classify
from exporter.sources.policies import PolicyCache
from exporter.sources.resourcegroups import GroupCache
from exporter.sources.results import (
    AdminSnapshot,
    BundleOwnership,
    ScrapeError,
    SourceHealth,
    SourceKind,
    TopicStats,
)

__all__ = ["AdminFetched", "AdminScrape", "AdminScraper", "bundles_from_json",
           "partitioned_stats_from_json", "subscription_from_json", "topic_stats_from_json"]
T = TypeVar("T")
A = TypeVar("A")
# Which of the topics a walk listed (partitions by their own names) to read the stats of;
# None: every one (the check loop's choice: engine/attention.py `stats_wanted`).
StatsChoice = Callable[[Sequence[str]], Collection[str]]


# --- HTTP -----------------------------------------------------------------------------------


class _Http:
    """One fetch's admin client, its failures classified for the source's counters."""

    def __init__(self, source: AdminSource):
        try:
            self._http = AdminHttp(source)
        except TokenFileError as exc:
            raise FetchFailure(ScrapeError.AUTH, str(exc)) from exc
        except CaFileError as exc:
            raise FetchFailure(ScrapeError.TLS, str(exc)) from exc

    def get_text(self, path: str) -> str:
        """GET a body that is no JSON document (Pulsar answers a `String` resource raw, and
        `null` as 204 with no body: ""); failures as `get_json`'s."""
        try:
            return self._http.call("GET", path).decode("utf-8")
        except Exception as exc:
            failed = classify(exc)
            raise FetchFailure(failed.reason, f"GET {path}: {failed.detail}") from exc

    def get_json(self, path: str, *, elsewhere_ok: bool = False) -> object:
        """GET and decode; a failure is re-raised classified, naming the path. With
        `elsewhere_ok`, redirects are not followed and a 3xx or 404 answer gives None."""
        try:
            return json.loads(self._http.call("GET", path, follow=not elsewhere_ok))
        except urllib.error.HTTPError as exc:
            if elsewhere_ok and (300 <= exc.code < 400 or exc.code == 404):
                return None
            failed = classify(exc)
            raise FetchFailure(failed.reason, f"GET {path}: {failed.detail}") from exc
        except Exception as exc:
            failed = classify(exc)
            raise FetchFailure(failed.reason, f"GET {path}: {failed.detail}") from exc


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _topic_path(topic: str) -> str:
    scheme, _, rest = topic.partition("://")
    parts = rest.split("/", 2)
    if scheme != "persistent" or len(parts) != 3 or not all(parts):
        raise FetchFailure(ScrapeError.MALFORMED, f"not a persistent topic name: {topic!r}")
    return "/admin/v2/persistent/" + "/".join(_q(p) for p in parts)


def _ns_path(namespace: str) -> str:
    tenant, _, ns = namespace.partition("/")
    return f"{_q(tenant)}/{_q(ns)}"


# --- the walk -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdminFetched:
    """The walk ran; `item_errors` lists what was left out of `snapshot` and why."""

    snapshot: AdminSnapshot
    item_errors: tuple[FetchFailed, ...]


AdminOutcome = AdminFetched | FetchFailed


@dataclass(frozen=True)
class AdminScrape:
    snapshot: AdminSnapshot | None  # last good (its fetched_at says how old); None if never
    health: SourceHealth
    outcome: AdminOutcome


def _attempt(fn: Callable[[A], T], item: A) -> T | FetchFailed:
    try:
        return fn(item)
    except Exception as exc:
        return classify(exc)


class _Memo:
    """Listings that rarely change (a tenant's namespaces, partitioned topics, clusters),
    re-read at most every `refresh_seconds` (as policies are: policies.py); topics,
    bundles, brokers and their bundles are read every walk. A failed read is not kept."""

    def __init__(self, clock: Callable[[], float], refresh_seconds: float = 60.0):
        self._clock = clock
        self.refresh_seconds = refresh_seconds
        self._answers: dict[str, tuple[float, object]] = {}
        self._lock = threading.Lock()  # the walk's pool reads it from several threads

    def bind(self, get: Callable[[str], object]) -> Callable[[str], object]:
        def cached(path: str) -> object:
            now = self._clock()
            with self._lock:
                hit = self._answers.get(path)
            if hit is not None and now - hit[0] < self.refresh_seconds:
                return hit[1]
            doc = get(path)
            with self._lock:
                self._answers[path] = (now, doc)
            return doc
        return cached

    def prune(self) -> None:
        """Forget what no walk asked for lately (a deleted tenant's listing)."""
        horizon = self._clock() - 2 * self.refresh_seconds
        with self._lock:
            self._answers = {p: a for p, a in self._answers.items() if a[0] >= horizon}


class _Walk:
    """One fetch below the tenant list: every step runs its items on the pool and keeps
    going past failed items, which it records in `errors`."""

    def __init__(self, http: _Http, pool: ThreadPoolExecutor, memo: _Memo):
        self.http = http
        self.pool = pool
        self.memo = memo
        self.errors: list[FetchFailed] = []
        self.topic_names: list[str] = []
        self.listed: list[str] = []  # namespaces whose topic listing answered
        self.chosen: set[str] = set()  # topics whose stats were asked for (partitioned: parents)

    def each(self, fn: Callable[[A], T], items: Sequence[A]) -> list[T]:
        results = list(self.pool.map(lambda item: _attempt(fn, item), items))
        self.errors.extend(r for r in results if isinstance(r, FetchFailed))
        return [r for r in results if not isinstance(r, FetchFailed)]

    def listing(self, path: str, where: str, *, rarely_changes: bool = False) -> list[str]:
        get = self.memo.bind(self.http.get_json) if rarely_changes else self.http.get_json
        return strings_of(get(path), where)

    def namespaces(self, tenants: Sequence[str]) -> list[str]:
        lists = self.each(lambda t: self.listing(
            f"/admin/v2/namespaces/{_q(t)}", f"namespaces of {t}", rarely_changes=True), tenants)
        return [ns for names in lists for ns in names]

    def topics(self, namespaces: Sequence[str], choose: StatsChoice | None) -> list[TopicStats]:
        """Non-partitioned topics via /stats, partitioned ones via one partitioned-stats
        call each (their "-partition-N" entries in the plain listing are skipped); only
        those `choose` picks (a partition picked: its partitioned topic's call)."""
        found = self.each(lambda ns: (ns, self.listing(
            f"/admin/v2/persistent/{_ns_path(ns)}", f"topics of {ns}")), namespaces)
        self.listed = [ns for ns, _ in found]
        listed = [topics for _, topics in found]
        partitioned = sorted({p for ps in self.each(lambda ns: self.listing(
            f"/admin/v2/persistent/{_ns_path(ns)}/partitioned", f"partitioned topics of {ns}",
            rarely_changes=True), namespaces) for p in ps})
        parents = set(partitioned)
        plain = [t for ts in listed for t in ts
                 if partitioned_parent(t) not in parents]
        self.topic_names = plain + partitioned  # what topic policies are set on
        if choose is not None:
            picked = set(choose([t for ts in listed for t in ts]))
            plain = [t for t in plain if t in picked]
            wanted_parents = {partitioned_parent(t) or t for t in picked}
            partitioned = [t for t in partitioned if t in wanted_parents]
        self.chosen = set(plain) | set(partitioned)
        single = self.each(lambda t: (topic_stats_from_json(
            t, self.http.get_json(_topic_path(t) + "/stats")),), plain)
        parted = self.each(lambda t: partitioned_stats_from_json(
            t, self.http.get_json(_topic_path(t) + "/partitioned-stats?perPartition=true")),
            partitioned)
        return sorted((s for group in single + parted for s in group), key=lambda s: s.topic)

    def bundles(self, namespaces: Sequence[str]) -> list[BundleOwnership]:
        docs = self.each(lambda ns: (ns, self.http.get_json(
            f"/admin/v2/namespaces/{_ns_path(ns)}/bundles")), namespaces)
        owners = self.owners() if docs else {}
        groups = self.each(lambda doc: bundles_from_json(doc[0], doc[1], owners), docs)
        return [b for group in groups for b in group]

    def owners(self) -> dict[str, str]:
        """Bundle → broker from every local broker's `ownedNamespaces`.

        A cluster that answers the broker listing with a redirect or 404 is another (or a
        pseudo) cluster and is skipped silently; other failures are counted. Bundles not
        loaded on any broker have no owner (None).
        """

        def brokers_of(cluster: str) -> list[tuple[str, str]]:
            found = self.http.get_json(f"/admin/v2/brokers/{_q(cluster)}", elsewhere_ok=True)
            if found is None:
                return []
            return [(cluster, b) for b in strings_of(found, f"brokers of {cluster}")]

        def owned_by(pair: tuple[str, str]) -> dict[str, str]:
            cluster, broker = pair
            owned = object_of(self.http.get_json(
                f"/admin/v2/brokers/{_q(cluster)}/{_q(broker)}/ownedNamespaces"),
                f"namespaces owned by {broker}")
            return dict.fromkeys(owned, broker)

        clusters = self.each(lambda path: self.listing(path, "clusters", rarely_changes=True),
                             ["/admin/v2/clusters"])
        pairs = [p for ps in self.each(brokers_of, [c for cs in clusters for c in cs])
                 for p in ps]
        owners: dict[str, str] = {}
        for owned in self.each(owned_by, pairs):
            owners.update(owned)
        return owners


AUTH_FORGET_SECONDS = 3600.0


class AdminScraper:
    """Fetches one admin REST endpoint; `scrape` keeps the last good snapshot and health."""

    def __init__(
        self,
        source: AdminSource,
        *,
        max_concurrency: int = 8,
        clock: Callable[[], float] = time.time,
        policies: PolicyCache | None = None,
        groups: GroupCache | None = None,
    ):
        """`policies`, `groups`: also read Pulsar's backlog-quota policies, resource groups
        and their bindings (each on its own period)."""
        self.source = source
        self._policies = policies
        self._groups = groups
        self._workers = max(1, max_concurrency)
        self._clock = clock
        self._ledger = HealthLedger(source.url, SourceKind.ADMIN)
        self._last_good: AdminSnapshot | None = None
        self._lock = threading.Lock()
        self._refused: dict[str, float] = {}  # an item's refusal → when last refused
        self._memo = _Memo(clock)

    def scrape(self, choose: StatsChoice | None = None) -> AdminScrape:
        with self._lock:
            outcome = self.fetch(choose)
            if isinstance(outcome, AdminFetched):
                self._last_good = outcome.snapshot
                self._ledger.record(up=True, at=outcome.snapshot.fetched_at,
                                    errors=self._recounted(outcome.item_errors))
            else:
                self._ledger.record(up=False, at=self._clock(), errors=(outcome,))
            return AdminScrape(self._last_good, self._ledger.health(), outcome)

    def _recounted(self, errors: tuple[FetchFailed, ...]) -> tuple[FetchFailed, ...]:
        """An item the role may not read (bundle owners, policies without admin rights:
        Permissions in docs/design.md) is refused at every walk; it is counted when first
        refused, not again while it keeps being refused (seen within AUTH_FORGET_SECONDS),
        so the errors counter says so once instead of paging for ever."""
        now = self._clock()
        self._refused = {k: t for k, t in self._refused.items() if now - t < AUTH_FORGET_SECONDS}
        kept = []
        for error in errors:
            if error.reason is ScrapeError.AUTH:
                known = error.detail in self._refused
                self._refused[error.detail] = now
                if known:
                    continue
            kept.append(error)
        return tuple(kept)

    def fetch(self, choose: StatsChoice | None = None) -> AdminOutcome:
        """One walk over the cluster (or `source.namespaces`), reading the stats of the
        topics `choose` picks (None: every topic's)."""
        self._memo.prune()
        try:
            http = _Http(self.source)
            tenants = () if self.source.namespaces else strings_of(
                http.get_json("/admin/v2/tenants"), "tenants")  # every walk: proves access
        except Exception as exc:
            return classify(exc)
        with ThreadPoolExecutor(self._workers, thread_name_prefix="admin-fetch") as pool:
            walk = _Walk(http, pool, self._memo)
            namespaces = list(self.source.namespaces) or walk.namespaces(tenants)
            topics = walk.topics(namespaces, choose)
            if self.source.namespaces and not walk.listed:
                return walk.errors[0]  # as a refused tenant list: keep the last good data
            bundles = walk.bundles(namespaces)
            listed = not walk.errors  # before the policy reads add theirs
            quotas = self._policies.read(walk.each, http.get_json, namespaces,
                                         walk.topic_names, self._clock(), complete=listed,
                                         now_too=walk.chosen if choose else ()) \
                if self._policies else None
            groups = self._groups.read(walk.each, http.get_json, namespaces, self._clock(),
                                       complete=listed, topics=walk.topic_names,
                                       get_text=http.get_text) if self._groups else None
        snapshot = AdminSnapshot(self._clock(), tuple(topics), tuple(bundles), quotas, groups)
        return AdminFetched(snapshot, tuple(walk.errors))
