"""Signed usage reports: the envelope, the key ring's rotation, and the exchange refusing
unsigned, forged and tampered reports by reason (transport/signing.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.config.auth import MIN_SECRET_BYTES, parse_secrets
from exporter.config.load import ConfigError, parse
from exporter.config.settings import USAGE_TOPIC, MonitoringClass, ReportSigning
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.decoder import decode
from exporter.transport.signing import (
    HEADER_BYTES,
    Keyring,
    SignatureReject,
    Unsigned,
    key_id,
    seal,
    unwrap,
)

OLD = b"old-secret-0123456789abcdef"
NEW = b"new-secret-0123456789abcdef"
REPORT = encode(WireReport("p-b", 7, 1_700_000_000.0, (
    Entry("rg", MonitoringClass.PUBLISH, Rates(10.0, 640.0), None),)))


def ring(tmp_path: Path, text: str, grace: float = 60.0, now: float = 0.0) -> Keyring:
    path = tmp_path / "secret"
    path.write_text(text)
    return Keyring(path, USAGE_TOPIC, grace, now)


def rewrite(ring_: Keyring, text: str) -> None:
    ring_.path.write_text(text)
    st = ring_.path.stat()  # a same-second rewrite of the same size must still be seen
    os.utime(ring_.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_a_sealed_report_opens_to_the_same_bytes_and_decodes(tmp_path):
    r = ring(tmp_path, OLD.decode() + "\n")
    sealed = r.seal(REPORT)
    assert sealed[0] == 0xB8 and len(sealed) == len(REPORT) + HEADER_BYTES
    assert r.open(sealed) == REPORT
    assert decode(r.open(sealed)).participant == "p-b"


@pytest.mark.parametrize("reason, payload", [
    (SignatureReject.UNSIGNED, lambda: REPORT),
    (SignatureReject.UNSIGNED, lambda: b""),
    (SignatureReject.UNKNOWN_KEY, lambda: seal(NEW, USAGE_TOPIC, REPORT)),
    (SignatureReject.BAD_SIGNATURE,  # one flipped bit in the report
     lambda: (lambda s: s[:-1] + bytes([s[-1] ^ 1]))(seal(OLD, USAGE_TOPIC, REPORT))),
    (SignatureReject.BAD_SIGNATURE,  # signed for another topic with the same secret
     lambda: seal(OLD, "non-persistent://other/ns/usage", REPORT)),
    (SignatureReject.BAD_SIGNATURE,  # our key id, a MAC of zeros
     lambda: bytes((0xB8, 1)) + key_id(OLD) + bytes(32) + REPORT),
    (SignatureReject.BAD_SIGNATURE, lambda: bytes((0xB8, 2)) + bytes(60)),  # version 2
    (SignatureReject.BAD_SIGNATURE, lambda: bytes((0xB8, 1)) + key_id(OLD)),  # cut short
])
def test_unsigned_forged_and_tampered_reports_are_refused_by_reason(tmp_path, reason, payload):
    outcome = ring(tmp_path, OLD.decode()).open(payload())
    assert isinstance(outcome, Unsigned) and outcome.reason is reason
    assert OLD.decode() not in outcome.detail


def test_every_line_verifies_and_the_first_signs(tmp_path):
    r = ring(tmp_path, f"# rotation step 1\n{OLD.decode()}\n\n{NEW.decode()}\n")
    assert r.open(seal(NEW, USAGE_TOPIC, REPORT)) == REPORT
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT
    assert r.seal(REPORT) == seal(OLD, USAGE_TOPIC, REPORT)


def test_a_replaced_secret_is_accepted_for_the_grace_period_only(tmp_path):
    r = ring(tmp_path, OLD.decode(), grace=60.0, now=1000.0)
    rewrite(r, NEW.decode())
    r.refresh(1010.0)
    assert r.seal(REPORT) == seal(NEW, USAGE_TOPIC, REPORT)  # signs with the new one at once
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT  # a peer not yet rotated
    assert r.accepted == 2
    r.refresh(1069.0)
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT
    r.refresh(1071.0)
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)).reason is SignatureReject.UNKNOWN_KEY
    assert r.accepted == 1


def test_a_secret_put_back_leaves_the_grace_list(tmp_path):
    r = ring(tmp_path, OLD.decode(), grace=60.0, now=0.0)
    rewrite(r, NEW.decode())
    r.refresh(1.0)
    rewrite(r, f"{OLD.decode()}\n{NEW.decode()}")
    r.refresh(2.0)
    r.refresh(500.0)  # far past the grace: OLD is current again, not retired
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT
    assert r.accepted == 2


@pytest.mark.parametrize("text", ["", "# only a comment\n", "short\n", "\xff"])
def test_a_broken_secret_file_keeps_the_keys_in_force(tmp_path, text):
    r = ring(tmp_path, OLD.decode(), now=0.0)
    if text == "\xff":
        r.path.write_bytes(b"\xff\xfe" * 20)
    else:
        rewrite(r, text)
    r.refresh(1.0)
    assert r.reload_failures == 1
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT
    assert r.seal(REPORT) == seal(OLD, USAGE_TOPIC, REPORT)
    r.path.unlink()
    r.refresh(2.0)
    assert r.reload_failures == 2 and r.open(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT


def test_a_keyring_that_never_read_a_secret_sends_nothing_and_accepts_nothing(tmp_path):
    r = Keyring(tmp_path / "missing", USAGE_TOPIC, 60.0, 0.0)
    assert r.reload_failures == 1
    with pytest.raises(ValueError, match="no signing secret"):
        r.seal(REPORT)
    assert r.open(seal(OLD, USAGE_TOPIC, REPORT)).reason is SignatureReject.UNKNOWN_KEY


def test_secrets_are_checked_without_being_quoted():
    assert parse_secrets(f" {OLD.decode()} \n#c\n{NEW.decode()}") == (OLD, NEW)
    with pytest.raises(ValueError, match=f"line 2 is 5 bytes; at least {MIN_SECRET_BYTES}") as e:
        parse_secrets(f"{OLD.decode()}\nshort")
    assert "short" not in str(e.value).replace("shorter", "")
    with pytest.raises(ValueError, match="no secret"):
        parse_secrets("\n  \n# x\n")


def test_a_peer_without_a_secret_reads_signed_reports_as_unsigned_ones():
    assert unwrap(seal(OLD, USAGE_TOPIC, REPORT)) == REPORT
    assert unwrap(REPORT) == REPORT


def _engine(signing: object) -> dict:
    return {"cluster": "c", "sources": {"brokers": [{"url": "http://b:8080/metrics"}]},
            "resource_group_engine": {"report_signing": signing}}


def test_the_config_reads_and_checks_the_secret_file(tmp_path):
    good = tmp_path / "usage.secret"
    good.write_text(f"{OLD.decode()}\n")
    config = parse(_engine({"secret_file": str(good), "rotation_grace": "2m"}), "c.yaml")
    signing = config.resource_group_engine.report_signing
    assert signing == ReportSigning(str(good), 120.0)
    assert OLD.decode() not in repr(config)
    assert parse(_engine({"secret_file": str(good)}), "c.yaml").resource_group_engine \
        .report_signing.rotation_grace == ReportSigning.rotation_grace


@pytest.mark.parametrize(("signing", "content", "error"), [
    ({}, None, "resource_group_engine.report_signing.secret_file: required: the file holding "
               "the shared secret"),
    ({"secret_file": "{file}"}, "too-short\n",
     "resource_group_engine.report_signing.secret_file: '{file}': the secret on line 1 is 9 "
     "bytes; at least 16 are needed"),
    ({"secret_file": "{file}"}, "# nothing\n",
     "resource_group_engine.report_signing.secret_file: '{file}': no secret in the file"),
    ({"secret_file": "/nonexistent/usage.secret"}, None,
     "resource_group_engine.report_signing.secret_file: cannot read "
     "'/nonexistent/usage.secret': No such file or directory"),
    ({"secret_file": "{file}", "rotation_grace": "soon"}, OLD.decode(),
     "resource_group_engine.report_signing.rotation_grace: "),
    ({"secret_file": "{file}", "grace": "1m"}, OLD.decode(),
     "resource_group_engine.report_signing.grace: unknown key"),
    ("yes", None, "resource_group_engine.report_signing: expected a mapping"),
])
def test_signing_config_errors_name_the_key_and_never_the_secret(tmp_path, signing, content,
                                                                  error):
    file = tmp_path / "usage.secret"
    if content is not None:
        file.write_text(content)
    if isinstance(signing, dict):
        signing = {k: v.replace("{file}", str(file)) for k, v in signing.items()}
    with pytest.raises(ConfigError) as caught:
        parse(_engine(signing), "c.yaml")
    assert any(e.startswith(f"c.yaml: {error.replace('{file}', str(file))}")
               for e in caught.value.errors), caught.value.errors
    assert "too-short" not in str(caught.value.errors)
