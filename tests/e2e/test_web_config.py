"""`--web.config.file` end to end: the exporter process, watching pulsar-lite, hardened with an
exporter-toolkit web config file (mTLS with allowed SANs, basic auth, a header), scraped by a
real Prometheus over HTTPS with a client certificate and basic auth: `up == 1`. Prometheus
jobs with no client certificate, with a certificate whose SAN is not allowed, or with a wrong
password scrape the same target and get `up == 0`; a Python client is refused likewise."""

from __future__ import annotations

import base64
import contextlib
import http.client
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from tests.harness.certs import Issued, ScratchCA
from tests.harness.exporter_process import ExporterProcess
from tests.harness.prometheus import Prometheus
from tests.harness.pulsar import PulsarLite
from tests.harness.wait import poll

PASSWORD = "scrape-secret"
ALLOWED_SAN = "prometheus.monitoring.svc"


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = ScratchCA(directory)
        self.server = self.ca.issue("server", ip=("127.0.0.1",))
        self.prometheus = self.ca.issue("prometheus", dns=(ALLOWED_SAN,), client=True)
        self.intruder = self.ca.issue("intruder", dns=("intruder.example",), client=True)


def _tls_config(pki: Pki, who: Issued | None) -> dict[str, Any]:
    tls: dict[str, Any] = {"ca_file": str(pki.ca.cert)}
    if who is not None:
        tls |= {"cert_file": str(who.cert), "key_file": str(who.key)}
    return tls


def _get(exporter: ExporterProcess, pki: Pki, who: Issued | None, path: str = "/metrics",
         password: str = PASSWORD) -> tuple[int, dict[str, str], bytes]:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    if who is not None:
        ctx.load_cert_chain(str(who.cert), str(who.key))
    token = base64.b64encode(f"prometheus:{password}".encode()).decode()
    conn = http.client.HTTPSConnection("127.0.0.1", exporter.port, timeout=10, context=ctx)
    try:
        conn.request("GET", path, headers={"Authorization": f"Basic {token}"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pki, ExporterProcess,
                                                                          Prometheus]]:
    root = tmp_path_factory.mktemp("web-config")
    pki = Pki(root / "pki")
    web = root / "web" / "web-config.yml"
    web.parent.mkdir()
    (web.parent / "server.crt").write_bytes(pki.server.cert.read_bytes())
    (web.parent / "server.key").write_bytes(pki.server.key.read_bytes())
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web.write_text(yaml.safe_dump({
        "tls_server_config": {
            "cert_file": "server.crt", "key_file": "server.key",  # relative to the file
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": str(pki.ca.cert), "client_allowed_sans": [ALLOWED_SAN]},
        "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
        "basic_auth_users": {"prometheus": hashed},
    }))
    password_file = root / "password"
    password_file.write_text(PASSWORD)
    wrong_file = root / "wrong-password"
    wrong_file.write_text("not-it")
    with contextlib.ExitStack() as stack:
        broker = PulsarLite(root / "pulsar-lite").start()
        stack.callback(broker.stop)
        exporter = ExporterProcess(root / "exporter", {
            "cluster": "web-config", "check_interval": "3s",
            "sources": {"brokers": [{"url": broker.metrics_url, "timeout": "2s"}]},
            "spark": {"master": "local[1]"},
        }, extra_args=("--web.config.file", str(web))).start()
        stack.callback(exporter.stop)
        https = {"scheme": "https"}
        auth = {"basic_auth": {"username": "prometheus", "password_file": str(password_file)}}
        prometheus = Prometheus(
            root / "prometheus", rule_files=[], alertmanager="127.0.0.1:9",
            targets={job: [exporter.address]
                     for job in ("allowed", "no-cert", "wrong-san", "wrong-password")},
            scrape_options={
                "allowed": {**https, **auth, "tls_config": _tls_config(pki, pki.prometheus)},
                "no-cert": {**https, **auth, "tls_config": _tls_config(pki, None)},
                "wrong-san": {**https, **auth, "tls_config": _tls_config(pki, pki.intruder)},
                "wrong-password": {**https, "tls_config": _tls_config(pki, pki.prometheus),
                                   "basic_auth": {"username": "prometheus",
                                                  "password_file": str(wrong_file)}},
            }).start()
        stack.callback(prometheus.stop)

        def ready() -> bool:
            return _get(exporter, pki, pki.prometheus, "/readyz")[0] == 200

        poll(ready, "the exporter's /readyz over mTLS", timeout=300, interval=1.0,
             ignore=(OSError, http.client.HTTPException), show=exporter.log_tail)
        yield pki, exporter, prometheus


def _up(prometheus: Prometheus) -> dict[str, str]:
    return {s["metric"]["job"]: s["value"][1] for s in prometheus.instant("up")}


def test_prometheus_scrapes_over_mtls_with_basic_auth_and_the_others_are_refused(hardened):
    _, exporter, prometheus = hardened
    expected = {"allowed": "1", "no-cert": "0", "wrong-san": "0", "wrong-password": "0"}
    poll(lambda: _up(prometheus), f"up by job to be {expected}", timeout=60,
         until=lambda up: up == expected, show=exporter.log_tail)
    # The scraped series are the exporter's own: what Prometheus stored came over mTLS.
    assert prometheus.instant('pulsar_quota_exporter_build_info{job="allowed"}')
    targets = {t["labels"]["job"]: t["lastError"]
               for t in prometheus.api("targets")["activeTargets"]}
    assert "401" in targets["wrong-password"], targets


def test_a_client_without_an_allowed_certificate_is_refused(hardened):
    pki, exporter, _ = hardened
    status, headers, body = _get(exporter, pki, pki.prometheus)
    assert status == 200 and b"pulsar_quota_exporter_build_info" in body
    assert headers["x-content-type-options"] == "nosniff"
    for who in (None, pki.intruder):
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            _get(exporter, pki, who)
    assert _get(exporter, pki, pki.prometheus, password="not-it")[0] == 401
