"""HTTP to Apache Pulsar's admin REST (`/admin/v2/...`): the one client behind both the
admin source (GETs, sources/admin.py) and the evictor (POSTs, actions/admin.py).

What both need, done once:
- the bearer token is read when a client is built (per fetch, per batch of evictions), so
  a rotated token (a re-mounted Secret) is picked up;
- TLS from `ca_file` / `insecure_skip_verify`;
- proxies from the environment are not used: the admin URL is a cluster-internal address,
  and an `HTTP_PROXY` meant for the outside must not see the token;
- a 307/308 is followed with its method and headers kept: Pulsar answers a request on a
  non-owner broker with a 307 to the owner (`PulsarWebResource`'s topic-ownership check),
  for POSTs too, which urllib refuses to follow on its own.

Errors are raised as urllib and http.client raise them: each caller classifies them for its
own counters (`ScrapeError` for the source, `EvictionFailure` for the evictor).
"""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path

from exporter.config.model import AdminSource

USER_AGENT = "pulsar-quota-exporter"


class TokenFileError(Exception):
    """`token_file` cannot be read or is empty."""


class CaFileError(Exception):
    """`ca_file` cannot be loaded."""


class _KeepMethodRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if code in (307, 308):
            return urllib.request.Request(newurl, method=req.get_method(),
                                          headers=dict(req.header_items()))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class AdminHttp:
    """One admin source's HTTP state as it is now: base URL, token, TLS context, timeout.

    Raises TokenFileError or CaFileError when built; `call` raises what urllib raises.
    """

    def __init__(self, source: AdminSource):
        self._base = source.url.rstrip("/")
        self._timeout = source.timeout
        self._headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        token = read_token(source.token_file)
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if source.url.startswith("https:"):
            handlers.append(urllib.request.HTTPSHandler(context=tls_context(source)))
        self._follow = urllib.request.build_opener(*handlers, _KeepMethodRedirect())
        self._stay = urllib.request.build_opener(*handlers, _NoRedirect())

    def call(self, method: str, path: str, *, follow: bool = True) -> bytes:
        """`path` starts at `/admin/v2`. Without `follow`, a 3xx answer raises HTTPError."""
        request = urllib.request.Request(self._base + path, method=method, headers=self._headers)
        opener = self._follow if follow else self._stay
        with opener.open(request, timeout=self._timeout) as resp:
            return resp.read()


def read_token(token_file: str | None) -> str | None:
    if token_file is None:
        return None
    try:
        token = Path(token_file).read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise TokenFileError(f"cannot read token_file: {exc}") from exc
    if not token:
        raise TokenFileError(f"token_file {token_file} is empty")
    return token


def tls_context(source: AdminSource) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=source.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise CaFileError(f"cannot load ca_file {source.ca_file}: {exc}") from exc
    if source.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
