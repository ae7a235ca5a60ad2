"""Per-peer admission of decoded usage reports: our own echo, spoofs, stale and replayed reports.

Pure: the caller passes `now` (wall-clock unix seconds, the clock `sent_at` is stamped
with). The rules, in the order they are applied:

1. A report carrying our own participant id is either one we published (the reader sees
   our own producer's messages: `Own`, to be ignored silently) or someone speaking for
   us (`SPOOFED`). A spoof must never be taken as a peer: it would double-count our usage
   and shrink our share. "One we published" means same sequence and same canonical
   bytes, so a forged report that reuses one of our sequence numbers is still caught.
2. `TOO_OLD`: sent more than two report intervals ago (issue 5). Such a report no longer
   describes the sender's usage: a newer one was due, and acting on it would move a
   quota on a stale picture (a reader catching up, a report stuck in a queue).
   Checked before the replay rule so that the verdict on an old report does not depend
   on whether its sender's sequence floor has been pruned yet. This rule needs clocks
   synchronised to well within two intervals (NTP); a sender whose clock lags by more
   is refused as TOO_OLD on every report, which the counters make visible.
3. `REPLAYED`: sequence not above the last one admitted from that participant. A
   duplicate or re-published old report must not overwrite newer usage, nor undo a
   goodbye (the goodbye is admitted like any report and raises the floor too).

The gate protects against duplicates, stale reports and confused peers; against a writer
on the topic who does not hold the fleet's secret, signing does (signing.py, before the
gate), and Pulsar's authorisation can restrict who may produce on the topic at all.

Memory is bounded: the last `remember_sent` sequences we published (as 16-byte digests),
and one sequence floor per participant heard from within the last two intervals. A floor
older than that protects nothing — any report it would refuse, a sender with monotonic
sequence and clock stamped earlier still, so rule 2 refuses it — and is pruned.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum

from exporter.transport.codec import WireReport, encode


class PeerReject(StrEnum):
    REPLAYED = "replayed"
    SPOOFED = "spoofed"
    TOO_OLD = "too_old"


@dataclass(frozen=True)
class Admitted:
    report: WireReport


@dataclass(frozen=True)
class Own:
    """Our own publication, echoed back by the reader: ignore silently."""

    report: WireReport


@dataclass(frozen=True)
class Refused:
    reason: PeerReject
    participant: str


GateOutcome = Admitted | Own | Refused


def initial_sequence(now: float) -> int:
    """The first sequence number of a sender starting at `now` (unix seconds): the time in
    milliseconds. Each report adds 1, so a sender that publishes less than once per
    millisecond never catches up with the clock, and after a restart it starts above
    every sequence it used before — peers keep admitting it without remembering it.
    (A wall clock stepped back across a restart breaks this; peers then refuse the new
    sequence as REPLAYED until the old floor ages out, two intervals later.)"""
    if not (math.isfinite(now) and now >= 0):
        raise ValueError(f"now must be finite and ≥ 0, got {now!r}")
    return int(now * 1000)


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()


@dataclass(frozen=True)
class _Floor:
    sequence: int
    sent_at: float


class PeerGate:
    """Admission for one participant's reader; see the module docstring for the rules."""

    def __init__(self, participant: str, interval: float, *, remember_sent: int = 64):
        if not participant:
            raise ValueError("participant must not be empty")
        if not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"interval must be finite and > 0, got {interval!r}")
        if remember_sent < 1:
            raise ValueError(f"remember_sent must be ≥ 1, got {remember_sent}")
        self.participant = participant
        self.interval = interval
        self.max_age = 2 * interval
        self._remember_sent = remember_sent
        self._sent: OrderedDict[int, bytes] = OrderedDict()
        self._floors: dict[str, _Floor] = {}
        self._latest_now = -math.inf
        self._pruned_at = -math.inf

    @property
    def tracked(self) -> int:
        """Participants whose sequence floor is held (bounded by recent senders)."""
        return len(self._floors)

    def sent(self, report: WireReport) -> None:
        """Remember a report we are publishing, so its echo is `Own`. Call it before
        sending; only the last `remember_sent` are kept. Raises ValueError for a report
        that is not ours or cannot be encoded (it could not be sent either)."""
        if report.participant != self.participant:
            raise ValueError(f"not our report: {report.participant!r} ≠ {self.participant!r}")
        self._sent[report.sequence] = _digest(encode(report))
        self._sent.move_to_end(report.sequence)
        while len(self._sent) > self._remember_sent:
            self._sent.popitem(last=False)

    def admit(self, report: WireReport, now: float) -> GateOutcome:
        """Apply the rules in order; on `Admitted` the participant's floor moves up."""
        self._latest_now = max(self._latest_now, now)
        participant = report.participant
        if participant == self.participant:
            known = self._sent.get(report.sequence)
            try:
                if known is not None and known == _digest(encode(report)):
                    return Own(report)
            except ValueError:  # not encodable, so not one we published
                pass
            return Refused(PeerReject.SPOOFED, participant)
        if report.sent_at < now - self.max_age:
            return Refused(PeerReject.TOO_OLD, participant)
        self._prune(now)
        floor = self._floors.get(participant)
        if floor is not None and report.sequence <= floor.sequence:
            return Refused(PeerReject.REPLAYED, participant)
        sent_at = report.sent_at if floor is None else max(floor.sent_at, report.sent_at)
        self._floors[participant] = _Floor(report.sequence, sent_at)
        return Admitted(report)

    def forget(self, participant: str) -> None:
        """The participant left (goodbye or stale drop): release its floor once it can no
        longer refuse anything rule 2 would not. Right after a goodbye the floor is kept —
        dropping it would let a replay of the reports just before the goodbye bring the
        participant back — and goes at a later prune, two intervals on."""
        floor = self._floors.get(participant)
        if floor is not None and self._expired(floor, self._latest_now):
            del self._floors[participant]

    def _expired(self, floor: _Floor, now: float) -> bool:
        return floor.sent_at < now - self.max_age

    def _prune(self, now: float) -> None:
        """Drop floors past the horizon, at most once per interval (amortised O(1))."""
        if now - self._pruned_at < self.interval:
            return
        self._pruned_at = now
        for participant in [p for p, f in self._floors.items() if self._expired(f, now)]:
            del self._floors[participant]
