"""Fuzz: usage reports. Ours go through `UsageExchange.receive` (signature, strict decoder,
gate) with and without `report_signing`: every payload is admitted or rejected by a reason
of REPORT_REJECT_REASONS, and an admitted report re-encodes to exactly the bytes sent. The
brokers' PIP-82 `ResourceUsageInfo` payloads (recorded from Apache Pulsar 4.0.8) go through
`BrokerReports.take`: decoded, or counted by a reason of BROKER_REPORT_REJECT_REASONS."""

from __future__ import annotations

import random

from hypothesis import event, given
from hypothesis import strategies as st

from exporter.catalogue import BROKER_REPORT_REJECT_REASONS, REPORT_REJECT_REASONS
from exporter.transport import pulsarwire
from exporter.transport.codec import Undecodable, WireReport, encode
from exporter.transport.decoder import decode
from tests.fuzz import inputs
from tests.fuzz.brokerserver import byte_ops


def test_every_seed_report_is_admitted_signed_or_not() -> None:
    rng = random.Random(1)
    for signed in (True, False):
        exch, channel = inputs.exchange(signed)
        for n in range(50):
            report = inputs.report_seed(rng, 10**12 + n)
            if report.participant == inputs.SELF or report.sent_at < inputs.NOW - 120:
                continue
            mode = "sealed" if signed else "plain"
            payload = inputs.report_payload(report, [], mode)
            outcome = inputs.receive(exch, channel, [payload])
            assert outcome.accepted == 1, (report, outcome)


@inputs.fuzz_settings(1.5)
@given(rng=st.randoms(use_true_random=False), signed=st.booleans(),
       sends=st.lists(st.tuples(st.sampled_from(inputs.SIGNING_MODES), byte_ops,
                                st.integers(0, 2)), min_size=1, max_size=4))
def test_every_payload_is_admitted_canonical_or_rejected_by_reason(
        rng: random.Random, signed: bool, sends: list) -> None:
    exch, channel = inputs.exchange(signed)
    sequence, payloads = 10**12, []
    for mode, ops, step in sends:
        sequence += step  # a step of 0 repeats a sequence: the gate's replay rule
        payloads.append(inputs.report_payload(inputs.report_seed(rng, sequence), ops, mode))
    outcome = inputs.receive(exch, channel, payloads)
    assert outcome.accepted + outcome.rejected.total() == len(payloads)
    assert set(outcome.rejected) <= set(REPORT_REJECT_REASONS)
    for reason in outcome.rejected:
        event(f"rejected: {reason}")


@inputs.fuzz_settings(5)
@given(data=st.binary(max_size=300))
def test_random_bytes_decode_or_are_refused_and_accepted_ones_are_canonical(data: bytes) -> None:
    exch, channel = inputs.exchange(signed=False)
    inputs.receive(exch, channel, [bytes((0xB7, 1)) + data, data])
    decoded = decode(data)
    assert isinstance(decoded, WireReport | Undecodable)
    if isinstance(decoded, WireReport):
        assert encode(decoded) == data


@inputs.fuzz_settings(7.5)
@given(seed=st.sampled_from(inputs.broker_report_seeds()), ops=byte_ops)
def test_a_mutated_broker_report_is_decoded_or_counted_by_reason(seed: bytes, ops: list) -> None:
    payload = inputs.apply_bytes(seed, ops, inputs.REPORT_WORDS)
    outcome = inputs.broker_report(payload)
    assert set(outcome.rejected) <= set(BROKER_REPORT_REJECT_REASONS)
    event(f"rejected: {next(iter(outcome.rejected))}" if outcome.rejected else "accepted")
    try:
        pulsarwire.decode(payload)
    except pulsarwire.Undecodable as exc:
        assert exc.reason.value in outcome.rejected
    else:
        assert outcome.accepted == 1
