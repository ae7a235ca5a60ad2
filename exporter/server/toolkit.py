"""`--web.config.file`: Prometheus exporter-toolkit's web config file, so that operators harden
this exporter with the file their Go exporters already take
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md):
`tls_server_config`, `http_server_config`, `basic_auth_users` and `rate_limit`, read into the
server's `WebConfig`. Relative paths resolve against the file's directory, as the toolkit's
`SetDirectory` does. Where Python's ssl module cannot do what Go's crypto/tls does the file is
refused, not half-honoured: `RequireAnyClientCert` (Python verifies every certificate it asks
for) and inline `cert`/`key`. `RequestClientCert` asks for a certificate Go never checks;
here none is asked for, which grants the same access. `curve_preferences`: the first curve
only (Python 3.11 sets one ECDHE curve). `http2` is accepted; the server speaks HTTP/1.1.

The file is re-read when it changes (`WebConfigFile`), as the toolkit reads it per request;
a broken new version keeps the previous one, with a warning naming the key paths.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable

from exporter.config import values as cv
from exporter.config.load import ConfigError, read_yaml
from exporter.config.reader import Reader, describe, join
from exporter.config.settings import Exposition
from exporter.config.units import parse_duration
from exporter.server.webconfig import (
    BasicAuth,
    RateLimit,
    TlsContext,
    TlsSettings,
    TokenBucket,
    WebConfig,
    WebConfigError,
)

log = logging.getLogger(__name__)

TOP = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
TLS_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
            "client_ca_file", "client_allowed_sans", "min_version", "max_version",
            "cipher_suites", "prefer_server_cipher_suites", "curve_preferences")
# Go's tls.ClientAuthType names → what Python's ssl can do (None: refused, see above).
CLIENT_AUTH: dict[str, ssl.VerifyMode | None] = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "RequireAnyClientCert": None,
    "RequireClientCert": None,  # the toolkit's old name of RequireAnyClientCert
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Go's tls.CipherSuites() (and the TLS_RSA_* four it listed before Go 1.22) → OpenSSL's names.
# TLS 1.3 suites are not configurable in Go either: accepted, nothing to set (None).
CIPHERS: dict[str, str | None] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
CURVES: dict[str, str | None] = {"CurveP256": "prime256v1", "CurveP384": "secp384r1",
                                 "CurveP521": "secp521r1", "X25519": "X25519"}
# The toolkit's extraHTTPHeaders: the only headers it lets a file set, with the fixed values
# of those that have them (web/handler.go).
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (), "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}


def load_file(path: str) -> WebConfig:
    """Read and validate the file; `WebConfigError` with every problem, each
    `FILE: key.path: what is wrong`."""
    try:
        data, duplicates = read_yaml(path)
    except ConfigError as e:
        raise WebConfigError(e.errors) from None
    try:
        config = parse(data, path)
    except WebConfigError as e:
        raise WebConfigError(duplicates + e.errors) from None
    if duplicates:  # Go's strict YAML refuses them too
        raise WebConfigError(duplicates)
    return config


def parse(data: object, filename: str) -> WebConfig:
    if data is None:  # an empty file: no TLS, no auth, as the toolkit's
        return WebConfig()
    r = Reader(filename)
    top = r.mapping(data, "", TOP)
    base = os.path.dirname(os.path.abspath(filename))
    tls = _tls(r, r.mapping(top.get("tls_server_config"), "tls_server_config", TLS_KEYS), base)
    headers = _http(r, r.mapping(top.get("http_server_config"), "http_server_config",
                                 ("http2", "headers")))
    users = _users(r, top.get("basic_auth_users"))
    limit = _rate_limit(r, r.mapping(top.get("rate_limit"), "rate_limit",
                                     ("interval", "burst")))
    context = None
    if tls is not None and not r.errors:
        try:
            context = TlsContext(tls)
        except (OSError, ssl.SSLError) as e:
            r.error("tls_server_config", f"cannot set up TLS: {getattr(e, 'reason', None) or e}")
    if r.errors:
        raise WebConfigError(r.errors)
    return WebConfig(tls=context, auth=BasicAuth(users) if users else None, headers=headers,
                     limiter=TokenBucket(limit) if limit else None)


def _file(r: Reader, m: dict[str, object], key: str, base: str) -> str | None:
    if key not in m:
        return None
    path = r.check(m[key], f"tls_server_config.{key}", cv.string, "")
    if not path:
        return None
    full = os.path.join(base, path)
    if not os.access(full, os.R_OK):
        r.error(f"tls_server_config.{key}", f"cannot read {full!r}")
        return None
    return full


def _names(r: Reader, value: object, path: str, table: dict[str, str | None]) -> list[str]:
    """The table's values of a list of names; an unknown name is an error."""
    out = []
    for ipath, item in r.items(value, path):
        if not isinstance(item, str) or item not in table:
            r.error(ipath, f"unknown: {describe(item)}; expected one of: {', '.join(table)}")
        elif (mapped := table[item]) is not None:
            out.append(mapped)
    return out


def _tls(r: Reader, m: dict[str, object], base: str) -> TlsSettings | None:
    path = "tls_server_config"
    for inline in ("cert", "key"):  # never echoed: `key` is a secret
        if inline in m:
            r.error(f"{path}.{inline}", f"inline PEM is not supported here: put it in a file "
                    f"and name it with {inline}_file")
    # What the toolkit's TLSConfig.IsEnabled counts: anything else alone leaves plain HTTP.
    if not {"cert_file", "key_file", "client_ca_file", "client_ca", "client_auth_type"} & m.keys():
        return None
    cert, key = _file(r, m, "cert_file", base), _file(r, m, "key_file", base)
    for name in ("cert_file", "key_file"):
        if name not in m:
            r.error(f"{path}.{name}", "required to serve TLS")
    ca_file = _file(r, m, "client_ca_file", base)
    ca = r.get(m, "client_ca", path, cv.string, None)
    auth_name = r.get(m, "client_auth_type", path, cv.string, "NoClientCert")
    verify = CLIENT_AUTH.get(auth_name, ssl.CERT_NONE)
    if auth_name not in CLIENT_AUTH:
        r.error(f"{path}.client_auth_type", f"unknown: {auth_name!r}; expected one of: "
                f"{', '.join(n for n in CLIENT_AUTH if n != 'RequireClientCert')}")
    elif verify is None:
        r.error(f"{path}.client_auth_type", f"{auth_name} is not supported here (Python's ssl "
                "verifies every client certificate it asks for): use RequireAndVerifyClientCert "
                "with client_ca_file")
    elif auth_name in ("NoClientCert", "RequestClientCert") and "client_auth_type" in m \
            and (ca_file or ca):
        r.error(f"{path}.client_auth_type", f"{auth_name} with a client CA: the CA would never "
                "be used; use RequireAndVerifyClientCert")
    elif "client_auth_type" not in m and (ca_file or ca):
        r.error(f"{path}.client_auth_type", "required with client_ca_file/client_ca: "
                "e.g. RequireAndVerifyClientCert")
    sans: frozenset[str] | None = None
    if "client_allowed_sans" in m:
        sans = frozenset(s for ipath, item in r.items(m["client_allowed_sans"],
                                                      f"{path}.client_allowed_sans")
                         if (s := r.check(item, ipath, cv.string, None)) is not None)
        if verify is not ssl.CERT_REQUIRED:
            r.error(f"{path}.client_allowed_sans", "needs client_auth_type: "
                    "RequireAndVerifyClientCert (without a certificate there is no SAN to match)")
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        given = r.get(m, name, path, cv.string, default)
        if given not in TLS_VERSIONS:
            r.error(f"{path}.{name}", f"unknown: {given!r}; expected one of: "
                    f"{', '.join(TLS_VERSIONS)}")
        versions[name] = TLS_VERSIONS.get(given, TLS_VERSIONS[default])
    if versions["min_version"] > versions["max_version"]:
        r.error(f"{path}.min_version", "above max_version")
    ciphers = _names(r, m.get("cipher_suites"), f"{path}.cipher_suites", CIPHERS)
    curves = _names(r, m.get("curve_preferences"), f"{path}.curve_preferences", CURVES)
    return TlsSettings(
        cert_file=cert or "", key_file=key or "", verify=verify or ssl.CERT_NONE,
        client_ca_file=ca_file, client_ca=ca, allowed_sans=sans,
        min_version=versions["min_version"], max_version=versions["max_version"],
        ciphers=":".join(ciphers) or None,
        prefer_server_ciphers=r.get(m, "prefer_server_cipher_suites", path, cv.boolean, True),
        curve=curves[0] if curves else None)


def _http(r: Reader, m: dict[str, object]) -> tuple[tuple[str, str], ...]:
    r.get(m, "http2", "http_server_config", cv.boolean, True)  # HTTP/1.1 only: checked, no more
    path = "http_server_config.headers"
    out = []
    for name, value in r.mapping(m.get("headers"), path).items():
        hpath = join(path, name)
        if name not in HEADERS:
            r.error(hpath, f"cannot be set; the toolkit allows: {', '.join(HEADERS)}")
        elif not isinstance(value, str) or "\r" in value or "\n" in value:
            r.error(hpath, f"expected a one-line string, found {describe(value)}")
        elif HEADERS[name] and value not in HEADERS[name]:
            r.error(hpath, f"{value!r}: expected one of: {', '.join(HEADERS[name])}")
        elif value:  # blank: unset, as the toolkit's
            out.append((name, value))
    return tuple(out)


def _users(r: Reader, value: object) -> dict[str, str]:
    users = {}
    for user, hashed in r.mapping(value, "basic_auth_users").items():
        upath = join("basic_auth_users", user)
        if ":" in user:
            r.error(upath, "a basic-auth user name cannot contain ':'")
        elif (checked := r.check(hashed, upath, cv.bcrypt, None)) is not None:
            users[user] = checked
    return users


def _duration(value: object) -> float:
    if not isinstance(value, str):  # Go would read a bare number as nanoseconds
        raise ValueError(f"expected a duration such as 1s or 100ms, found {describe(value)}")
    return parse_duration(value)


def _rate_limit(r: Reader, m: dict[str, object]) -> RateLimit | None:
    interval = r.get(m, "interval", "rate_limit", _duration, 0.0)
    burst = r.get(m, "burst", "rate_limit", cv.integer(0), 0)
    if not interval:  # 0 or absent: no limiter, as the toolkit's
        return None
    if burst < 1:
        r.error("rate_limit.burst", "at least 1 with an interval (0 would refuse every request)")
        return None
    return RateLimit(interval, burst)


def conflicts(web_file: str, config_file: str, exposition: Exposition) -> list[str]:
    """TLS or basic auth in both the config file and the web config file: refused, as one
    would silently win."""
    given = [key for key, on in (("tls", exposition.tls is not None),
                                 ("basic_auth", bool(exposition.basic_auth))) if on]
    return [f"{config_file}: exposition.{key}: set, and --web.config.file {web_file} is given "
            "too: configure TLS and basic auth in one of them" for key in given]


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class WebConfigFile:
    """The file's latest good `WebConfig`, re-read when its mtime, size or inode changes
    (a Kubernetes Secret update swaps a symlink), looked at most every `check_every` s.
    Whether TLS is on cannot change without a restart (the listener's scheme is fixed)."""

    def __init__(self, path: str, *, check_every: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._stamp = _stamp(path)
        self._config = load_file(path)
        self._check_every, self._clock = check_every, clock
        self._next = clock() + check_every
        self._lock = threading.Lock()

    def current(self) -> WebConfig:
        if self._clock() < self._next:
            return self._config
        with self._lock:
            now = self._clock()
            if now >= self._next:
                self._next = now + self._check_every
                stamp = _stamp(self.path)
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._config = self._reload(self._config)
            return self._config

    def _reload(self, old: WebConfig) -> WebConfig:
        try:
            new = load_file(self.path)
        except WebConfigError as e:  # the messages name key paths, never values of secrets
            log.warning("web config not reloaded, keeping the previous one: %s",
                        "; ".join(e.errors))
            return old
        if (new.tls is None) != (old.tls is None):
            log.warning("web config %s not reloaded, keeping the previous one: turning TLS %s "
                        "needs a restart", self.path, "on" if new.tls else "off")
            return old
        if new.limiter and old.limiter and new.limiter.limit == old.limiter.limit:
            new = dataclasses.replace(new, limiter=old.limiter)  # keep the bucket's level
        log.info("web config reloaded from %s", self.path)
        return new
