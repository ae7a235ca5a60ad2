"""Per-peer admission: each rule with a case it refuses and a case it lets through."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import MonitoringClass
from exporter.transport.codec import Entry, Rates, WireReport, encode
from exporter.transport.decoder import decode
from exporter.transport.gate import (
    Admitted,
    Own,
    PeerGate,
    PeerReject,
    Refused,
    initial_sequence,
)

INTERVAL = 60.0
NOW = 1_700_000_000.0


def report(participant: str = "peer", sequence: int = 100, sent_at: float = NOW,
           usage: float = 10.0, goodbye: bool = False) -> WireReport:
    entries = () if goodbye else (
        Entry("rg", MonitoringClass.PUBLISH, Rates(usage, usage * 100), Rates(50.0, 5000.0)),)
    return WireReport(participant, sequence, sent_at, entries, goodbye)


def echo(sent: WireReport) -> WireReport:
    """What our reader gets back: the report after the wire (quantised)."""
    decoded = decode(encode(sent))
    assert isinstance(decoded, WireReport)
    return decoded


@pytest.fixture
def gate() -> PeerGate:
    return PeerGate("me", INTERVAL)


# --- own reports and spoofs -----------------------------------------------------------------


def test_our_own_report_echoed_is_own(gate: PeerGate) -> None:
    mine = report("me", usage=1 / 3)  # not exactly representable: the echo is quantised
    gate.sent(mine)
    assert echo(mine) != mine
    assert gate.admit(echo(mine), NOW) == Own(echo(mine))


def test_a_report_in_our_name_we_never_sent_is_spoofed(gate: PeerGate) -> None:
    assert gate.admit(report("me", sequence=7), NOW) == Refused(PeerReject.SPOOFED, "me")


def test_a_spoof_reusing_one_of_our_sequences_is_caught(gate: PeerGate) -> None:
    gate.sent(report("me", sequence=7, usage=10))
    forged = report("me", sequence=7, usage=90)
    assert gate.admit(forged, NOW) == Refused(PeerReject.SPOOFED, "me")
    assert isinstance(gate.admit(report("me", sequence=7, usage=10), NOW), Own)


def test_own_is_not_subject_to_age_or_replay(gate: PeerGate) -> None:
    mine = report("me", sequence=7, sent_at=NOW - 10 * INTERVAL)
    gate.sent(mine)
    assert isinstance(gate.admit(mine, NOW), Own)
    assert isinstance(gate.admit(mine, NOW), Own)  # a duplicate echo is still ours


def test_memory_of_sent_reports_is_bounded() -> None:
    gate = PeerGate("me", INTERVAL, remember_sent=4)
    first = report("me", sequence=1)
    gate.sent(first)
    for sequence in range(2, 6):
        gate.sent(report("me", sequence=sequence))
    assert gate.admit(first, NOW) == Refused(PeerReject.SPOOFED, "me")
    assert isinstance(gate.admit(report("me", sequence=5), NOW), Own)


def test_sent_refuses_someone_elses_or_an_unencodable_report(gate: PeerGate) -> None:
    with pytest.raises(ValueError):
        gate.sent(report("peer"))
    with pytest.raises(ValueError):
        gate.sent(report("me", usage=-1))


def test_an_unencodable_report_in_our_name_is_spoofed_not_an_error(gate: PeerGate) -> None:
    assert gate.admit(report("me", usage=float("nan")), NOW) == Refused(PeerReject.SPOOFED, "me")


# --- too old ----------------------------------------------------------------------------------


def test_older_than_two_intervals_is_too_old(gate: PeerGate) -> None:
    stale = report(sent_at=NOW - 2 * INTERVAL - 0.001)
    assert gate.admit(stale, NOW) == Refused(PeerReject.TOO_OLD, "peer")


def test_exactly_two_intervals_old_is_admitted(gate: PeerGate) -> None:
    edge = report(sent_at=NOW - 2 * INTERVAL)
    assert gate.admit(edge, NOW) == Admitted(edge)


def test_a_report_from_the_future_is_admitted(gate: PeerGate) -> None:
    ahead = report(sent_at=NOW + 5)  # clock skew: not the gate's business
    assert gate.admit(ahead, NOW) == Admitted(ahead)


def test_an_old_replay_is_too_old_rather_than_replayed(gate: PeerGate) -> None:
    gate.admit(report(sequence=100, sent_at=NOW), NOW)
    old = report(sequence=50, sent_at=NOW - 3 * INTERVAL)
    assert gate.admit(old, NOW) == Refused(PeerReject.TOO_OLD, "peer")


# --- replays ----------------------------------------------------------------------------------


def test_same_or_lower_sequence_is_replayed(gate: PeerGate) -> None:
    first = report(sequence=100)
    assert gate.admit(first, NOW) == Admitted(first)
    assert gate.admit(first, NOW + 1) == Refused(PeerReject.REPLAYED, "peer")
    assert gate.admit(report(sequence=99, sent_at=NOW + 1), NOW + 1) == \
        Refused(PeerReject.REPLAYED, "peer")


def test_higher_sequence_is_admitted(gate: PeerGate) -> None:
    gate.admit(report(sequence=100), NOW)
    nxt = report(sequence=101, sent_at=NOW + INTERVAL)
    assert gate.admit(nxt, NOW + INTERVAL) == Admitted(nxt)


def test_sequences_are_per_participant(gate: PeerGate) -> None:
    gate.admit(report("a", sequence=100), NOW)
    other = report("b", sequence=5)
    assert gate.admit(other, NOW) == Admitted(other)


def test_a_restarted_sender_is_admitted_again(gate: PeerGate) -> None:
    before = report(sequence=initial_sequence(NOW - 30) + 1, sent_at=NOW - 30)
    gate.admit(before, NOW - 30)
    after = report(sequence=initial_sequence(NOW), sent_at=NOW)
    assert gate.admit(after, NOW) == Admitted(after)


# --- goodbye and forget -----------------------------------------------------------------------


def test_goodbye_is_admitted_and_raises_the_floor(gate: PeerGate) -> None:
    last = report(sequence=100, sent_at=NOW - 10)
    gate.admit(last, NOW - 10)
    bye = report(sequence=101, goodbye=True)
    assert gate.admit(bye, NOW) == Admitted(bye)
    assert gate.admit(bye, NOW + 1) == Refused(PeerReject.REPLAYED, "peer")


def test_a_replayed_goodbye_is_refused(gate: PeerGate) -> None:
    gate.admit(report(sequence=100), NOW)
    old_bye = report(sequence=90, goodbye=True)
    assert gate.admit(old_bye, NOW) == Refused(PeerReject.REPLAYED, "peer")


def test_forget_right_after_goodbye_keeps_replay_protection(gate: PeerGate) -> None:
    last = report(sequence=100, sent_at=NOW - 10)
    gate.admit(last, NOW - 10)
    gate.admit(report(sequence=101, goodbye=True), NOW)
    gate.forget("peer")
    # Replaying the report from before the goodbye must not bring the peer back.
    assert gate.admit(last, NOW + 1) == Refused(PeerReject.REPLAYED, "peer")
    assert gate.tracked == 1


def test_forget_releases_a_floor_past_the_horizon(gate: PeerGate) -> None:
    gate.admit(report("gone", sequence=100, sent_at=NOW), NOW)
    later = NOW + 2 * INTERVAL + 1
    # Time moves on (a refused report carries the clock) but no pruning has happened yet.
    assert gate.admit(report("x", sent_at=NOW - 5 * INTERVAL), later) == \
        Refused(PeerReject.TOO_OLD, "x")
    assert gate.tracked == 1
    gate.forget("gone")
    assert gate.tracked == 0
    back = report("gone", sequence=5, sent_at=later)  # e.g. restarted with a clock set back
    assert gate.admit(back, later) == Admitted(back)


def test_floors_are_pruned_so_memory_stays_bounded(gate: PeerGate) -> None:
    for step in range(50):
        now = NOW + step * INTERVAL
        for index in range(10):
            gate.admit(report(f"p{step}-{index}", sequence=1, sent_at=now), now)
    # Only senders heard within about two intervals (plus one pruning period) remain.
    assert gate.tracked <= 10 * 4
    assert gate.tracked >= 10


# --- construction and initial sequence ----------------------------------------------------------


@pytest.mark.parametrize(("participant", "interval"), [
    ("", 60.0), ("me", 0.0), ("me", -1.0), ("me", float("inf")), ("me", float("nan"))])
def test_gate_rejects_bad_arguments(participant: str, interval: float) -> None:
    with pytest.raises(ValueError):
        PeerGate(participant, interval)


def test_initial_sequence_refuses_bad_times() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            initial_sequence(bad)


@given(start=st.floats(0, 4e9), interval=st.floats(0.002, 3600), sent=st.integers(0, 100_000),
       pause=st.floats(0.002, 3600))
def test_a_restart_starts_above_every_sequence_used_before(start: float, interval: float,
                                                          sent: int, pause: float) -> None:
    # A sender publishing once per `interval` for `sent` reports, then restarting after
    # `pause`, starts above its last sequence: peers admit it without remembering it.
    last_used = initial_sequence(start) + sent
    restart = start + sent * interval + pause
    assert initial_sequence(restart) > last_used


@given(st.lists(st.tuples(st.integers(0, 30), st.floats(0, 400)), max_size=40))
def test_admitted_sequences_strictly_increase(arrivals: list[tuple[int, float]]) -> None:
    # An honest sender published report i at NOW + i·INTERVAL/2 with sequence 1000 + i;
    # the reader gets them late, out of order and duplicated. Whatever is admitted moves
    # forward only, and is never more than two intervals old — pruning included.
    gate = PeerGate("me", INTERVAL)
    now = NOW
    admitted: list[int] = []
    for index, delay in arrivals:
        sent_at = NOW + index * INTERVAL / 2
        now = max(now, sent_at + delay)
        outcome = gate.admit(report(sequence=1000 + index, sent_at=sent_at), now)
        if isinstance(outcome, Admitted):
            admitted.append(1000 + index)
            assert sent_at >= now - 2 * INTERVAL
        else:
            assert isinstance(outcome, Refused) and outcome.participant == "peer"
    assert admitted == sorted(set(admitted))
