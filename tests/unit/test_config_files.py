"""Files the config names are checked when it loads: a regular file, readable, and a PEM that
loads where a client would load it, each problem one line naming its key path."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from exporter.config.load import ConfigError, load
from tests.harness.fixtures import THROWAWAY_CERT, THROWAWAY_KEY

BROKER = "http://127.0.0.1:9/metrics"


def _errors(tmp_path: Path, text: str) -> list[str]:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(config)
    return caught.value.errors


def test_a_directory_named_as_a_file_is_one_line_naming_the_key(tmp_path: Path) -> None:
    errors = _errors(tmp_path, f"cluster: c\nsources:\n  brokers: [{{url: '{BROKER}'}}]\n"
                               f"  service_url: pulsar://127.0.0.1:6650\n"
                               f"  service_token_file: '{tmp_path}'\n")
    assert errors == [f"{tmp_path / 'c.yaml'}: sources.service_token_file: '{tmp_path}' is a "
                      "directory, not a regular file"]


def test_a_fifo_named_as_a_file_is_refused_without_blocking_the_load(tmp_path: Path) -> None:
    """Reading a FIFO waits for a writer: the load would hang, not fail."""
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    outcome: list[list[str]] = []

    def loading() -> None:
        outcome.append(_errors(tmp_path, (
            f"cluster: c\nsources:\n  brokers:\n    - url: '{BROKER}'\n"
            f"      authorization: {{credentials_file: '{fifo}'}}\n")))

    thread = threading.Thread(target=loading, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():  # unblock the reader so the thread ends, then fail
        with open(fifo, "w") as writer:
            writer.write("token\n")
        thread.join(timeout=10)
        pytest.fail("the load blocked on a FIFO")
    assert len(outcome[0]) == 1
    assert outcome[0][0].endswith(f"sources.brokers[0].authorization.credentials_file: "
                                  f"'{fifo}' is a special file, not a regular file")


def test_a_broker_tls_ca_that_is_no_certificate_and_a_key_not_the_certificates(
        tmp_path: Path) -> None:
    """What the broker client would refuse at its first scrape (sources/brokers.py loads
    the CA from its PEM; the pair as a client certificate), said at load."""
    not_a_ca = tmp_path / "ca.pem"
    not_a_ca.write_text("hello\n")
    other_key = tmp_path / "other.key"
    other_key.write_text("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEG\n"
                         "-----END PRIVATE KEY-----\n")
    errors = _errors(tmp_path, (
        f"cluster: c\nsources:\n  brokers:\n    - url: '{BROKER}'\n"
        f"      tls_config: {{ca_file: '{not_a_ca}', cert_file: '{THROWAWAY_CERT}', "
        f"key_file: '{other_key}'}}\n"))
    assert [e.split(": ")[1] for e in errors] == ["sources.brokers[0].tls_config.ca_file",
                                                  "sources.brokers[0].tls_config"]
    assert "does not load as CA certificates" in errors[0]
    assert "the certificate and key do not load together" in errors[1]
    assert "MIGHAgEA" not in "\n".join(errors)  # a key's content is never quoted


def test_a_broker_tls_block_whose_files_load_is_accepted(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"cluster: c\nsources:\n  brokers:\n    - url: '{BROKER}'\n"
        f"      tls_config: {{ca_file: '{THROWAWAY_CERT}', cert_file: '{THROWAWAY_CERT}', "
        f"key_file: '{THROWAWAY_KEY}'}}\n")
    tls = load(config).sources.brokers[0].tls
    assert tls is not None and tls.key_pem == THROWAWAY_KEY.read_text()
