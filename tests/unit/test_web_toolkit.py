"""`--web.config.file` (server/toolkit.py): exporter-toolkit's web config file read into the
server's `WebConfig`: each field, every error with its key path, exit 2 from `run` and
`validate-config`, and the server honouring it (client certificates and their SANs, headers,
429 beyond the rate limit, reload on change). Certificates come from the openssl CLI."""

from __future__ import annotations

import base64
import http.client
import ssl
from pathlib import Path

import bcrypt
import pytest
import yaml

from exporter import cli
from exporter.server.http import build_server
from exporter.server.published import PublishedState
from exporter.server.toolkit import WebConfigFile, load_file
from exporter.server.webconfig import RateLimit, TokenBucket, WebConfigError
from tests.harness.certs import ScratchCA

BODY = b"# TYPE up gauge\nup 1\n"
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory, openssl: str):
    ca = ScratchCA(tmp_path_factory.mktemp("pki"))
    return {"ca": ca, "server": ca.issue("server", dns=("localhost",), ip=("127.0.0.1",)),
            "allowed": ca.issue("prometheus", dns=("prometheus.monitoring",), client=True),
            "other": ca.issue("intruder", dns=("intruder.example",), client=True)}


def write(tmp_path: Path, doc: object, name: str = "web.yml") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


def errors_of(tmp_path: Path, doc: object) -> list[str]:
    path = write(tmp_path, doc)
    with pytest.raises(WebConfigError) as info:
        load_file(path)
    assert all(e.startswith(f"{path}: ") for e in info.value.errors), info.value.errors
    return [e.removeprefix(f"{path}: ") for e in info.value.errors]


# --- parsing: every error with its key path --------------------------------------------------
@pytest.mark.parametrize(("doc", "expected"), [
    ({"tls_config": {}}, "tls_config: unknown key (did you mean 'tls_server_config'?)"),
    ({"tls_server_config": {"cert_file": "c", "keyfile": "k"}},
     "tls_server_config.keyfile: unknown key"),
    ({"tls_server_config": {"client_auth_type": "RequireAndVerifyClientCert"}},
     "tls_server_config.cert_file: required to serve TLS"),
    ({"tls_server_config": {"cert_file": "missing.crt", "key_file": "missing.key"}},
     "tls_server_config.cert_file: cannot read"),
    ({"tls_server_config": {"key": "-----BEGIN PRIVATE KEY-----secret"}},
     "tls_server_config.key: inline PEM is not supported here"),
    ({"http_server_config": {"headers": {"Server": "x"}}},
     'http_server_config.headers.Server: cannot be set; the toolkit allows'),
    ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
     "http_server_config.headers.X-Frame-Options: 'allow': expected one of: deny, sameorigin"),
    ({"http_server_config": {"headers": {"X-XSS-Protection": "1\r\nSet-Cookie: a=b"}}},
     "http_server_config.headers.X-XSS-Protection: expected a one-line string"),
    ({"http_server_config": {"http2": "yes"}}, "http_server_config.http2: expected"),
    ({"basic_auth_users": {"alice": "plain-password"}},
     "basic_auth_users.alice: expected a bcrypt hash"),
    ({"basic_auth_users": {"a:b": HASH}}, "basic_auth_users[\"a:b\"]: a basic-auth user name"),
    ({"basic_auth_users": ["alice"]}, "basic_auth_users: expected a mapping, found a list"),
    ({"rate_limit": {"interval": 5, "burst": 1}}, "rate_limit.interval: expected a duration"),
    ({"rate_limit": {"interval": "1s", "burst": 0}}, "rate_limit.burst: at least 1"),
    ({"rate_limit": {"interval": "1s", "burst": -2}}, "rate_limit.burst: must be at least 0"),
    ({"rate_limit": {"every": "1s"}}, "rate_limit.every: unknown key"),
    ("tls_server_config: [\n", "line 2: not valid YAML"),
    ("- a\n", "top level: expected a mapping, found a list"),
])
def test_errors_name_the_key(tmp_path, doc, expected):
    found = errors_of(tmp_path, doc)
    assert any(e.startswith(expected) for e in found), found


def test_tls_errors_name_the_key(tmp_path, pki):
    pair = {"cert_file": str(pki["server"].cert), "key_file": str(pki["server"].key)}
    cases = [
        ({**pair, "client_auth_type": "VerifyAlways"},
         "tls_server_config.client_auth_type: unknown: 'VerifyAlways'"),
        ({**pair, "client_auth_type": "RequireAnyClientCert"},
         "tls_server_config.client_auth_type: RequireAnyClientCert is not supported here"),
        ({**pair, "client_ca_file": str(pki["ca"].cert)},
         "tls_server_config.client_auth_type: required with client_ca_file"),
        ({**pair, "client_auth_type": "NoClientCert", "client_ca_file": str(pki["ca"].cert)},
         "tls_server_config.client_auth_type: NoClientCert with a client CA"),
        ({**pair, "client_auth_type": "VerifyClientCertIfGiven", "client_allowed_sans": ["x"]},
         "tls_server_config.client_allowed_sans: needs client_auth_type"),
        ({**pair, "min_version": "TLS14"}, "tls_server_config.min_version: unknown: 'TLS14'"),
        ({**pair, "min_version": "TLS13", "max_version": "TLS12"},
         "tls_server_config.min_version: above max_version"),
        ({**pair, "cipher_suites": ["TLS_RSA_WITH_RC4_128_SHA"]},
         "tls_server_config.cipher_suites[0]: unknown: a string ('TLS_RSA_WITH_RC4_128_SHA')"),
        ({**pair, "curve_preferences": ["P256"]},
         "tls_server_config.curve_preferences[0]: unknown"),
        ({**pair, "key_file": str(pki["other"].key)},
         "tls_server_config: cannot set up TLS"),
    ]
    for doc, expected in cases:
        found = errors_of(tmp_path, {"tls_server_config": doc})
        assert any(e.startswith(expected) for e in found), (doc, found)


def test_every_error_at_once_and_no_secret_echoed(tmp_path):
    found = errors_of(tmp_path, {
        "tls_server_config": {"key": "TOPSECRETKEY"},
        "basic_auth_users": {"alice": "TOPSECRETPASSWORD"},
        "rate_limit": {"interval": "1s", "burst": 0}})
    assert len(found) == 3, found
    assert not any("TOPSECRET" in e for e in found)


def test_a_duplicate_key_is_refused_as_go_refuses_it(tmp_path):
    """Go's strict YAML refuses a repeated key; PyYAML keeps the last one silently, which
    would make a second `rate_limit` block the only one."""
    doc = "rate_limit:\n  burst: 1\nrate_limit:\n  interval: 1s\n  burst: 2\n"
    assert errors_of(tmp_path, doc) == [
        "line 3: duplicate key 'rate_limit' (YAML would silently keep the last)"]


def test_unreadable_and_broken_yaml_say_so_with_the_line(tmp_path):
    assert errors_of(tmp_path, "rate_limit: [1,\n")[0].startswith("line ")
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe")
    with pytest.raises(WebConfigError, match="not UTF-8 text"):
        load_file(str(tmp_path / "bin.yml"))


def test_an_empty_file_and_an_empty_tls_section_serve_plain_http(tmp_path):
    assert load_file(write(tmp_path, "")).tls is None
    web = load_file(write(tmp_path, {"tls_server_config": {"min_version": "TLS13"}}))
    assert web.tls is None and web.auth is None and web.limiter is None


# --- parsing: each field ---------------------------------------------------------------------
def test_tls_fields_map_to_python_ssl(tmp_path, pki):
    # Relative paths resolve against the file's directory, as the toolkit's SetDirectory.
    directory = pki["ca"].directory
    web = load_file(write(directory, {"tls_server_config": {
        "cert_file": "server.crt", "key_file": "server.key",
        "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt",
        "client_allowed_sans": ["prometheus.monitoring", "::1"],
        "min_version": "TLS12", "max_version": "TLS12",
        "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"],
        "prefer_server_cipher_suites": False, "curve_preferences": ["CurveP384", "X25519"]}}))
    settings = web.tls.settings
    assert settings.cert_file == str(directory / "server.crt")
    assert settings.client_ca_file == str(directory / "ca.crt")
    assert settings.verify is ssl.CERT_REQUIRED
    assert settings.allowed_sans == {"prometheus.monitoring", "::1"}
    assert settings.ciphers == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert settings.curve == "secp384r1"
    ctx = web.tls.context()
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2,) * 2
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]


@pytest.mark.parametrize(("name", "mode"), [
    ("NoClientCert", ssl.CERT_NONE), ("RequestClientCert", ssl.CERT_NONE),
    ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
    ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED)])
def test_client_auth_types(tmp_path, pki, name, mode):
    ca = {} if mode is ssl.CERT_NONE else {"client_ca_file": str(pki["ca"].cert)}
    web = load_file(write(tmp_path, {"tls_server_config": {
        "cert_file": str(pki["server"].cert), "key_file": str(pki["server"].key),
        "client_auth_type": name, **ca}}))
    assert web.tls.context().verify_mode is mode


def test_headers_users_and_rate_limit(tmp_path):
    web = load_file(write(tmp_path, {
        "http_server_config": {"http2": False, "headers": {
            "X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "", "Strict-Transport-Security": "max-age=31536000"}},
        "basic_auth_users": {"prometheus": HASH},
        "rate_limit": {"interval": "500ms", "burst": 3}}))
    assert dict(web.headers) == {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff",
                                 "Strict-Transport-Security": "max-age=31536000"}
    token = base64.b64encode(b"prometheus:s3cret").decode()
    assert web.auth.check(f"Basic {token}").value == "ok"
    assert web.limiter.limit == RateLimit(0.5, 3)
    assert load_file(write(tmp_path, {"rate_limit": {"interval": "0s", "burst": 0}})).limiter \
        is None


def test_token_bucket_allows_a_burst_then_one_per_interval():
    now = [0.0]
    bucket = TokenBucket(RateLimit(interval=2.0, burst=3), clock=lambda: now[0])
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]
    now[0] = 1.0
    assert not bucket.allow()
    now[0] = 2.0
    assert bucket.allow() and not bucket.allow()
    now[0] = 100.0  # refilled up to the burst, no more
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]


# --- reload ----------------------------------------------------------------------------------
def test_reload_on_change_keeps_the_previous_config_when_broken(tmp_path, caplog):
    now = [0.0]
    path = write(tmp_path, {"basic_auth_users": {"alice": HASH}})
    source = WebConfigFile(path, check_every=2.0, clock=lambda: now[0])
    first = source.current()
    write(tmp_path, {"basic_auth_users": {"bob": HASH}, "rate_limit": {"interval": "1s",
                                                                       "burst": 1}})
    assert source.current() is first  # not looked at before check_every
    now[0] = 2.0
    second = source.current()
    assert second is not first and second.limiter is not None
    assert second.auth.check("Basic " + base64.b64encode(b"bob:s3cret").decode()).value == "ok"
    write(tmp_path, {"basic_auth_users": {"carol": "hunter2-plain"}})
    now[0] = 4.0
    assert source.current() is second
    assert "basic_auth_users.carol: expected a bcrypt hash" in caplog.text
    assert "hunter2" not in caplog.text


def test_reload_cannot_turn_tls_on(tmp_path, pki, caplog):
    now = [0.0]
    path = write(tmp_path, {})
    source = WebConfigFile(path, check_every=1.0, clock=lambda: now[0])
    write(tmp_path, {"tls_server_config": {"cert_file": str(pki["server"].cert),
                                           "key_file": str(pki["server"].key)}})
    now[0] = 5.0
    assert source.current().tls is None
    assert "turning TLS on needs a restart" in caplog.text


# --- the server ------------------------------------------------------------------------------
@pytest.fixture
def state():
    s = PublishedState(check_interval=10.0)
    s.publish(BODY, dict)
    return s


def client(pki, who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if who is not None:
        ctx.load_cert_chain(str(pki[who].cert), str(pki[who].key))
    return ctx


def get(srv, ctx: ssl.SSLContext | None, path: str = "/metrics", headers=None):
    host, port = srv.address
    conn = (http.client.HTTPSConnection(host, port, timeout=10, context=ctx) if ctx
            else http.client.HTTPConnection(host, port, timeout=10))
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_mtls_with_allowed_sans(tmp_path, pki, state):
    web = WebConfigFile(write(tmp_path, {"tls_server_config": {
        "cert_file": str(pki["server"].cert), "key_file": str(pki["server"].key),
        "client_auth_type": "RequireAndVerifyClientCert",
        "client_ca_file": str(pki["ca"].cert),
        "client_allowed_sans": ["prometheus.monitoring"]}}))
    with build_server("127.0.0.1:0", state, web).start() as srv:
        assert srv.url.startswith("https://")
        assert get(srv, client(pki, "allowed"))[2] == BODY
        for who in (None, "other"):  # no certificate; a certificate without an allowed SAN
            with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
                get(srv, client(pki, who))


def test_headers_on_every_response_and_429_beyond_the_rate(tmp_path, state):
    web = WebConfigFile(write(tmp_path, {
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
        "rate_limit": {"interval": "1h", "burst": 2}}))
    with build_server("127.0.0.1:0", state, web).start() as srv:
        statuses = []
        for path in ("/metrics", "/nope", "/metrics", "/healthz"):
            status, headers, _ = get(srv, None, path)
            statuses.append(status)
            assert headers["x-frame-options"] == "deny"
        assert statuses == [200, 404, 429, 200]  # probes are not rate limited


# --- the command line ------------------------------------------------------------------------
def test_validate_config_checks_the_web_config_file(tmp_path, capsys):
    config = write(tmp_path, {"cluster": "c", "sources": {
        "brokers": [{"url": "http://127.0.0.1:1/metrics"}]}}, "config.yaml")
    good = write(tmp_path, {"basic_auth_users": {"alice": HASH}}, "good.yml")
    assert cli.main(["validate-config", config, "--web.config.file", good]) == 0
    bad = write(tmp_path, {"basic_auth_users": {"alice": "x"}}, "bad.yml")
    with pytest.raises(SystemExit) as info:
        cli.main(["validate-config", config, "--web.config.file", bad])
    assert info.value.code == 2
    assert f"{bad}: basic_auth_users.alice: expected a bcrypt hash" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["validate-config", "run"])
def test_tls_or_auth_in_both_places_is_an_error_naming_both(tmp_path, capsys, command):
    config = write(tmp_path, {"cluster": "c", "sources": {
        "brokers": [{"url": "http://127.0.0.1:1/metrics"}]},
        "exposition": {"basic_auth": {"alice": HASH}}}, "config.yaml")
    web = write(tmp_path, {"basic_auth_users": {"alice": HASH}})
    args = [config] if command == "validate-config" else ["--config.file", config]
    with pytest.raises(SystemExit) as info:
        cli.main([command, *args, "--web.config.file", web])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{config}: exposition.basic_auth: set, and --web.config.file {web}" in err

