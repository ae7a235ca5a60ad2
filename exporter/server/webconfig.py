"""TLS and basic auth for the HTTP server, in the manner of Prometheus' web config
(exporter-toolkit): TLS ≥ 1.2 from PEM files that are re-read when they change (cert-manager
rotates them in place), client certificates verified against a CA and matched against allowed
SANs, and basic auth against bcrypt hashes with successful checks cached, so a scrape every
few seconds does not pay bcrypt each time. Extra response headers and a token-bucket rate
limit come from the toolkit's file (server/toolkit.py), which builds the same `WebConfig`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import bcrypt

from exporter.config.settings import Exposition, Tls
from exporter.config.values import BCRYPT_HASH

log = logging.getLogger(__name__)

REALM = "pulsar-quota-exporter"
CHALLENGE = f'Basic realm="{REALM}", charset="UTF-8"'


class WebConfigError(ValueError):
    """Every problem found, each formatted `key.path: what is wrong`."""

    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = errors


# --- basic auth ------------------------------------------------------------------------------
class AuthOutcome(Enum):
    OK = "ok"
    MISSING = "missing"  # no Authorization header, or another scheme
    MALFORMED = "malformed"  # not base64 / not UTF-8 / no colon
    UNKNOWN_USER = "unknown_user"
    WRONG_PASSWORD = "wrong_password"


class BasicAuth:
    """Checks `Authorization: Basic …` against bcrypt hashes.

    Unknown users are checked against a real hash too, so the response time does not reveal
    which users exist. Successful checks are cached under an HMAC of (user, password) with a
    per-process key, so no password is kept in memory and cache lookups leak nothing useful
    by timing. Failures are not cached (that would let random guesses fill the cache), and
    bcrypt runs one at a time so a flood of bad passwords cannot take every core — cached
    successes do not wait for it.
    """

    def __init__(self, users: Mapping[str, str], *, cache_size: int = 256,
                 checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw) -> None:
        if not users:
            raise ValueError("basic auth needs at least one user")
        self._hashes = {user: h.encode("ascii") for user, h in users.items()}
        self._dummy = next(iter(self._hashes.values()))
        self._checkpw = checkpw
        self._key = secrets.token_bytes(32)
        self._cache: dict[bytes, None] = {}
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()

    def check(self, authorization: str | None) -> AuthOutcome:
        credentials = _parse_basic(authorization)
        if isinstance(credentials, AuthOutcome):
            return credentials
        user, password = credentials
        digest = hmac.new(self._key, user.encode() + b"\0" + password.encode(),
                          hashlib.sha256).digest()
        with self._cache_lock:
            if digest in self._cache:
                return AuthOutcome.OK
        hashed = self._hashes.get(user)
        with self._bcrypt_lock:
            try:
                matches = self._checkpw(password.encode(), hashed or self._dummy)
            except ValueError:  # bcrypt refuses passwords over 72 bytes
                matches = False
        if hashed is None:
            return AuthOutcome.UNKNOWN_USER
        if not matches:
            return AuthOutcome.WRONG_PASSWORD
        with self._cache_lock:
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[digest] = None
        return AuthOutcome.OK


def _parse_basic(header: str | None) -> tuple[str, str] | AuthOutcome:
    if not header:
        return AuthOutcome.MISSING
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return AuthOutcome.MISSING
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return AuthOutcome.MALFORMED
    user, colon, password = decoded.partition(":")
    if not colon:
        return AuthOutcome.MALFORMED
    return user, password


# --- TLS ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TlsSettings:
    """The server's TLS: `exposition.tls` gives the pair only, the toolkit file the rest."""

    cert_file: str
    key_file: str
    verify: ssl.VerifyMode = ssl.CERT_NONE  # CERT_OPTIONAL / CERT_REQUIRED: client certs
    client_ca_file: str | None = None
    client_ca: str | None = None  # inline PEM (the toolkit's `client_ca`)
    allowed_sans: frozenset[str] | None = None  # None: any verified client
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    ciphers: str | None = None  # OpenSSL names for TLS ≤ 1.2; None: OpenSSL's defaults
    prefer_server_ciphers: bool = True
    curve: str | None = None  # OpenSSL name of the ECDHE curve

    @classmethod
    def of(cls, tls: Tls) -> TlsSettings:
        return cls(tls.cert_file, tls.key_file)


def _server_context(tls: TlsSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = tls.min_version
    ctx.maximum_version = tls.max_version
    if tls.ciphers:
        ctx.set_ciphers(tls.ciphers)
    if tls.prefer_server_ciphers:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve:
        ctx.set_ecdh_curve(tls.curve)
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.verify is not ssl.CERT_NONE:
        if tls.client_ca_file or tls.client_ca:
            ctx.load_verify_locations(cafile=tls.client_ca_file, cadata=tls.client_ca)
        else:  # as Go's crypto/tls with no ClientCAs: the system's roots
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = tls.verify
    return ctx


def _san_values(conn: ssl.SSLSocket) -> set[str]:
    """The SANs of the verified peer certificate (`getpeercert()`), IPs normalised."""
    cert = conn.getpeercert() or {}
    sans: tuple[tuple[str, str], ...] = cert.get("subjectAltName", ())  # type: ignore[assignment]
    return {_normal_ip(value) if kind == "IP Address" else value for kind, value in sans}


def _normal_ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


class TlsContext:
    """The server's SSLContext, rebuilt when the certificate, key or client CA file changes.

    A failed rebuild (e.g. the key written but not yet the certificate) keeps the previous
    context and is retried on the next connection.
    """

    def __init__(self, tls: Tls | TlsSettings) -> None:
        self._tls = tls if isinstance(tls, TlsSettings) else TlsSettings.of(tls)
        self._allowed = (None if self._tls.allowed_sans is None
                         else {_normal_ip(s) for s in self._tls.allowed_sans})
        self._lock = threading.Lock()
        self._stamp = self._fingerprint()
        self._context = _server_context(self._tls)

    @property
    def settings(self) -> TlsSettings:
        return self._tls

    def _fingerprint(self) -> tuple[tuple[int, int, int] | None, ...]:
        stamp: list[tuple[int, int, int] | None] = []
        for path in (self._tls.cert_file, self._tls.key_file, self._tls.client_ca_file):
            try:
                st = os.stat(path) if path else None
                stamp.append(None if st is None else (st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def context(self) -> ssl.SSLContext:
        stamp = self._fingerprint()
        if stamp == self._stamp:
            return self._context
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._context = _server_context(self._tls)
                    self._stamp = stamp
                    log.info("TLS certificate reloaded from %s", self._tls.cert_file)
                except (OSError, ssl.SSLError) as e:
                    log.warning("TLS reload failed, keeping the previous certificate: %s", e)
            return self._context

    def admits(self, conn: ssl.SSLSocket) -> bool:
        """Whether the verified client certificate names an allowed SAN (exact match, as
        the toolkit's `client_allowed_sans`: DNS, IP, e-mail or URI); True when none are
        configured. Python's ssl has no verify callback, so this runs after the handshake."""
        if self._allowed is None:
            return True
        return not self._allowed.isdisjoint(_san_values(conn))


# --- rate limit ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RateLimit:
    """The toolkit's `rate_limit`: one request per `interval` seconds, bursts of `burst`."""

    interval: float
    burst: int


class TokenBucket:
    """golang.org/x/time/rate's Limiter as the toolkit uses it (`Allow`): `burst` tokens,
    one more every `interval`; a request without a token gets 429."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.limit.burst),
                               self._tokens + (now - self._at) / self.limit.interval)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


# --- the whole thing --------------------------------------------------------------------------
@dataclass(frozen=True)
class WebConfig:
    tls: TlsContext | None = None
    auth: BasicAuth | None = None
    headers: tuple[tuple[str, str], ...] = ()  # added to every response
    limiter: TokenBucket | None = None

    def current(self) -> WebConfig:
        """A fixed config is its own `WebSource`."""
        return self


class WebSource(Protocol):
    """What the server asks, per connection and per request: the web config now (a fixed
    one, or the toolkit file's latest good version)."""

    def current(self) -> WebConfig: ...


def load_web_config(exposition: Exposition) -> WebConfig:
    """Validate TLS files and password hashes up front; every error names its key path."""
    errors: list[str] = []
    tls = None
    if exposition.tls is not None:
        for key in ("cert_file", "key_file"):
            path = getattr(exposition.tls, key)
            if not os.access(path, os.R_OK):
                errors.append(f"exposition.tls.{key}: cannot read {path!r}")
        if not errors:
            try:
                tls = TlsContext(exposition.tls)
            except (OSError, ssl.SSLError) as e:
                errors.append(f"exposition.tls: certificate/key unusable: {e}")
    for user, hashed in exposition.basic_auth.items():
        if not BCRYPT_HASH.fullmatch(hashed):
            errors.append(f"exposition.basic_auth.{user}: not a bcrypt hash "
                          "(expected $2a$/$2b$/$2y$, e.g. from `htpasswd -nBC 10`)")
        if not user or ":" in user:
            errors.append(f"exposition.basic_auth.{user}: user names cannot be empty or "
                          "contain ':'")
    if errors:
        raise WebConfigError(errors)
    auth = BasicAuth(exposition.basic_auth) if exposition.basic_auth else None
    return WebConfig(tls=tls, auth=auth)
