"""A reverse proxy in front of a real broker's web port that counts what passes: how many
admin requests one cycle makes, and of which kind. Everything is forwarded as it came
(method, path, headers, body) and answered as the broker answered, redirects included."""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class CountingProxy:
    def __init__(self, upstream: str):
        target = urlsplit(upstream)
        self.requests: list[tuple[str, str]] = []  # (method, path without its query)
        # (method, path, the broker's status, its Location header): a redirect as answered
        self.answers: list[tuple[str, str, int, str | None]] = []
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                with lock:
                    proxy.requests.append((self.command, self.path.split("?", 1)[0]))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                with lock:
                    proxy.answers.append((self.command, self.path, answer.status,
                                          answer.getheader("Location")))
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def take(self) -> Counter[str]:
        """The requests since the last take, by kind (stats, a listing, …: `kind`)."""
        taken, self.requests = self.requests, []
        return Counter(kind(path) for _, path in taken)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def kind(path: str) -> str:
    """An admin path's kind: `topic stats`, `namespace bundles`, `namespace topics`, …"""
    parts = path.rstrip("/").split("/")  # "", admin, v2, persistent, tenant, ns, …
    if parts[3:4] == ["persistent"]:
        if len(parts) == 6:
            return "namespace topics"
        if len(parts) == 7 and parts[6] == "partitioned":
            return "namespace partitioned"
        return "topic " + parts[-1]  # …/{topic}/stats, /partitioned-stats, /backlogQuotaMap
    if parts[3:4] == ["namespaces"]:
        return {5: "tenant namespaces", 6: "namespace policies"}.get(
            len(parts), "namespace " + parts[-1])
    if parts[3:4] == ["brokers"]:
        return {"ownedNamespaces": "broker ownedNamespaces", "runtime": "broker runtime"}.get(
            parts[-1], "cluster brokers")
    return path
