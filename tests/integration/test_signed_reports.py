"""Signed usage reports between exchanges over a real pulsar-lite broker: peers holding the
secret admit each other; unsigned, foreign-key and tampered reports are refused by reason;
a peer without a secret still reads signed reports (signing is turned on one instance at
a time). The three-process version is tests/integration/test_distributed_signed.py."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from exporter.config.settings import (
    Config,
    MonitoringClass,
    ReportSigning,
    ResourceGroupEngine,
)
from exporter.engine.groups.usage import Usage, UsageReport
from exporter.runtime.exchange import UsageExchange
from exporter.transport.channel import UsageChannel
from exporter.transport.codec import encode
from exporter.transport.signing import seal
from tests.harness.pulsar import PulsarLite, pulsar_lite_fixture
from tests.harness.wait import poll

pulsar_lite = pulsar_lite_fixture()
SECRET = "fleet-secret-0123456789abcdef"
OTHER = "another-fleet-secret-0123456789"


@pytest.fixture
def exchanges(pulsar_lite: PulsarLite, tmp_path: Path):
    topic = f"non-persistent://public/default/usage-{uuid.uuid4().hex[:8]}"
    made: list[UsageExchange] = []

    def make(participant: str, secret: str | None) -> UsageExchange:
        signing = None
        if secret is not None:
            path = tmp_path / f"{participant}.secret"
            path.write_text(secret + "\n")
            signing = ReportSigning(str(path))
        config = Config(cluster="t", resource_group_engine=ResourceGroupEngine(
            participant=participant, topic=topic, report_interval=5.0, report_signing=signing))
        channel = UsageChannel(pulsar_lite.service_url, topic, participant,
                               backoff_initial=0.2, backoff_max=1.0)
        assert channel.wait_connected(15), participant
        made.append(UsageExchange(config, channel, time.time))
        return made[-1]

    yield make
    for exchange in made:
        exchange.close()


def _usage(participant: str, rate: float) -> list[UsageReport]:
    return [UsageReport("rg", MonitoringClass.PUBLISH, participant,
                        Usage(bytes=rate * 64, messages=rate), None)]


def _heard(receiver: UsageExchange, send, what: str) -> tuple[list[str], dict[str, int]]:
    """Send (again, a non-persistent topic drops what a new reader has no permits for)
    until the receiver admits or refuses something; what it admitted and refused."""
    admitted: list[str] = []
    refused: dict[str, int] = {}

    def got() -> bool:
        send()
        time.sleep(0.2)
        inbound = receiver.receive(time.time())
        admitted.extend(r.participant for r in inbound.admitted)
        for reason, count in inbound.rejected.items():
            refused[reason] = refused.get(reason, 0) + count
        return bool(admitted or refused)

    poll(got, what, 20, interval=0.1)
    return admitted, refused


def test_peers_with_the_secret_admit_each_other(exchanges):
    a, b = exchanges("a", SECRET), exchanges("b", SECRET)
    admitted, refused = _heard(b, lambda: a.publish(_usage("a", 10), time.time()), "a at b")
    assert set(admitted) == {"a"} and refused == {}


def test_an_unsigned_report_is_refused_by_a_signing_peer(exchanges):
    b, c = exchanges("b", SECRET), exchanges("c", None)
    admitted, refused = _heard(b, lambda: c.publish(_usage("c", 10), time.time()), "c at b")
    assert admitted == [] and set(refused) == {"unsigned"}


def test_a_report_signed_with_another_secret_is_refused_as_unknown_key(exchanges):
    b, d = exchanges("b", SECRET), exchanges("d", OTHER)
    admitted, refused = _heard(b, lambda: d.publish(_usage("d", 10), time.time()), "d at b")
    assert admitted == [] and set(refused) == {"unknown_key"}


def test_a_tampered_report_is_refused_as_bad_signature(exchanges):
    b, e = exchanges("b", SECRET), exchanges("e", None)
    from exporter.runtime.exchange import to_wire

    def forged() -> None:  # signed with the right secret, then its usage raised
        honest = encode(to_wire("e", time.time_ns(), time.time(), _usage("e", 10)))
        sealed = seal(SECRET.encode(), b.channel.topic, honest)
        louder = encode(to_wire("e", time.time_ns(), time.time(), _usage("e", 10_000)))
        e.channel.send(sealed[:-len(honest)] + louder)

    admitted, refused = _heard(b, forged, "the forgery at b")
    assert admitted == [] and set(refused) == {"bad_signature"}


def test_a_peer_without_a_secret_still_reads_signed_reports(exchanges):
    a, c = exchanges("a", SECRET), exchanges("c", None)
    admitted, refused = _heard(c, lambda: a.publish(_usage("a", 10), time.time()), "a at c")
    assert set(admitted) == {"a"} and refused == {}
