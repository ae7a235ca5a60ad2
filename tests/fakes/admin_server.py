"""A FAKE of Apache Pulsar's admin REST v2 for tests — recorded JSON, not a broker.

A fake shows what the brokers the tests start cannot: the output of other Apache Pulsar
versions, as Pulsar itself wrote it. `FakeAdminServer` serves the recorded real outputs in
tests/fixtures (read at start; their provenance is in its SOURCES.md), byte for byte, at the
paths the admin API uses:

  GET …/persistent/public/default/Fibonacci/stats
      ← apache-pulsar-4.0-topic-stats.json (`pulsar-admin topics stats` of that topic)
  GET …/persistent/my-tenant/my-namespace/my-topic/partitioned-stats
      ← apache-pulsar-2.x-partitioned-stats-DOCS-EXAMPLE.json (3 partitions; the topic
        name is the docs' usual example name, the page does not say which topic it is)

Everything else is BUILT from those two files, not recorded, and kept minimal: the tenant,
namespace and topic listings that lead to them (the partitioned topic's listing names its
3 partitions, as Pulsar's `getList` does); 4 bundles per namespace (Pulsar's default
`defaultNumberOfNamespaceBundles=4`, boundaries as `NamespaceBundles` splits the hash
range); one cluster named `replay`, whose one broker is the 4.0 fixture's `ownerBroker`
and owns the 4 bundles of `public/default` (the docs example's namespace is unowned).

It checks the bearer token (401 with Pulsar's `{"reason": …}` body otherwise) and can be
told to misbehave for requests under a path prefix: HTTP 500, hang past the client's
timeout, a truncated JSON body, answer slowly, or redirect (307) to another server as a
Pulsar broker that does not own the topic does.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from enum import StrEnum
from http.server import BaseHTTPRequestHandler
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tests.harness.fixtures import FIXTURES
from tests.harness.loopback import LoopbackHTTP

TOPIC_STATS_4_0 = "apache-pulsar-4.0-topic-stats.json"
PARTITIONED_STATS_DOCS = "apache-pulsar-2.x-partitioned-stats-DOCS-EXAMPLE.json"

TOPIC = "persistent://public/default/Fibonacci"
PARTITIONED_TOPIC = "persistent://my-tenant/my-namespace/my-topic"
PARTITIONS = 3  # the docs example's metadata.partitions
CLUSTER = "replay"
BOUNDARIES = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]


class Fault(StrEnum):
    ERROR_500 = "500"
    HANG = "hang"  # answer only after `hang_seconds` (or at stop), past any sane timeout
    TRUNCATED = "truncated"  # a complete HTTP response whose JSON is cut in half
    SLOW = "slow"  # answer normally after `slow_seconds` (to observe concurrency)


@dataclass(frozen=True)
class Seen:
    path: str  # decoded, without the query
    query: str
    authorization: str | None


def _topic_route(topic: str, suffix: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/" + suffix


def recorded_routes(fixtures: Path = FIXTURES) -> dict[str, bytes]:
    """Path (decoded) → response body: the recorded fixtures plus the listings built around
    them (see the module docstring)."""
    stats = (fixtures / TOPIC_STATS_4_0).read_bytes()
    partitioned = (fixtures / PARTITIONED_STATS_DOCS).read_bytes()
    owner = json.loads(stats)["ownerBroker"]
    built: dict[str, object] = {
        "/admin/v2/tenants": ["my-tenant", "public"],
        "/admin/v2/namespaces/public": ["public/default"],
        "/admin/v2/namespaces/my-tenant": ["my-tenant/my-namespace"],
        "/admin/v2/persistent/public/default": [TOPIC],
        "/admin/v2/persistent/public/default/partitioned": [],
        "/admin/v2/persistent/my-tenant/my-namespace":
            [f"{PARTITIONED_TOPIC}-partition-{i}" for i in range(PARTITIONS)],
        "/admin/v2/persistent/my-tenant/my-namespace/partitioned": [PARTITIONED_TOPIC],
        "/admin/v2/clusters": [CLUSTER],
        f"/admin/v2/brokers/{CLUSTER}": [owner],
        f"/admin/v2/brokers/{CLUSTER}/{owner}/ownedNamespaces": {
            f"public/default/{lo}_{hi}":
                {"broker_assignment": "primary", "is_controlled": False, "is_active": True}
            for lo, hi in pairwise(BOUNDARIES)
        },
    }
    for ns in ("public/default", "my-tenant/my-namespace"):
        built[f"/admin/v2/namespaces/{ns}/bundles"] = {
            "boundaries": BOUNDARIES, "numBundles": len(BOUNDARIES) - 1}
    routes = {path: json.dumps(doc).encode() for path, doc in built.items()}
    routes[_topic_route(TOPIC, "stats")] = stats
    routes[_topic_route(PARTITIONED_TOPIC, "partitioned-stats")] = partitioned
    return routes


class FakeAdminServer:
    """The fake server on 127.0.0.1 and a free port. Use as a context manager."""

    def __init__(self, token: str | None = "replay-token", *, fixtures: Path = FIXTURES,
                 hang_seconds: float = 5.0, slow_seconds: float = 0.1):
        self.token = token
        self.hang_seconds = hang_seconds
        self.slow_seconds = slow_seconds
        self.in_flight = 0
        self.max_in_flight = 0  # most requests served at the same time
        self._redirects: dict[str, str] = {}
        self.routes: dict[str, bytes] = recorded_routes(fixtures)
        self.seen: list[Seen] = []
        self._faults: dict[str, Fault] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = LoopbackHTTP(self._handler())

    @property
    def url(self) -> str:
        return self._server.url

    def set_route(self, path: str, doc: object) -> None:
        self.routes[path] = json.dumps(doc).encode()

    def fail(self, path_prefix: str, fault: Fault) -> None:
        with self._lock:
            self._faults[path_prefix] = fault

    def redirect(self, path_prefix: str, base_url: str) -> None:
        """Answer 307 to the same path on `base_url`, as a non-owner Pulsar broker does."""
        with self._lock:
            self._redirects[path_prefix] = base_url

    def heal(self) -> None:
        with self._lock:
            self._faults.clear()
            self._redirects.clear()

    def fault_for(self, path: str) -> Fault | None:
        with self._lock:
            return next((f for p, f in self._faults.items() if path.startswith(p)), None)

    def start(self) -> FakeAdminServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # hung and slow answers return at once
        self._server.stop()

    def __enter__(self) -> FakeAdminServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            _counted = False  # this request is in `in_flight`

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, body: bytes,
                      content_type: str = "application/json") -> None:
                self._answered()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                with replay._lock:
                    replay.in_flight += 1
                    replay.max_in_flight = max(replay.max_in_flight, replay.in_flight)
                self._counted = True
                try:
                    self._get()
                finally:
                    self._answered()

            def _answered(self) -> None:
                """Leave the in-flight count before the first byte of the answer: once the
                client has its answer it may send the next request at once, and counting
                until after the write (as before) saw one fetch worker twice."""
                if self._counted:
                    self._counted = False
                    with replay._lock:
                        replay.in_flight -= 1

            def _get(self) -> None:
                parts = urlsplit(self.path)
                path = unquote(parts.path)
                auth = self.headers.get("Authorization")
                with replay._lock:
                    replay.seen.append(Seen(path, parts.query, auth))
                if replay.token is not None and auth != f"Bearer {replay.token}":
                    self._send(401, b'{"reason":"HTTP 401 Unauthorized"}')
                    return
                with replay._lock:
                    target = next((u for p, u in replay._redirects.items()
                                   if path.startswith(p)), None)
                if target is not None:
                    self._answered()
                    self.send_response(307)
                    self.send_header("Location", target + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                fault = replay.fault_for(path)
                if fault is Fault.SLOW:
                    replay._stopping.wait(replay.slow_seconds)
                if fault is Fault.HANG:
                    replay._stopping.wait(replay.hang_seconds)
                if fault is Fault.ERROR_500:
                    self._send(500, b'{"reason":"replayed internal server error"}')
                    return
                body = replay.routes.get(path)
                if body is None and path.endswith("/resourceGroup"):
                    # a topic's resource group: no such resource on a 4.0 broker, whose
                    # web server answers its own HTML page (measured on 4.0.8)
                    self._send(404, b"<html><body><h2>HTTP ERROR 404 Not Found</h2>"
                               b"</body></html>", "text/html;charset=iso-8859-1")
                    return
                if body is None:
                    self._send(404, b'{"reason":"Not found (replay)"}')
                    return
                self._send(200, body[: len(body) // 2] if fault is Fault.TRUNCATED else body)

        return Handler
