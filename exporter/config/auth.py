"""Credentials and TLS blocks of the config: `authorization`, `basic_auth` and `tls_config`
with Prometheus' scrape-config names, for broker /metrics endpoints and the Pulsar client.

Secrets come from files only (never inline, so the YAML can be shared), read when the
config is loaded or reloaded; an unreadable file is a config error naming its key path. A
secret's content never appears in an error, a log line or a repr.
"""

from __future__ import annotations

import base64
import os
import ssl
import stat
from pathlib import Path

from exporter.config import values as cv
from exporter.config.reader import Reader
from exporter.config.settings import TlsClient

MIN_SECRET_BYTES = 16  # a shorter shared HMAC secret is guessable offline from one report
TLS_KEYS = ("ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify")


def read(r: Reader, path: str, file: str | None, *, strip: bool = False) -> str | None:
    """A file the config names, read now so a missing or unreadable one is a config error
    (exit 2) before anything starts. Only a regular file (a Kubernetes secret's symlink to
    one is): reading a FIFO or a device would block the load or never end."""
    if file is None:
        return None
    try:
        if not stat.S_ISREG(mode := os.stat(file).st_mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a special file"
            r.error(path, f"{file!r} is {kind}, not a regular file")
            return None
        text = Path(file).read_text()
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        r.error(path, f"cannot read {file!r}: {getattr(exc, 'strerror', None) or exc}")
        return None
    return text.strip() if strip else text


def secret(r: Reader, path: str, file: str | None) -> str | None:
    """A credentials file's content, stripped of surrounding whitespace (a trailing newline
    is no part of a token or password); an empty one is an error."""
    content = read(r, path, file, strip=True)
    if content == "":
        r.error(path, f"{file!r} is empty")
        return None
    return content


def server_pair(r: Reader, path: str, cert_file: str, key_file: str) -> None:
    """A certificate and its key, readable and loading together: checked with the config, so
    `validate-config` reports them and `run` stops before starting anything, not after."""
    readable = [read(r, f"{path}.{key}", file) is not None
                for key, file in (("cert_file", cert_file), ("key_file", key_file))]
    if all(readable):
        _pair_loads(r, path, cert_file, key_file)


def _pair_loads(r: Reader, path: str, cert_file: str, key_file: str) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:
        r.error(path, f"the certificate and key do not load together: "
                f"{getattr(exc, 'reason', None) or exc}")


def ca_bundle(r: Reader, path: str, ca_file: str | None) -> None:
    """A CA file that loads as one (PEM): checked with the config, used when a client is
    built."""
    if ca_file is None or read(r, path, ca_file) is None:
        return
    try:
        ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError, ValueError) as exc:
        r.error(path, f"{ca_file!r} does not load as CA certificates: "
                f"{getattr(exc, 'reason', None) or exc}")


def authorization(r: Reader, m: dict[str, object], path: str) -> str | None:
    """`authorization: {type, credentials_file}` or `basic_auth: {username, password_file}`
    → the Authorization header's value, or None when neither is given."""
    if "authorization" in m and "basic_auth" in m:
        r.error(path, "give authorization or basic_auth, not both")
        return None
    if "authorization" in m:
        apath = f"{path}.authorization"
        a = r.mapping(m["authorization"], apath, ("type", "credentials_file"), nullable=False)
        kind = r.get(a, "type", apath, cv.string, "Bearer")
        if "credentials_file" not in a:
            r.error(f"{apath}.credentials_file", "required: a file holding the credentials")
        value = secret(r, f"{apath}.credentials_file",
                       r.get(a, "credentials_file", apath, cv.string, None))
        return f"{kind} {value}" if value else None
    if "basic_auth" in m:
        bpath = f"{path}.basic_auth"
        b = r.mapping(m["basic_auth"], bpath, ("username", "password_file"), nullable=False)
        for key in ("username", "password_file"):
            if key not in b:
                r.error(f"{bpath}.{key}", "required")
        user = r.get(b, "username", bpath, cv.string, None)
        password = secret(r, f"{bpath}.password_file",
                          r.get(b, "password_file", bpath, cv.string, None))
        if user is None or password is None:
            return None
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return None


def tls_config(r: Reader, value: object, path: str) -> TlsClient | None:
    if value is None:
        return None
    t = r.mapping(value, path, TLS_KEYS, nullable=False)
    files = {key: r.get(t, key, path, cv.string, None) for key in TLS_KEYS[:3]}
    if (files["cert_file"] is None) != (files["key_file"] is None):
        r.error(path, "cert_file and key_file go together (a client certificate and its key)")
    client = TlsClient(
        **files,
        server_name=r.get(t, "server_name", path, cv.string, None),
        insecure_skip_verify=r.get(t, "insecure_skip_verify", path, cv.boolean, False),
        ca_pem=read(r, f"{path}.ca_file", files["ca_file"]),
        cert_pem=read(r, f"{path}.cert_file", files["cert_file"]),
        key_pem=read(r, f"{path}.key_file", files["key_file"]),
    )
    # what a client would refuse at its first connection, said now (the PEMs are in hand)
    if client.ca_pem is not None:
        try:
            ssl.create_default_context(cadata=client.ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            r.error(f"{path}.ca_file", f"{client.ca_file!r} does not load as CA certificates: "
                    f"{getattr(exc, 'reason', None) or exc}")
    if client.cert_file and client.key_file and client.cert_pem and client.key_pem:
        _pair_loads(r, path, client.cert_file, client.key_file)
    return client


def parse_secrets(text: str) -> tuple[bytes, ...]:
    """The secrets of a secret file, signing one first. Raises ValueError (never quoting
    a secret) when there is none or one is too short."""
    secrets = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        raw = line.encode("utf-8")
        if len(raw) < MIN_SECRET_BYTES:
            raise ValueError(f"the secret on line {number} is {len(raw)} bytes; at least "
                             f"{MIN_SECRET_BYTES} are needed")
        secrets.append(raw)
    if not secrets:
        raise ValueError("no secret in the file (one per line; # starts a comment)")
    return tuple(secrets)
