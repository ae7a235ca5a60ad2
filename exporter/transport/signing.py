"""Signed usage reports: an HMAC-SHA256 envelope around the encoded report, with a key ring
read from a shared secret file.

Why: the usage topic is writable by anyone the broker lets produce on it, and an unsigned
report moves every peer's share of a quota for a round (PIP-82's reports are unsigned too,
`ResourceUsageTopicTransportManager` trusts the topic). With a shared secret, only holders
of the secret can speak. A holder can still speak for another participant: the key is
shared, so this authenticates the fleet, not the member (the gate's spoof rule still
catches one speaking for us).

Envelope, version 1:

    magic 0xB8 · version 0x01 · key id (8 bytes) · HMAC-SHA256 (32 bytes) · report bytes

The MAC covers a fixed context string, the topic and the key id before the report, so a
report signed for one topic (or a test fleet) is refused on another with the same secret.
The key id (a hash prefix of the secret) only picks the key to try; it tells a rotation in
progress (`unknown_key`) apart from a forgery (`bad_signature`).

The secret file holds one secret per line (blank lines and `#` comments ignored): the
first line signs, every line verifies. It is re-read when it changes, at most once per
round. A secret that disappears from the file is still accepted for `rotation_grace`
seconds (peers whose file has not been updated yet keep signing with it), so replacing
the file everywhere is a rotation that loses nothing once every peer has the new file;
listing the new secret second first, then first, then alone, loses nothing at all.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from exporter.config.auth import parse_secrets

log = logging.getLogger(__name__)

MAGIC = 0xB8
VERSION = 1
KEY_ID_BYTES = 8
MAC_BYTES = 32
HEADER_BYTES = 2 + KEY_ID_BYTES + MAC_BYTES
_CONTEXT = b"pulsar-quota-exporter usage report v1\x00"


class SignatureReject(StrEnum):
    UNSIGNED = "unsigned"  # a bare report where a signature is required
    UNKNOWN_KEY = "unknown_key"  # signed with a key this peer does not hold (rotation?)
    BAD_SIGNATURE = "bad_signature"  # the key is known and the MAC does not match


@dataclass(frozen=True)
class Unsigned:
    reason: SignatureReject
    detail: str


def key_id(secret: bytes) -> bytes:
    return hashlib.sha256(b"pulsar-quota-exporter key id\x00" + secret).digest()[:KEY_ID_BYTES]


def _mac(secret: bytes, topic: str, kid: bytes, report: bytes) -> bytes:
    message = _CONTEXT + topic.encode("utf-8") + b"\x00" + kid + report
    return hmac.new(secret, message, hashlib.sha256).digest()


def seal(secret: bytes, topic: str, report: bytes) -> bytes:
    kid = key_id(secret)
    return bytes((MAGIC, VERSION)) + kid + _mac(secret, topic, kid, report) + report


def is_sealed(payload: bytes) -> bool:
    return len(payload) >= 1 and payload[0] == MAGIC


def unwrap(payload: bytes) -> bytes:
    """The report inside an envelope, unverified (a peer that has no secret trusts the
    topic, as before signing was turned on: a fleet can turn it on one instance at a time)."""
    return payload[HEADER_BYTES:] if is_sealed(payload) and len(payload) >= HEADER_BYTES \
        else payload


class Keyring:
    """The secrets of one secret file, re-read when the file changes, and the ones it
    dropped in the last `grace` seconds. Times are unix seconds, passed in."""

    def __init__(self, secret_file: str | Path, topic: str, grace: float, now: float) -> None:
        self.path = Path(secret_file)
        self.topic = topic
        self.grace = grace
        self.reload_failures = 0
        self._stamp: tuple[int, int, int] | None = None
        self._current: tuple[bytes, ...] = ()
        self._retired: dict[bytes, tuple[bytes, float]] = {}  # key id → (secret, until)
        self.refresh(now)  # the config loader checked the file: a failure here is a race

    def refresh(self, now: float) -> bool:
        """Re-read the file if it changed; on a bad file keep the keys in force (logged and
        counted). Whether keys are held."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                secrets = parse_secrets(self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
                self._rotate(secrets, now)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.reload_failures += 1
            log.error("report signing: cannot use %s (%s); keeping the keys in force",
                      self.path, getattr(exc, "strerror", None) or exc)
        self._retired = {k: v for k, v in self._retired.items() if v[1] > now}
        return bool(self._current)

    def _rotate(self, secrets: tuple[bytes, ...], now: float) -> None:
        kept = set(secrets)
        for old in self._current:
            if old not in kept:
                self._retired[key_id(old)] = (old, now + self.grace)
                log.info("report signing: a secret left %s; accepted for %g s more",
                         self.path, self.grace)
        for secret in secrets:
            self._retired.pop(key_id(secret), None)
        self._current = secrets

    @property
    def accepted(self) -> int:
        """Secrets a report may be signed with now (current and in grace)."""
        return len(self._current) + len(self._retired)

    def seal(self, report: bytes) -> bytes:
        """Raises ValueError while no secret has ever been read (nothing can be sent)."""
        if not self._current:
            raise ValueError(f"no signing secret could be read from {self.path}")
        return seal(self._current[0], self.topic, report)

    def open(self, payload: bytes) -> bytes | Unsigned:
        """The report inside a valid envelope, or why not. Never raises."""
        if not is_sealed(payload):
            return Unsigned(SignatureReject.UNSIGNED, "a report without a signature")
        if len(payload) < HEADER_BYTES or payload[1] != VERSION:
            return Unsigned(SignatureReject.BAD_SIGNATURE, "not a version-1 envelope")
        kid = payload[2:2 + KEY_ID_BYTES]
        secret = next((s for s in self._current if key_id(s) == kid), None)
        if secret is None and kid in self._retired:
            secret = self._retired[kid][0]
        if secret is None:
            return Unsigned(SignatureReject.UNKNOWN_KEY, f"key id {kid.hex()} is not ours")
        mac, report = payload[2 + KEY_ID_BYTES:HEADER_BYTES], payload[HEADER_BYTES:]
        if not hmac.compare_digest(mac, _mac(secret, self.topic, kid, report)):
            return Unsigned(SignatureReject.BAD_SIGNATURE, "the signature does not match")
        return report
