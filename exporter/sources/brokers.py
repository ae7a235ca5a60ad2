"""Broker /metrics: fetch every configured endpoint concurrently and spool each body to disk.

A 10k-topic body is ~15 MB and is parsed inside the Spark plan (DESIGN.md, "Parsing is the
hot path"), so Python never decodes it: the HTTP body is streamed (gunzipped on the fly when
served with `Content-Encoding: gzip`) into a temp file that is renamed over
`<spool_dir>/<sanitised-source>.prom` only once it is complete and looks like Prometheus
text. A failed fetch therefore never touches the last good body, which the snapshot keeps
using (stale) while `SourceHealth` says the source is down and why.

This module also holds what every source shares: failure classification into `ScrapeError`
and the per-source `HealthLedger` (the admin client imports both).
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import http.client
import json
import os
import re
import ssl
import tempfile
import threading
import time
import urllib.error
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from exporter.config import BrokerSource
from exporter.sources.model import BrokerBody, ScrapeError, SourceHealth, SourceKind

CHUNK_BYTES = 1 << 16
SNIFF_BYTES = 1024  # how much of a body is inspected to tell Prometheus text from junk
_GRACE_SECONDS = 1.0  # how long past the last deadline `scrape` waits for a stuck worker
_USER_AGENT = "pulsar-quota-exporter"
_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"  # classic text format, like Prometheus


# --- outcomes and classification (shared by all sources) ---------------------------------


@dataclass(frozen=True)
class Failed:
    """One classified failure: of a whole fetch, or of one item (a topic) within it."""

    reason: ScrapeError
    detail: str  # one line


@dataclass(frozen=True)
class Fetched:
    body: BrokerBody


FetchOutcome = Fetched | Failed


class FetchFailure(Exception):
    """Raised inside a fetch with the reason already decided."""

    def __init__(self, reason: ScrapeError, detail: str):
        super().__init__(detail)
        self.failure = Failed(reason, detail)


def status_reason(status: int) -> ScrapeError:
    """401/403 are credentials to fix, every other status >= 400 a server-side problem."""
    return ScrapeError.AUTH if status in (401, 403) else ScrapeError.HTTP_ERROR


def classify(exc: BaseException) -> Failed:
    """Map whatever a fetch raised to a reason; the order matters (SSL and timeout errors
    are OSErrors too, and urllib wraps the real cause in `URLError.reason`)."""
    if isinstance(exc, FetchFailure):
        return exc.failure
    if isinstance(exc, urllib.error.HTTPError):
        return Failed(status_reason(exc.code), f"HTTP {exc.code} {exc.reason}")
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        return classify(exc.reason)
    detail = _one_line(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, ConnectionRefusedError):
        return Failed(ScrapeError.REFUSED, detail)
    if isinstance(exc, TimeoutError):
        return Failed(ScrapeError.TIMEOUT, detail)
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return Failed(ScrapeError.TLS, detail)
    if isinstance(exc, http.client.IncompleteRead):
        return Failed(ScrapeError.MALFORMED, f"truncated body: {detail}")
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | zlib.error):
        return Failed(ScrapeError.MALFORMED, detail)
    return Failed(ScrapeError.OTHER, detail)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class HealthLedger:
    """What one source remembers between fetches: last success and errors by reason.

    Every reason is present from the start at 0 (DESIGN.md: error counters exist at 0).
    `last_error` is the first error of the latest fetch, None when it was clean; a fetch
    can be up and still carry item errors (the admin source skips a broken topic).
    """

    def __init__(self, source: str, kind: SourceKind):
        self._source = source
        self._kind = kind
        self._counts = dict.fromkeys(ScrapeError, 0)
        self._up = False
        self._last_success: float | None = None
        self._last: Failed | None = None

    def record(self, *, up: bool, at: float, errors: Iterable[Failed] = ()) -> None:
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


# --- spooling ------------------------------------------------------------------------------


def spool_name(source: str) -> str:
    """A file name for a source URL: readable, filesystem-safe, and unique (the hash keeps
    `http://a/b` and `http://a_b` apart)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", source.split("://", 1)[-1]).strip("._")[:80]
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    return f"{readable or 'source'}-{digest}.prom"


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


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str, dict]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchFailure(ScrapeError.OTHER, f"unsupported URL {url!r}")
    headers = {"Accept-Encoding": "gzip", "Accept": _ACCEPT, "User-Agent": _USER_AGENT}
    if parts.username is not None:
        creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(creds.encode()).decode()
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return conn, target, headers


def fetch_to_spool(
    source: BrokerSource, spool_path: Path, deadline: float, clock: Callable[[], float]
) -> BrokerBody:
    """GET `source.url` and install its body at `spool_path`, or raise.

    `deadline` (time.monotonic) bounds the whole fetch, not just each socket operation, so a
    broker trickling bytes cannot hold the cycle. The file is only renamed into place when
    the body is complete, decompressed cleanly, passed `sniff`, and the deadline holds.
    """

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FetchFailure(ScrapeError.TIMEOUT, f"no complete body within {source.timeout}s")
        return left

    conn, target, headers = _connection(source.url, min(source.timeout, remaining()))
    tmp_path: str | None = None
    resp: http.client.HTTPResponse | None = None
    try:
        conn.request("GET", target, headers=headers)
        sock = conn.sock  # getresponse() drops conn.sock when the server will close
        resp = conn.getresponse()
        if not 200 <= resp.status < 300:  # redirects are not followed: /metrics has none
            reason = status_reason(resp.status) if resp.status >= 400 else ScrapeError.HTTP_ERROR
            raise FetchFailure(reason, f"HTTP {resp.status} {resp.reason}")
        content_type = (resp.getheader("Content-Type") or "").lower()
        if content_type.startswith(("text/html", "application/xhtml")):
            raise FetchFailure(ScrapeError.MALFORMED, f"Content-Type {content_type!r}")
        encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "x-gzip"):
            raise FetchFailure(ScrapeError.MALFORMED, f"unsupported Content-Encoding {encoding}")
        gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding != "identity" else None

        fd, tmp_path = tempfile.mkstemp(dir=spool_path.parent, prefix=f".{spool_path.name}.",
                                        suffix=".tmp")
        head = bytearray()
        size = 0
        with os.fdopen(fd, "wb") as out:
            while True:
                left = remaining()
                if sock is not None:
                    sock.settimeout(min(source.timeout, left))
                chunk = resp.read1(CHUNK_BYTES)  # returns what has arrived: deadline holds
                if not chunk:
                    break
                data = gunzip.decompress(chunk) if gunzip else chunk
                if len(head) < SNIFF_BYTES:
                    head += data[: SNIFF_BYTES - len(head)]
                out.write(data)
                size += len(data)
            if resp.length:  # http.client leaves a short Content-Length body to us
                raise FetchFailure(ScrapeError.MALFORMED,
                                   f"truncated body: {resp.length} bytes short")
            if gunzip:
                tail = gunzip.flush()
                if not gunzip.eof:
                    raise FetchFailure(ScrapeError.MALFORMED, "truncated gzip stream")
                head += tail[: max(0, SNIFF_BYTES - len(head))]
                out.write(tail)
                size += len(tail)
        problem = sniff(bytes(head), size)
        if problem:
            raise FetchFailure(ScrapeError.MALFORMED, problem)
        remaining()  # a worker that overran its deadline must not replace the spool file
        os.replace(tmp_path, spool_path)
        tmp_path = None
        return BrokerBody(source.url, str(spool_path), size, clock())
    finally:
        if resp is not None:
            resp.close()
        conn.close()
        if tmp_path is not None:
            Path(tmp_path).unlink(missing_ok=True)


# --- all brokers, one cycle ----------------------------------------------------------------


@dataclass(frozen=True)
class BrokerScrape:
    """One cycle's view of the broker sources, in configuration order."""

    bodies: tuple[BrokerBody, ...]  # last good body per source (stale where the fetch failed)
    health: tuple[SourceHealth, ...]
    outcomes: tuple[FetchOutcome, ...]  # this cycle's result per source


class BrokerScraper:
    """Fetches all broker sources concurrently, one deadline each, keeping the last good body.

    Not re-entrant: one `scrape` at a time (a lock enforces it).
    """

    def __init__(
        self,
        sources: Sequence[BrokerSource],
        spool_dir: str | os.PathLike[str],
        *,
        max_workers: int = 8,
        clock: Callable[[], float] = time.time,
    ):
        urls = [s.url for s in sources]
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate broker source URLs: {urls}")
        self._sources = tuple(sources)
        self._spool_dir = Path(spool_dir)
        self._spool_dir.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._pool = ThreadPoolExecutor(max(1, min(max_workers, len(urls) or 1)),
                                        thread_name_prefix="broker-scrape")
        self._ledgers = {s.url: HealthLedger(s.url, SourceKind.BROKER) for s in sources}
        self._last_good: dict[str, BrokerBody] = {}
        self._lock = threading.Lock()

    def spool_path(self, source: BrokerSource) -> Path:
        return self._spool_dir / spool_name(source.url)

    def scrape(self) -> BrokerScrape:
        with self._lock:
            start = time.monotonic()
            futures: list[Future[BrokerBody]] = [
                self._pool.submit(fetch_to_spool, s, self.spool_path(s), start + s.timeout,
                                  self._clock)
                for s in self._sources
            ]
            longest = max((s.timeout for s in self._sources), default=0.0)
            wait(futures, timeout=longest + _GRACE_SECONDS)
            outcomes = tuple(self._outcome(s, f) for s, f in zip(self._sources, futures,
                                                                 strict=True))
            for source, outcome in zip(self._sources, outcomes, strict=True):
                ledger = self._ledgers[source.url]
                if isinstance(outcome, Fetched):
                    self._last_good[source.url] = outcome.body
                    ledger.record(up=True, at=outcome.body.fetched_at)
                else:
                    ledger.record(up=False, at=self._clock(), errors=(outcome,))
            return BrokerScrape(
                bodies=tuple(self._last_good[s.url] for s in self._sources
                             if s.url in self._last_good),
                health=tuple(self._ledgers[s.url].health() for s in self._sources),
                outcomes=outcomes,
            )

    @staticmethod
    def _outcome(source: BrokerSource, future: Future[BrokerBody]) -> FetchOutcome:
        if not future.done():  # e.g. stuck in DNS resolution, which no socket timeout covers
            return Failed(ScrapeError.TIMEOUT, f"fetch did not finish within {source.timeout}s")
        exc = future.exception()
        return Fetched(future.result()) if exc is None else classify(exc)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> BrokerScraper:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
