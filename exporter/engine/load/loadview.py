"""One cycle's load verdicts: the pipeline's broker and bundle tables, the admin snapshot's
bundle owners, the `load_manager` config and the last cycle's `LoadState` → `LoadResult`
(engine/load/shedders.py runs the configured shedder, engine/load/loadbalance.py splits).

Semantics decided here:

- **Which broker.** A broker is named by `broker_id(source)`: `host:port` of its /metrics
  URL (host lower-cased, the scheme's port when the URL has none). Apache Pulsar names a
  broker `advertisedAddress:webServicePort` (`pulsar-admin brokers list` → `localhost:8080`,
  the key of `ownedNamespaces`), and /metrics is served on the web-service port, so the two
  agree when the URL names the advertised host. The `broker` label of Pulsar's own
  `pulsar_lb_*` gauges is the advertised host without the port: two brokers on one host
  would share it, so it is not used. Two sources with the same host:port keep their URLs.
- **Which bundles.** A broker's bundles are its rows of the BUNDLES table (its share of
  each, after topic de-duplication). With the admin snapshot's bundles given to the
  pipeline, topics are placed by Pulsar's own hash (pipeline/merge.py, `place`). Without them a
  namespace is one bundle, `tenant/ns/0x00000000_0xffffffff`: split verdicts are then per
  namespace (and per broker's share of it for shedding). A broker reporting only
  namespace-level series (topic-level metrics off) gives its share of a namespace as that
  full-range bundle too. An admin-listed bundle no scraped broker reports a topic of is
  added, empty, to its owner (when the owner is a scraped broker), because Pulsar counts
  every owned bundle in the "a broker with one bundle is never shed" rule.
- **Whole bundles** (for split verdicts) sum the shares of every broker; the owner named
  in a `SplitCandidate` is the broker holding most of its topics (ties: the smaller id).
- **Rates** are the brokers' own rate gauges (`pulsar_rate_in`, `pulsar_throughput_out`,
  ...; pulsar-lite's out rates are its subscriptions' sums): the per-interval rates
  Pulsar's load manager reads too, so no counter diff (and no second cycle) is needed. A
  rate or count missing, NaN or negative counts as 0.
- **Usage.** A broker without all of cpu, memory and bandwidth in/out (`pulsar_lb_*`;
  direct memory is optional, as in the engine) gets no verdict: `Unjudged`, with why.
  The shedder sees the judged brokers only (a cluster-wide strategy's average or spread
  is then over them), while every broker with a body counts as available for Pulsar's
  "at least two brokers" rule.
- **Recently unloaded.** Pulsar's leader skips bundles it unloaded within the grace
  period; that map lives in its memory. `BundleMoves` approximates it: a bundle reported
  by one broker that was last seen on another moved at this cycle's time. It also counts
  moves the shedder did not make (an admin unload, a broker restart), and sees a move up
  to one cycle late.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from urllib.parse import urlsplit

from exporter.config.settings import LoadManager, SheddingStrategy
from exporter.engine.load.avgshedder import AvgHits
from exporter.engine.load.loadbalance import (
    BrokerLoad,
    BrokerVerdict,
    BundleStats,
    SplitCandidate,
    split_candidates,
)
from exporter.engine.load.shedders import SkipReason, ThresholdHistory, shed
from exporter.pipeline.aggregates import Aggregates
from exporter.sources.results import AdminSnapshot

_DEFAULT_PORTS = {"http": 80, "https": 443}
_REQUIRED_USAGE = ("cpu_percent", "memory_percent", "bandwidth_in_percent",
                   "bandwidth_out_percent")
_USAGE = (*_REQUIRED_USAGE, "direct_memory_percent")


def broker_id(source: str) -> str:
    """`host:port` of a broker source URL (Pulsar's broker id form); the URL itself when it
    names no host or port (then nothing is guessed)."""
    parts = urlsplit(source)
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:  # a port that is not a number
        return source
    host = parts.hostname
    if not host or port is None:
        return source
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def broker_ids(sources: Iterable[str]) -> dict[str, str]:
    """source → broker id, unique: sources that would share a host:port keep their URLs."""
    sources = sorted(set(sources))
    ids = {s: broker_id(s) for s in sources}
    counts: dict[str, int] = defaultdict(int)
    for b in ids.values():
        counts[b] += 1
    return {s: (b if counts[b] == 1 else s) for s, b in ids.items()}


class UsageGap(StrEnum):
    """Why a broker has no verdict."""

    NOT_REPORTED = "not_reported"  # no pulsar_lb_* gauge at all (pulsar-lite)
    INCOMPLETE = "incomplete"  # some of cpu, memory, bandwidth in/out missing
    INVALID = "invalid"  # a usage that is NaN, infinite or negative


@dataclass(frozen=True)
class Judged:
    """A broker the engine ruled on: what it was given and what it decided."""

    source: str
    load: BrokerLoad
    verdict: BrokerVerdict

    @property
    def broker(self) -> str:
        return self.load.broker


@dataclass(frozen=True)
class Unjudged:
    """A broker without a verdict (and without load series): its bundles still count for
    split verdicts."""

    source: str
    broker: str
    gap: UsageGap
    bundles: tuple[BundleStats, ...]


BrokerResult = Judged | Unjudged


def _empty() -> Mapping:
    return MappingProxyType({})


@dataclass(frozen=True)
class BundleMoves:
    """Bundle → its sole owner when last seen, and → when it last changed owner (kept
    for the grace period)."""

    owners: Mapping[str, str] = field(default_factory=_empty)
    moved_at: Mapping[str, float] = field(default_factory=_empty)

    def recent(self) -> frozenset[str]:
        return frozenset(self.moved_at)


def track_moves(before: BundleMoves, shares: Iterable[BundleStats], now: float,
                grace: float) -> BundleMoves:
    """This cycle's owners: a bundle reported by exactly one broker is owned by it (a
    namespace's pseudo-bundle split over brokers has no single owner and never moves).
    Moves older than `grace` are forgotten, as Pulsar drops entries older than
    `loadBalancerSheddingGracePeriodMinutes` before each run; vanished bundles too."""
    holders: dict[str, set[str]] = defaultdict(set)
    for s in shares:
        holders[s.name].add(s.broker)
    owners = {name: next(iter(b)) for name, b in holders.items() if len(b) == 1}
    moved = {name: at for name, at in before.moved_at.items()
             if name in holders and at >= now - grace}
    for name, owner in owners.items():
        if before.owners.get(name, owner) != owner:
            moved[name] = now
    return BundleMoves(MappingProxyType(owners), MappingProxyType(moved))


@dataclass(frozen=True)
class LoadState:
    """What the load verdicts carry from one cycle to the next."""

    history: ThresholdHistory = field(default_factory=ThresholdHistory)
    moves: BundleMoves = BundleMoves()
    hits: AvgHits = field(default_factory=AvgHits)  # AvgShedder's hit counts


@dataclass(frozen=True)
class LoadResult:
    brokers: tuple[BrokerResult, ...]  # one per broker source with a body, by broker id
    bundles: tuple[BundleStats, ...]  # whole bundles (every broker's share summed), by name
    splits: tuple[SplitCandidate, ...]  # by bundle name
    strategy: SheddingStrategy = SheddingStrategy.THRESHOLD
    skipped: SkipReason | None = None  # why no broker was considered at all
    recently_unloaded: frozenset[str] = frozenset()  # what the shedder left alone
    state: LoadState = LoadState()  # for the next cycle

    def broker(self, broker: str) -> BrokerResult | None:
        return next((b for b in self.brokers if b.broker == broker), None)


def _number(value: float | None) -> float:
    """A rate or count as the engine takes it: missing, NaN or negative → 0."""
    return value if value is not None and math.isfinite(value) and value > 0 else 0.0


def _shares(rows: Sequence[Mapping], ids: Mapping[str, str]) -> list[BundleStats]:
    return [
        BundleStats(
            name=f"{r['namespace']}/{r['bundle']}",
            broker=ids[r["source"]],
            topics=round(_number(r["topics"])),
            producers=round(_number(r["producers"])),
            consumers=round(_number(r["consumers"])),
            msg_rate_in=_number(r["rate_in"]),
            msg_rate_out=_number(r["rate_out"]),
            throughput_in=_number(r["throughput_in"]),
            throughput_out=_number(r["throughput_out"]),
        )
        for r in rows
        if r["source"] in ids
    ]


def _owner_key(broker: str) -> str:
    """An admin-reported owner (`host:port`, or a URL on some versions) as comparable with
    `broker_id`: hosts are case-insensitive."""
    return (broker_id(broker) if "://" in broker else broker).lower()


def _owned_empty(admin: AdminSnapshot | None, shares: Sequence[BundleStats],
                 ids: Mapping[str, str]) -> list[BundleStats]:
    """Admin-listed bundles with no reported topic, for their scraped owners. Skipped for a
    namespace whose reported bundles are not the admin's (its boundaries were not used, so
    adding the admin's ranges would give a broker two views of one namespace)."""
    if admin is None:
        return []
    by_id = {_owner_key(b): b for b in ids.values()}
    listed: dict[str, set[str]] = defaultdict(set)
    for b in admin.bundles:
        listed[b.namespace].add(f"{b.namespace}/{b.bundle}")
    reported = {s.name for s in shares}
    foreign = {s.namespace for s in shares if s.name not in listed[s.namespace]}
    out: list[BundleStats] = []
    for b in admin.bundles:
        name = f"{b.namespace}/{b.bundle}"
        owner = by_id.get(_owner_key(b.broker or ""))
        if owner is None or name in reported or b.namespace in foreign:
            continue
        try:
            out.append(BundleStats(name, owner, 0, 0, 0, 0.0, 0.0, 0.0, 0.0))
        except ValueError:  # a range the admin source let through but no bundle can have
            continue
        reported.add(name)
    return out


def _whole(shares: Iterable[BundleStats]) -> list[BundleStats]:
    """Shares of one bundle summed; owner: most topics, then the smaller broker id."""
    by_name: dict[str, list[BundleStats]] = defaultdict(list)
    for s in shares:
        by_name[s.name].append(s)
    out = []
    for name, parts in sorted(by_name.items()):
        owner = min(parts, key=lambda s: (-s.topics, s.broker)).broker
        out.append(BundleStats(
            name=name,
            broker=owner,
            topics=sum(s.topics for s in parts),
            producers=sum(s.producers for s in parts),
            consumers=sum(s.consumers for s in parts),
            msg_rate_in=math.fsum(s.msg_rate_in for s in parts),
            msg_rate_out=math.fsum(s.msg_rate_out for s in parts),
            throughput_in=math.fsum(s.throughput_in for s in parts),
            throughput_out=math.fsum(s.throughput_out for s in parts),
        ))
    return out


def _gap(row: Mapping) -> UsageGap | None:
    values = [row.get(c) for c in _USAGE]
    if all(v is None for v in values):
        return UsageGap.NOT_REPORTED
    if any(row.get(c) is None for c in _REQUIRED_USAGE):
        return UsageGap.INCOMPLETE
    if any(v is not None and (not math.isfinite(v) or v < 0) for v in values):
        return UsageGap.INVALID
    return None


def evaluate_load(agg: Aggregates, admin: AdminSnapshot | None, cfg: LoadManager,
                  recently_unloaded: frozenset[str] = frozenset(),
                  state: LoadState = LoadState(), now: float | None = None) -> LoadResult:
    """Every broker's shedding verdict under `cfg.load_shedding_strategy` and every
    bundle's split verdict for one cycle. `recently_unloaded` (full bundle names) adds to
    the bundles `state` saw move within the grace period; `now` (seconds) dates moves and
    paces the ThresholdShedder history (None: no moves tracked, history always advanced).
    The result's `state` is the next cycle's."""
    brokers = agg.brokers.to_pylist()
    ids = broker_ids(r["source"] for r in brokers)
    shares = _shares(agg.bundles.to_pylist(), ids)
    shares += _owned_empty(admin, shares, ids)
    moves = state.moves if now is None else track_moves(
        state.moves, shares, now, cfg.shedding_grace_period)
    recently = recently_unloaded | moves.recent()
    by_broker: dict[str, list[BundleStats]] = defaultdict(list)
    for s in shares:
        by_broker[s.broker].append(s)
    unjudged: list[BrokerResult] = []
    loads: dict[str, tuple[str, BrokerLoad]] = {}
    for row in brokers:
        source, broker = row["source"], ids[row["source"]]
        bundles = tuple(sorted(by_broker[broker], key=lambda s: s.name))
        gap = _gap(row)
        if gap is not None:
            unjudged.append(Unjudged(source, broker, gap, bundles))
            continue
        loads[broker] = (source, BrokerLoad(
            broker=broker,
            cpu_percent=row["cpu_percent"],
            memory_percent=row["memory_percent"],
            bandwidth_in_percent=row["bandwidth_in_percent"],
            bandwidth_out_percent=row["bandwidth_out_percent"],
            direct_memory_percent=row["direct_memory_percent"],
            bundles=bundles,
        ))
    shedding = shed([load for _, load in loads.values()], cfg, history=state.history,
                    hits=state.hits, recently_unloaded=recently,
                    alive=frozenset(ids.values()), now=now)
    judged = [Judged(loads[v.broker][0], loads[v.broker][1], v) for v in shedding.verdicts]
    whole = _whole(shares)
    return LoadResult(
        brokers=tuple(sorted([*judged, *unjudged], key=lambda r: r.broker)),
        bundles=tuple(whole),
        splits=tuple(split_candidates(whole, cfg)),
        strategy=shedding.strategy,
        skipped=shedding.skipped,
        recently_unloaded=recently,
        state=LoadState(shedding.history, moves, shedding.hits),
    )
