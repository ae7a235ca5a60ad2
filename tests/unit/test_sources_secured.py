"""Broker /metrics behind authentication and TLS (`authorization`, `basic_auth`, `tls_config`
per endpoint, Prometheus' names), against a loopback HTTPS server standing in for a secured
broker: a CA of our own, a server certificate for `broker.test` only, client certificates."""

from __future__ import annotations

import base64
import dataclasses
import ssl
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from exporter.config.load import ConfigError, parse
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.sources.brokers import tls_context
from exporter.sources.results import ScrapeError
from tests.harness.certs import Issued, ScratchCA
from tests.harness.fixtures import FIXTURES
from tests.harness.loopback import LoopbackHTTP

BODY = (FIXTURES / "apache-pulsar-4.0-metrics.txt").read_bytes()
TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.not-a-real-signature"


class SecuredBroker:
    """HTTPS with a certificate for broker.test only; wants `Bearer TOKEN` or basic
    alice:s3cret, and a client certificate from the CA when `mtls`."""

    def __init__(self, ca: ScratchCA, server: Issued, *, mtls: bool):
        self.seen: list[str | None] = []
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                given = self.headers.get("Authorization")
                broker.seen.append(given)
                ok = given in (f"Bearer {TOKEN}",
                               "Basic " + base64.b64encode(b"alice:s3cret").decode())
                body = BODY if ok else b"unauthorized\n"
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert))
        context.load_cert_chain(server.cert, server.key)
        context.verify_mode = ssl.CERT_REQUIRED if mtls else ssl.CERT_NONE
        self.http = LoopbackHTTP(Handler, context=context).start()

    @property
    def url(self) -> str:
        return f"{self.http.url}/metrics"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory, openssl: str) -> dict[str, object]:
    """A scratch CA (tests/harness/certs.py runs `openssl`) and what it issued."""
    directory = tmp_path_factory.mktemp("pki")
    ca = ScratchCA(directory)
    token = directory / "token"
    token.write_text(TOKEN + "\n")
    password = directory / "password"
    password.write_text("s3cret\n")
    return {"ca": ca, "server": ca.issue("broker", dns=("broker.test",)),
            "client": ca.issue("exporter", client=True), "token": token,
            "password": password, "dir": directory}


@pytest.fixture
def broker(pki) -> Iterator[SecuredBroker]:
    b = SecuredBroker(pki["ca"], pki["server"], mtls=False)
    yield b
    b.http.stop()


@pytest.fixture
def mtls_broker(pki) -> Iterator[SecuredBroker]:
    b = SecuredBroker(pki["ca"], pki["server"], mtls=True)
    yield b
    b.http.stop()


def scrape(url: str, **endpoint: object):
    config = parse({"cluster": "c", "sources": {"brokers": [{"url": url, **endpoint}]}},
                   "secured.yaml")
    sources = config.sources.brokers
    data = BrokerScrape(sources, in_process(sources), clock=lambda: 0.0).run()
    return data.health[0], data.tables


def tls(pki, **extra: object) -> dict:
    return {"ca_file": str(pki["ca"].cert), "server_name": "broker.test", **extra}


def test_bearer_token_from_a_file(broker, pki):
    health, tables = scrape(broker.url, tls_config=tls(pki),
                            authorization={"credentials_file": str(pki["token"])})
    assert health.up and tables, health
    assert broker.seen == [f"Bearer {TOKEN}"]  # the trailing newline is no part of it


def test_basic_auth_with_a_password_file(broker, pki):
    health, _ = scrape(broker.url, tls_config=tls(pki),
                       basic_auth={"username": "alice", "password_file": str(pki["password"])})
    assert health.up, health


def test_no_credentials_is_down_with_its_own_reason(broker, pki):
    health, tables = scrape(broker.url, tls_config=tls(pki))
    assert not health.up and health.last_error is ScrapeError.AUTH
    assert "401" in health.last_error_detail and not tables


def test_the_certificate_is_checked_against_server_name(broker, pki):
    auth = {"credentials_file": str(pki["token"])}
    health, _ = scrape(broker.url, tls_config={"ca_file": str(pki["ca"].cert)},
                       authorization=auth)  # 127.0.0.1 is not in the certificate
    assert not health.up and health.last_error is ScrapeError.TLS, health
    health, _ = scrape(broker.url, tls_config=tls(pki, server_name="other.test"),
                       authorization=auth)
    assert health.last_error is ScrapeError.TLS
    health, _ = scrape(broker.url, authorization=auth)  # the system CAs do not know ours
    assert health.last_error is ScrapeError.TLS
    health, _ = scrape(broker.url, tls_config={"insecure_skip_verify": True},
                       authorization=auth)
    assert health.up, health


def test_client_certificate_for_mutual_tls(mtls_broker, pki):
    auth = {"credentials_file": str(pki["token"])}
    health, _ = scrape(mtls_broker.url, tls_config=tls(pki), authorization=auth)
    assert not health.up and health.last_error is ScrapeError.TLS, health
    client = pki["client"]
    health, _ = scrape(mtls_broker.url, authorization=auth, tls_config=tls(
        pki, cert_file=str(client.cert), key_file=str(client.key)))
    assert health.up, health


def test_secrets_never_show_in_a_repr_or_an_error(pki, tmp_path: Path):
    config = parse({"cluster": "c", "sources": {"brokers": [{
        "url": "https://b/metrics", "authorization": {"credentials_file": str(pki["token"])},
        "tls_config": tls(pki, cert_file=str(pki["client"].cert),
                          key_file=str(pki["client"].key))}]}}, "secured.yaml")
    shown = repr(config)
    assert TOKEN not in shown and "PRIVATE KEY" not in shown
    assert str(pki["token"]) not in shown  # the header is kept, not the path: nothing to show
    bad = tmp_path / "token"
    bad.write_text("")
    with pytest.raises(ConfigError) as caught:
        parse({"cluster": "c", "sources": {"brokers": [{
            "url": "https://b/metrics", "authorization": {"credentials_file": str(bad)}}]}},
            "secured.yaml")
    assert caught.value.errors == [
        f"secured.yaml: sources.brokers[0].authorization.credentials_file: '{bad}' is empty"]


@pytest.mark.parametrize(("endpoint", "error"), [
    ({"authorization": {"credentials_file": "/nonexistent/token"}},
     "sources.brokers[0].authorization.credentials_file: cannot read '/nonexistent/token': "
     "No such file or directory"),
    ({"authorization": {"type": "Bearer"}},
     "sources.brokers[0].authorization.credentials_file: required: a file holding the "
     "credentials"),
    ({"basic_auth": {"username": "u"}}, "sources.brokers[0].basic_auth.password_file: required"),
    ({"authorization": {"credentials_file": "/x"}, "basic_auth": {"username": "u"}},
     "sources.brokers[0]: give authorization or basic_auth, not both"),
    ({"tls_config": {"cert_file": "/x"}},
     "sources.brokers[0].tls_config: cert_file and key_file go together"),
    ({"tls_config": {"verify": False}}, "sources.brokers[0].tls_config.verify: unknown key"),
])
def test_config_errors_name_the_key(endpoint: dict, error: str):
    with pytest.raises(ConfigError) as caught:
        parse({"cluster": "c", "sources": {"brokers": [{"url": "https://b/metrics",
                                                        **endpoint}]}}, "s.yaml")
    assert any(error in e for e in caught.value.errors), caught.value.errors


def test_a_bad_client_key_is_a_config_error_and_past_it_a_tls_failure_not_a_crash(
        pki, broker, tmp_path: Path):
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    endpoint = {"tls_config": tls(pki, cert_file=str(pki["client"].cert), key_file=str(junk)),
                "authorization": {"credentials_file": str(pki["token"])}}
    with pytest.raises(ConfigError) as caught:  # refused when the config loads
        scrape(broker.url, **endpoint)
    assert [e.split(": ")[1] for e in caught.value.errors] == ["sources.brokers[0].tls_config"]
    # a config built past the load (a test, a library user): still no crash
    good = {**endpoint, "tls_config": tls(pki, cert_file=str(pki["client"].cert),
                                          key_file=str(pki["client"].key))}
    sources = parse({"cluster": "c", "sources": {"brokers": [{"url": broker.url, **good}]}},
                    "secured.yaml").sources.brokers
    assert sources[0].tls is not None
    sources = (dataclasses.replace(sources[0], tls=dataclasses.replace(
        sources[0].tls, key_pem=junk.read_text())),)
    health = BrokerScrape(sources, in_process(sources), clock=lambda: 0.0).run().health[0]
    assert not health.up and health.last_error is ScrapeError.TLS, health
    tls_context.cache_clear()
