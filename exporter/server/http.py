"""The HTTP side: /metrics, /healthz, /readyz, /api/v1/status and an index page.

Every request is answered from the current `Publication` (server/published.py), made by the
check loop: a scrape never renders anything itself. What a client can hold of the server
(connections, time, requests in flight) is bounded in server/limits.py.
"""

from __future__ import annotations

import contextlib
import errno
import html
import json
import logging
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

from exporter import __version__
from exporter.exposition.negotiation import accepts_gzip, prefers_openmetrics
from exporter.exposition.render import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE
from exporter.server.limits import BoundedHandler, BoundedServer, Limits
from exporter.server.published import Health, Publication, PublishedState
from exporter.server.webconfig import CHALLENGE, AuthOutcome, WebConfig, WebSource

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0


# --- requests --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


_INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>pulsar-quota-exporter</title></head>
<body><h1>pulsar-quota-exporter</h1>
<p>Prometheus exporter and quota engine for Apache Pulsar backlog quotas and resource groups.</p>
<ul>
<li><a href="{href}">{path}</a> - metrics, rendered once per check cycle</li>
<li><a href="healthz">/healthz</a> - 200 while check cycles keep finishing</li>
<li><a href="readyz">/readyz</a> - 200 once the first cycle is published</li>
<li><a href="api/v1/status">/api/v1/status</a> - last cycle, stages, sources, decisions</li>
</ul></body></html>
"""


def _metrics(current: Publication, accept: str | None,
             accept_encoding: str | None) -> _Response:
    body, zipped, kind = current.body, current.body_gzip, CONTENT_TYPE
    if prefers_openmetrics(accept):
        (body, zipped), kind = current.openmetrics(), OPENMETRICS_CONTENT_TYPE
    if accepts_gzip(accept_encoding):
        return _Response(200, zipped, kind,
                         (("Content-Encoding", "gzip"), ("Vary", "Accept, Accept-Encoding")))
    return _Response(200, body, kind, (("Vary", "Accept, Accept-Encoding"),))


_ROUTES = ("/", "/healthz", "/readyz", "/api/v1/status")


def check_metrics_path(path: str) -> None:
    """ValueError unless `path` can serve the metrics (--web.telemetry-path): absolute,
    and not another route's."""
    if not path.startswith("/") or path in _ROUTES or "?" in path or "#" in path:
        raise ValueError(f"{path!r}: expected an absolute path other than "
                         f"{', '.join(_ROUTES)}, e.g. /metrics")


def _route(state: PublishedState, path: str, accept_encoding: str | None,
           accept: str | None = None, metrics_path: str = "/metrics") -> _Response:
    current = state.current
    if path == metrics_path:
        if current is None:
            return _Response(503, b"no check cycle published yet\n")
        return _metrics(current, accept, accept_encoding)
    if path == "/healthz":
        health, reason = state.health()
        code = 200 if health in (Health.OK, Health.STARTING) else 503
        return _Response(code, reason.encode() + b"\n")
    if path == "/readyz":
        if current is None:
            return _Response(503, b"not ready: no check cycle published yet\n")
        lines = [f"ready: cycle {current.cycle} published"]
        lines += [f"degraded: {d}" for d in current.degraded]
        return _Response(200, ("\n".join(lines) + "\n").encode())
    if path == "/api/v1/status":
        if current is None:
            body = json.dumps({"status": "starting", "reason": "no check cycle published yet"})
            return _Response(503, body.encode(), "application/json")
        return _Response(200, current.status_json, "application/json")
    if path == "/":
        index = _INDEX.format(href=html.escape(metrics_path[1:]), path=html.escape(metrics_path))
        return _Response(200, index.encode(), "text/html; charset=utf-8")
    return _Response(404, b"404 page not found\n")


def _handler_class(state: PublishedState, web: WebSource,
                   metrics_path: str = "/metrics") -> type:
    class Handler(BoundedHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses connections
        server_version = f"pulsar-quota-exporter/{__version__}"
        ungated = frozenset({"/healthz", "/readyz"})
        _web = WebConfig()  # the web config of the request being served

        def do_GET(self) -> None:
            self._serve(head=False)

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def _not_allowed(self) -> None:
            self.close_connection = True  # we did not read a request body
            self._web = web.current()
            self._send(_Response(405, b"method not allowed\n", headers=(("Allow", "GET, HEAD"),)),
                       head=False)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

        def _serve(self, *, head: bool) -> None:
            config = self._web = web.current()
            path = urlsplit(self.path).path
            if config.limiter is not None and path not in self.ungated \
                    and not config.limiter.allow():  # probes exempt, as from max-requests
                self._send(_Response(429, b"Too Many Requests\n"), head=head)
                return
            if config.auth is not None:
                outcome = config.auth.check(self.headers.get("Authorization"))
                if outcome is not AuthOutcome.OK:
                    log.debug("auth %s from %s", outcome.value, self.client_address[0])
                    self._send(_Response(401, b"Unauthorized\n",
                                         headers=(("WWW-Authenticate", CHALLENGE),)), head=head)
                    return
            self._send(_route(state, path, self.headers.get("Accept-Encoding"),
                              self.headers.get("Accept"), metrics_path), head=head)

        def _send(self, response: _Response, *, head: bool) -> None:
            try:
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                for name, value in response.headers + self._web.headers:
                    self.send_header(name, value)
                self.end_headers()
                if not head:
                    self.wfile.write(response.body)
            except (BrokenPipeError, ConnectionResetError, TimeoutError, ssl.SSLError):
                self.close_connection = True

        def version_string(self) -> str:
            return self.server_version

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


# --- the server ------------------------------------------------------------------------------
def parse_listen(listen: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` (all interfaces)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def listened(host: str, port: int) -> bool:
    """Whether something listens on host:port already: a bind with SO_REUSEADDR, as the
    server's own, fails with EADDRINUSE then (and for a wildcard listener on the port),
    not for connections left in TIME_WAIT. Other failures (an address not this host's)
    are the bind's to report."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


class _HTTPServer(BoundedServer, ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type, web: WebSource,
                 limits: Limits):
        self._web = web
        self.bound(limits)
        host, port = address
        if host == "":  # every interface: dual-stack where the kernel has IPv6
            try:
                self.address_family = socket.AF_INET6
                super().__init__(("::", port), handler)
                return
            except OSError:
                host = "0.0.0.0"
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            with contextlib.suppress(AttributeError, OSError):
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        # Not HTTPServer.server_bind: its getfqdn() is a reverse DNS lookup at startup.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def finish_request(self, request: socket.socket | tuple[bytes, socket.socket],
                       client_address: tuple) -> None:
        """Runs in the connection's own thread, so a slow TLS handshake blocks nobody."""
        assert isinstance(request, socket.socket)  # a TCP server's: never a datagram's
        conn = request
        tls = self._web.current().tls
        if tls is not None:
            request.settimeout(HANDSHAKE_TIMEOUT)
            try:
                # `wrap_socket` detaches `request`: the tracker is given the TLS socket before
                # the handshake, so an eviction or the shutdown can cut a slow handshake too
                conn = tls.context().wrap_socket(request, server_side=True,
                                                 do_handshake_on_connect=False)
                self.connections.rekey(request, conn)
                conn.do_handshake()
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS handshake with %s failed: %s", client_address[0], e)
                conn.close()
                return
            if not tls.admits(conn):
                log.debug("client certificate of %s has no allowed SAN", client_address[0])
                conn.close()
                return
        try:
            # typeshed types the attribute with `Self`, which mypy does not bind here
            self.RequestHandlerClass(conn, client_address, self)  # type: ignore[arg-type]
        except (ConnectionError, TimeoutError, ssl.SSLError) as e:
            log.debug("connection from %s ended: %s", client_address[0], e)
        finally:
            if conn is not request:
                conn.close()

    def handle_error(self, request: object, client_address: tuple) -> None:
        log.exception("error serving %s", client_address[0])


class Server:
    """A bound HTTP(S) server; `start()` serves in a background thread."""

    def __init__(self, httpd: _HTTPServer, tls: bool) -> None:
        self._httpd = httpd
        self._thread: threading.Thread | None = None
        self.scheme = "https" if tls else "http"

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        if host in ("::", "0.0.0.0"):
            host = "localhost"
        return f"{self.scheme}://[{host}]:{port}" if ":" in host else \
            f"{self.scheme}://{host}:{port}"

    def start(self) -> Server:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
            name="http-server", daemon=True)
        self._thread.start()
        return self

    def shutdown(self, timeout: float = 1.0) -> None:
        """Stop accepting, close the listener, cut open connections; within `timeout`."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout)
            self._thread = None
        self._httpd.server_close()
        self._httpd.connections.close_all(timeout / 2)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class ListenError(Exception):
    """The listen address cannot be bound (in use, not this host's, no permission)."""

    def __init__(self, listen: str, why: str) -> None:
        super().__init__(f"cannot listen on {listen} (exposition.listen): {why}")


def check_listen(listen: str) -> None:
    """ListenError now if something listens on `listen` already: before starting what the
    bind would then have started for nothing (the Spark JVM)."""
    if listened(*parse_listen(listen)):
        raise ListenError(listen, "in use")


def build_server(listen: str, state: PublishedState, web: WebSource | None = None,
                 limits: Limits | None = None, metrics_path: str = "/metrics") -> Server:
    """Bind (so a busy port fails now, not later) and return the unstarted server."""
    web = web or WebConfig()
    check_metrics_path(metrics_path)
    try:
        httpd = _HTTPServer(parse_listen(listen),
                            _handler_class(state, web, metrics_path), web,
                            limits or Limits())
    except OSError as exc:
        raise ListenError(listen, exc.strerror or str(exc)) from None
    return Server(httpd, tls=web.current().tls is not None)
