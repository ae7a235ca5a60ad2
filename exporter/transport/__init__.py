"""Usage reports between exporter instances over a non-persistent Pulsar topic (PIP-82).

- `codec`: the versioned compact wire report and its encoder, `decoder` its strict
  decoder (pure);
- `gate`: per-peer admission — own echo, spoofed, too old, replayed (pure, time passed in);
- `channel`: the producer and reader on the topic, reconnecting with back-off (I/O).

Transport never imports the engine, so each can change alone: the cycle converts between
`WireReport` entries and the engine's `UsageReport`s. `channel` is not imported here so that
the pure parts load without pulsar-client; import `exporter.transport.channel` where it is
needed.
"""

from exporter.transport.codec import (
    MAX_REPORT_BYTES,
    Entry,
    Rates,
    Undecodable,
    WireReject,
    WireReport,
    canonical,
    encode,
)
from exporter.transport.decoder import decode
from exporter.transport.gate import (
    Admitted,
    GateOutcome,
    Own,
    PeerGate,
    PeerReject,
    Refused,
    initial_sequence,
)

__all__ = [
    "MAX_REPORT_BYTES",
    "Admitted",
    "Entry",
    "GateOutcome",
    "Own",
    "PeerGate",
    "PeerReject",
    "Rates",
    "Refused",
    "Undecodable",
    "WireReject",
    "WireReport",
    "canonical",
    "decode",
    "encode",
    "initial_sequence",
]
