"""The HTTP server's bounds, over real loopback sockets: slowloris connections cut by the
request-head deadline while scrapes are answered, the connection cap (the longest-waiting
connection cut for a new one), requests in flight capped with 503, request bodies on GET/HEAD
refused (no desync into a second request), a connect burst within the listen backlog, and
the telemetry path."""

from __future__ import annotations

import http.client
import selectors
import socket
import ssl
import threading
import time

import pytest

from exporter.cli import _limits, _parser
from exporter.config.settings import Exposition, Tls
from exporter.server.http import build_server, check_metrics_path
from exporter.server.limits import Limits
from exporter.server.published import PublishedState
from exporter.server.webconfig import load_web_config
from tests.harness.wait import poll
from tests.unit.test_server import client_context, make_cert

BODY = b"# TYPE up gauge\nup 1\n"
HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\nAccept: */*\r\n\r\n"


@pytest.fixture
def state():
    state = PublishedState(check_interval=10.0)
    state.publish(BODY, dict)
    return state


def serve(state, **limits):
    return build_server("127.0.0.1:0", state, limits=Limits(**limits)).start()


def get(srv, path="/metrics", timeout=10.0):
    conn = http.client.HTTPConnection(*srv.address, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def threads_named(prefix: str = "Thread-") -> int:
    """The server's connection threads (socketserver names them Thread-N (process_request...))."""
    return sum(t.name.startswith(prefix) and "process_request" in t.name
               for t in threading.enumerate())


class Slowloris:
    """`count` connections that each send one byte of a request head every `interval`;
    records when the server closed each one."""

    def __init__(self, address, count: int, interval: float = 0.5) -> None:
        self.interval = interval
        self.socks = [socket.create_connection(address, timeout=5) for _ in range(count)]
        self.sent = dict.fromkeys(self.socks, 0)
        self.closed: dict[socket.socket, float] = {}
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Slowloris:
        for s in self.socks:
            s.setblocking(False)
        self._thread.start()
        return self

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for s in self.socks:
            sel.register(s, selectors.EVENT_READ)
        next_byte = time.monotonic()
        while not self._stop.is_set() and len(self.closed) < len(self.socks):
            if time.monotonic() >= next_byte:
                for s in self.socks:
                    if s not in self.closed and self.sent[s] < len(HEAD) - 1:  # never whole
                        try:
                            s.send(HEAD[self.sent[s]:self.sent[s] + 1])
                            self.sent[s] += 1
                        except OSError:
                            self._close(sel, s)
                next_byte += self.interval
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    data = s.recv(4096)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._close(sel, s)  # type: ignore[arg-type]
        sel.close()

    def _close(self, sel, s: socket.socket) -> None:
        self.closed[s] = time.monotonic() - self.started
        sel.unregister(s)

    def wait_all_closed(self, timeout: float) -> None:
        poll(lambda: len(self.closed), "every slow connection closed", timeout=timeout,
             interval=0.1, until=lambda n: n == len(self.socks))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self.socks:
            s.close()


def test_200_slowloris_connections_are_cut_by_the_head_deadline_while_scrapes_answer(state):
    srv = serve(state, head_timeout=3.0)
    try:
        before = threads_named()
        with Slowloris(srv.address, 200) as slow:
            poll(threads_named, "200 connection threads", timeout=5, interval=0.05,
                 until=lambda n: n >= 200)
            latencies = []
            for _ in range(5):
                t0 = time.monotonic()
                assert get(srv) == (200, BODY)
                latencies.append(time.monotonic() - t0)
                time.sleep(0.2)
            assert max(latencies) < 1.0, latencies
            slow.wait_all_closed(timeout=8)
            cut = sorted(slow.closed.values())
            assert cut[0] > 2.5 and cut[-1] < 6.0, (cut[0], cut[-1])  # the deadline
            assert max(slow.sent.values()) >= 4  # they trickled: no read timed out
        poll(threads_named, "the connection threads gone", timeout=3, interval=0.05,
             until=lambda n: n <= before)
    finally:
        srv.shutdown()


def test_a_full_connection_cap_cuts_the_longest_waiting_so_scrapes_still_get_in(state):
    srv = serve(state, max_connections=50, head_timeout=30.0)
    try:
        with Slowloris(srv.address, 200):
            time.sleep(1.0)  # they all trickled by now
            poll(threads_named, "threads under the cap", timeout=3, interval=0.05,
                 until=lambda n: n <= 52)  # a thread per connection (cut ones exit at once)
            latencies = []
            for _ in range(5):
                t0 = time.monotonic()
                assert get(srv) == (200, BODY)
                latencies.append(time.monotonic() - t0)
            assert max(latencies) < 1.0, latencies
            assert srv._httpd.connections.evicted >= 150
    finally:
        srv.shutdown()


def test_a_keep_alive_connection_serves_many_requests_and_is_closed_when_idle(state):
    srv = serve(state, idle_timeout=1.0)
    try:
        conn = http.client.HTTPConnection(*srv.address, timeout=10)
        for _ in range(5):
            conn.request("GET", "/metrics")
            assert conn.getresponse().read() == BODY
        sock = conn.sock
        assert sock is not None
        t0 = time.monotonic()
        assert sock.recv(1) == b""  # the server closes the idle connection
        assert 0.8 < time.monotonic() - t0 < 3.0
        conn.close()
    finally:
        srv.shutdown()


def blocking_status(release: threading.Event, entered: threading.Event):
    def status():
        entered.set()
        release.wait(20)
        return {"ok": True}
    return status


@pytest.mark.parametrize("cap", [3, 0])
def test_requests_in_flight_beyond_the_cap_get_503_at_once(cap):
    state = PublishedState(check_interval=10.0)
    release, entered = threading.Event(), threading.Event()
    state.publish(BODY, blocking_status(release, entered))
    srv = serve(state, max_requests=cap)
    held = 3 if cap else 5
    results: list[int] = []
    workers = [threading.Thread(target=lambda: results.append(get(srv, "/api/v1/status")[0]))
               for _ in range(held)]
    try:
        for w in workers:
            w.start()
        assert entered.wait(10)
        if cap:
            # Wait, without a request of our own, until the three hold every slot (a scrape
            # sent meanwhile could take the third's, which then gets the 503 and holds none).
            gate = srv._httpd.in_flight
            poll(lambda: gate._value == 0, "the three holding every slot", timeout=10,
                 interval=0.01)
            # Then a scrape gets 503 at once; health probes do not count. The three hold their
            # slots until released below: a server that queued the scrape would answer it only
            # then, so the 503 arriving at all is "at once" (no timing band: one failed on a
            # loaded machine).
            status, body = get(srv, timeout=5)
            assert status == 503 and b"limit of concurrent requests reached (3)" in body
            assert not release.is_set()
            assert get(srv, "/healthz")[0] == 200
        else:
            time.sleep(0.3)
            assert get(srv) == (200, BODY)  # no limit
        release.set()
        for w in workers:
            w.join(10)
        assert results == [200] * held
        assert get(srv) == (200, BODY)  # slots given back
    finally:
        release.set()
        srv.shutdown()


def exchange(srv, raw: bytes) -> bytes:
    """Send `raw` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(srv.address, timeout=5) as s:
        s.sendall(raw)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except TimeoutError:
                chunks.append(b"<still open>")
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


SMUGGLED = b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(("method", "framing", "body"), [
    ("GET", f"Content-Length: {len(SMUGGLED)}", SMUGGLED),
    ("HEAD", f"Content-Length: {len(SMUGGLED)}", SMUGGLED),
    ("GET", "Transfer-Encoding: chunked", b"%x\r\n%s\r\n0\r\n\r\n" % (len(SMUGGLED), SMUGGLED)),
    ("GET", "Content-Length: 0\r\nContent-Length: 5", b"GET /"),
])
def test_a_body_on_get_or_head_gets_400_and_the_connection_closes(state, method, framing,
                                                                   body):
    srv = serve(state)
    try:
        raw = f"{method} /metrics HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode() + body
        answer = exchange(srv, raw)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert answer.count(b"HTTP/1.") == 1, answer  # one response: the body was no request
        assert b"<still open>" not in answer and b"Connection: close" in answer
    finally:
        srv.shutdown()


def test_content_length_zero_is_no_body_and_keeps_the_connection(state):
    srv = serve(state)
    try:
        conn = http.client.HTTPConnection(*srv.address, timeout=10)
        for _ in range(2):
            conn.request("GET", "/metrics", headers={"Content-Length": "0"})
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (200, BODY)
        conn.close()
    finally:
        srv.shutdown()


def test_a_burst_of_200_connects_is_accepted_without_syn_retries(state):
    srv = serve(state)
    socks = []
    try:
        sel = selectors.DefaultSelector()
        t0 = time.monotonic()
        for _ in range(200):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(srv.address)
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE)
        connected = 0
        while connected < 200 and time.monotonic() - t0 < 3.0:
            for key, _ in sel.select(timeout=0.05):
                sel.unregister(key.fileobj)
                connected += 1
        took = time.monotonic() - t0
        sel.close()
        assert connected == 200 and took < 0.5, (connected, took)  # a SYN retry waits 1 s
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for s in socks)
        assert get(srv) == (200, BODY)
    finally:
        for s in socks:
            s.close()
        srv.shutdown()


def test_the_telemetry_path_moves_the_metrics_and_the_index_links_it(state):
    srv = build_server("127.0.0.1:0", state, metrics_path="/prom/metrics").start()
    try:
        assert get(srv, "/prom/metrics") == (200, BODY)
        assert get(srv, "/metrics")[0] == 404
        status, index = get(srv, "/")
        assert status == 200 and b'href="prom/metrics"' in index and b'href="metrics"' not in index
    finally:
        srv.shutdown()


@pytest.mark.parametrize("path", ["metrics", "/healthz", "/", "/api/v1/status", "/m?x=1"])
def test_a_telemetry_path_that_cannot_serve_is_refused(state, path, capsys):
    with pytest.raises(ValueError, match="expected an absolute path"):
        check_metrics_path(path)
    args = _parser().parse_args(["run", "--config.file", "x.yaml", "--web.telemetry-path", path])
    with pytest.raises(SystemExit) as exit_:
        _limits(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("pulsar-quota-exporter: --web.telemetry-path: ")


def test_the_run_flags_reach_the_limits():
    args = _parser().parse_args(["run", "--config.file", "x.yaml"])
    assert (args.max_requests, args.telemetry_path) == (40, "/metrics")
    args = _parser().parse_args(["run", "--config.file", "x.yaml", "--web.max-requests", "0",
                                 "--web.telemetry-path", "/x"])
    assert _limits(args) == Limits(max_requests=0)
    with pytest.raises(SystemExit):
        _limits(_parser().parse_args(["run", "--config.file", "x", "--web.max-requests", "-1"]))


def test_over_tls_a_trickled_head_is_cut_and_a_full_cap_cuts_the_longest_waiting(
        state, tmp_path, openssl):
    """The deadline reads through the TLS socket; the cap cuts the TLS-wrapped connection."""
    cert, key = make_cert(openssl, tmp_path, "bounds")
    web = load_web_config(Exposition(tls=Tls(str(cert), str(key))))
    srv = build_server("127.0.0.1:0", state, web, Limits(head_timeout=1.5)).start()
    capped = build_server("127.0.0.1:0", state, web, Limits(max_connections=2)).start()
    ctx = client_context(cert)

    def handshaken(server=srv) -> ssl.SSLSocket:
        raw = socket.create_connection(server.address, timeout=5)
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")

    try:
        slow = handshaken()
        slow.settimeout(0.2)
        t0, closed_at = time.monotonic(), None
        for i in range(len(HEAD) - 1):  # a byte every 0.2 s, never the whole head
            try:
                slow.sendall(HEAD[i:i + 1])
                data = slow.recv(1)  # TLS 1.3 session tickets are read here too, as no data
            except TimeoutError:
                continue
            except OSError:
                data = b""
            assert data == b""  # no answer: the connection is closed
            closed_at = time.monotonic() - t0
            break
        assert closed_at is not None and 1.3 < closed_at < 3.0, closed_at
        slow.close()
        first, second = handshaken(capped), handshaken(capped)  # the cap: both waiting
        time.sleep(0.1)
        third = handshaken(capped)  # cuts `first`, the longest waiting
        third.sendall(HEAD)
        assert third.recv(64).startswith(b"HTTP/1.1 200 ")
        first.settimeout(3)  # well within the 10 s head deadline: the cap cut it
        assert first.recv(1) == b""
        for s in (first, second, third):
            s.close()
    finally:
        srv.shutdown()
        capped.shutdown()


def test_over_tls_a_stalled_handshake_is_cut_by_the_cap_and_at_shutdown(
        state, tmp_path, openssl):
    """A client that connects and never sends its ClientHello holds a connection in the
    handshake (10 s at most): the tracker knows the TLS socket from the start, so a full cap
    and the shutdown cut it at once, where they used to leave it for the whole 10 s."""
    cert, key = make_cert(openssl, tmp_path, "stalled")
    web = load_web_config(Exposition(tls=Tls(str(cert), str(key))))
    srv = build_server("127.0.0.1:0", state, web, Limits(max_connections=2)).start()
    ctx = client_context(cert)
    stalled = [socket.create_connection(srv.address, timeout=5) for _ in range(2)]
    try:
        time.sleep(0.2)  # both accepted and in their handshake
        third = ctx.wrap_socket(socket.create_connection(srv.address, timeout=5),
                                server_hostname="127.0.0.1")  # cuts the longest waiting
        stalled[0].settimeout(3)  # well within the 10 s handshake timeout
        assert stalled[0].recv(1) == b""
        third.sendall(HEAD)
        assert third.recv(64).startswith(b"HTTP/1.1 200 ")
        third.close()
        t0 = time.monotonic()
        srv.shutdown()
        stalled[1].settimeout(3)
        assert stalled[1].recv(1) == b""
        assert time.monotonic() - t0 < 3
    finally:
        for s in stalled:
            s.close()
        srv.shutdown()
