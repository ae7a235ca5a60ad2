"""The HTTP server: routes, gzip, HEAD, health from an injected clock, whole-cycle swaps under
concurrent scrapes, shutdown within a second, basic auth with cached bcrypt, and TLS ≥ 1.2
with a certificate made by the openssl CLI (re-read when it is rotated)."""

from __future__ import annotations

import base64
import gzip
import http.client
import itertools
import json
import os
import socket
import ssl
import subprocess
import threading
from functools import partial
from pathlib import Path

import bcrypt
import pytest

from exporter.config.settings import Exposition, Tls
from exporter.demo.embedded import free_port
from exporter.exposition.render import CONTENT_TYPE
from exporter.server.http import (
    ListenError,
    accepts_gzip,
    build_server,
    listened,
    parse_listen,
)
from exporter.server.published import PublishedState
from exporter.server.webconfig import (
    AuthOutcome,
    BasicAuth,
    WebConfig,
    WebConfigError,
    load_web_config,
)
from tests.harness.wait import poll


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def state(clock):
    return PublishedState(check_interval=10.0, startup_grace=30.0, clock=clock)


@pytest.fixture
def server(state):
    srv = build_server("127.0.0.1:0", state).start()
    yield srv
    srv.shutdown()


def request(srv, method="GET", path="/metrics", headers=None, context=None):
    host, port = srv.address
    if context is None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
    else:
        conn = http.client.HTTPSConnection(host, port, timeout=10, context=context)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


BODY = b'# HELP m A metric.\n# TYPE m gauge\nm{cluster="c"} 1\n' * 50


# --- routes ----------------------------------------------------------------------------------
def test_before_the_first_cycle_metrics_and_readyz_are_503_but_healthz_is_200(server):
    assert request(server, path="/metrics")[0] == 503
    status, _, body = request(server, path="/readyz")
    assert status == 503 and body.startswith(b"not ready")
    status, _, body = request(server, path="/healthz")
    assert status == 200 and body.startswith(b"starting") and body.count(b"\n") == 1
    assert request(server, path="/api/v1/status")[0] == 503


def test_metrics_plain_and_gzip(server, state):
    state.publish(BODY, dict)
    status, headers, body = request(server)
    assert (status, body) == (200, BODY)
    assert headers["content-type"] == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert "content-encoding" not in headers and int(headers["content-length"]) == len(BODY)
    status, headers, body = request(server, headers={"Accept-Encoding": "deflate, gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == BODY and int(headers["content-length"]) == len(body)
    status, headers, body = request(server, headers={"Accept-Encoding": "gzip;q=0"})
    assert body == BODY and "content-encoding" not in headers


def test_head_sends_the_headers_of_get_without_a_body(server, state):
    state.publish(BODY, lambda: {"a": 1})
    for path in ("/metrics", "/healthz", "/readyz", "/api/v1/status", "/"):
        get_status, get_headers, get_body = request(server, path=path)
        status, headers, body = request(server, "HEAD", path)
        assert (status, body) == (get_status, b"")
        assert int(headers["content-length"]) == len(get_body) > 0
        assert headers["content-type"] == get_headers["content-type"]


def test_status_json_is_served_as_handed_and_readyz_lists_degraded_sources(server, state):
    """The status is made on the cycle's first request, once, not at publication."""
    status_doc = {"cycle": {"duration_seconds": 1.25}, "sources": {"broker-1": "up"},
                  "decisions": [{"topic": "persistent://t/n/x", "evict": False}]}
    made: list[int] = []

    def status_of() -> dict:
        made.append(state.current.cycle)
        return status_doc

    state.publish(BODY, status_of, degraded=("source broker-2 down, data 120s old",))
    request(server)  # a scrape of /metrics makes no status
    assert made == []
    for _ in range(2):
        status, headers, body = request(server, path="/api/v1/status")
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body) == status_doc
    assert made == [1]
    status, _, body = request(server, path="/readyz")
    assert status == 200
    assert body.decode().splitlines() == ["ready: cycle 1 published",
                                          "degraded: source broker-2 down, data 120s old"]


def test_index_links_every_endpoint(server, state):
    state.publish(BODY, dict)
    status, headers, body = request(server, path="/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    for target in ("metrics", "healthz", "readyz", "api/v1/status"):
        assert f'href="{target}"'.encode() in body
        assert request(server, path="/" + target)[0] == 200


def test_unknown_paths_and_methods(server, state):
    state.publish(BODY, dict)
    assert request(server, path="/nope")[0] == 404
    assert request(server, path="/metrics?x=1")[0] == 200  # queries are ignored
    status, headers, _ = request(server, "POST", "/metrics")
    assert status == 405 and headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize(("header", "expected"), [
    (None, False), ("", False), ("gzip", True), ("GZIP", True), ("deflate, gzip;q=0.5", True),
    ("gzip;q=0", False), ("gzip; q=0.0", False), ("*", True), ("*;q=0", False),
    ("identity", False), ("gzip;q=0, *", False), ("x-gzip", True), ("br, *;q=0.1", True),
])
def test_accept_encoding(header, expected):
    assert accepts_gzip(header) is expected


@pytest.mark.parametrize(("listen", "expected"), [
    ("127.0.0.1:9964", ("127.0.0.1", 9964)), (":8080", ("", 8080)),
    ("[::1]:80", ("::1", 80)), ("localhost:0", ("localhost", 0)),
])
def test_parse_listen(listen, expected):
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["127.0.0.1", "host:port", "h:70000", ""])
def test_parse_listen_rejects(listen):
    with pytest.raises(ValueError):
        parse_listen(listen)


def test_all_interfaces_listen_serves_ipv4(state):
    state.publish(BODY, dict)
    with build_server(":0", state).start() as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=5)
        conn.request("GET", "/metrics")
        assert conn.getresponse().read() == BODY
        conn.close()


def test_a_busy_port_fails_at_build_time(server, state):
    listen = f"127.0.0.1:{server.address[1]}"
    assert listened(*parse_listen(listen))
    with pytest.raises(ListenError, match=f"cannot listen on {listen} "
                                          r"\(exposition.listen\): Address already in use"):
        build_server(listen, state)
    assert not listened("127.0.0.1", free_port())
    # not this host's address: no listener to name; the bind says what is wrong
    assert not listened("203.0.113.7", free_port())  # TEST-NET-3, on no host
    with pytest.raises(ListenError, match="Cannot assign requested address"):
        build_server("203.0.113.7:9", state)


# --- health ----------------------------------------------------------------------------------
def test_healthz_follows_the_last_cycle_age(server, state, clock):
    assert state.max_age == 30.0  # (2 missed + 1) × check_interval
    state.publish(BODY, dict)
    clock.now += 29.0
    status, _, body = request(server, path="/healthz")
    assert status == 200 and body == b"ok: cycle 1 finished 29.0s ago\n"
    clock.now += 2.0
    status, _, body = request(server, path="/healthz")
    assert status == 503 and body.count(b"\n") == 1
    assert body.startswith(b"unhealthy: last cycle (1) finished 31.0s ago")
    state.publish(BODY, dict)
    assert request(server, path="/healthz")[0] == 200
    assert request(server, path="/readyz")[2].startswith(b"ready: cycle 2")


def test_healthz_fails_when_no_cycle_finishes_within_the_startup_grace(server, clock):
    clock.now += 30.0 + 30.0  # startup grace + max age
    assert request(server, path="/healthz")[0] == 200
    clock.now += 0.5
    status, _, body = request(server, path="/healthz")
    assert status == 503 and body.startswith(b"unhealthy: no cycle finished")


# --- atomic swaps --------------------------------------------------------------------------
def test_concurrent_scrapes_only_ever_see_whole_cycles(server, state):
    def body_of(i: int) -> bytes:
        return b"".join(b'm{cycle="%d",n="%d"} %d\n' % (i, n, i) for n in range(4000))

    bodies = {body_of(i): i for i in range(30)}
    by_cycle = {i: b for b, i in bodies.items()}
    state.publish(by_cycle[0], lambda: {"cycle": 0})
    stop = threading.Event()
    seen: list[list[int]] = [[] for _ in range(4)]  # per scraper, the cycle of each read
    errors: list[str] = []

    def scrape(mine: list[int], use_gzip: bool) -> None:
        host, port = server.address
        conn = http.client.HTTPConnection(host, port, timeout=10)  # keep-alive
        try:
            while not stop.is_set():
                conn.request("GET", "/metrics",
                             headers={"Accept-Encoding": "gzip"} if use_gzip else {})
                raw = conn.getresponse().read()
                body = gzip.decompress(raw) if use_gzip else raw
                if body not in bodies:
                    errors.append(f"torn body of {len(body)} bytes")
                mine.append(bodies.get(body, -1))
        except Exception as error:  # a dead scraper fails the test, not only the wait
            errors.append(repr(error))
        finally:
            conn.close()

    threads = [threading.Thread(target=scrape, args=(mine, i % 2 == 0))
               for i, mine in enumerate(seen)]
    for t in threads:
        t.start()
    published = itertools.count(1)

    def publish_until_each_scraper_saw_two_cycles() -> bool:
        """Swap in the next cycle until every scraper (plain and gzip) has read across a swap
        and every body has been published once, however the threads are scheduled."""
        if errors:
            return True
        i = next(published)
        if i > len(by_cycle) and all(len(set(mine)) >= 2 for mine in seen):
            return True
        state.publish(by_cycle[i % len(by_cycle)], partial(dict, cycle=i))
        return False

    try:
        poll(publish_until_each_scraper_saw_two_cycles, "every scraper seeing two cycles",
             timeout=120, interval=0.01, show=lambda: [sorted(set(m)) for m in seen])
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors
    assert all(len(set(mine)) >= 2 for mine in seen)


# --- shutdown --------------------------------------------------------------------------------
def test_shutdown_closes_the_listener_and_an_idle_keep_alive_connection(state):
    state.publish(BODY, dict)
    srv = build_server("127.0.0.1:0", state).start()
    host, port = srv.address
    idle = http.client.HTTPConnection(host, port, timeout=10)
    idle.request("GET", "/metrics")
    assert idle.getresponse().read() == BODY  # connection stays open (HTTP/1.1)
    srv.shutdown()  # returns: an idle kept-alive connection does not hold it up
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1).close()
    idle.sock.settimeout(10.0)  # a FIN already sent reads at once; none fails, not hangs
    assert idle.sock.recv(1) == b""  # the server closed the kept-alive connection too
    idle.close()


# --- basic auth ------------------------------------------------------------------------------
def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def alice_hash() -> str:
    return bcrypt.hashpw(b"s3cret \xc3\xa9", bcrypt.gensalt(rounds=4)).decode()


class CountingCheck:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls += 1
        return bcrypt.checkpw(password, hashed)


def test_basic_auth_on_every_route(state, alice_hash):
    state.publish(BODY, dict)
    web = WebConfig(auth=BasicAuth({"alice": alice_hash}))
    with build_server("127.0.0.1:0", state, web).start() as srv:
        for path in ("/metrics", "/healthz", "/"):
            status, headers, _ = request(srv, path=path)
            assert status == 401
            assert headers["www-authenticate"].startswith('Basic realm="pulsar-quota-exporter"')
        assert request(srv, headers=basic("alice", "s3cret é"))[2] == BODY
        assert request(srv, headers=basic("alice", "wrong"))[0] == 401
        assert request(srv, headers=basic("mallory", "s3cret é"))[0] == 401
        assert request(srv, "HEAD", headers=basic("alice", "nope"))[0] == 401


@pytest.mark.parametrize(("header", "outcome"), [
    (None, AuthOutcome.MISSING),
    ("Bearer abc", AuthOutcome.MISSING),
    ("Basic !!!", AuthOutcome.MALFORMED),
    ("Basic " + base64.b64encode(b"no-colon").decode(), AuthOutcome.MALFORMED),
    ("Basic " + base64.b64encode(b"alice:\xff").decode(), AuthOutcome.MALFORMED),
    ("basic " + base64.b64encode(b"alice:s3cret \xc3\xa9").decode(), AuthOutcome.OK),
    ("Basic " + base64.b64encode(b"alice:" + b"x" * 100).decode(), AuthOutcome.WRONG_PASSWORD),
    ("Basic " + base64.b64encode(b"bob:s3cret \xc3\xa9").decode(), AuthOutcome.UNKNOWN_USER),
])
def test_basic_auth_outcomes(alice_hash, header, outcome):
    assert BasicAuth({"alice": alice_hash}).check(header) is outcome


def test_successes_are_cached_failures_and_unknown_users_always_pay_bcrypt(alice_hash):
    check = CountingCheck()
    auth = BasicAuth({"alice": alice_hash}, checkpw=check)
    good = basic("alice", "s3cret é")["Authorization"]
    for _ in range(5):
        assert auth.check(good) is AuthOutcome.OK
    assert check.calls == 1
    for _ in range(3):
        assert auth.check(basic("alice", "bad")["Authorization"]) is AuthOutcome.WRONG_PASSWORD
    assert check.calls == 4
    # unknown users are checked against a real hash too: same cost, no user enumeration
    assert auth.check(basic("zed", "s3cret é")["Authorization"]) is AuthOutcome.UNKNOWN_USER
    assert check.calls == 5


def test_cache_is_bounded(alice_hash):
    check = CountingCheck()
    auth = BasicAuth({"alice": alice_hash, "bob": alice_hash}, cache_size=1, checkpw=check)
    a, b = basic("alice", "s3cret é")["Authorization"], basic("bob", "s3cret é")["Authorization"]
    for header in (a, b, a):
        assert auth.check(header) is AuthOutcome.OK
    assert check.calls == 3  # alice was evicted by bob


def test_load_web_config_validates_hashes_and_files(alice_hash, tmp_path):
    y_hash = "$2y$" + alice_hash[4:]  # htpasswd / Go style prefix
    web = load_web_config(Exposition(basic_auth={"alice": y_hash}))
    assert web.tls is None and web.auth.check(basic("alice", "s3cret é")["Authorization"]) \
        is AuthOutcome.OK
    with pytest.raises(WebConfigError) as e:
        load_web_config(Exposition(
            basic_auth={"bob": "plaintext"},
            tls=Tls(str(tmp_path / "missing.crt"), str(tmp_path / "missing.key"))))
    text = "\n".join(e.value.errors)
    assert "exposition.basic_auth.bob: not a bcrypt hash" in text
    assert "exposition.tls.cert_file: cannot read" in text
    assert "exposition.tls.key_file: cannot read" in text


# --- TLS -------------------------------------------------------------------------------------
def make_cert(openssl: str, directory: Path, cn: str) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={cn}",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=30)
    return cert, key


def client_context(cafile: Path, **versions) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cafile))
    for attr, value in versions.items():
        setattr(ctx, attr, value)
    return ctx


def peer_cn(srv, cafile: Path) -> str:
    host, port = srv.address
    with socket.create_connection((host, port), timeout=5) as raw, \
            client_context(cafile).wrap_socket(raw, server_hostname=host) as tls:
        subject = dict(x[0] for x in tls.getpeercert()["subject"])
        return subject["commonName"]


@pytest.fixture
def tls_files(tmp_path, openssl):
    return make_cert(openssl, tmp_path / "a", "exporter-a")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_serves_with_tls12_minimum(state, tls_files):
    cert, key = tls_files
    state.publish(BODY, dict)
    web = load_web_config(Exposition(tls=Tls(str(cert), str(key))))
    assert web.tls.context().minimum_version == ssl.TLSVersion.TLSv1_2
    with build_server("127.0.0.1:0", state, web).start() as srv:
        assert srv.url.startswith("https://")
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            ctx = client_context(cert, minimum_version=version, maximum_version=version)
            assert request(srv, context=ctx)[2] == BODY
        old = client_context(cert)
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # so this client really offers TLS 1.1
        old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError, match="ALERT_PROTOCOL_VERSION"):  # the server's alert
            request(srv, context=old)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            request(srv)  # plain HTTP to the TLS port
        assert request(srv, context=client_context(cert))[0] == 200  # still serving


def test_tls_with_basic_auth(state, tls_files, alice_hash):
    cert, key = tls_files
    state.publish(BODY, dict)
    web = load_web_config(Exposition(tls=Tls(str(cert), str(key)),
                                     basic_auth={"alice": alice_hash}))
    with build_server("127.0.0.1:0", state, web).start() as srv:
        ctx = client_context(cert)
        assert request(srv, context=ctx)[0] == 401
        assert request(srv, context=ctx, headers=basic("alice", "s3cret é"))[2] == BODY


def test_rotated_certificate_is_picked_up_by_new_connections(state, tmp_path, openssl):
    cert, key = make_cert(openssl, tmp_path / "live", "exporter-a")
    new_cert, new_key = make_cert(openssl, tmp_path / "next", "exporter-b")
    state.publish(BODY, dict)
    web = load_web_config(Exposition(tls=Tls(str(cert), str(key))))
    trusted_b = tmp_path / "b.pem"
    trusted_b.write_bytes(new_cert.read_bytes())
    with build_server("127.0.0.1:0", state, web).start() as srv:
        assert peer_cn(srv, cert) == "exporter-a"
        os.replace(new_key, key)
        os.replace(new_cert, cert)
        assert peer_cn(srv, trusted_b) == "exporter-b"
        cert.write_text("half-written")  # a broken update keeps the last good certificate
        assert peer_cn(srv, trusted_b) == "exporter-b"
        assert request(srv, context=client_context(trusted_b))[2] == BODY
