"""The exporter's side of the usage exchange: wire reports in and out, and the translation
between the transport's types and the engine's.

Inbound, per report round: drain the channel, check the signature (when
`report_signing` is on: transport/signing.py), decode, pass the gate (replays, spoofs,
reports older than two intervals), then hand each entry to the engine; every rejection is
counted by reason and logged once per round. Outbound: the round's report, if it has
entries, goes out as one message (signed with the first secret); on a clean stop a
goodbye does.

Replicas of one deployment (several instances configured with one `participant`, e.g. a
Deployment with `replicas: 2`) scrape the same brokers: were each to report, peers would
hold one usage under its name from whichever spoke last, and each replica would refuse the
other's as a spoof. So one reports, the holder of the reporter lease for that name (an
exclusive producer, as the enforcer's: actions/lease.py). The others stand by: they send
nothing, not even a goodbye, and take the reporter's reports under their name as their own
entry (engine/groups/participant.py), so every replica publishes the shares the reporter does. When
the reporter goes, its lease ends with its connection and a replica takes it at its next
round, continuing above every sequence number the reporter used (peers' gates would refuse
lower ones as replays).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporter.actions.orders import LeaseState, LeaseView
from exporter.config.settings import Config
from exporter.engine.groups.usage import Usage, UsageReport
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
    from exporter.actions.lease import EnforcerLease
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


def reporter_topic(config: Config) -> str:
    """The lock topic of the reporter lease for our participant name: beside the usage
    topic (the same namespace, so the same produce permission), one per name. A name with
    characters a topic's local name should not carry is spelled safely, a digest of it
    appended so that two such names never share a lock."""
    engine = config.resource_group_engine
    name = engine.participant
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if safe != name:
        safe += "-" + hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return f"{engine.topic}-reporter-{safe}"


def reporter_lease_for(config: Config) -> EnforcerLease | None:
    """The reporter lease (through `sources.service_url`, which the exchange needs too)."""
    if config.sources.service_url is None:
        return None
    from exporter.actions.lease import EnforcerLease
    from exporter.transport.client import client_options

    return EnforcerLease(config.sources.service_url, reporter_topic(config),
                         config.resource_group_engine.participant,
                         client_options=client_options(config.sources),
                         what="the usage-reporter lease", does="reports usage")


def with_exchange(status: Callable[[], dict], exchange: UsageExchange | None,
                  ) -> Callable[[], dict]:
    """The status view with who this instance speaks for in the exchange and whether it
    reports (its reporter lease's state now: `holding` reports, `standing_by` does not)."""
    if exchange is None:
        return status
    said = {"participant": exchange.participant,
            "reporter_lease": exchange.reporter_state().value}
    return lambda: {**status(), "usage_exchange": said}


@dataclass
class Inbound:
    """What one drain brought: admitted reports (goodbyes included) and rejections."""

    admitted: list[WireReport] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)  # reason → count
    spoofed: bool = False  # someone spoke for us: peers may hold its numbers as ours


class UsageExchange:
    def __init__(self, config: Config, channel: UsageChannel,
                 clock: Callable[[], float], lease: EnforcerLease | None = None) -> None:
        """`lease`: the reporter lease (`reporter_lease_for`); None, this instance alone
        speaks for its name and always reports."""
        engine = config.resource_group_engine
        self.participant = engine.participant
        self.channel = channel
        self.gate = PeerGate(engine.participant, engine.report_interval)
        self._sequence = initial_sequence(clock())
        self._last_drain: float | None = None
        self.lease = lease
        self._replica_sequence = -1  # the reporting replica's last, as we stood by
        signing = engine.report_signing
        self.keyring = None if signing is None else Keyring(
            signing.secret_file, engine.topic, signing.rotation_grace, clock())

    @property
    def reporting(self) -> bool:
        """Whether our reports go out: no lease, or we hold it (or the broker cannot
        exclude, pulsar-lite: `unfenced`)."""
        return self.lease is None or self.lease.evicts

    def reporter_state(self) -> LeaseState:
        return LeaseState.HOLDING if self.lease is None else self.lease.state

    def reporter_view(self) -> LeaseView | None:
        """The reporter lease for pulsar_quota_exporter_usage_reporter; None without one."""
        return None if self.lease is None else self.lease.view()

    def elect(self, now: float) -> bool:
        """Each round, before publishing: take the reporter lease if free, or confirm it
        (the fence: a reporter that lost it learns so before it sends). Whether we report.
        Just taken: our sequence continues above the previous reporter's (its last seen
        here, and the clock's milliseconds, `initial_sequence`)."""
        if self.lease is None:
            return True
        was = self.lease.evicts
        if self.lease.refresh() and not was:
            self._sequence = max(self._sequence, self._replica_sequence,
                                 initial_sequence(now))
        return self.lease.evicts

    def _replica(self, report: WireReport, arrived: float) -> PeerReject | None:
        """A report under our name while we stand by: the reporting replica's. The gate's
        rules 2 and 3 for it (too old, replayed); None: admitted."""
        if report.sent_at < arrived - self.gate.max_age:
            return PeerReject.TOO_OLD
        if report.sequence <= self._replica_sequence:
            return PeerReject.REPLAYED
        self._replica_sequence = report.sequence
        return None

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
            if (isinstance(outcome, Refused) and outcome.reason is PeerReject.SPOOFED
                    and not self.reporting):
                reject = self._replica(decoded, arrived)
                if reject is None:
                    inbound.admitted.append(decoded)
                else:
                    inbound.rejected[reject.value] += 1
                    detail = f"{reject.value} report of the reporting replica"
                continue
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
        """Peers drop our name's usage at once; only the reporter says it (a standby's
        would drop the usage the reporter goes on reporting)."""
        if not self.reporting:
            return False
        self._sequence += 1
        return self._send(WireReport(self.participant, self._sequence, now, (), goodbye=True))

    def close(self) -> None:
        """After the goodbye: a replica taking the lease at once could otherwise report
        before our goodbye reaches peers, which would then drop its report."""
        if self.lease is not None:
            self.lease.close()
        self.channel.close()
