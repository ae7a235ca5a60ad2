"""Evictions through Apache Pulsar's admin REST, as the broker's BacklogQuotaManager evicts:
`GET …/stats?getEarliestTimeInBacklog=true&subscriptionBacklogSize=true` to see the
subscription now, then for size `POST …/subscription/{sub}/skip/{n}` and for time `POST …/
subscription/{sub}/expireMessages/{seconds}`, for every subscription type, consumers
connected or not.

The cycle's figures are seconds old, and a plain-HTTP /metrics body can be spoofed: `n` is
made again from those stats (`fresh_cut`), never more than the broker's own eviction would
skip now, and an order the stats no longer bear out (within the limit, no backlog, nothing
before the cut-off) is refused as `stale_size` / `stale_time`. A time order cannot take more
than its quota allows: it expires by publish time, which no stale figure moves.

Measured on 4.0.8 and read in its sources (PersistentSubscription): `skip` moves the cursor
(`asyncSkipEntries`) without disconnecting anyone; `expireMessages` marks deleted up to the
newest message older than the seconds given, never backwards, without disconnecting anyone,
and runs on after the 204. It answers 409 when consumers are connected, the backlog is under
1,000 entries and the oldest message is younger than 1.5 × the seconds (a guard the broker's
own eviction does not meet: it calls the expiry monitor directly): Skipped(consumer_connected),
and the next cycle tries again. `resetcursor` is never used: it disconnects consumers and
may move a cursor backwards past individual acknowledgements. HTTP (token, TLS, redirects
to the owner broker, no proxies) is exporter/adminhttp.py's.
"""

from __future__ import annotations

import http.client as http_client
import json
import logging
import math
import ssl
import time
import urllib.error
from collections.abc import Callable, Sequence
from urllib.parse import quote

from exporter.actions.orders import (
    Completion,
    EvictionFailed,
    EvictionFailure,
    EvictionMethod,
    EvictionOrder,
    EvictionResult,
    Performed,
    Skipped,
    lease_lost,
    unfenced,
)
from exporter.adminhttp import AdminHttp, CaFileError, TokenFileError
from exporter.config.settings import AdminSource
from exporter.engine.backlog.check import skip_count

log = logging.getLogger(__name__)

_JAVA_INT_MAX = 2**31 - 1  # Pulsar's skip/{numMessages} is a Java int


class _AdminError(Exception):
    def __init__(self, reason: EvictionFailure, detail: str, status: int | None = None):
        super().__init__(detail)
        self.reason, self.detail, self.status = reason, detail, status


def _http_failure(exc: BaseException, url: str) -> tuple[EvictionFailure, str]:
    if isinstance(exc, urllib.error.HTTPError):
        detail = f"{url}: HTTP {exc.code} {exc.reason}"
        if exc.code == 404:
            return EvictionFailure.NOT_FOUND, detail
        if exc.code in (401, 403):  # Pulsar denies a missing permission with either
            return EvictionFailure.FORBIDDEN, detail
        if exc.code in (405, 409, 412) or exc.code >= 500:
            return EvictionFailure.BROKER_ERROR, detail
        return EvictionFailure.OTHER, detail
    cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    detail = f"{url}: {cause}"
    if isinstance(cause, TimeoutError):
        return EvictionFailure.TIMEOUT, detail
    if isinstance(cause, ssl.SSLError):
        return EvictionFailure.OTHER, detail
    if isinstance(cause, OSError):
        return EvictionFailure.BROKER_ERROR, detail
    return EvictionFailure.OTHER, detail


def _backlog_bytes(stats: dict, sub: dict) -> float | None:
    """The subscription's backlog in bytes as the broker counts it now: its own
    (`subscriptionBacklogSize=true`), else the topic's (the slowest cursor's: never less)."""
    for size in (sub.get("backlogSize"), stats.get("backlogSize")):
        if isinstance(size, int | float) and not isinstance(size, bool) and size >= 0:
            return float(size)
    return None


def fresh_cut(order: EvictionOrder, backlog: int, backlog_bytes: float | None) -> int | str:
    """How many messages a size order skips, from the broker's stats read just before: never
    more than the cycle decided, than the backlog holds, or than the broker's own eviction
    would skip now (`BacklogQuotaManager.dropBacklogForSizeLimit`: `(int)((backlogSize −
    target) / backlogSize × entriesInBacklog)`, in doubles as Java computes it); a reason
    instead when that is nothing, or when the backlog is within the limit now (the broker
    evicts only a topic over its quota)."""
    assert order.messages is not None
    if backlog <= 0:
        return "no backlog now"
    count = min(order.messages, backlog, _JAVA_INT_MAX)
    target = order.target_bytes
    if target is None or backlog_bytes is None:
        return count
    limit = order.limit_bytes
    if limit is not None and backlog_bytes <= limit:
        return (f"the backlog is {backlog_bytes:.0f} bytes now, within the limit "
                f"{limit:.0f}: the broker would not evict (the cycle ordered "
                f"{order.messages} skipped)")
    if backlog_bytes <= target:
        return (f"the backlog is {backlog_bytes:.0f} bytes now, within the target "
                f"{target:.0f} (0.9 × the limit; the cycle ordered {order.messages} skipped)")
    broker = skip_count(backlog_bytes, target, backlog)
    if broker <= 0:
        return f"the broker would skip nothing now ({backlog} messages, {backlog_bytes:.0f} B)"
    return min(count, broker)


class AdminEvictor:
    """Evicts through Apache Pulsar's admin REST (`/admin/v2/persistent/...`)."""

    def __init__(self, source: AdminSource, clock: Callable[[], float] = time.time):
        self._source = source
        self._clock = clock  # the orders' cut-offs are epoch seconds on this clock

    def perform(self, orders: Sequence[EvictionOrder],
                fence: Callable[[], bool] = unfenced) -> tuple[EvictionResult, ...]:
        if not orders:
            return ()
        try:  # built per batch: the token is read now, as it may have rotated
            http = AdminHttp(self._source)
        except (TokenFileError, CaFileError) as exc:  # ours to fix, like a 401
            return tuple(EvictionFailed(o, EvictionFailure.OTHER, str(exc)) for o in orders)
        return tuple(self._one(http, o) if fence() else lease_lost(o) for o in orders)

    def _one(self, http: AdminHttp, order: EvictionOrder) -> EvictionResult:
        tenant, ns, local = order.path
        base = ("/admin/v2/persistent/"
                f"{quote(tenant, safe='')}/{quote(ns, safe='')}/{quote(local, safe='')}")
        sub_path = f"{base}/subscription/{quote(order.subscription, safe='')}"

        def call(method: str, path: str) -> bytes:
            try:
                return http.call(method, path)
            except (OSError, ValueError, http_client.HTTPException) as exc:
                status = exc.code if isinstance(exc, urllib.error.HTTPError) else None
                raise _AdminError(*_http_failure(exc, path), status) from exc

        try:
            stats = json.loads(call("GET", f"{base}/stats?getEarliestTimeInBacklog=true"
                                    "&subscriptionBacklogSize=true"))
            sub = (stats.get("subscriptions") or {}).get(order.subscription)
            if not isinstance(sub, dict):
                return EvictionFailed(order, EvictionFailure.NOT_FOUND,
                                      "subscription not in topic stats")
            consumers = len(sub.get("consumers") or ())
            backlog = int(sub.get("msgBacklog") or 0)
            if order.messages is not None:
                count = fresh_cut(order, backlog, _backlog_bytes(stats, sub))
                if isinstance(count, str):
                    return Skipped(order, EvictionFailure.STALE_SIZE, count)
                if count < order.messages:
                    log.info("size cut of %s on %s: %d messages, not the cycle's %d (the "
                             "broker's stats now: %d in the backlog)", order.subscription,
                             order.topic, count, order.messages, backlog)
                call("POST", f"{sub_path}/skip/{count}")
                return Performed(order, EvictionMethod.ADMIN_SKIP, count, Completion.CONFIRMED)
            if backlog <= 0:
                return Skipped(order, EvictionFailure.STALE_TIME, "no backlog now")
            cut = order.cutoff_ms
            assert cut is not None and order.before_publish_time is not None  # a time order
            earliest = sub.get("earliestMsgPublishTimeInBacklog")
            if isinstance(earliest, int) and earliest > 0 and earliest >= cut:
                return Skipped(order, EvictionFailure.STALE_TIME,
                               "the oldest message is not before the cut-off now")
            # Older than `seconds` on the broker's clock: ceil keeps, never drops, the
            # fraction of a second between the cut-off and a whole second.
            seconds = max(1, math.ceil(self._clock() - order.before_publish_time))
            try:
                call("POST", f"{sub_path}/expireMessages/{min(seconds, _JAVA_INT_MAX)}")
            except _AdminError as exc:
                if exc.status != 409 or not consumers:
                    raise  # 409 alone: an expiry of the subscription is still running
                return Skipped(order, EvictionFailure.CONSUMER_CONNECTED,
                               f"{consumers} consumer(s) connected and the broker refused to "
                               f"expire (HTTP 409: backlog under 1,000 entries and the oldest "
                               f"message younger than 1.5 × {seconds} s)")
            return Performed(order, EvictionMethod.ADMIN_EXPIRE, None, Completion.STARTED)
        except _AdminError as exc:
            return EvictionFailed(order, exc.reason, exc.detail)
        except (ValueError, TypeError, AttributeError) as exc:
            return EvictionFailed(order, EvictionFailure.OTHER, f"unexpected stats document: {exc}")
