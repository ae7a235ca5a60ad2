"""Broker /metrics fetching against real HTTP servers on loopback.

The body served is the recorded Apache Pulsar broker output in shared/fixtures; what is
checked is that it lands on disk byte for byte, that each kind of failure gets its reason
and is counted, and that the last good body stays in use (stale) until a fetch succeeds.
"""

from __future__ import annotations

import gzip
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.config import BrokerSource
from exporter.sources.brokers import (
    SNIFF_BYTES,
    BrokerScraper,
    Failed,
    Fetched,
    sniff,
    spool_name,
)
from exporter.sources.model import ScrapeError, SourceKind
from tests.harness.loopback import LoopbackHTTP

FIXTURE = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"
           / "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt")
BODY = FIXTURE.read_bytes()
TIMEOUT = 0.4  # seconds; every test stays well under a few seconds


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
def scraper_for(tmp_path: Path) -> Iterator[Callable[..., BrokerScraper]]:
    made: list[BrokerScraper] = []

    def make(*urls: str, timeout: float = TIMEOUT) -> BrokerScraper:
        scraper = BrokerScraper([BrokerSource(u, timeout) for u in urls], tmp_path / "spool",
                                clock=Clock())
        made.append(scraper)
        return scraper

    yield make
    for s in made:
        s.close()


def counts(health) -> dict[ScrapeError, int]:
    return dict(health.errors)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


# --- success -------------------------------------------------------------------------------


def test_fixture_body_is_spooled_byte_exact(server, scraper_for, tmp_path):
    scraper = scraper_for(server.url)
    result = scraper.scrape()
    (outcome,) = result.outcomes
    assert isinstance(outcome, Fetched)
    (body,) = result.bodies
    assert body.source == server.url
    assert Path(body.path).read_bytes() == BODY
    assert body.size_bytes == len(BODY)
    assert Path(body.path).parent == tmp_path / "spool" and body.path.endswith(".prom")
    (health,) = result.health
    assert health.up and health.kind is SourceKind.BROKER and health.source == server.url
    assert health.last_success == body.fetched_at and health.last_error is None
    assert set(counts(health)) == set(ScrapeError) and not any(counts(health).values())
    assert server.request_headers[0]["Accept-Encoding"] == "gzip"
    assert [p.name for p in (tmp_path / "spool").iterdir()] == [Path(body.path).name]


def test_gzip_body_is_decompressed_on_the_way_to_disk(server, scraper_for):
    wire = gzip.compress(BODY)
    server.reply = send(200, wire, {"Content-Encoding": "gzip"})
    result = scraper_for(server.url).scrape()
    (body,) = result.bodies
    assert len(wire) < len(BODY) // 4  # it really travelled compressed
    assert Path(body.path).read_bytes() == BODY and body.size_bytes == len(BODY)
    assert result.health[0].up


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
    (body,) = scraper_for(server.url).scrape().bodies
    assert Path(body.path).read_bytes() == BODY


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
    "timeout": (lambda s: s.sleep(3.0), ScrapeError.TIMEOUT),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failure_is_classified_counted_and_last_good_body_kept(case, server, scraper_for,
                                                                tmp_path):
    make_reply, reason = FAILURES[case]
    scraper = scraper_for(server.url)
    (good,) = scraper.scrape().bodies

    server.reply = make_reply(server)
    started = time.monotonic()
    result = scraper.scrape()
    assert time.monotonic() - started < TIMEOUT + 1.0
    (outcome,) = result.outcomes
    assert isinstance(outcome, Failed) and outcome.reason is reason, outcome
    assert result.bodies == (good,)  # stale, not dropped, not replaced
    assert Path(good.path).read_bytes() == BODY
    (health,) = result.health
    assert not health.up and health.last_error is reason and health.last_error_detail
    assert health.last_success == good.fetched_at
    assert counts(health)[reason] == 1
    assert sum(counts(health).values()) == 1

    again = scraper.scrape()
    assert counts(again.health[0])[reason] == 2  # cumulative
    assert not [p for p in (tmp_path / "spool").iterdir() if p.suffix == ".tmp"]


def test_refused_when_the_broker_goes_away(scraper_for):
    srv = MetricsServer()
    scraper = scraper_for(srv.url)
    (good,) = scraper.scrape().bodies
    srv.stop()  # the port is closed now
    result = scraper.scrape()
    assert result.outcomes[0].reason is ScrapeError.REFUSED
    assert result.bodies == (good,) and not result.health[0].up
    assert counts(result.health[0])[ScrapeError.REFUSED] == 1


def test_never_reachable_source_has_no_body_and_is_down(scraper_for):
    result = scraper_for(closed_port_url()).scrape()
    assert result.bodies == ()
    (health,) = result.health
    assert not health.up and health.last_success is None
    assert health.last_error is ScrapeError.REFUSED


def test_a_trickling_broker_hits_the_deadline_not_just_the_socket_timeout(server, scraper_for):
    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.end_headers()
        for line in BODY.splitlines(keepends=True)[:40]:
            if server.stopping.wait(0.05):
                return
            h.wfile.write(line)
            h.wfile.flush()

    server.reply = trickle  # each line arrives well within the socket timeout
    started = time.monotonic()
    result = scraper_for(server.url, timeout=0.5).scrape()
    assert time.monotonic() - started < 1.2
    assert result.outcomes[0].reason is ScrapeError.TIMEOUT


def test_recovery_flips_up_back_and_replaces_the_body(server, scraper_for):
    scraper = scraper_for(server.url)
    (first,) = scraper.scrape().bodies
    server.reply = send(500, b"")
    assert not scraper.scrape().health[0].up
    newer = BODY + b"pulsar_extra_gauge{cluster=\"test\"} 1.0\n"
    server.reply = send(200, newer)
    result = scraper.scrape()
    (health,) = result.health
    assert health.up and health.last_error is None and health.last_error_detail == ""
    assert counts(health)[ScrapeError.HTTP_ERROR] == 1  # the history stays
    (body,) = result.bodies
    assert body.fetched_at > first.fetched_at and health.last_success == body.fetched_at
    assert body.path == first.path and Path(body.path).read_bytes() == newer


# --- several sources -------------------------------------------------------------------------


def test_sources_are_independent_and_fetched_concurrently(scraper_for):
    slow = [MetricsServer() for _ in range(3)]
    try:
        for s in slow:
            s.reply = s.sleep(0.3)
        down = closed_port_url()
        scraper = scraper_for(*(s.url for s in slow), down, timeout=2.0)
        started = time.monotonic()
        result = scraper.scrape()
        elapsed = time.monotonic() - started
        assert elapsed < 0.8, elapsed  # one after the other would take 0.9 s
        assert [h.source for h in result.health] == [*(s.url for s in slow), down]
        assert [h.up for h in result.health] == [True, True, True, False]
        assert len(result.bodies) == 3
        assert len({b.path for b in result.bodies}) == 3
        assert all(Path(b.path).read_bytes() == BODY for b in result.bodies)
    finally:
        for s in slow:
            s.stop()


def test_duplicate_sources_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        BrokerScraper([BrokerSource("http://a/metrics"), BrokerSource("http://a/metrics")],
                      tmp_path)


# --- spool names and sniffing (pure) -------------------------------------------------------

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*\.prom$")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=200), st.text(min_size=1, max_size=200))
def test_spool_names_are_safe_and_distinct(a, b):
    assert SAFE_NAME.match(spool_name(a))
    assert spool_name(a) == spool_name(a)
    if a != b:
        assert spool_name(a) != spool_name(b)


def test_spool_name_is_readable():
    assert spool_name("http://10.0.0.7:8080/metrics").startswith("10.0.0.7_8080_metrics-")


def test_sniff_accepts_the_recorded_broker_output():
    assert sniff(BODY[:SNIFF_BYTES], len(BODY)) is None
    assert sniff(b"\n\n  pulsar_x 1\n", 14) is None


def test_sniff_accepts_a_multibyte_character_cut_at_the_kib_boundary():
    head = (b"# HELP x " + b"a" * (SNIFF_BYTES - 10) + "é".encode())[:SNIFF_BYTES]
    assert head.endswith(b"\xc3")
    assert sniff(head, 5000) is None


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\x00",
                                      blacklist_categories=("Cs",)), max_size=300))
def test_sniff_accepts_any_utf8_after_a_comment(rest):
    text = ("# TYPE x gauge\n" + rest).encode()
    assert sniff(text[:SNIFF_BYTES], len(text)) is None


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["<", "{", "[", "\"", "1", "-", "!"]), st.text(max_size=100))
def test_sniff_rejects_bodies_that_cannot_start_exposition_text(first, rest):
    text = (first + rest).encode()
    assert sniff(text[:SNIFF_BYTES], len(text)) is not None
