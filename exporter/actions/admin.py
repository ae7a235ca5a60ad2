"""Evictions through Apache Pulsar's admin REST: `GET …/stats?getEarliestTimeInBacklog=true`
to see the subscription, then `POST …/subscription/{sub}/resetcursor/{ms}` or `…/skip/{n}`."""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
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
)
from exporter.config.model import AdminSource

log = logging.getLogger(__name__)
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
