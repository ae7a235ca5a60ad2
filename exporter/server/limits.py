"""What a client can hold of the HTTP server: connections, threads, time, requests in flight.

The server is a thread per connection (`ThreadingHTTPServer`). Left alone, a client that
trickles its request head a byte at a time keeps a thread for ever (a timeout per socket read
never fires), any number of such clients make as many threads, and a GET carrying a body has
the body parsed as the next request on the connection (a desync). Here:

- open connections are capped; when full, the connection that has waited longest for a request
  head (a slow or idle one) is cut to admit the new one, so slow clients cannot lock scrapers
  out; only when every connection is serving a request is the new one closed at accept;
- the request head (request line and headers) must arrive whole within `head_timeout` of its
  first byte (of the accept, for a connection's first request), however slowly it trickles;
  a kept-alive connection may idle `idle_timeout` between requests;
- requests in flight are capped, as node_exporter's `--web.max-requests` (promhttp's
  MaxRequestsInFlight): beyond the cap a 503 at once; health probes are exempt so that load
  does not make a liveness probe restart the exporter;
- a GET or HEAD announcing a body (Content-Length > 0, any Transfer-Encoding) gets 400 and the
  connection is closed, so the body can never be read as a request.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


@dataclass(frozen=True)
class Limits:
    max_requests: int = 40  # in flight at once; 0 = no limit (node_exporter's default is 40)
    max_connections: int = 512  # open at once, a thread each; 0 = no limit
    head_timeout: float = 10.0  # for the whole request head
    idle_timeout: float = 90.0  # between requests: above Prometheus' usual scrape intervals
    write_timeout: float = 30.0  # for a whole response (sendall's timeout is its total)
    backlog: int = socket.SOMAXCONN  # the listen queue; the kernel caps it at net.core.somaxconn


class _Entry:
    __slots__ = ("serving", "since", "sock")

    def __init__(self, sock: socket.socket, since: float) -> None:
        self.sock, self.since, self.serving = sock, since, False


class Connections:
    """The open connections, each waiting for a request head or serving a request."""

    def __init__(self, cap: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._cap, self._clock = cap, clock
        self._lock = threading.Lock()
        self._entries: dict[socket.socket, _Entry] = {}
        self._aliases: dict[socket.socket, socket.socket] = {}  # accepted -> TLS-wrapped
        self.refused = 0
        self.evicted = 0

    def admit(self, sock: socket.socket) -> bool:
        """In the accept loop: whether to serve `sock`, cutting the longest-waiting
        connection if the cap is reached."""
        victim: _Entry | None = None
        with self._lock:
            if self._cap and len(self._entries) >= self._cap:
                waiting = [e for e in self._entries.values() if not e.serving]
                if not waiting:
                    self.refused += 1
                    return False
                victim = min(waiting, key=lambda e: e.since)
                del self._entries[victim.sock]  # counted gone now; its thread exits on EOF
                self.evicted += 1
            self._entries[sock] = _Entry(sock, self._clock())
        if victim is not None:
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RDWR)
        return True

    def rekey(self, accepted: socket.socket, wrapped: socket.socket) -> None:
        """The TLS socket replaces the accepted one (which `wrap_socket` detached)."""
        with self._lock:
            entry = self._entries.pop(accepted, None)
            if entry is not None:
                entry.sock = wrapped
                self._entries[wrapped] = entry
                self._aliases[accepted] = wrapped

    def mark(self, sock: socket.socket, *, serving: bool) -> None:
        with self._lock:
            entry = self._entries.get(sock)
            if entry is not None:
                entry.serving, entry.since = serving, self._clock()

    def leave(self, accepted: socket.socket) -> None:
        with self._lock:
            self._entries.pop(self._aliases.pop(accepted, accepted), None)

    def close_all(self, timeout: float) -> None:
        """At shutdown, the listener closed: cut every open connection (a kept-alive one
        would idle on for `idle_timeout`) and wait up to `timeout` for their threads to leave.
        One cut at eviction already is no longer counted here: its thread is on its way out."""
        with self._lock:
            open_now = [entry.sock for entry in self._entries.values()]
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._entries:
                    return
            time.sleep(0.01)


class _HeadReader(io.RawIOBase):
    """The socket as the handler reads it, with the deadlines for the request head."""

    def __init__(self, sock: socket.socket, limits: Limits) -> None:
        super().__init__()
        self._sock, self._limits = sock, limits
        self._deadline: float | None = time.monotonic() + limits.head_timeout
        self._idle_until: float | None = None

    def readable(self) -> bool:
        return True

    def await_head(self) -> None:
        """Between requests: idle up to idle_timeout, then the head's clock starts."""
        self._deadline, self._idle_until = None, time.monotonic() + self._limits.idle_timeout

    def head_read(self) -> None:
        self._deadline = self._idle_until = None
        self._sock.settimeout(self._limits.write_timeout)

    def readinto(self, buffer: WriteableBuffer) -> int:
        until = self._deadline if self._deadline is not None else self._idle_until
        if until is not None:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError("request head not received in time")
            self._sock.settimeout(left)
        n = self._sock.recv_into(buffer)
        if n and self._deadline is None and self._idle_until is not None:
            self._idle_until, self._deadline = None, time.monotonic() + self._limits.head_timeout
        return n


_Request = socket.socket | tuple[bytes, socket.socket]  # socketserver's, typeshed's


class BoundedServer:
    """Mixed into the `socketserver` server: admits connections under `Limits`."""

    limits: Limits
    connections: Connections
    in_flight: threading.BoundedSemaphore | None

    def bound(self, limits: Limits) -> None:
        """Before the listener is activated (the backlog is read then)."""
        self.limits = limits
        self.request_queue_size = limits.backlog
        self.connections = Connections(limits.max_connections)
        self.in_flight = (threading.BoundedSemaphore(limits.max_requests)
                          if limits.max_requests else None)

    def process_request(self, request: _Request, client_address: Any) -> None:
        assert isinstance(request, socket.socket)  # a TCP server's: never a datagram's
        if not self.connections.admit(request):
            self.shutdown_request(request)  # type: ignore[attr-defined]  # socketserver's
            return
        try:
            super().process_request(request, client_address)  # type: ignore[misc]
        except BaseException:
            self.connections.leave(request)
            raise

    def process_request_thread(self, request: _Request, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            assert isinstance(request, socket.socket)
            self.connections.leave(request)


class BoundedHandler(BaseHTTPRequestHandler):
    """The request handler's side: head deadlines, bodies refused, requests in flight."""

    server: BoundedServer  # type: ignore[assignment]  # the server it is used with
    ungated: ClassVar[frozenset[str]] = frozenset()  # paths outside the in-flight cap
    _reader: _HeadReader
    _slot = False
    _served = False

    def setup(self) -> None:
        super().setup()
        self._reader = _HeadReader(self.connection, self.server.limits)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        if self._served:
            self._reader.await_head()
            self.server.connections.mark(self.connection, serving=False)
        self._served = True
        try:
            super().handle_one_request()
        finally:
            if self._slot:
                self._slot = False
                assert self.server.in_flight is not None
                self.server.in_flight.release()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self._reader.head_read()
        self.server.connections.mark(self.connection, serving=True)
        if not ok:
            return False
        if self.command in ("GET", "HEAD") and self._announces_body():
            self.send_error(400, "Bad Request", "a GET or HEAD request may not carry a body")
            self.close_connection = True
            return False
        gate = self.server.in_flight
        if gate is not None and urlsplit(self.path).path not in self.ungated:
            if not gate.acquire(blocking=False):
                limit = self.server.limits.max_requests
                self.send_error(503, "Service Unavailable",
                                f"limit of concurrent requests reached ({limit}), "
                                "try again later")
                return False
            self._slot = True
        return True

    def _announces_body(self) -> bool:
        if "Transfer-Encoding" in self.headers:
            return True
        length = self.headers.get_all("Content-Length") or []
        return any(value.strip() != "0" for value in length)
