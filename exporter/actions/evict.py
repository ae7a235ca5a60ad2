"""Evictions: move a subscription's cursor past messages the backlog quota does not allow.

Two ways to the cluster, chosen by `evictor_for(config)`:

- Admin REST (Apache Pulsar): `GET …/stats?getEarliestTimeInBacklog=true` to see the
  subscription, then `POST …/subscription/{sub}/resetcursor/{ms}` or `…/skip/{n}`.
- Binary protocol (pulsar-client; works on pulsar-lite, which has no admin API): attach to
  the subscription as a `Shared` consumer, then `seek(publish_time_ms)` for a cut-off, or
  receive and individually acknowledge N messages for a skip (Shared forbids cumulative acks).

Why the binary path looks before it leaps (measured on pulsar-lite 0.2):
- Subscribing creates missing topics *and* subscriptions, so a missing one cannot be detected
  by attaching, and attaching would leave a durable subscription behind that grows a backlog.
  A probe of the brokers' /metrics (`pulsar_subscription_consumers_count`) says whether it exists
  and how many consumers it has; /metrics carries no subscription type, so connected consumers
  of unknown type mean Skipped(consumer_connected).
- `seek(t)` moves the cursor backwards as readily as forwards (both Pulsar and pulsar-lite), so
  we first read the oldest unacknowledged message and seek only when it is older than the cut.
- pulsar-lite refuses a seek to a time after its newest message by dropping the connection, and
  the client then reports success; so we read the head again and, if it is still older than
  the cut, acknowledge the remaining old messages one by one (bounded by `budget`).
- A seek that ends in `ResultDisconnected` is "done, verify at the next refresh" (UNCONFIRMED).
Pulsar's seek by time keeps a message published exactly at the cut (it resets to the entry after
the newest one with `publishTime < t`, PersistentMessageFinder), which is our contract too.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any, Protocol
from urllib.parse import quote

import pulsar

from exporter.catalogue import QUOTA_TYPES
from exporter.config import AdminSource, BrokerSource, Config
from exporter.sources.brokers import classify, stream
from exporter.sources.model import ScrapeError
from exporter.transport.client import client_options

log = logging.getLogger(__name__)
_CLIENT_LOG = logging.getLogger(__name__ + ".client")  # the C++ client's own chatter
_CLIENT_LOG.setLevel(logging.WARNING)
SUBSCRIBER_NAME = "pulsar-quota-exporter-evictor"
_JAVA_INT_MAX = 2**31 - 1  # Pulsar's skip/{numMessages} is a Java int


class EvictionFailure(StrEnum):
    """Why an eviction was not performed; values are `catalogue.EVICTION_FAILURE_REASONS`."""

    NO_SERVICE_URL = "no_service_url"
    CONSUMER_CONNECTED = "consumer_connected"
    NOT_FOUND = "not_found"
    TIMEOUT = "timeout"
    BROKER_ERROR = "broker_error"
    OTHER = "other"


class EvictionMethod(StrEnum):
    SEEK = "seek"  # binary protocol, consumer.seek(publish_time_ms)
    ACKNOWLEDGE = "acknowledge"  # binary protocol, receive + individual acks
    ADMIN_RESET_CURSOR = "admin_reset_cursor"
    ADMIN_SKIP = "admin_skip"


class Completion(StrEnum):
    CONFIRMED = "confirmed"
    UNCONFIRMED = "unconfirmed"  # the broker dropped the connection after the request
    PARTIAL = "partial"  # the time budget ran out before all messages were acknowledged


@dataclass(frozen=True)
class EvictionOrder:
    """One subscription to cut: EITHER everything published before `before_publish_time`
    (epoch seconds) OR its `messages` oldest messages. `quota_type` is the label to count under."""

    topic: str  # persistent://tenant/ns/name
    subscription: str
    quota_type: str  # "time" | "size"
    before_publish_time: float | None = None
    messages: int | None = None

    def __post_init__(self) -> None:
        parts = self.topic.removeprefix("persistent://").split("/", 2)
        if not self.topic.startswith("persistent://") or len(parts) != 3 or not all(parts):
            raise ValueError(f"not a persistent topic's full name: {self.topic!r}")
        if not self.subscription:
            raise ValueError("empty subscription name")
        if self.quota_type not in QUOTA_TYPES:
            raise ValueError(f"quota_type must be one of {QUOTA_TYPES}: {self.quota_type!r}")
        if (self.before_publish_time is None) == (self.messages is None):
            raise ValueError("give exactly one of before_publish_time and messages")
        if self.messages is not None and (
            isinstance(self.messages, bool) or not isinstance(self.messages, int)
            or self.messages < 1
        ):
            raise ValueError(f"messages must be a positive integer: {self.messages!r}")
        if self.before_publish_time is not None and not (
            math.isfinite(self.before_publish_time) and self.before_publish_time > 0
        ):
            raise ValueError(f"before_publish_time must be positive: {self.before_publish_time!r}")

    @property
    def cutoff_ms(self) -> int | None:
        """Smallest integer ms not before the cut: `pt < cutoff_ms` ⇔ `pt < before × 1000`
        for integer publish times, computed exactly (no float rounding)."""
        if self.before_publish_time is None:
            return None
        return math.ceil(Fraction(self.before_publish_time) * 1000)

    @property
    def path(self) -> tuple[str, str, str]:
        """(tenant, namespace, local name) as in the admin REST paths."""
        tenant, ns, local = self.topic.removeprefix("persistent://").split("/", 2)
        return tenant, ns, local


@dataclass(frozen=True)
class Performed:
    order: EvictionOrder
    method: EvictionMethod
    messages: int | None  # acknowledged/skipped; None when the broker does not say (seek, reset)
    completion: Completion


@dataclass(frozen=True)
class NothingToEvict:
    """The subscription holds nothing the order would remove (no backlog, or none before the
    cut); not counted as an eviction (the broker counts these, we do not)."""

    order: EvictionOrder
    detail: str


@dataclass(frozen=True)
class Skipped:
    """Deliberately not attempted: nothing to reach it with, or not safe now."""

    order: EvictionOrder
    reason: EvictionFailure  # NO_SERVICE_URL | CONSUMER_CONNECTED
    detail: str


@dataclass(frozen=True)
class EvictionFailed:
    order: EvictionOrder
    reason: EvictionFailure  # NOT_FOUND | TIMEOUT | BROKER_ERROR | OTHER
    detail: str


EvictionResult = Performed | NothingToEvict | Skipped | EvictionFailed


class Evictor(Protocol):
    def perform(self, orders: Sequence[EvictionOrder]) -> tuple[EvictionResult, ...]: ...


# --- subscription probe (binary path) ----------------------------------------------------------


@dataclass(frozen=True)
class Present:
    consumers: int
    type: str | None = None  # Pulsar's names (Shared, Exclusive, …); None when not reported


@dataclass(frozen=True)
class Absent:
    pass


@dataclass(frozen=True)
class Unreachable:
    reason: EvictionFailure
    detail: str


SubscriptionState = Present | Absent | Unreachable


class SubscriptionProbe(Protocol):
    def states(self) -> Callable[[str, str], SubscriptionState]: ...


_CONSUMERS_LINE = b"pulsar_subscription_consumers_count{"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def topic_key(labels: Mapping[str, str]) -> str:
    """Full topic name from either label form: Apache Pulsar's `persistent://t/ns/x` or
    pulsar-lite's short `x` with `namespace` (and `partition` when it is not -1)."""
    topic = labels.get("topic", "")
    if "://" in topic:
        return topic
    partition = labels.get("partition", "-1")
    if partition not in ("", "-1") and not topic.endswith(f"-partition-{partition}"):
        topic = f"{topic}-partition-{partition}"
    return f"persistent://{labels.get('namespace', '')}/{topic}"


def parse_consumer_counts(lines: Iterator[bytes]) -> dict[tuple[str, str], int]:
    """(topic, subscription) → connected consumers, from a /metrics body's lines."""
    counts: dict[tuple[str, str], int] = {}
    for raw in lines:
        if not raw.startswith(_CONSUMERS_LINE):
            continue
        line = raw.decode("utf-8", "replace").rstrip()
        head, _, value = line.rpartition("} ")
        labels = dict(_LABEL.findall(head))
        try:
            count = int(float(value.split()[0]))
        except (ValueError, IndexError):
            continue
        counts[(topic_key(labels), labels.get("subscription", ""))] = count
    return counts


_PROBE_REASONS = {ScrapeError.TIMEOUT: EvictionFailure.TIMEOUT,
                  ScrapeError.REFUSED: EvictionFailure.BROKER_ERROR,
                  ScrapeError.HTTP_ERROR: EvictionFailure.BROKER_ERROR}


class MetricsProbe:
    """Reads the brokers' /metrics once per batch, through the same fetch as the cycle's
    (sources/brokers.py: its deadline, authorization and TLS). Gauges there lag by up to a
    refresh interval (about 5 s on pulsar-lite), so a brand-new consumer may not be seen
    yet; Apache Pulsar then still refuses our Shared attach with ConsumerBusy."""

    def __init__(self, sources: Sequence[BrokerSource], timeout: float = 5.0):
        self._sources = tuple(sources)
        self._timeout = timeout

    def states(self) -> Callable[[str, str], SubscriptionState]:
        counts: dict[tuple[str, str], int] = {}
        errors: list[tuple[EvictionFailure, str]] = []
        for source in self._sources:
            deadline = time.monotonic() + min(self._timeout, source.timeout)
            try:
                body = b"".join(stream(source, deadline))
            except Exception as exc:  # classified: a probe failure is a reason, not a crash
                failed = classify(exc)
                errors.append((_PROBE_REASONS.get(failed.reason, EvictionFailure.OTHER),
                               f"{source.url}: {failed.detail}"))
                continue
            counts.update(parse_consumer_counts(iter(body.splitlines())))

        def state(topic: str, subscription: str) -> SubscriptionState:
            if (topic, subscription) in counts:
                return Present(counts[(topic, subscription)])
            if errors or not self._sources:
                reason, detail = errors[0] if errors else (
                    EvictionFailure.OTHER, "no broker /metrics source to probe")
                return Unreachable(reason, f"cannot tell whether it exists: {detail}")
            return Absent()

        return state


# --- binary protocol -------------------------------------------------------------------------


def _is_disconnect(exc: Exception) -> bool:
    return "Disconnected" in str(exc)


def _client_failure(exc: Exception) -> tuple[EvictionFailure, str]:
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, pulsar.Timeout):
        return EvictionFailure.TIMEOUT, detail
    if isinstance(exc, pulsar.ConsumerBusy):
        return EvictionFailure.CONSUMER_CONNECTED, detail
    if isinstance(exc, pulsar.TopicNotFound | pulsar.SubscriptionNotFound):
        return EvictionFailure.NOT_FOUND, detail
    if isinstance(exc, pulsar.PulsarException):
        return EvictionFailure.BROKER_ERROR, detail
    return EvictionFailure.OTHER, detail


class BinaryEvictor:
    """Evicts over the binary protocol. Safe only with no consumer connected, or a Shared
    subscription (Present.type == "Shared"); otherwise Skipped(consumer_connected)."""

    def __init__(self, service_url: str, probe: SubscriptionProbe, *, timeout: float = 5.0,
                 budget: float = 5.0, idle_wait: float = 1.0,
                 client_options: Mapping[str, Any] | None = None):
        """`client_options`: pulsar.Client's authentication and TLS (transport/client.py)."""
        self._url = service_url
        self._client_options = dict(client_options or {})
        self._probe = probe
        self._timeout = timeout  # per broker operation
        self._budget = budget  # per order, for acknowledging message by message
        self._idle_wait = idle_wait  # no message within this: the backlog is exhausted

    def perform(self, orders: Sequence[EvictionOrder]) -> tuple[EvictionResult, ...]:
        if not orders:
            return ()
        state = self._probe.states()
        try:
            client = pulsar.Client(
                self._url, operation_timeout_seconds=max(1, math.ceil(self._timeout)),
                connection_timeout_ms=int(self._timeout * 1000), logger=_CLIENT_LOG,
                **self._client_options)
        except (ValueError, pulsar.PulsarException) as exc:
            return tuple(EvictionFailed(o, EvictionFailure.OTHER, f"service_url: {exc}")
                         for o in orders)
        try:
            return tuple(self._one(client, o, state(o.topic, o.subscription)) for o in orders)
        finally:
            client.close()

    def _one(self, client: pulsar.Client, order: EvictionOrder,
             state: SubscriptionState) -> EvictionResult:
        if isinstance(state, Unreachable):
            return EvictionFailed(order, state.reason, state.detail)
        if isinstance(state, Absent):
            return EvictionFailed(order, EvictionFailure.NOT_FOUND, "no such topic or subscription")
        shared = state.type == "Shared"
        if state.consumers and not shared:
            return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                           f"{state.consumers} consumer(s), type {state.type or 'unknown'}")
        try:
            if order.messages is not None:
                return self._skip(client, order, others=state.consumers > 0)
            return self._seek(client, order, others=state.consumers > 0)
        except Exception as exc:
            reason, detail = _client_failure(exc)
            if reason is EvictionFailure.CONSUMER_CONNECTED:
                return Skipped(order, reason, detail)
            return EvictionFailed(order, reason, detail)

    @contextmanager
    def _attached(self, client: pulsar.Client, order: EvictionOrder,
                  queue: int) -> Iterator[pulsar.Consumer]:
        consumer = client.subscribe(order.topic, order.subscription,
                                    consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=queue, consumer_name=SUBSCRIBER_NAME)
        try:
            yield consumer
        finally:
            try:
                consumer.close()  # also flushes pending acknowledgements
            except pulsar.PulsarException as exc:
                log.warning("closing eviction consumer on %s: %s", order.topic, exc)

    def _receive(self, consumer: pulsar.Consumer, wait: float) -> pulsar.Message | None:
        try:
            return consumer.receive(timeout_millis=max(1, int(wait * 1000)))
        except pulsar.Timeout:
            return None

    def _drain(self, consumer: pulsar.Consumer, keep: Callable[[pulsar.Message], bool],
               limit: int | None) -> tuple[int, Completion]:
        """Acknowledge messages while `keep(message)`, at most `limit`, within the budget."""
        deadline = time.monotonic() + self._budget
        done = 0
        while limit is None or done < limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return done, Completion.PARTIAL
            message = self._receive(consumer, min(self._idle_wait, remaining))
            if message is None:
                return done, (Completion.CONFIRMED if time.monotonic() < deadline
                              else Completion.PARTIAL)
            if not keep(message):
                return done, Completion.CONFIRMED  # left unacknowledged: redelivered
            consumer.acknowledge(message)
            done += 1
        return done, Completion.CONFIRMED

    def _skip(self, client: pulsar.Client, order: EvictionOrder, others: bool) -> EvictionResult:
        assert order.messages is not None
        with self._attached(client, order, queue=min(order.messages, 1000)) as consumer:
            done, completion = self._drain(consumer, lambda _m: True, order.messages)
        if done:
            return Performed(order, EvictionMethod.ACKNOWLEDGE, done, completion)
        if others:
            return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                           "connected consumers hold the whole backlog")
        return NothingToEvict(order, "no backlog")

    def _seek(self, client: pulsar.Client, order: EvictionOrder, others: bool) -> EvictionResult:
        cut = order.cutoff_ms
        assert cut is not None
        with self._attached(client, order, queue=1) as consumer:
            head = self._receive(consumer, self._idle_wait)
            if head is None or head.publish_timestamp() >= cut:
                if others:  # their prefetched messages may be older: cannot prove forward
                    return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                                   "no message older than the cut-off reached us")
                what = "no backlog" if head is None else "oldest message is not before the cut-off"
                return NothingToEvict(order, what)
            try:
                consumer.seek(cut)
            except pulsar.PulsarException as exc:
                if not _is_disconnect(exc):
                    raise
                return Performed(order, EvictionMethod.SEEK, None, Completion.UNCONFIRMED)
        if others:
            return Performed(order, EvictionMethod.SEEK, None, Completion.CONFIRMED)
        with self._attached(client, order, queue=1) as consumer:  # verify: one message touched
            head = self._receive(consumer, self._idle_wait)
            if head is None or head.publish_timestamp() >= cut:
                return Performed(order, EvictionMethod.SEEK, None, Completion.CONFIRMED)
            consumer.acknowledge(head)
        # The seek did not take (pulsar-lite: a cut after its newest message): acknowledge.
        with self._attached(client, order, queue=100) as consumer:
            done, completion = self._drain(consumer, lambda m: m.publish_timestamp() < cut, None)
        return Performed(order, EvictionMethod.ACKNOWLEDGE, done + 1, completion)


# --- admin REST ------------------------------------------------------------------------------


class _AdminError(Exception):
    def __init__(self, reason: EvictionFailure, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _http_failure(exc: BaseException, url: str) -> tuple[EvictionFailure, str]:
    if isinstance(exc, urllib.error.HTTPError):
        detail = f"{url}: HTTP {exc.code} {exc.reason}"
        if exc.code == 404:
            return EvictionFailure.NOT_FOUND, detail
        if exc.code in (405, 409, 412) or exc.code >= 500:
            return EvictionFailure.BROKER_ERROR, detail
        return EvictionFailure.OTHER, detail  # 401/403 and the like: ours to fix
    cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    detail = f"{url}: {cause}"
    if isinstance(cause, TimeoutError):
        return EvictionFailure.TIMEOUT, detail
    if isinstance(cause, ssl.SSLError):
        return EvictionFailure.OTHER, detail
    if isinstance(cause, OSError):
        return EvictionFailure.BROKER_ERROR, detail
    return EvictionFailure.OTHER, detail


class _KeepMethodRedirect(urllib.request.HTTPRedirectHandler):
    """Pulsar answers 307 when another broker owns the topic; urllib refuses that for POST."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        if code in (307, 308):
            return urllib.request.Request(newurl, method=req.get_method(),
                                          headers=dict(req.header_items()))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class AdminEvictor:
    """Evicts through Apache Pulsar's admin REST (`/admin/v2/persistent/...`)."""

    def __init__(self, source: AdminSource):
        self._source = source
        context = None
        if source.url.startswith("https"):
            context = ssl.create_default_context(cafile=source.ca_file)
            if source.insecure_skip_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        self._opener = urllib.request.build_opener(
            _KeepMethodRedirect(), urllib.request.HTTPSHandler(context=context))

    def perform(self, orders: Sequence[EvictionOrder]) -> tuple[EvictionResult, ...]:
        return tuple(self._one(order) for order in orders)

    def _call(self, method: str, url: str) -> bytes:
        request = urllib.request.Request(url, method=method, headers={"Accept": "application/json"})
        if self._source.token_file:
            try:  # read per call: tokens rotate
                with open(self._source.token_file, encoding="utf-8") as handle:
                    request.add_header("Authorization", f"Bearer {handle.read().strip()}")
            except OSError as exc:
                raise _AdminError(EvictionFailure.OTHER, f"token file: {exc}") from exc
        try:
            with self._opener.open(request, timeout=self._source.timeout) as resp:
                return resp.read()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise _AdminError(*_http_failure(exc, url)) from exc

    def _one(self, order: EvictionOrder) -> EvictionResult:
        tenant, ns, local = order.path
        base = (f"{self._source.url.rstrip('/')}/admin/v2/persistent/"
                f"{quote(tenant, safe='')}/{quote(ns, safe='')}/{quote(local, safe='')}")
        sub_url = f"{base}/subscription/{quote(order.subscription, safe='')}"
        try:
            stats = json.loads(self._call("GET", f"{base}/stats?getEarliestTimeInBacklog=true"))
            sub = (stats.get("subscriptions") or {}).get(order.subscription)
            if not isinstance(sub, dict):
                return EvictionFailed(order, EvictionFailure.NOT_FOUND,
                                      "subscription not in topic stats")
            consumers, kind = len(sub.get("consumers") or ()), sub.get("type")
            if consumers and kind != "Shared":
                return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                               f"{consumers} consumer(s) connected, type {kind or 'unknown'}")
            backlog = int(sub.get("msgBacklog") or 0)
            if backlog <= 0:
                return NothingToEvict(order, "no backlog")
            if order.messages is not None:
                count = min(order.messages, _JAVA_INT_MAX)
                self._call("POST", f"{sub_url}/skip/{count}")
                return Performed(order, EvictionMethod.ADMIN_SKIP, min(count, backlog),
                                 Completion.CONFIRMED)
            cut = order.cutoff_ms
            earliest = sub.get("earliestMsgPublishTimeInBacklog")
            if isinstance(earliest, int) and earliest > 0:
                if earliest >= cut:
                    return NothingToEvict(order, "oldest message is not before the cut-off")
            elif consumers:  # a reset may move backwards past what they acknowledged
                return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                               "consumers connected and the oldest publish time is unknown")
            self._call("POST", f"{sub_url}/resetcursor/{cut}")
            return Performed(order, EvictionMethod.ADMIN_RESET_CURSOR, None, Completion.CONFIRMED)
        except _AdminError as exc:
            return EvictionFailed(order, exc.reason, exc.detail)
        except (ValueError, TypeError, AttributeError) as exc:
            return EvictionFailed(order, EvictionFailure.OTHER, f"unexpected stats document: {exc}")


class Unconfigured:
    """Neither an admin source nor a service URL: every order is Skipped(no_service_url)."""

    def perform(self, orders: Sequence[EvictionOrder]) -> tuple[EvictionResult, ...]:
        return tuple(Skipped(o, EvictionFailure.NO_SERVICE_URL,
                             "configure sources.service_url or sources.admin") for o in orders)


def evictor_for(config: Config, *, timeout: float = 5.0) -> Evictor:
    """Admin REST when configured (precise, Apache Pulsar), else the binary protocol."""
    sources = config.sources
    if sources.admin is not None:
        return AdminEvictor(sources.admin)
    if sources.service_url:
        probe = MetricsProbe(sources.brokers, timeout=timeout)
        return BinaryEvictor(sources.service_url, probe, timeout=timeout,
                             client_options=client_options(sources))
    return Unconfigured()
