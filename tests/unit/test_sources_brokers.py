"""Broker /metrics fetching against real HTTP servers on loopback, through the code a Spark
task runs (`scrape_one`, here in this process) and what the driver keeps of it
(`BrokerScrape`).

The body served is the recorded Apache Pulsar broker output in tests/fixtures; what is
checked is that it arrives whole (plain, gzip, chunked) and parses, that each kind of
failure gets its reason and is counted, and that the last good tables stay in use (stale)
until a fetch succeeds.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import BrokerSource
from exporter.pipeline.packed import coded
from exporter.pipeline.parse import parse_text
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.pipeline.tables import source_tables
from exporter.sources.brokers import SNIFF_BYTES, sniff
from exporter.sources.results import ScrapeError, SourceKind
from tests.harness.fixtures import FIXTURES
from tests.harness.loopback import LoopbackHTTP

FIXTURE = FIXTURES / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt"
BODY = FIXTURE.read_bytes()
# as the driver has them: its subscriptions' topics coded over its topics (packed.py)
EXPECTED = coded(source_tables([parse_text(BODY)]))
# Seconds per fetch: generous, since a test not about timeouts must not hit one on a slow,
# loaded machine; the timeout cases hang far longer (released when their server stops).
TIMEOUT = 5.0


# --- a scriptable /metrics server ---------------------------------------------------------

Reply = Callable[[BaseHTTPRequestHandler], None]


def send(status: int, body: bytes, headers: dict[str, str] | None = None) -> Reply:
    def reply(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        for k, v in {"Content-Type": "text/plain; version=0.0.4", **(headers or {})}.items():
            h.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return reply


class MetricsServer:
    """Serves whatever `reply` says; records the request headers it saw."""

    def __init__(self) -> None:
        self.reply: Reply = send(200, BODY)
        self.request_headers: list[dict[str, str]] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.request_headers.append(dict(self.headers.items()))
                server.reply(self)

        self.server = LoopbackHTTP(Handler).start()

    @property
    def url(self) -> str:
        return f"{self.server.url}/metrics"

    def sleep(self, seconds: float) -> Reply:
        def reply(h: BaseHTTPRequestHandler) -> None:
            self.stopping.wait(seconds)
            send(200, BODY)(h)

        return reply

    def stop(self) -> None:
        self.stopping.set()
        self.server.stop()


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = MetricsServer()
    yield s
    s.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def scraper_for() -> Callable[..., BrokerScrape]:
    def make(*urls: str, timeout: float = TIMEOUT) -> BrokerScrape:
        sources = [BrokerSource(u, timeout) for u in urls]
        return BrokerScrape(sources, in_process(sources), clock=Clock())

    return make


def same_as_fixture(tables) -> bool:
    return all(getattr(tables, n).equals(getattr(EXPECTED, n))
               for n in ("topics", "subscriptions", "namespaces", "usage"))


def counts(health) -> dict[ScrapeError, int]:
    return dict(health.errors)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


# --- success -------------------------------------------------------------------------------


def test_fixture_body_is_fetched_whole_and_parsed(server, scraper_for):
    result = scraper_for(server.url).run()
    ((source, tables),) = result.tables
    assert source == server.url and same_as_fixture(tables)
    assert result.malformed == {server.url: {r: 0 for r in tables.malformed}}
    (health,) = result.health
    assert health.up and health.kind is SourceKind.BROKER and health.source == server.url
    assert health.last_success is not None and health.last_error is None
    assert set(counts(health)) == set(ScrapeError) and not any(counts(health).values())
    assert server.request_headers[0]["Accept-Encoding"] == "gzip"


@pytest.mark.parametrize("content_type", ["text/plain;charset=utf-8",
                                          "text/plain; version=0.0.4; charset=utf-8"])
def test_apache_pulsars_content_types_before_and_since_4_0_4(content_type, server,
                                                              scraper_for):
    """Pulsar answered `text/plain;charset=utf-8` until 4.0.4 added the format's version
    for Prometheus 3 (apache/pulsar#24060, PrometheusMetricsServlet's
    PROMETHEUS_CONTENT_TYPE_004); 4.1 answers the same."""
    server.reply = send(200, BODY, {"Content-Type": content_type})
    ((_, tables),) = scraper_for(server.url).run().tables
    assert same_as_fixture(tables)


def test_gzip_body_is_decompressed_as_it_streams(server, scraper_for):
    wire = gzip.compress(BODY)
    server.reply = send(200, wire, {"Content-Encoding": "gzip"})
    result = scraper_for(server.url).run()
    assert len(wire) < len(BODY) // 4  # it really travelled compressed
    assert same_as_fixture(result.tables[0][1]) and result.health[0].up


def test_a_gzip_bomb_is_cut_at_body_size_limit_without_inflating_it_whole(server):
    """64 MiB of text in 64 KiB of gzip, against a 1 MiB limit: the fetch fails as too
    large, and no more than a MiB or two is ever inflated at once (a 64 KiB chunk of this
    stream inflates to ~64 MiB in one `decompress` call)."""
    wire = gzip.compress(b"# HELP x y\n" + b"\n" * (64 << 20), compresslevel=9)
    assert len(wire) < 128 << 10
    server.reply = send(200, wire, {"Content-Encoding": "gzip"})
    source = BrokerSource(server.url, TIMEOUT, body_size_limit=1 << 20)
    tracemalloc.start()
    try:
        health = BrokerScrape([source], in_process([source]), clock=Clock()).run().health[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not health.up and health.last_error is ScrapeError.TOO_LARGE, health
    assert "body_size_limit" in health.last_error_detail
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB traced"


def test_chunked_transfer_encoding(server, scraper_for):
    def chunked(h: BaseHTTPRequestHandler) -> None:
        h.protocol_version = "HTTP/1.1"
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i in range(0, len(BODY), 10_000):
            part = BODY[i:i + 10_000]
            h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")
        h.close_connection = True

    server.reply = chunked
    assert same_as_fixture(scraper_for(server.url).run().tables[0][1])


# --- redirects: followed as Prometheus follows them ----------------------------------------


def redirect(status: int, location: str) -> Reply:
    return send(status, b"", {"Location": location})


def test_a_redirect_is_followed_as_apache_pulsar_sends_it(server, scraper_for):
    """Apache Pulsar answers /metrics with 302 → /metrics/ (a relative Location here)."""
    def pulsar(h: BaseHTTPRequestHandler) -> None:
        (redirect(302, "/metrics/") if h.path == "/metrics" else send(200, BODY))(h)

    server.reply = pulsar
    result = scraper_for(server.url).run()
    assert result.health[0].up
    assert same_as_fixture(result.tables[0][1])
    assert len(server.request_headers) == 2  # the hop and the body


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_every_redirect_status_is_followed_to_another_server(status, server, scraper_for):
    target = MetricsServer()
    try:
        server.reply = redirect(status, target.url)
        result = scraper_for(server.url).run()
        assert result.health[0].up and same_as_fixture(result.tables[0][1])
        assert len(target.request_headers) == 1
    finally:
        target.stop()


def test_credentials_go_to_the_configured_origin_only(server):
    """Same origin (the /metrics/ hop): the Authorization header goes on; another origin
    (another port of the same host is another origin) never sees it."""
    target = MetricsServer()
    try:
        server.reply = lambda h: (redirect(302, "/metrics/") if h.path == "/metrics"
                                  else redirect(307, target.url))(h)
        source = BrokerSource(server.url, TIMEOUT, authorization="Bearer s3cret")
        result = BrokerScrape([source], in_process([source]), clock=Clock()).run()
        assert result.health[0].up
        assert [h.get("Authorization") for h in server.request_headers] == ["Bearer s3cret"] * 2
        assert [h.get("Authorization") for h in target.request_headers] == [None]
    finally:
        target.stop()


def test_userinfo_credentials_stay_home_too(server):
    target = MetricsServer()
    try:
        server.reply = redirect(302, target.url)
        url = server.url.replace("http://", "http://alice:p%40ss@")
        source = BrokerSource(url, TIMEOUT)
        result = BrokerScrape([source], in_process([source]), clock=Clock()).run()
        assert result.health[0].up
        # used (alice:p@ss) and shown as Prometheus shows it, whoever built the source
        assert server.request_headers[0]["Authorization"] == "Basic YWxpY2U6cEBzcw=="
        assert "Authorization" not in target.request_headers[0]
        shown = server.url.replace("http://", "http://alice:<secret>@")
        assert source.url == result.health[0].source == shown
        assert "p%40ss" not in repr(source)
    finally:
        target.stop()


def test_a_redirect_loop_is_an_http_error_after_ten_hops(server, scraper_for):
    server.reply = redirect(302, "/metrics")
    health = scraper_for(server.url).run().health[0]
    assert not health.up and health.last_error is ScrapeError.HTTP_ERROR
    assert "more than 10 redirects" in health.last_error_detail
    assert len(server.request_headers) == 11  # the first request and ten hops


def test_a_redirect_without_location_is_an_http_error(server, scraper_for):
    server.reply = send(302, b"")
    health = scraper_for(server.url).run().health[0]
    assert not health.up and health.last_error is ScrapeError.HTTP_ERROR
    assert "without a Location" in health.last_error_detail


def test_a_redirect_to_another_scheme_is_refused(server, scraper_for):
    server.reply = redirect(302, "ftp://127.0.0.1/metrics")
    health = scraper_for(server.url).run().health[0]
    assert not health.up and "unsupported URL" in health.last_error_detail


# --- failures: reason, counting, last good body kept -------------------------------------

HTML = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
FAILURES: dict[str, tuple[Callable[[MetricsServer], Reply], ScrapeError]] = {
    "http_500": (lambda s: send(500, b"oops"), ScrapeError.HTTP_ERROR),
    "http_404": (lambda s: send(404, b"no"), ScrapeError.HTTP_ERROR),
    "http_401": (lambda s: send(401, b"who are you"), ScrapeError.AUTH),
    "http_403": (lambda s: send(403, b"not you"), ScrapeError.AUTH),
    "html_body": (lambda s: send(200, HTML), ScrapeError.MALFORMED),
    "html_content_type": (lambda s: send(200, BODY, {"Content-Type": "text/html"}),
                          ScrapeError.MALFORMED),
    "empty_body": (lambda s: send(200, b""), ScrapeError.MALFORMED),
    "binary_body": (lambda s: send(200, bytes(range(256)) * 8), ScrapeError.MALFORMED),
    "latin1_body": (lambda s: send(200, "# caf\xe9\n".encode("latin-1")),
                    ScrapeError.MALFORMED),
    "json_body": (lambda s: send(200, b'{"error": "x"}'), ScrapeError.MALFORMED),
    "truncated_body": (lambda s: send(200, BODY[:5000], {"Content-Length": str(len(BODY))}),
                       ScrapeError.MALFORMED),
    "truncated_gzip": (lambda s: send(200, gzip.compress(BODY)[:3000],
                                      {"Content-Encoding": "gzip"}), ScrapeError.MALFORMED),
    "corrupt_gzip": (lambda s: send(200, b"\x1f\x8b" + b"not gzip" * 50,
                                    {"Content-Encoding": "gzip"}), ScrapeError.MALFORMED),
    "brotli": (lambda s: send(200, b"....", {"Content-Encoding": "br"}), ScrapeError.MALFORMED),
    "timeout": (lambda s: s.sleep(60.0), ScrapeError.TIMEOUT),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failure_is_classified_counted_and_last_good_tables_kept(case, server, scraper_for):
    make_reply, reason = FAILURES[case]
    scraper = scraper_for(server.url)
    first = scraper.run()
    (good,) = first.tables

    server.reply = make_reply(server)
    result = scraper.run()
    assert result.tables == (good,)  # stale, not dropped, not replaced
    assert result.malformed == {}  # nothing fetched afresh: no lines counted again
    (health,) = result.health
    assert not health.up and health.last_error is reason and health.last_error_detail
    assert health.last_success == first.health[0].last_success
    assert counts(health)[reason] == 1
    assert sum(counts(health).values()) == 1

    again = scraper.run()
    assert counts(again.health[0])[reason] == 2  # cumulative


def test_refused_when_the_broker_goes_away(scraper_for):
    srv = MetricsServer()
    scraper = scraper_for(srv.url)
    (good,) = scraper.run().tables
    srv.stop()  # the port is closed now
    result = scraper.run()
    assert result.health[0].last_error is ScrapeError.REFUSED
    assert result.tables == (good,) and not result.health[0].up
    assert counts(result.health[0])[ScrapeError.REFUSED] == 1


def test_never_reachable_source_has_no_tables_and_is_down(scraper_for):
    result = scraper_for(closed_port_url()).run()
    assert result.tables == ()
    (health,) = result.health
    assert not health.up and health.last_success is None
    assert health.last_error is ScrapeError.REFUSED


def test_a_trickling_broker_hits_the_deadline_not_just_the_socket_timeout(server, scraper_for):
    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.end_headers()
        for line in BODY.splitlines(keepends=True)[:40]:
            if server.stopping.wait(0.5):
                return
            h.wfile.write(line)
            h.wfile.flush()

    server.reply = trickle  # each line arrives well within the socket timeout
    started = time.monotonic()
    result = scraper_for(server.url, timeout=2.0).run()
    assert result.health[0].last_error is ScrapeError.TIMEOUT
    # 40 lines × 0.5 s would take 20 s: the fetch was cut, not waited out
    assert time.monotonic() - started < 20.0


def test_recovery_flips_up_back_and_replaces_the_tables(server, scraper_for):
    scraper = scraper_for(server.url)
    (first,) = scraper.run().tables
    server.reply = send(500, b"")
    assert not scraper.run().health[0].up
    newer = BODY + (b'pulsar_in_messages_total{cluster="test",namespace="prop/ns-abc1",'
                    b'topic="persistent://prop/ns-abc1/new"} 7\n')
    server.reply = send(200, newer)
    result = scraper.run()
    (health,) = result.health
    assert health.up and health.last_error is None and health.last_error_detail == ""
    assert counts(health)[ScrapeError.HTTP_ERROR] == 1  # the history stays
    ((_, tables),) = result.tables
    assert tables is not first[1]
    assert tables.topics["topic"].to_pylist() == ["persistent://prop/ns-abc1/new"]


# --- several sources -------------------------------------------------------------------------


def test_sources_are_independent_and_in_configuration_order(scraper_for):
    servers = [MetricsServer() for _ in range(2)]
    try:
        servers[1].reply = send(500, b"")
        down = closed_port_url()
        result = scraper_for(servers[0].url, down, servers[1].url).run()
        assert [h.source for h in result.health] == [servers[0].url, down, servers[1].url]
        assert [h.up for h in result.health] == [True, False, False]
        assert [s for s, _ in result.tables] == [servers[0].url]
    finally:
        for s in servers:
            s.stop()


def test_duplicate_sources_are_rejected():
    sources = [BrokerSource("http://a/metrics"), BrokerSource("http://a/metrics")]
    with pytest.raises(ValueError, match="duplicate"):
        BrokerScrape(sources, in_process(sources))


# --- sniffing (pure) -------------------------------------------------------------------------


def test_sniff_accepts_the_recorded_broker_output():
    assert sniff(BODY[:SNIFF_BYTES], len(BODY)) is None
    assert sniff(b"\n\n  pulsar_x 1\n", 14) is None


def test_sniff_accepts_a_multibyte_character_cut_at_the_kib_boundary():
    head = (b"# HELP x " + b"a" * (SNIFF_BYTES - 10) + "é".encode())[:SNIFF_BYTES]
    assert head.endswith(b"\xc3")
    assert sniff(head, 5000) is None


@given(st.text(alphabet=st.characters(blacklist_characters="\x00",
                                      blacklist_categories=("Cs",)), max_size=300))
def test_sniff_accepts_any_utf8_after_a_comment(rest):
    text = ("# TYPE x gauge\n" + rest).encode()
    assert sniff(text[:SNIFF_BYTES], len(text)) is None


@given(st.sampled_from(["<", "{", "[", "\"", "1", "-", "!"]), st.text(max_size=100))
def test_sniff_rejects_bodies_that_cannot_start_exposition_text(first, rest):
    text = (first + rest).encode()
    assert sniff(text[:SNIFF_BYTES], len(text)) is not None
