"""A broker /metrics endpoint on loopback that answers whatever the fuzz tests script, good
or bad: status, Content-Type, Content-Encoding (gzip, a cut gzip stream, one the client
does not speak), a Content-Length longer than the body. The exporter fetches it with its
own client (`pipeline.scrape.in_process`: the Spark task's code, in this process)."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from hypothesis import strategies as st

from tests.fuzz import inputs
from tests.harness.loopback import LoopbackHTTP

TEXT = "text/plain; version=0.0.4; charset=utf-8"
ENCODINGS = ("identity", "gzip", "gzip_cut", "br")


@dataclass(frozen=True)
class Response:
    body: bytes
    status: int = 200
    content_type: str = TEXT
    encoding: str = "identity"  # one of ENCODINGS
    short_by: int = 0  # Content-Length claims this many bytes more than are sent

    def expected(self) -> str | None:
        """The reason the exporter must give for this answer, when the answer alone decides
        it (None: up, or malformed, as the body decides)."""
        if self.status in (401, 403):
            return "auth"
        if not 200 <= self.status < 300:
            return "http_error"
        if self.content_type.startswith("text/html") or self.encoding in ("br", "gzip_cut") \
                or self.short_by:
            return "malformed"
        return None


class BrokerServer:
    def __init__(self) -> None:
        self.response = Response(b"")
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                r = server.response
                body = r.body
                if r.encoding != "identity":
                    body = gzip.compress(body, mtime=0)
                    if r.encoding == "gzip_cut":
                        body = body[: len(body) // 2]
                self.send_response(r.status)
                self.send_header("Content-Type", r.content_type)
                if r.encoding != "identity":
                    self.send_header("Content-Encoding", "gzip" if r.encoding != "br" else "br")
                self.send_header("Content-Length", str(len(body) + r.short_by))
                self.end_headers()
                self.wfile.write(body)

        self.http = LoopbackHTTP(Handler).start()

    @property
    def url(self) -> str:
        return f"{self.http.url}/metrics"

    def stop(self) -> None:
        self.http.stop()


byte_ops = st.lists(st.tuples(st.integers(0, inputs.BYTE_OPS - 1), st.integers(0, 1 << 20),
                              st.integers(0, 1 << 10), st.integers(0, 1 << 10)), max_size=6)


@st.composite
def mutated_bodies(draw: st.DrawFn, most_lines: int = 40) -> bytes:
    seed = inputs.metrics_seed(draw(st.integers(0, len(inputs.METRICS_FIXTURES) - 1)),
                               draw(st.integers(0, 1 << 20)), draw(st.integers(1, most_lines)))
    return inputs.apply_bytes(seed, draw(byte_ops), inputs.METRICS_WORDS)


@st.composite
def responses(draw: st.DrawFn) -> Response:
    """Mostly 200s with a mutated body; some error statuses, HTML error pages, broken or
    unknown encodings and cut bodies."""
    body = draw(st.one_of(mutated_bodies(), st.sampled_from((
        b"", b"<html><body>502 Bad Gateway</body></html>", b'{"error": "no"}', b"\x00" * 64,
        b"\xff\xfe" + "pulsar".encode("utf-16-le")))))
    return Response(
        body=body,
        status=draw(st.sampled_from((200, 200, 200, 200, 301, 401, 403, 404, 500, 503))),
        content_type=draw(st.sampled_from((TEXT, TEXT, "text/html; charset=utf-8",
                                           "application/json", ""))),
        encoding=draw(st.sampled_from(ENCODINGS)),
        short_by=draw(st.sampled_from((0, 0, 0, 1, 4096))),
    )


@st.composite
def rejected_responses(draw: st.DrawFn) -> Response:
    """Answers a fetch must fail on: what a broken broker, proxy or network sends."""
    response = draw(responses())
    if response.expected() is None and response.body[:1] not in (b"", b"\x00", b"<", b"{"):
        response = Response(b"<html>" + response.body, response.status,
                            "text/html", response.encoding, response.short_by)
    return response
