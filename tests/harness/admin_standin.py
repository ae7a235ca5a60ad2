"""A STAND-IN for Apache Pulsar's admin REST v2: answers what a test scripts, records what it
was asked. Not a broker and not recorded output (that is tests/fakes/admin_server.py): each
test writes the few answers it needs, as Pulsar words them, and asserts on the requests.

The evictor's tests (tests/integration/test_evict.py) script TopicStats, skips, expiries,
307s to an owner and slow answers; the admin client's redirect tests (tests/unit/
test_adminhttp.py) run several on other loopback hosts (127.0.0.2 plays a foreign machine)
and one over TLS.
"""

from __future__ import annotations

import json
import ssl
import time
from http.server import BaseHTTPRequestHandler

from tests.harness.loopback import LoopbackHTTP

# What a broker answers for a topic it does not have (Pulsar's RestException: {"reason": …}).
NOT_SCRIPTED = (404, {"reason": "Topic not found"}, 0.0)


class AdminStandIn(LoopbackHTTP):
    """A scripted admin REST on `host` (over TLS with `context`), once started by `start()`
    or `with`. `answer` scripts one `METHOD path` (the path as sent, query included); every
    request is recorded as (method, path, Authorization header or None) before it is
    answered, so a timed-out one is recorded too."""

    def __init__(self, host: str = "127.0.0.1", context: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, tuple[int, object, float]] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        super().__init__(self._handler(), host=host, context=context)

    def answer(self, method: str, path: str, status: int = 204, body: object = None,
               delay: float = 0.0) -> None:
        """Answer `status` after `delay` seconds: `body` as JSON (none if None), or for a 307
        or 308 as the Location, as a broker that does not own the topic redirects."""
        self.routes[f"{method} {path}"] = (status, body, delay)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                script.requests.append((self.command, self.path,
                                        self.headers.get("Authorization")))
                status, body, delay = script.routes.get(f"{self.command} {self.path}",
                                                        NOT_SCRIPTED)
                time.sleep(delay)
                self.send_response(status)
                payload = b""
                if status in (307, 308):
                    self.send_header("Location", str(body))
                elif body is not None:
                    payload = json.dumps(body).encode()
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler
