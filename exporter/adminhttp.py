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
  for POSTs too, which urllib refuses to follow on its own;
- the credentials go only where they were configured for: a redirect is followed to the admin
  URL's host, a host of `sources.brokers`, or a broker of the cluster (`GET /admin/v2/brokers/
  {cluster}` on the admin URL itself, which lists `host:port` of every active broker; a
  superuser's call), never from https to http;
  any other redirect is refused (`RedirectRefused`), so a compromised or spoofed answer
  cannot send the token elsewhere.

Errors are raised as urllib and http.client raise them: each caller classifies them for its
own counters (`ScrapeError` for the source, `EvictionFailure` for the evictor).
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

from exporter.config import userinfo
from exporter.config.settings import AdminSource

USER_AGENT = "pulsar-quota-exporter"


class TokenFileError(Exception):
    """`token_file` cannot be read or is empty."""


class CaFileError(Exception):
    """`ca_file` cannot be loaded."""


class RedirectRefused(urllib.error.URLError):
    """A redirect to where the credentials may not go."""


class _KeptRedirect(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only where `allowed` says the credentials may go; 307/308 with the
    method and headers kept."""

    def __init__(self, allowed: Callable[[str, str], str | None]):
        self._allowed = allowed

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        why = self._allowed(req.full_url, newurl)
        if why is not None:
            raise RedirectRefused(f"HTTP {code} to {userinfo.bare(newurl)} not followed: {why}")
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
        self._base = userinfo.bare(source.url).rstrip("/")
        self._timeout = source.timeout
        self._headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        token = read_token(source.token_file)
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        elif source.authorization:  # the URL's userinfo
            self._headers["Authorization"] = source.authorization
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if source.url.startswith("https:"):
            handlers.append(urllib.request.HTTPSHandler(context=tls_context(source)))
        self._brokers = frozenset(source.broker_hosts)
        self._cluster_hosts: frozenset[str] | None = None
        self._follow = urllib.request.build_opener(*handlers, _KeptRedirect(self._may_go))
        self._stay = urllib.request.build_opener(*handlers, _NoRedirect())

    def _may_go(self, current: str, target: str) -> str | None:
        """None when the request may follow a redirect from `current` to `target`, else
        why not."""
        now, then = urlsplit(current), urlsplit(target)
        if then.scheme not in ("http", "https") or not then.hostname:
            return "not an http(s) URL"
        if now.scheme == "https" and then.scheme != "https":
            return "a downgrade from https to http"
        host = then.hostname.lower()
        if host == (urlsplit(self._base).hostname or "").lower() or host in self._brokers:
            return None
        if self._cluster_hosts is None:
            self._cluster_hosts = self._list_cluster_hosts()
        if host in self._cluster_hosts:
            return None
        return "not the admin URL's host, a host of sources.brokers or a broker the cluster lists"

    def _list_cluster_hosts(self) -> frozenset[str]:
        """Every active broker's host, as the admin URL's own broker lists them; none when
        it cannot (a role without the permission: then only the admin URL's host is
        trusted)."""
        hosts: set[str] = set()
        try:
            clusters = json.loads(self.call("GET", "/admin/v2/clusters", follow=False))
            for cluster in clusters if isinstance(clusters, list) else ():
                try:
                    listed = json.loads(self.call(
                        "GET", f"/admin/v2/brokers/{quote(str(cluster), safe='')}",
                        follow=False))
                except urllib.error.HTTPError:  # another cluster's: 307 or 404
                    continue
                for broker in listed if isinstance(listed, list) else ():
                    name = urlsplit(f"//{broker}").hostname
                    if name:
                        hosts.add(name.lower())
        except (OSError, ValueError, http.client.HTTPException):
            pass
        return frozenset(hosts)

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
