"""What the fuzz tests (tests/fuzz/test_fuzz_*.py) and the fuzz run (tests/bench/fuzz.py)
share: seeds read from real inputs, the mutations applied to them, and one runner per
input kind that pushes an input through the exporter's own code and says what became of
it (`Outcome`: accepted, or rejected with a reason).

The four kinds, each through the code that meets such input in production:

- metrics: a broker's /metrics body: `sniff` (what `sources.brokers.stream` rejects as
  malformed), then `whole_lines` pieces → `parse_text` → `source_tables`, as
  `pipeline.scrape.scrape_one` does. Skipped lines are counted by `MalformedReason`. The
  tables then go through the driver's `merge`, two cycles of the engine's `decide`, and
  the /metrics body and status JSON of the second: whatever tables the pipeline makes,
  the engine decides and the exporter publishes.
- admin: an admin REST answer: `json.loads` and `classify` as `sources.admin._Http`
  does, then the converter of the endpoint (`adminjson`, `policies`, `resourcegroups`),
  which may only raise `FetchFailure` (malformed / missing_fields).
- reports: our usage reports through `UsageExchange.receive` (signature, strict decoder,
  gate; with and without `report_signing`), and the brokers' PIP-82 `ResourceUsageInfo`
  through `BrokerReports.take`.
- config: YAML text through `config.load.load`, and loaded mappings through `parse`: only
  `ConfigError`, each line `FILE: key.path: message` (or `FILE: line N: …`).

A runner returns an `Outcome` or raises: `Violation` when the code answered but broke its
contract (a reason outside the closed set, an accepted report that re-encodes to other
bytes, an error line without the file name), anything else is a crash.

Mutations are lists of small integer tuples, so that hypothesis can draw and shrink them
(`byte_ops`, `tree_ops`) and a plain loop can draw them from `random.Random` (the same
`apply_*` functions run both).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import math
import random
import re
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

import yaml

from exporter.catalogue import (
    BROKER_REPORT_REJECT_REASONS,
    REPORT_REJECT_REASONS,
    SCRAPE_ERROR_REASONS,
)
from exporter.config.load import ConfigError, load, parse
from exporter.config.settings import Config, MonitoringClass
from exporter.engine.decide import Decider
from exporter.exposition.build import CycleFacts, Tallies, build
from exporter.exposition.render import render
from exporter.exposition.status import view
from exporter.pipeline.aggregates import MalformedReason
from exporter.pipeline.merge import merge
from exporter.pipeline.parse import FAMILIES, parse_text
from exporter.pipeline.pieces import whole_lines
from exporter.pipeline.tables import source_tables
from exporter.runtime.exchange import UsageExchange
from exporter.sources.adminjson import (
    bundles_from_json,
    partitioned_stats_from_json,
    strings_of,
    topic_stats_from_json,
)
from exporter.sources.brokerreports import BrokerReports
from exporter.sources.brokers import SNIFF_BYTES, FetchFailure, classify, sniff
from exporter.sources.policies import broker_default_from_json, quota_map_from_json
from exporter.sources.resourcegroups import binding_from_json, group_from_json
from exporter.sources.results import ScrapeError
from exporter.transport import pulsarwire
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.signing import HEADER_BYTES, seal, unwrap
from tests.harness.fixtures import FIXTURES, THROWAWAY_CERT, THROWAWAY_KEY
from tests.harness.resource_usage_info import entry, info, network
from tests.harness.resource_usage_info import field as pb_field

T = TypeVar("T")
ROOT = FIXTURES.parents[1]
NOW = 1_800_000_000.0  # the fuzzed exchange's clock: fixed, reports are stamped near it
SELF = "fuzz-self"  # our participant id: a report claiming it is a spoof
TOPIC = "non-persistent://pulsar/system/pulsar-quota-exporter-usage"
SECRET = b"fuzz-secret-0123456789abcdef"
OTHER_SECRET = b"another-secret-0123456789abcdef"


class Violation(AssertionError):
    """The code answered, but not as its contract says."""


@dataclass
class Outcome:
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)  # reason → inputs
    lines: Counter = field(default_factory=Counter)  # metrics: skipped lines by reason

    def add(self, other: Outcome) -> None:
        self.accepted += other.accepted
        self.rejected.update(other.rejected)
        self.lines.update(other.lines)


def crash_site(exc: BaseException) -> str:
    """`Type at exporter/…py:function`: the innermost frame of the exporter's own code (the
    traceback goes on into numpy, pyarrow or yaml below it)."""
    site = "outside exporter/"
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if "exporter" in path.parts and ".venv" not in path.parts:
            site = f"{path.relative_to(ROOT)}:{frame.name}"
    return f"{type(exc).__name__} at {site}"


# Crash sites the property tests let through while a fix is pending (each with a failing
# test in test_fuzz_found.py). Empty: the 13 sites the first fuzz run found are fixed, and
# test_fuzz_found.py keeps each of them fixed.
KNOWN_CRASHES: frozenset[str] = frozenset()


def known(exc: BaseException) -> bool:
    return not isinstance(exc, Violation) and crash_site(exc) in KNOWN_CRASHES


def fuzz_settings(scale: float):
    """Bounded and reproducible: `scale` times the examples of the Hypothesis profile loaded
    (tests/conftest.py: 200 under `ci`, so 7.5 is 1500; 10 under `dev`), more for what runs
    in memory, fewer for what goes through a server; the same inputs every run
    (tests/bench/fuzz.py explores for longer)."""
    from hypothesis import HealthCheck, settings

    return settings(max_examples=max(1, round(settings().max_examples * scale)), deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def tolerating_known(run: Callable[[], T]) -> T | None:
    """`run()`, or None when it raised one of `KNOWN_CRASHES` (noted as a hypothesis event
    when hypothesis runs it); anything else raised goes on."""
    try:
        return run()
    except Exception as exc:
        if not known(exc):
            raise
        try:
            from hypothesis import event

            event(f"known crash: {crash_site(exc)}")
        except Exception:  # outside a hypothesis test
            pass
        return None


# --- byte mutations ---------------------------------------------------------------------------

# (op, a, b, token): op picks the mutation, a and b are positions or sizes (taken modulo
# the input), token indexes the kind's dictionary or is a byte value.
ByteOp = tuple[int, int, int, int]
BYTE_OPS = 10
# Op 9 puts one of these in place of a sample line's value: numbers the text format allows
# that no broker prints for a count (a NaN backlog froze every broker's decisions until
# 2026-11, and byte-level mutations almost never made one).
VALUE_WORDS = (b"NaN", b"+Inf", b"-Inf", b"-Infinity", b"1e30", b"-5", b"-0", b"0.5",
               b"9223372036854775807", b"9223372036854775808", b"9.3e18", b"1e-300")
_SAMPLE_VALUE = re.compile(rb"^([ \t]*[^\s{#]+(?:[ \t]*\{.*\})?[ \t]+)(\S+)")


def apply_bytes(data: bytes, ops: Sequence[ByteOp], dictionary: Sequence[bytes]) -> bytes:
    out = bytearray(data)
    for op, a, b, token in ops:
        n = len(out)
        at = a % (n + 1)
        size = 1 + b % 64
        word = dictionary[token % len(dictionary)]
        if op == 0 and n:  # flip bits of one byte
            out[a % n] ^= 1 + token % 255
        elif op == 1:  # insert a dictionary word
            out[at:at] = word
        elif op == 2:  # delete a run
            del out[at:at + size]
        elif op == 3:  # overwrite a run with a word
            out[at:at + len(word)] = word
        elif op == 4:  # duplicate a run in place
            out[at:at] = out[at:at + size]
        elif op == 5:  # truncate
            del out[at:]
        elif op == 6:  # one random byte in
            out[at:at] = bytes((token % 256,))
        elif op in (7, 8, 9):  # line ops: drop a line, repeat it, or replace its value
            lines = bytes(out).split(b"\n")
            i = a % len(lines)
            if op == 7:
                del lines[i]
            elif op == 8:
                lines.insert(i, lines[i])
            else:
                value = VALUE_WORDS[token % len(VALUE_WORDS)]
                lines[i] = _SAMPLE_VALUE.sub(rb"\g<1>" + value, lines[i], count=1)
            out = bytearray(b"\n".join(lines))
    return bytes(out)


def random_byte_ops(rng: random.Random, most: int = 6) -> list[ByteOp]:
    return [(rng.randrange(BYTE_OPS), rng.randrange(1 << 20), rng.randrange(1 << 10),
             rng.randrange(1 << 10)) for _ in range(rng.randint(1, most))]


# --- tree mutations (JSON documents, YAML mappings) ----------------------------------------

# (op, where, what): op 0 replace the value at path `where` (an index into every path of
# the document) with interesting value `what`, 1 delete it, 2 add key `what`, 3 tweak a
# string or number in place, 4 wrap the value in a list.
TreeOp = tuple[int, int, int]
TREE_OPS = 5


def _paths(doc: object, here: tuple = ()) -> Iterator[tuple]:
    yield here
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*here, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*here, i))


def _tweak(value: object, what: int) -> object:
    if isinstance(value, str):
        i = what % (len(value) + 1)
        inserts = ("", "x", "/", "\x00", " ", "é", "-", "${X}", "://", "'", '"', "\n", "9" * 30)
        return value[:i] + inserts[what % len(inserts)] + value[i + 1:]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return (value, -value, value * 10**(what % 40), value + 1, -1, 0)[what % 6]
    if isinstance(value, float):
        return (value, -value, value * 1e300, math.nan, math.inf, 0.5)[what % 6]
    return value


def apply_tree(doc: object, ops: Sequence[TreeOp], values: Sequence[object],
               keys: Sequence[object]) -> object:
    doc = copy.deepcopy(doc)
    for op, where, what in ops:
        paths = list(_paths(doc))
        path = paths[where % len(paths)]
        if not path:  # the root: only a replacement makes sense
            if op == 0:
                doc = copy.deepcopy(values[what % len(values)])
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if op == 0:
            parent[last] = copy.deepcopy(values[what % len(values)])
        elif op == 1:
            del parent[last]
        elif op == 2 and isinstance(parent, dict):
            parent[keys[what % len(keys)]] = copy.deepcopy(values[(what // 7) % len(values)])
        elif op == 3:
            parent[last] = _tweak(parent[last], what)
        elif op == 4:
            parent[last] = [parent[last]]
    return doc


def random_tree_ops(rng: random.Random, most: int = 4) -> list[TreeOp]:
    return [(rng.randrange(TREE_OPS), rng.randrange(1 << 20), rng.randrange(1 << 20))
            for _ in range(rng.randint(1, most))]


# --- metrics -----------------------------------------------------------------------------------

METRICS_FIXTURES = ("apache-pulsar-4.0-metrics.txt",
                    "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt",
                    "apache-pulsar-4.0.8-otel-classic-metrics.txt",
                    "apache-pulsar-4.0.8-otel-metrics.txt")
METRICS_WORDS = (
    b"{", b"}", b'"', b"\\", b'\\"', b"\\\\", b"\\n", b"\n", b"\r\n", b",", b"=", b" ", b"\t",
    b"#", b"# TYPE pulsar_rate_in gauge\n", b"NaN", b"+Inf", b"-Inf", b"-Infinity", b"1e999",
    b"-0", b"0x10", b"1_000", b"\x00", b"\x01", b"\x03", b"\xff", b"\xc3\xa9", b'topic="',
    b'topic=""', b'namespace="', b'partition="-1"', b'partition="99999999999"',
    b'subscription="s"', b'consumer_name="c"', b'remote_cluster="local"', b'cluster="c"',
    b"pulsar_lb_cpu_usage ", b"pulsar_rate_in", b"pulsar_subscription_back_log",
    b"persistent://", b"-partition-", b" 1712345678901", b"<html>", b"{}",
    b'pulsar_storage_backlog_age_seconds{topic="persistent://t/n/x"} ',
    b"pulsar_topic_messaging_backlog_age_seconds", b"pulsar.namespace=",
    b"\npulsar_lb_cpu_usage 12.5\n", b"\npulsar_rate_in 1\n", b"\njvm_threads_current 90\n",
)


@cache
def metrics_lines(name: str) -> tuple[bytes, ...]:
    return tuple((FIXTURES / name).read_bytes().splitlines(keepends=True))


def metrics_seed(fixture: int, start: int, size: int) -> bytes:
    """A run of `size` lines (0: the whole body) of one recorded broker body."""
    lines = metrics_lines(METRICS_FIXTURES[fixture % len(METRICS_FIXTURES)])
    if size == 0:
        return b"".join(lines)
    start %= len(lines)
    return b"".join(lines[start:start + size])


def with_values(lines: Sequence[bytes], shift: int) -> bytes:
    """`lines` with the value of each sample of a family the exporter reads replaced: the
    i-th such sample gets `VALUE_WORDS[(i + shift) % len(VALUE_WORDS)]`, so over every
    `shift` each sample takes every value (a sweep, where a random mutation would rarely
    land one on a family read)."""
    out, i = [], 0
    for line in lines:
        name = line.lstrip(b" \t").split(b"{", 1)[0].split(b" ", 1)[0]
        if name.decode(errors="replace") in FAMILIES:
            value = VALUE_WORDS[(i + shift) % len(VALUE_WORDS)]
            line, replaced = _SAMPLE_VALUE.subn(rb"\g<1>" + value, line, count=1)
            i += replaced
        out.append(line)
    return b"".join(out)


def _pieces(body: bytes, size: int) -> Iterator[bytes]:
    for at in range(0, len(body), size):
        yield body[at:at + size]


def metrics_body(body: bytes, piece_bytes: int = 4096) -> Outcome:
    """One body as a broker task handles it once fetched: rejected whole (malformed) when
    it does not look like exposition text, else parsed in pieces and its skipped lines
    counted by reason."""
    problem = sniff(body[:SNIFF_BYTES], len(body))
    if problem is not None:
        return Outcome(rejected=Counter({ScrapeError.MALFORMED.value: 1}))
    parsed = [parse_text(p) for p in whole_lines(_pieces(body, piece_bytes), piece_bytes)]
    tables = source_tables(parsed)
    malformed = dict(tables.malformed)
    if set(malformed) != {r.value for r in MalformedReason}:
        raise Violation(f"skipped lines by unknown reasons: {malformed}")
    if any(n < 0 for n in malformed.values()):
        raise Violation(f"negative counts: {malformed}")
    if malformed[MalformedReason.SYNTAX.value] > body.count(b"\n") + 1:
        raise Violation(f"more syntax errors than lines: {malformed}")
    decider = Decider(_broker_config())
    aggregates = merge([(_BROKER_URL, tables)], {})
    for cycle in range(2):  # the second reads the age tables the first began
        decisions = decider.decide(aggregates, None, _NOW + 60 * cycle)
    facts = CycleFacts("fuzz", _NOW, {}, _NOW, 60.0, 10.0, 60.0)
    render(build(facts, decisions, (), Tallies(), "fuzz"), topic_level=True)
    json.dumps(view("fuzz", _NOW, decisions, ()), allow_nan=False)  # strict JSON
    return Outcome(accepted=1, lines=Counter({k: v for k, v in malformed.items() if v}))


_BROKER_URL = "http://broker-1:8080/metrics"
_NOW = 1_800_000_000.0


@cache
def _broker_config() -> Config:
    return parse({"cluster": "fuzz", "sources": {"brokers": [{"url": _BROKER_URL}]}},
                 "fuzz.yaml")


# --- admin JSON -------------------------------------------------------------------------------

def _owners() -> dict[str, str]:
    return {"public/default/0x00000000_0x40000000": "broker-1:8080"}


ADMIN_CONVERTERS: dict[str, Callable[[object], object]] = {
    "topic_stats": lambda doc: topic_stats_from_json("persistent://public/default/t", doc),
    "partitioned_stats": lambda doc: partitioned_stats_from_json(
        "persistent://my-tenant/my-namespace/my-topic", doc),
    "bundles": lambda doc: bundles_from_json("public/default", doc, _owners()),
    "backlog_quota_map": lambda doc: quota_map_from_json(doc, "public/default"),
    "broker_runtime_config": broker_default_from_json,
    "resource_group": lambda doc: group_from_json("rg-a", doc),
    "namespace_policies": lambda doc: binding_from_json("public/default", doc),
    "listing": lambda doc: strings_of(doc, "tenants"),
}
ADMIN_VALUES: tuple[object, ...] = (
    None, True, False, 0, -1, 1, 1.5, -0.5, 2**31, 2**63, -(2**63), 2**64, 10**30, 1e308,
    math.inf, -math.inf, math.nan, "", "x", "NaN", "Infinity", "1e999", "-1", "10", "1.0",
    "producer_request_hold", "consumer_backlog_eviction", "bogus_policy", [], {}, ["a"],
    [1, "a"], {"a": 1}, {"msgBacklog": 1, "unackedMessages": 0, "consumers": []},
    "0x00000000", ["0x00000000", "0xffffffff"],
)
ADMIN_KEYS: tuple[object, ...] = (
    "subscriptions", "partitions", "consumers", "msgBacklog", "unackedMessages", "backlogSize",
    "msgInCounter", "bytesInCounter", "oldestBacklogMessageAgeSeconds",
    "oldestBacklogMessageSubscriptionName", "boundaries", "destination_storage",
    "message_age", "limitSize", "limit", "limitTime", "policy", "backlogQuotaDefaultLimitGB",
    "backlogQuotaDefaultLimitBytes", "backlogQuotaDefaultLimitSecond",
    "backlogQuotaDefaultRetentionPolicy", "publishRateInMsgs", "publishRateInBytes",
    "dispatchRateInMsgs", "dispatchRateInBytes", "resource_group_name", "", "x",
)
ADMIN_WORDS = (b"{", b"}", b"[", b"]", b'"', b",", b":", b"null", b"true", b"NaN",
               b"Infinity", b"-Infinity", b"1e999", b"-1", b"18446744073709551616",
               b"\\u0000", b"\\ud800", b"\xff", b"\x00", b" ", b"\n", b"0.0", b"[[[[[[[[")


@cache
def admin_seeds() -> tuple[tuple[str, bytes], ...]:
    """(endpoint kind, the JSON body as a broker sends it): the recorded stats, and the
    others as Apache Pulsar 4.0.8 answers them (tests/unit/test_sources_policies.py and
    test_sources_resourcegroups.py show the same documents)."""
    recorded = [("topic_stats", (FIXTURES / "apache-pulsar-4.0-topic-stats.json").read_bytes()),
                ("partitioned_stats", (FIXTURES / "apache-pulsar-2.x-partitioned-stats-DOCS-"
                                       "EXAMPLE.json").read_bytes())]
    built: list[tuple[str, object]] = [
        ("bundles", {"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000",
                                    "0xffffffff"], "numBundles": 4}),
        ("backlog_quota_map", {
            "destination_storage": {"limit": 4194304, "limitSize": 4194304, "limitTime": 0,
                                    "policy": "producer_request_hold"},
            "message_age": {"limit": 0, "limitSize": 0, "limitTime": 3600,
                            "policy": "consumer_backlog_eviction"}}),
        ("broker_runtime_config", {
            "backlogQuotaDefaultLimitGB": "-1.0", "backlogQuotaDefaultLimitBytes": "-1",
            "backlogQuotaDefaultLimitSecond": "-1",
            "backlogQuotaDefaultRetentionPolicy": "producer_request_hold",
            "clusterName": "standalone"}),
        ("resource_group", {"publishRateInMsgs": 50, "publishRateInBytes": 100000,
                            "dispatchRateInMsgs": -1, "dispatchRateInBytes": -1}),
        ("namespace_policies", {"resource_group_name": "rg-a", "bundles": {"numBundles": 4},
                                "deleted": False}),
        ("listing", ["public", "pulsar", "sample"]),
    ]
    return (*recorded, *((kind, json.dumps(doc).encode()) for kind, doc in built))


def admin_answer(kind: str, body: bytes) -> Outcome:
    """One admin answer as the walk handles it: decoded as `_Http.get_json` does (a failure
    classified), then converted; only `FetchFailure` may come out of the converter."""
    try:
        doc = json.loads(body)
    except Exception as exc:  # what get_json does with it
        return _admin_rejected(classify(exc).reason.value, decoding=True)
    try:
        ADMIN_CONVERTERS[kind](doc)
    except FetchFailure as exc:
        return _admin_rejected(exc.failure.reason.value, decoding=False)
    return Outcome(accepted=1)


def _admin_rejected(reason: str, *, decoding: bool) -> Outcome:
    if reason not in SCRAPE_ERROR_REASONS:
        raise Violation(f"reason {reason!r} outside {SCRAPE_ERROR_REASONS}")
    allowed = {ScrapeError.MALFORMED.value} | (
        set() if decoding else {ScrapeError.MISSING_FIELDS.value})
    if reason not in allowed:
        raise Violation(f"a bad {'JSON body' if decoding else 'document'} counted as "
                        f"{reason!r}")
    return Outcome(rejected=Counter({reason: 1}))


# --- usage reports ----------------------------------------------------------------------------

REPORT_WORDS = (b"\xb7", b"\x01", b"\x02", b"\x00", b"\x7f", b"\x80", b"\xff", b"\xb8\x01",
                b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\xff\xff\xff\xff\x0f",
                b"\xc0\x80", b"\xed\xa0\x80", b"\x3f", b"\x09", b"\x36")
PEERS = ("peer-1", "peer-2", "pulsar-broker-042.pulsar-broker.pulsar.svc", SELF, "p")


def report_seed(rng: random.Random, sequence: int) -> WireReport:
    """A report as a peer sends one: a few groups of a realistic fleet (names sharing long
    prefixes), both classes, rates and limits of real magnitudes; some goodbyes, some sent
    too long ago, some claiming to be us."""
    participant = PEERS[rng.randrange(len(PEERS))] if rng.random() < 0.3 else PEERS[0]
    sent_at = NOW - (rng.choice((0.0, 1.0, 59.0, 500.0)) if rng.random() < 0.2 else 0.5)
    if rng.random() < 0.1:
        return WireReport(participant, sequence, sent_at, (), goodbye=True)
    names = sorted({f"tenant-{rng.randrange(100_000):05d}-rg" if rng.random() < 0.9
                    else rng.choice(("rg-a", "grüppe", "rg/ns", "x" * 80))
                    for _ in range(rng.randint(0, 12))})
    entries = []
    for name in names:
        for cls in (MonitoringClass.PUBLISH, MonitoringClass.DISPATCH):
            if rng.random() < 0.2:
                continue
            messages = math.exp(rng.uniform(0, math.log(10_000)))
            usage = Rates(messages, messages * rng.uniform(100, 10_240))
            limit = rng.choice((None, Rates(usage.messages * 2, usage.bytes * 2),
                                Rates(math.inf, usage.bytes * 3), Rates(50.0, math.inf)))
            entries.append(Entry(name, cls, usage, limit))
    return WireReport(participant, sequence, sent_at, tuple(entries))


SIGNING_MODES = ("plain", "sealed", "sealed_then_mutated", "mutated_then_sealed", "other_key")


def report_payload(report: WireReport, ops: Sequence[ByteOp], mode: str) -> bytes:
    """The bytes a peer (or an attacker, or a broken link) puts on the topic."""
    raw = encode(report)
    if mode == "plain":
        return apply_bytes(raw, ops, REPORT_WORDS)
    if mode == "sealed":
        return seal(SECRET, TOPIC, raw)
    if mode == "sealed_then_mutated":
        return apply_bytes(seal(SECRET, TOPIC, raw), ops, REPORT_WORDS)
    if mode == "mutated_then_sealed":  # a key holder sending junk
        return seal(SECRET, TOPIC, apply_bytes(raw, ops, REPORT_WORDS))
    return seal(OTHER_SECRET, TOPIC, raw)


class Channel:
    """The topic: hands the exchange what was put on it (the transport's network side)."""

    def __init__(self) -> None:
        self.pending: list[bytes] = []

    def drain(self, limit: int = 10_000) -> list[bytes]:
        out, self.pending = self.pending[:limit], self.pending[limit:]
        return out

    def close(self, timeout: float = 10.0) -> None:
        pass


@cache
def _workdir() -> Path:
    """Files the fuzzed configs point at (a secret, a token, PEM-looking files)."""
    path = Path(tempfile.mkdtemp(prefix="pqe-fuzz-"))
    for name in ("token", "password"):
        (path / name).write_text("0123456789abcdef0123456789abcdef\n")
    for name, pem in (("ca.pem", THROWAWAY_CERT), ("client.pem", THROWAWAY_CERT),
                      ("tls.crt", THROWAWAY_CERT), ("client.key", THROWAWAY_KEY),
                      ("tls.key", THROWAWAY_KEY)):  # they load as TLS files
        (path / name).write_text(pem.read_text())
    (path / "secret").write_bytes(SECRET + b"\n")
    return path


def exchange(signed: bool) -> tuple[UsageExchange, Channel]:
    engine = {"participant": SELF, "report_interval": "60s", "topic": TOPIC}
    if signed:
        engine["report_signing"] = {"secret_file": str(_workdir() / "secret")}
    config = parse({"cluster": "fuzz", "sources": {"brokers": [
        {"url": "http://127.0.0.1:1/metrics"}]}, "resource_group_engine": engine}, "fuzz.yaml")
    channel = Channel()
    return UsageExchange(config, channel, lambda: NOW), channel


def receive(exch: UsageExchange, channel: Channel, payloads: Sequence[bytes],
            now: float = NOW) -> Outcome:
    """Payloads through one round of `receive`: rejections only by known reasons, and
    every admitted report the canonical decoding of what was sent."""
    channel.pending.extend(payloads)
    inbound = exch.receive(now)
    reasons = dict(inbound.rejected)
    if not set(reasons) <= set(REPORT_REJECT_REASONS):
        raise Violation(f"rejected by unknown reasons: {reasons}")
    sent = {p[HEADER_BYTES:] if exch.keyring is not None else unwrap(p) for p in payloads}
    for report in inbound.admitted:
        if encode(report) not in sent:
            raise Violation(f"admitted {report!r}, which re-encodes to other bytes")
    if len(inbound.admitted) + sum(reasons.values()) > len(payloads):
        raise Violation("more outcomes than payloads")
    return Outcome(accepted=len(inbound.admitted), rejected=Counter(reasons))


@cache
def broker_report_seeds() -> tuple[bytes, ...]:
    """`ResourceUsageInfo` payloads recorded from an Apache Pulsar 4.0.8 broker, and ones
    encoded from master's proto (replication)."""
    return tuple(bytes.fromhex(line) for name in (
        "apache-pulsar-4.0.8-resource-usage-reports.hex",
        "apache-pulsar-master-17548093-resource-usage-reports.hex")
        for line in (FIXTURES / name).read_text().splitlines()
        if line and not line.startswith("#"))


def _reencode(report: pulsarwire.BrokerUsageReport) -> bytes:
    """The report written again the way the broker writes it (tests/harness); an unknown
    field again as an empty one of its number (only numbers are kept)."""
    def usage(u: pulsarwire.GroupUsage) -> bytes:
        parts = [pb_field(n, network(c.bytes, c.messages))
                 for n, c in ((2, u.publish), (3, u.dispatch), (6, u.replication_dispatch))
                 if c is not None]
        if u.storage_bytes is not None:
            parts.append(pb_field(4, pb_field(1, u.storage_bytes)))
        parts += [pb_field(7, pb_field(1, r.local_cluster.encode())
                           + pb_field(2, r.remote_cluster.encode())
                           + pb_field(3, network(r.usage.bytes, r.usage.messages)))
                  for r in u.replicators]
        parts += [pb_field(n, b"") for n in u.unknown_fields]
        return entry(u.owner, *parts)

    return info(report.broker, *(usage(u) for u in report.usage)) + b"".join(
        pb_field(n, b"") for n in report.unknown_fields)


def broker_report(payload: bytes) -> Outcome:
    """One payload off the brokers' usage topic, through `BrokerReports.take`."""
    channel = Channel()
    reader = BrokerReports(channel)
    channel.pending.append(payload)
    view = reader.take(NOW)
    rejected = {r.value: n for r, n in view.rejected if n}
    if not set(rejected) <= set(BROKER_REPORT_REJECT_REASONS):
        raise Violation(f"rejected by unknown reasons: {rejected}")
    if view.received + sum(rejected.values()) != 1:
        raise Violation(f"one payload, {view.received} received and {rejected} rejected")
    if view.received:  # what was accepted reads back the same once written again
        first = pulsarwire.decode(payload)
        if pulsarwire.decode(_reencode(first)) != first:
            raise Violation(f"{first!r} does not survive re-encoding")
    return Outcome(accepted=view.received, rejected=Counter(rejected))


# --- config ------------------------------------------------------------------------------------

CONFIG_WORDS = (
    b": ", b":", b"\n", b"\n  ", b"  ", b"- ", b"-1", b"0", b"1e400", b".inf", b".nan", b"~",
    b"null", b"yes", b"no", b"on", b"[]", b"{}", b"[a, b]", b"{a: 1}", b'"\\0"', b'"\\ud800"',
    b"9" * 400, b"9" * 5000, b"2001-02-03", b"2001-13-45", b"10GiB", b"1h30m", b"500ms",
    b"10MiB/s", b"&a ", b"*a", b"<<: *a", b"!!binary aGVsbG8=", b"!!python/name:os.system",
    b"? ", b"%YAML 1.1\n", b"---\n", b"...\n", b"#", b"\t", b"'", b'"', b"\xff", b"\x00",
    b"${HOME}", b"$$", b"persistent://t/n/x", b"tenant/ns", b"http://", b"pulsar://h:6650",
)
CONFIG_VALUES: tuple[object, ...] = (
    None, True, False, 0, 1, -1, 0.5, 2**63, 10**400, -(10**400), math.inf, math.nan, "",
    " ", "x", "-1", "0s", "1h30m", "90", "9" * 400 + "s", "1e400", "10GiB", "1.5KiB",
    "10MiB/s", "-5MiB", "100%", "a\x00b", "${HOME}", "http://", "https://[::1", "pulsar://x",
    "persistent://t/n/x", "tenant/ns", "$2b$10$" + "a" * 53, "local[*]", "k8s://x",
    "consumer_backlog_eviction", "fair", [], {}, ["a"], [None], [{"url": "x"}], {"a": 1},
    {1: 2}, datetime.date(2001, 2, 3), datetime.datetime(2001, 2, 3, 4, 5, 6),
    "/nonexistent/file", "/",
)
CONFIG_KEYS: tuple[object, ...] = (
    "cluster", "check_interval", "sources", "brokers", "admin", "url", "timeout", "limit_size",
    "limit_time", "policy", "enforce", "source", "publish", "dispatch", "tenants",
    "namespaces", "topics", "participant", "report_interval", "allocator", "report_signing",
    "secret_file", "listen", "tls", "basic_auth", "master", "conf", "spark.x", "clustr",
    "unknown", "", 1, True, None, "tenant/ns", "persistent://t/n/x",
)
_FILE_PATHS = re.compile(rb"(/var/run/secrets/pulsar|/etc/pulsar-quota-exporter|/etc/pulsar)/"
                         rb"([A-Za-z.-]+)")
_SECRET_NAMES = {b"usage-report.secret": b"secret"}


@cache
def config_texts() -> tuple[bytes, ...]:
    """examples/reference.yaml (every key) with its file paths pointing at files that
    exist, so that it loads, and the demo's config."""
    work = str(_workdir()).encode()
    reference = _FILE_PATHS.sub(
        lambda m: work + b"/" + _SECRET_NAMES.get(m.group(2), m.group(2)),
        (ROOT / "examples" / "reference.yaml").read_bytes())
    return reference, (ROOT / "exporter" / "data" / "demo.yaml").read_bytes()


@cache
def config_mappings() -> tuple[dict, ...]:
    return tuple(yaml.safe_load(text) for text in config_texts())


_LOCATION = re.compile(r"line \d+: |top level: |not valid YAML|cannot read: ")
_KEY_PATH = re.compile(r'(?P<first>[A-Za-z0-9_-]+|\[".*?"\])(\.[A-Za-z0-9_-]+|\[\d+\]'
                       r'|\[".*?"\])*: ')


def config_reason(message: str) -> str:
    """Config errors have no closed set of reasons: a rough kind, for the counts."""
    for needle, kind in (("not valid YAML", "yaml_syntax"), ("cannot read", "unreadable"),
                         ("duplicate key", "duplicate_key"), ("unknown key", "unknown_key"),
                         ("required", "missing_required"), ("expected", "wrong_type"),
                         ("not set in the environment", "unset_env")):
        if needle in message:
            return kind
    return "bad_value"


def _check_errors(error: ConfigError, filename: str, keys: Sequence[object] = ()) -> str:
    """Every line `FILE: where: message`, where = a line, the top level or a key path
    whose first key is in the input or the schema. The rough kind of the first error."""
    known = {f.name for f in dataclasses.fields(Config)} | {k for k in keys if isinstance(k, str)}
    if not error.errors:
        raise Violation("a ConfigError without errors")
    for line in error.errors:
        prefix = f"{filename}: "
        if not line.startswith(prefix):
            raise Violation(f"error line does not start with the file name: {line!r}")
        rest = line[len(prefix):]
        if _LOCATION.match(rest):
            continue
        path = _KEY_PATH.match(rest)
        if path is None:
            raise Violation(f"error line names no line or key path: {line!r}")
        first = path.group("first")
        if first.startswith('["'):
            continue  # a user-named key, not an identifier
        if keys and first not in known:
            raise Violation(f"error names key {first!r}, which is nowhere: {line!r}")
    return config_reason(error.errors[0])


def config_file(text: bytes, path: Path) -> Outcome:
    """YAML bytes in a file, through `load`."""
    path.write_bytes(text)
    try:
        load(path)
    except ConfigError as e:
        return Outcome(rejected=Counter({_check_errors(e, str(path)): 1}))
    return Outcome(accepted=1)


def config_mapping(data: object, filename: str = "fuzz.yaml") -> Outcome:
    """A loaded YAML document, through `parse`."""
    try:
        parse(data, filename)
    except ConfigError as e:
        keys = tuple(data) if isinstance(data, dict) else ()
        return Outcome(rejected=Counter({_check_errors(e, filename, keys): 1}))
    return Outcome(accepted=1)


def config_path() -> Path:
    return _workdir() / "fuzzed.yaml"
