"""The exporter's side of the usage exchange: wire reports in and out, and the translation
between the transport's types and the engine's.

Inbound, per report round: drain the channel, check the signature (when
`report_signing` is on: transport/signing.py), decode, pass the gate (replays, spoofs,
reports older than two intervals), then hand each entry to the engine; every rejection is
counted by reason and logged once per round. Outbound: the round's report, if it has
entries, goes out as one message (signed with the first secret); on a clean stop a
goodbye does.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporter.config.model import Config
from exporter.engine.usage import Usage, UsageReport
from exporter.transport.codec import MAX_SEQUENCE, Entry, Rates, Undecodable, WireReport, encode
from exporter.transport.decoder import decode
from exporter.transport.gate import (
    Admitted,
    Own,
    PeerGate,
    PeerReject,
    Refused,
    initial_sequence,
)
from exporter.transport.signing import Keyring, Unsigned, unwrap

if TYPE_CHECKING:  # pulsar-client: loaded by whoever opened the channel
    from exporter.transport.channel import UsageChannel

log = logging.getLogger(__name__)


def _limit_to_wire(limit: Usage | None) -> Rates | None:
    if limit is None:
        return None

    def one(v: float) -> float:
        return math.inf if v < 0 else v

    return Rates(messages=one(limit.messages), bytes=one(limit.bytes))


def _limit_from_wire(limit: Rates | None) -> Usage | None:
    if limit is None:
        return None

    def one(v: float) -> float:
        return -1.0 if v == math.inf else v

    return Usage(bytes=one(limit.bytes), messages=one(limit.messages))


def to_wire(participant: str, sequence: int, now: float,
            reports: Iterable[UsageReport]) -> WireReport:
    entries = tuple(
        Entry(r.resource_group, r.monitoring_class,
              Rates(messages=r.usage.messages, bytes=r.usage.bytes), _limit_to_wire(r.limit))
        for r in reports)
    return WireReport(participant, sequence, now, entries)


def from_wire(report: WireReport) -> list[UsageReport]:
    return [UsageReport(e.resource_group, e.monitoring_class, report.participant,
                        Usage(bytes=e.usage.bytes, messages=e.usage.messages),
                        _limit_from_wire(e.limit))
            for e in report.entries]


@dataclass
class Inbound:
    """What one drain brought: admitted reports (goodbyes included) and rejections."""

    admitted: list[WireReport] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)  # reason → count
    spoofed: bool = False  # someone spoke for us: peers may hold its numbers as ours


class UsageExchange:
    def __init__(self, config: Config, channel: UsageChannel,
                 clock: Callable[[], float]) -> None:
        engine = config.resource_group_engine
        self.participant = engine.participant
        self.channel = channel
        self.gate = PeerGate(engine.participant, engine.report_interval)
        self._sequence = initial_sequence(clock())
        self._last_drain: float | None = None
        signing = engine.report_signing
        self.keyring = None if signing is None else Keyring(
            signing.secret_file, engine.topic, signing.rotation_grace, clock())

    def _open(self, payload: bytes) -> bytes | Unsigned:
        return unwrap(payload) if self.keyring is None else self.keyring.open(payload)

    def receive(self, now: float) -> Inbound:
        """Everything received since the last call. The age rule is applied as of the
        previous drain, the earliest a waiting report can have arrived: a report that was
        fresh on arrival is not refused for the time it waited for this round."""
        inbound, detail = Inbound(), ""
        arrived, self._last_drain = self._last_drain or now, now
        if self.keyring is not None:
            self.keyring.refresh(now)
        for payload in self.channel.drain():
            report = self._open(payload)
            if isinstance(report, Unsigned):
                inbound.rejected[report.reason.value] += 1
                detail = report.detail
                continue
            decoded = decode(report)
            if isinstance(decoded, Undecodable):
                inbound.rejected[decoded.reason.value] += 1
                detail = decoded.detail
                continue
            outcome = self.gate.admit(decoded, arrived)
            if isinstance(outcome, Admitted):
                inbound.admitted.append(decoded)
            elif isinstance(outcome, Refused):
                inbound.rejected[outcome.reason.value] += 1
                detail = f"{outcome.reason.value} report claiming to be {outcome.participant!r}"
                if outcome.reason is PeerReject.SPOOFED:
                    # Peers cannot tell the spoof from us and now refuse our lower sequence
                    # as a replay: continue above it (and the caller re-sends everything).
                    inbound.spoofed = True
                    self._sequence = max(self._sequence, min(decoded.sequence, MAX_SEQUENCE - 1))
            else:
                assert isinstance(outcome, Own)
        if inbound.rejected:
            log.warning("usage reports rejected this round: %s (last: %s)",
                        dict(inbound.rejected), detail)
        return inbound

    def _send(self, report: WireReport) -> bool:
        try:
            payload = encode(report)
            if self.keyring is not None:
                payload = self.keyring.seal(payload)
        except ValueError as e:  # too large for the wire, or no secret: skip this round
            log.error("usage report %d not encodable: %s", report.sequence, e)
            return False
        self.gate.sent(report)
        from exporter.transport.channel import NotSent  # loaded with the channel

        outcome = self.channel.send(payload)
        if isinstance(outcome, NotSent):
            log.warning("usage report %d not sent: %s", report.sequence, outcome)
            return False
        return True

    def publish(self, reports: Iterable[UsageReport], now: float) -> bool:
        """Send this round's entries as one message; whether it went out."""
        self._sequence += 1
        return self._send(to_wire(self.participant, self._sequence, now, reports))

    def goodbye(self, now: float) -> bool:
        self._sequence += 1
        return self._send(WireReport(self.participant, self._sequence, now, (), goodbye=True))

    def close(self) -> None:
        self.channel.close()
