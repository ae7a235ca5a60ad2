"""A real Apache Pulsar standalone that requires authentication and speaks TLS: token
authentication (`AuthenticationProviderToken`, HS256 tokens signed with a key of our own)
on every port, /metrics included (`authenticateMetricsEndpoint`), and TLS ports beside the
plaintext ones with a server certificate from a scratch CA; clients must present a
certificate from that CA on the TLS binary port (`tlsRequireTrustedClientCertOnConnect`).
The broker's own clients use the plaintext ports with a superuser token."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar

from exporter.demo.embedded import free_ports
from tests.harness.apache_pulsar import ApachePulsar
from tests.harness.certs import Issued, ScratchCA

SUPERUSER = "admin"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(key: bytes, subject: str) -> str:
    """An HS256 JWT for `subject`, as `pulsar tokens create --secret-key` makes one."""
    head = _b64(json.dumps({"alg": "HS256"}).encode())
    body = _b64(json.dumps({"sub": subject}).encode())
    signature = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


class SecuredPulsar(ApachePulsar):
    def __init__(self, workdir: Path, **options: Any) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.ca = ScratchCA(workdir / "pki")
        self.server_cert: Issued = self.ca.issue("broker", ip=("127.0.0.1",), dns=("localhost",))
        self.client_cert: Issued = self.ca.issue("exporter", client=True)
        self.key = hashlib.sha256(b"pulsar-quota-exporter test key").digest()
        key_file = workdir / "secret.key"
        key_file.write_bytes(self.key)
        self.token = token(self.key, SUPERUSER)
        self.token_file = workdir / "token"
        self.token_file.write_text(self.token + "\n")
        # A second way in, HTTP basic auth (`AuthenticationProviderBasic`): its users file
        # holds an APR1-MD5 hash, as `htpasswd -m` writes, made here by openssl.
        self.basic_user, self.basic_password = "scraper", "pw@odd/chars%"
        hashed = subprocess.run(["openssl", "passwd", "-apr1", "-stdin"],
                                input=self.basic_password, capture_output=True, text=True,
                                check=True).stdout.strip()
        basic_conf = base64.b64encode(f"{self.basic_user}:{hashed}\n".encode()).decode()
        self.tls_port, self.web_tls_port = free_ports(2)
        super().__init__(workdir, resource_usage_transport=False, overrides={
            "authenticationEnabled": "true",
            "authenticationProviders":
                "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
                "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
            "basicAuthConf": basic_conf,
            "tokenSecretKey": f"file://{key_file}",
            "superUserRoles": SUPERUSER,
            "authorizationEnabled": "false",
            "authenticateMetricsEndpoint": "true",
            "brokerClientAuthenticationPlugin":
                "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "brokerClientAuthenticationParameters": f"token:{self.token}",
            "brokerServicePortTls": str(self.tls_port),
            "webServicePortTls": str(self.web_tls_port),
            "tlsCertificateFilePath": str(self.server_cert.cert),
            "tlsKeyFilePath": str(self.server_cert.key),
            "tlsTrustCertsFilePath": str(self.ca.cert),
            "tlsRequireTrustedClientCertOnConnect": "true",
            **options.pop("overrides", {}),
        }, **options)

    @property
    def tls_service_url(self) -> str:
        return f"pulsar+ssl://127.0.0.1:{self.tls_port}"

    @property
    def tls_metrics_url(self) -> str:
        return f"https://127.0.0.1:{self.web_tls_port}/metrics"

    def _request(self, url: str, **kwargs: Any) -> urllib.request.Request:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return urllib.request.Request(url, headers=headers, **kwargs)

    def admin(self, method: str, path: str, body: object = None, timeout: float = 10) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = self._request(self.web_url + path, data=data, method=method, headers={
            "Content-Type": "application/json", "Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    def _answers(self, url: str) -> bool:  # type: ignore[override]
        try:
            with urllib.request.urlopen(self._request(url), timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self._request(self.metrics_url), timeout=30) as resp:
            return resp.read().decode("utf-8")

    @contextlib.contextmanager
    def client(self) -> Iterator[pulsar.Client]:
        client = pulsar.Client(self.service_url, operation_timeout_seconds=self.client_timeout,
                               authentication=pulsar.AuthenticationToken(self.token))
        try:
            yield client
        finally:
            client.close()
