"""Evictions through Apache Pulsar's admin REST: `GET …/stats?getEarliestTimeInBacklog=true`
to see the subscription, then `POST …/subscription/{sub}/resetcursor/{ms}` or `…/skip/{n}`.
HTTP (token, TLS, redirects to the owner broker, no proxies) is exporter/adminhttp.py's."""

from __future__ import annotations

import http.client as http_client
import json
import ssl
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
    NothingToEvict,
    Performed,
    Skipped,
    lease_lost,
    unfenced,
)
from exporter.adminhttp import AdminHttp, CaFileError, TokenFileError
from exporter.config.model import AdminSource

_JAVA_INT_MAX = 2**31 - 1  # Pulsar's skip/{numMessages} is a Java int


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


class AdminEvictor:
    """Evicts through Apache Pulsar's admin REST (`/admin/v2/persistent/...`)."""

    def __init__(self, source: AdminSource):
        self._source = source

    def perform(self, orders: Sequence[EvictionOrder],
                fence: Callable[[], bool] = unfenced) -> tuple[EvictionResult, ...]:
        if not orders:
            return ()
        try:  # built per batch: the token is read now, as it may have rotated
            http = AdminHttp(self._source)
        except (TokenFileError, CaFileError) as exc:  # ours to fix, like a 401
            return tuple(EvictionFailed(o, EvictionFailure.OTHER, str(exc)) for o in orders)
        return tuple(self._one(http, o) if fence() else lease_lost(o) for o in orders)

    @staticmethod
    def _one(http: AdminHttp, order: EvictionOrder) -> EvictionResult:
        tenant, ns, local = order.path
        base = ("/admin/v2/persistent/"
                f"{quote(tenant, safe='')}/{quote(ns, safe='')}/{quote(local, safe='')}")
        sub_path = f"{base}/subscription/{quote(order.subscription, safe='')}"

        def call(method: str, path: str) -> bytes:
            try:
                return http.call(method, path)
            except (OSError, ValueError, http_client.HTTPException) as exc:
                raise _AdminError(*_http_failure(exc, path)) from exc

        try:
            stats = json.loads(call("GET", f"{base}/stats?getEarliestTimeInBacklog=true"))
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
                call("POST", f"{sub_path}/skip/{count}")
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
            call("POST", f"{sub_path}/resetcursor/{cut}")
            return Performed(order, EvictionMethod.ADMIN_RESET_CURSOR, None, Completion.CONFIRMED)
        except _AdminError as exc:
            return EvictionFailed(order, exc.reason, exc.detail)
        except (ValueError, TypeError, AttributeError) as exc:
            return EvictionFailed(order, EvictionFailure.OTHER, f"unexpected stats document: {exc}")
