"""pulsar.Client's authentication and TLS from `sources`, for every client we open
(evictions over the binary protocol, the usage exchange, the brokers' report reader).

The token file is read on every connection (pulsar-client calls the supplier), so a rotated
token is picked up without a reload. TLS: the trust store, a client certificate for mutual
TLS (`tlsRequireTrustedClientCertOnConnect` on the broker), and hostname verification on
unless `insecure_skip_verify`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exporter.config.settings import Sources


def client_options(sources: Sources) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if sources.service_token_file is not None:
        import pulsar  # here: no other client option needs pulsar-client loaded

        path = Path(sources.service_token_file)
        options["authentication"] = pulsar.AuthenticationToken(
            lambda: path.read_text().strip())
    tls = sources.service_tls
    if tls is not None:
        options.update(
            tls_trust_certs_file_path=tls.ca_file,
            tls_allow_insecure_connection=tls.insecure_skip_verify,
            tls_validate_hostname=not tls.insecure_skip_verify,
            tls_certificate_file_path=tls.cert_file,
            tls_private_key_file_path=tls.key_file,
        )
    return options
