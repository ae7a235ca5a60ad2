"""Credentials written into a URL (`http://user:password@host/metrics`): used, never shown.

Prometheus accepts them in a scrape URL and shows the password as `<secret>`; so do we. A
source's `url` holds the shown form from the moment it is built, so every label, status
document, log line and error made from it is safe by construction; the credentials travel
separately, as the Authorization header the source sends to its own origin only.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit

SECRET = "<secret>"


def _parts(url: str) -> tuple[str, str | None, str | None, str]:
    """(scheme://, user, password, host-and-rest) with user and password still quoted."""
    scheme, sep, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not sep or not at:
        return url, None, None, ""
    user, colon, password = userinfo.partition(":")
    return f"{scheme}://", user, password if colon else None, f"{host}{slash}{tail}"


def shown(url: str) -> str:
    """The URL as it may be shown: a password replaced by `<secret>`, the user kept."""
    head, user, password, rest = _parts(url)
    if user is None:
        return url
    return f"{head}{user}{':' + SECRET if password is not None else ''}@{rest}"


def bare(url: str) -> str:
    """The URL without its userinfo: what a connection is opened to."""
    head, user, _, rest = _parts(url)
    return url if user is None else head + rest


def basic_authorization(url: str) -> str | None:
    """`Basic …` from the URL's userinfo; None when it has none, or only the shown form
    (the password already `<secret>`: the header was taken when the source was built)."""
    _, user, password, _ = _parts(url)
    if user is None or password == SECRET:
        return None
    credentials = f"{unquote(user)}:{unquote(password or '')}"
    return "Basic " + base64.b64encode(credentials.encode()).decode()


def has_userinfo(url: str) -> bool:
    return urlsplit(url).username is not None
