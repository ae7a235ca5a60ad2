"""One enforcer at a time: a lease held as Pulsar's exclusive producer on a lock topic.

A broker admits one `Exclusive` producer per topic (PIP-68, `AbstractTopic.addProducer`):
a second is refused at once (`ProducerFenced`). The holder keeps it until its connection
goes: at once when its process dies, after two keep-alive intervals when it hangs
(`keepAliveIntervalSeconds`, 30 s by default; docs/design.md, "One enforcer at a time", has
the times measured on 4.0.8). Every new exclusive producer bumps the topic's epoch,
so a holder that lost the topic cannot come back: its sends fail with `ProducerFenced`.

That makes the fence: before each eviction the holder sends a claim on the lock topic, and
only a producer the broker still admits can. A holder paused past its lease (GC, SIGSTOP, a
frozen node) learns that it lost it from its next send, before evicting, not after.
What no lock closes is a pause between a confirmed claim and the one eviction that follows.

pulsar-lite admits any number of exclusive producers (measured, 0.2). The lease probes the
broker when it acquires (a second exclusive producer of our own must be refused) and, on a
broker that does not refuse it, reports `unfenced` and enforces: run one enforcing
instance there.

The usage exchange elects the one replica that reports a participant's usage with the same
lease on a lock topic of its own (runtime/exchange.py).
"""

from __future__ import annotations

import json
import logging
import math
import socket
from typing import Any

import pulsar

from exporter.actions.orders import LeaseState, LeaseView

log = logging.getLogger(__name__)
_CLIENT_LOG = logging.getLogger(__name__ + ".client")  # the C++ client's own chatter
_CLIENT_LOG.setLevel(logging.CRITICAL)  # we say what a refusal means ourselves


class EnforcerLease:
    """The lease on `topic` for this instance (`holder` names it in the claims it sends)."""

    def __init__(self, service_url: str, topic: str, holder: str, *, timeout: float = 5.0,
                 client_options: dict[str, Any] | None = None,
                 what: str = "the enforcer lease", does: str = "evicts"):
        self.topic, self.holder = topic, holder
        self._what, self._does = what, does  # for the log: the usage reporter's lease too
        self._url, self._timeout = service_url, timeout
        self._options = dict(client_options or {})
        self._client: pulsar.Client | None = None
        self._producer: pulsar.Producer | None = None
        self.state = LeaseState.STANDING_BY
        self.acquired = 0  # times this instance took the lease
        self.lost = 0  # times it found it gone (fenced, or the broker out of reach)
        self._said: str | None = None  # why we stand by, as last logged: said once
        self._claim = json.dumps({"holder": holder, "host": socket.gethostname()}).encode()

    def _say(self, level: int, message: str, *args: object) -> None:
        if self._said != message:
            log.log(level, message, *args)
        self._said = message

    @property
    def evicts(self) -> bool:
        return self.state is not LeaseState.STANDING_BY

    def view(self) -> LeaseView:
        return LeaseView(self.state, self.acquired, self.lost)

    def refresh(self) -> bool:
        """Each cycle: take the lease if free, or confirm it is still ours. True: evict."""
        if self._producer is None:
            self._acquire()
        else:
            self.confirm()
        return self.evicts

    def confirm(self) -> bool:
        """Send a claim; only a producer the broker still admits can. The fence, called
        before each eviction."""
        if self._producer is None:
            return False
        try:
            self._producer.send(self._claim)
            return True
        except pulsar.PulsarException as exc:
            log.warning("lost %s on %s: %s: %s", self._what, self.topic,
                        type(exc).__name__, exc)
            self.lost += 1
            self._drop_producer()
            self.state = LeaseState.STANDING_BY
            return False

    def close(self) -> None:
        """Let go at once (a standby takes it at its next cycle), then the client."""
        self._drop_producer()
        if self._client is not None:
            try:
                self._client.close()
            except pulsar.PulsarException as exc:
                log.debug("closing the lease's client: %s", exc)
            self._client = None

    # --- internals ----------------------------------------------------------------------
    def _exclusive(self) -> pulsar.Producer:
        if self._client is None:
            self._client = pulsar.Client(
                self._url, operation_timeout_seconds=max(1, math.ceil(self._timeout)),
                connection_timeout_ms=int(self._timeout * 1000), logger=_CLIENT_LOG,
                **self._options)
        return self._client.create_producer(
            self.topic, access_mode=pulsar.ProducerAccessMode.Exclusive,
            send_timeout_millis=int(self._timeout * 1000), batching_enabled=False,
            block_if_queue_full=False)

    def _acquire(self) -> None:
        try:
            self._producer = self._exclusive()
        except (pulsar.ProducerFenced, pulsar.ProducerBusy):
            self._say(logging.INFO, "standing by: another instance holds %s on %s",
                      self._what, self.topic)
            return
        except pulsar.AuthorizationError:
            self._say(logging.WARNING, "standing by: this role may not hold %s on %s (it "
                      "needs produce on that namespace)", self._what, self.topic)
            return
        except (ValueError, pulsar.PulsarException) as exc:
            log.warning("cannot reach %s on %s: %s: %s", self._what, self.topic,
                        type(exc).__name__, exc)
            self._said = None
            return
        self._said = None
        fenced = self._probe()
        if not self.confirm():
            return
        self.acquired += 1
        self.state = LeaseState.HOLDING if fenced else LeaseState.UNFENCED
        if fenced:
            log.info("holding %s on %s: this instance %s", self._what, self.topic, self._does)
        else:
            log.info("the broker admits several exclusive producers on %s (pulsar-lite): "
                     "the lease cannot exclude other instances, this one %s; run one such "
                     "instance against such a broker", self.topic, self._does)

    def _probe(self) -> bool:
        """Whether the broker refuses a second exclusive producer, as Apache Pulsar does."""
        try:
            second = self._exclusive()
        except (pulsar.ProducerFenced, pulsar.ProducerBusy):
            return True
        except pulsar.PulsarException as exc:
            log.debug("probing the lease's exclusivity: %s", exc)
            return True  # refused for another reason: not admitted, so exclusive
        second.close()
        return False

    def _drop_producer(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close()
            except pulsar.PulsarException as exc:
                log.debug("closing the lease's producer: %s", exc)
            self._producer = None
