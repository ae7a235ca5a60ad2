"""Broker /metrics: one streamed HTTP fetch, its failures classified, its health kept.

The fetch runs inside the Spark task that parses the body (pipeline/scrape.py), so a body
never touches the driver or any disk: it is streamed (gunzipped on the fly when served
with `Content-Encoding: gzip`) and handed on in pieces as it arrives, under one deadline
for the whole fetch. Redirects are followed as Prometheus follows them (up to 10 hops;
credentials only to the configured origin): Apache Pulsar answers `/metrics` with a 302 to
`/metrics/`. A failed fetch never replaces the last good data, which stays in use (stale)
while `SourceHealth` says the source is down and why.

This module also holds what every source shares: failure classification into `ScrapeError`
and the per-source `HealthLedger` (the admin client imports both).
"""

from __future__ import annotations

import codecs
import functools
import http.client
import json
import socket
import ssl
import tempfile
import time
import urllib.error
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from exporter.config import userinfo
from exporter.config.settings import BrokerSource, TlsClient
from exporter.sources.results import ScrapeError, SourceHealth, SourceKind

CHUNK_BYTES = 1 << 16
INFLATE_BYTES = 1 << 20
SNIFF_BYTES = 1024  # how much of a body is inspected to tell Prometheus text from junk
_USER_AGENT = "pulsar-quota-exporter"
_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"  # classic text format, like Prometheus


# --- outcomes and classification (shared by all sources) ---------------------------------


@dataclass(frozen=True)
class FetchFailed:
    """One classified failure: of a whole fetch, or of one item (a topic) within it."""

    reason: ScrapeError
    detail: str  # one line


class FetchFailure(Exception):
    """Raised inside a fetch with the reason already decided."""

    def __init__(self, reason: ScrapeError, detail: str):
        super().__init__(detail)
        self.failure = FetchFailed(reason, detail)


def status_reason(status: int) -> ScrapeError:
    """401/403 are credentials to fix, every other status >= 400 a server-side problem."""
    return ScrapeError.AUTH if status in (401, 403) else ScrapeError.HTTP_ERROR


def classify(exc: BaseException) -> FetchFailed:
    """Map whatever a fetch raised to a reason; the order matters (SSL and timeout errors
    are OSErrors too, and urllib wraps the real cause in `URLError.reason`)."""
    if isinstance(exc, FetchFailure):
        return exc.failure
    if isinstance(exc, urllib.error.HTTPError):
        return FetchFailed(status_reason(exc.code), f"HTTP {exc.code} {exc.reason}")
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        return classify(exc.reason)
    detail = _one_line(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, ConnectionRefusedError):
        return FetchFailed(ScrapeError.REFUSED, detail)
    if isinstance(exc, TimeoutError):
        return FetchFailed(ScrapeError.TIMEOUT, detail)
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return FetchFailed(ScrapeError.TLS, detail)
    if isinstance(exc, http.client.IncompleteRead):
        return FetchFailed(ScrapeError.MALFORMED, f"truncated body: {detail}")
    # RecursionError: JSON nested deeper than the decoder recurses, which no broker sends
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | zlib.error | RecursionError):
        return FetchFailed(ScrapeError.MALFORMED, detail)
    return FetchFailed(ScrapeError.OTHER, detail)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class HealthLedger:
    """What one source remembers between fetches: last success and errors by reason.

    Every reason is present from the start at 0, so that rate() over the error counters works
    from the first failure on.
    `last_error` is the first error of the latest fetch, None when it was clean; a fetch
    can be up and still carry item errors (the admin source skips a broken topic).
    """

    def __init__(self, source: str, kind: SourceKind):
        self._source = source
        self._kind = kind
        self._counts = dict.fromkeys(ScrapeError, 0)
        self._up = False
        self._last_success: float | None = None
        self._last: FetchFailed | None = None

    def record(self, *, up: bool, at: float, errors: Iterable[FetchFailed] = ()) -> None:
        errors = tuple(errors)
        for failure in errors:
            self._counts[failure.reason] += 1
        self._up = up
        if up:
            self._last_success = at
        self._last = errors[0] if errors else None

    def health(self) -> SourceHealth:
        return SourceHealth(
            source=self._source,
            kind=self._kind,
            up=self._up,
            last_success=self._last_success,
            last_error=self._last.reason if self._last else None,
            last_error_detail=self._last.detail if self._last else "",
            errors=tuple(self._counts.items()),
        )


def sniff(head: bytes, total_bytes: int) -> str | None:
    """Why a body is clearly not Prometheus text (judging by its first KiB), or None.

    Exposition text starts, after blank lines, with a comment or a metric name; an error
    page (HTML), JSON, a binary or non-UTF-8 payload does not.
    """
    if total_bytes == 0:
        return "empty body"
    if b"\x00" in head:
        return "binary body (NUL byte in its first KiB)"
    try:  # incremental: a multi-byte character cut at the KiB boundary is fine
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return "body is not UTF-8 in its first KiB"
    stripped = text.lstrip()
    if not stripped:
        return "blank body"
    first = stripped[0]
    if first != "#" and not (first.isascii() and (first.isalpha() or first in "_:")):
        return f"does not look like Prometheus text (starts with {stripped[:20]!r})"
    return None


# --- one fetch -----------------------------------------------------------------------------


class _HTTPS(http.client.HTTPSConnection):
    """HTTPS naming `server_name` (SNI and the certificate check) instead of the URL's host,
    as Prometheus' `tls_config.server_name` does: brokers are often scraped by address."""

    def __init__(self, host: str, port: int | None, *, timeout: float,
                 context: ssl.SSLContext, server_name: str | None):
        super().__init__(host, port, timeout=timeout, context=context)
        self._server_name = server_name or host

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._server_name)


@functools.lru_cache(maxsize=64)
def tls_context(tls: TlsClient | None) -> ssl.SSLContext:
    """The client context for `tls` (cached per task process: a fleet reuses a handful).
    The client certificate and key come as PEM text (read with the config on the driver);
    `ssl` loads them only from files, so they pass through a private temporary directory
    that is removed at once."""
    context = ssl.create_default_context(cadata=tls.ca_pem if tls and tls.ca_pem else None)
    if tls is None:
        return context
    if tls.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_pem and tls.key_pem:
        with tempfile.TemporaryDirectory(prefix="pqe-tls-") as scratch:
            cert, key = Path(scratch, "cert.pem"), Path(scratch, "key.pem")
            for path, text in ((cert, tls.cert_pem), (key, tls.key_pem)):
                path.touch(mode=0o600)
                path.write_text(text)
            context.load_cert_chain(cert, key)
    return context


# Redirects are followed as Prometheus' scrapes follow them (Go's http.Client: at most 10
# hops, any of these codes). Apache Pulsar answers `/metrics` with 302 → `/metrics/`
# (Jetty's context redirect), so the URL an operator types needs one hop.
MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80,
                                                                   "https": 443}.get(scheme)


def _connection(source: BrokerSource, url: str, timeout: float,
                ) -> tuple[http.client.HTTPConnection, str, dict]:
    """A connection to `url`: the configured one, or where it redirected. Credentials and
    the TLS `server_name` go only to the configured URL's origin (scheme, host, port): a
    redirect elsewhere never sees the token or the password."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchFailure(ScrapeError.OTHER, f"unsupported URL {url!r}")
    home = _origin(url) == _origin(source.url)
    headers = {"Accept-Encoding": "gzip", "Accept": _ACCEPT, "User-Agent": _USER_AGENT}
    if home and source.authorization is not None:  # the URL's userinfo too (config/settings.py)
        headers["Authorization"] = source.authorization
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        try:
            context = tls_context(source.tls)
        except (ssl.SSLError, ValueError) as exc:
            raise FetchFailure(ScrapeError.TLS, f"tls_config: {exc}") from exc
        server_name = source.tls.server_name if source.tls and home else None
        conn = _HTTPS(parts.hostname, parts.port, timeout=timeout, context=context,
                      server_name=server_name)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return conn, target, headers


def _open(source: BrokerSource, timeout: Callable[[], float],
          ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, socket.socket | None]:
    """GET `source.url`, following redirects; the final connection, its response (any
    status but a redirect) and its socket. Each hop gets the time left (`timeout()`)."""
    url = source.url
    for _ in range(MAX_REDIRECTS + 1):
        conn, target, headers = _connection(source, url, timeout())
        try:
            conn.request("GET", target, headers=headers)
            sock = conn.sock  # getresponse() drops conn.sock when the server will close
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        if resp.status not in _REDIRECTS:
            return conn, resp, sock
        location = resp.getheader("Location")
        resp.close()
        conn.close()
        if not location:
            raise FetchFailure(ScrapeError.HTTP_ERROR,
                               f"HTTP {resp.status} {resp.reason} without a Location")
        url = urljoin(url, location.strip())
    raise FetchFailure(ScrapeError.HTTP_ERROR,
                       f"more than {MAX_REDIRECTS} redirects (last to {userinfo.bare(url)})")


def stream(source: BrokerSource, deadline: float) -> Iterator[bytes]:
    """GET `source.url` and yield its (decompressed) body in pieces as they arrive, or
    raise (`classify` tells why). `deadline` (time.monotonic) bounds the whole fetch, not
    just each socket operation, so a broker trickling bytes cannot hold the cycle. The
    generator ends normally only once the body is complete and passed `sniff`: whoever
    keeps the pieces must drop them when it raises."""

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FetchFailure(ScrapeError.TIMEOUT, f"no complete body within {source.timeout}s")
        return left

    conn, resp, sock = _open(source, lambda: min(source.timeout, remaining()))
    try:
        if not 200 <= resp.status < 300:
            reason = status_reason(resp.status) if resp.status >= 400 else ScrapeError.HTTP_ERROR
            raise FetchFailure(reason, f"HTTP {resp.status} {resp.reason}")
        content_type = (resp.getheader("Content-Type") or "").lower()
        if content_type.startswith(("text/html", "application/xhtml")):
            raise FetchFailure(ScrapeError.MALFORMED, f"Content-Type {content_type!r}")
        encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "x-gzip"):
            raise FetchFailure(ScrapeError.MALFORMED, f"unsupported Content-Encoding {encoding}")
        gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding != "identity" else None
        head = bytearray()
        size = 0
        while True:
            left = remaining()
            if sock is not None:
                sock.settimeout(min(source.timeout, left))
            chunk = resp.read1(CHUNK_BYTES)  # returns what has arrived: deadline holds
            if not chunk:
                break
            for data in _inflated(gunzip, chunk) if gunzip else (chunk,):
                if len(head) < SNIFF_BYTES:
                    head += data[: SNIFF_BYTES - len(head)]
                    if len(head) >= SNIFF_BYTES and (problem := sniff(bytes(head), len(head))):
                        raise FetchFailure(ScrapeError.MALFORMED, problem)
                size += len(data)
                if source.body_size_limit and size > source.body_size_limit:
                    raise FetchFailure(ScrapeError.TOO_LARGE, "body over body_size_limit "
                                       f"({source.body_size_limit} bytes uncompressed)")
                if data:
                    yield data
        if resp.length:  # http.client leaves a short Content-Length body to us
            raise FetchFailure(ScrapeError.MALFORMED,
                               f"truncated body: {resp.length} bytes short")
        if gunzip:
            tail = gunzip.flush()
            if not gunzip.eof:
                raise FetchFailure(ScrapeError.MALFORMED, "truncated gzip stream")
            head += tail[: max(0, SNIFF_BYTES - len(head))]
            size += len(tail)
            if source.body_size_limit and size > source.body_size_limit:
                raise FetchFailure(ScrapeError.TOO_LARGE, "body over body_size_limit")
            if tail:
                yield tail
        problem = sniff(bytes(head), size)
        if problem:
            raise FetchFailure(ScrapeError.MALFORMED, problem)
        remaining()  # a fetch that overran its deadline does not count
    finally:
        resp.close()
        conn.close()


def _inflated(gunzip: zlib._Decompress, chunk: bytes) -> Iterator[bytes]:
    """A gzip chunk's output in pieces of at most INFLATE_BYTES: deflate expands up to
    ~1,000 times, so one 64 KiB chunk of a gzip bomb would otherwise be 64 MB at once,
    before the size limit could see it."""
    data = gunzip.decompress(chunk, INFLATE_BYTES)
    yield data
    while gunzip.unconsumed_tail:
        yield gunzip.decompress(gunzip.unconsumed_tail, INFLATE_BYTES)
