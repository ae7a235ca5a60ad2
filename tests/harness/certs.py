"""A throwaway certificate authority for TLS tests, made with the openssl CLI (`./dev test`
installs it): a CA, and certificates it signs for servers and clients."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI is needed to make test certificates (./dev test installs it)"
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class ScratchCA:
    """`issue(name, dns=…, ip=…)` makes `name.crt`/`name.key` signed by this CA."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.cert, self.key = directory / "ca.crt", directory / "ca.key"
        _openssl("req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
                 "-subj", "/CN=pulsar-quota-exporter test CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)

    def issue(self, name: str, *, dns: tuple[str, ...] = (), ip: tuple[str, ...] = (),
              client: bool = False) -> Issued:
        sans = ",".join([*(f"DNS:{d}" for d in dns), *(f"IP:{a}" for a in ip)])
        ext = self.directory / f"{name}.ext"
        ext.write_text("\n".join([
            f"subjectAltName={sans}" if sans else "",
            f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}", ""]))
        _openssl("req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=self.directory)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", ext.name,
                 cwd=self.directory)
        return Issued(self.directory / f"{name}.crt", self.directory / f"{name}.key")
