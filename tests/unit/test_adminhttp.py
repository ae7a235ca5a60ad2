"""Where the admin client's credentials may go: Pulsar's 307 to an owner broker is followed
with the token (same host, or a broker the cluster lists), a redirect to any other host or
from https to http is refused before a byte is sent there. The servers are stand-ins that
script an admin REST's answers on loopback addresses (tests/harness/admin_standin.py;
127.0.0.2 plays a foreign host); the real broker's 307 is followed in
tests/cluster/test_owners.py."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.actions.admin import AdminEvictor
from exporter.actions.orders import EvictionFailed, EvictionOrder, Performed
from exporter.adminhttp import AdminHttp, RedirectRefused
from exporter.config.settings import AdminSource
from tests.harness.admin_standin import AdminStandIn
from tests.harness.certs import ScratchCA

TOPIC = "persistent://t/ns/x"
STATS = ("/admin/v2/persistent/t/ns/x/stats?getEarliestTimeInBacklog=true"
         "&subscriptionBacklogSize=true")
SKIP = "/admin/v2/persistent/t/ns/x/subscription/s/skip/2"
STATS_DOC = {"backlogSize": 100, "subscriptions": {"s": {"msgBacklog": 10, "consumers": []}}}


@pytest.fixture
def servers() -> Iterator[list[AdminStandIn]]:
    made: list[AdminStandIn] = []
    yield made
    for server in made:
        server.stop()


def _server(servers: list[AdminStandIn], host: str,
            context: ssl.SSLContext | None = None) -> AdminStandIn:
    server = AdminStandIn(host, context).start()
    servers.append(server)
    return server


def _owner(servers: list[AdminStandIn], host: str) -> AdminStandIn:
    owner = _server(servers, host)
    owner.answer("GET", STATS, 200, STATS_DOC)
    owner.answer("POST", SKIP, 204)
    return owner


def _redirecting(servers: list[AdminStandIn], owner: AdminStandIn) -> AdminStandIn:
    """An admin URL on 127.0.0.1 answering both calls with a 307 to `owner`, as a broker
    that does not own the topic answers."""
    admin = _server(servers, "127.0.0.1")
    admin.answer("GET", STATS, 307, owner.url + STATS)
    admin.answer("POST", SKIP, 307, owner.url + SKIP)
    return admin


OWNER_SAW = [("GET", STATS, "Bearer the-token"), ("POST", SKIP, "Bearer the-token")]


def _evict(admin: AdminStandIn, token: Path) -> object:
    (result,) = AdminEvictor(AdminSource(admin.url, token_file=str(token))).perform(
        [EvictionOrder(TOPIC, "s", "size", messages=2)])
    return result


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("the-token\n")
    return path


def test_a_307_to_another_port_of_the_admin_host_carries_the_token(servers, token) -> None:
    """As Pulsar's brokers on one host answer for each other's topics."""
    owner = _owner(servers, "127.0.0.1")
    admin = _redirecting(servers, owner)
    assert isinstance(_evict(admin, token), Performed)
    assert owner.requests == OWNER_SAW


def test_a_307_to_a_foreign_host_is_refused_before_it_is_reached(servers, token) -> None:
    foreign = _owner(servers, "127.0.0.2")
    admin = _server(servers, "127.0.0.1")
    admin.answer("GET", STATS, 307, foreign.url + STATS)
    result = _evict(admin, token)
    assert isinstance(result, EvictionFailed), result
    assert "not followed" in result.detail and "127.0.0.2" in result.detail
    assert foreign.requests == []
    # What the client asked its own admin URL to learn whether 127.0.0.2 is a broker
    assert [r[1] for r in admin.requests] == [STATS, "/admin/v2/clusters"]


def test_a_307_to_a_broker_the_cluster_lists_carries_the_token(servers, token) -> None:
    """The owner on another host is trusted because the admin URL's own broker lists it
    among the cluster's active brokers (`host:webServicePort`, as Pulsar names them)."""
    owner = _owner(servers, "127.0.0.2")
    admin = _redirecting(servers, owner)
    admin.answer("GET", "/admin/v2/clusters", 200, ["other", "here"])
    admin.answer("GET", "/admin/v2/brokers/other", 307, "http://elsewhere:8080/x")
    admin.answer("GET", "/admin/v2/brokers/here", 200, [owner.url.removeprefix("http://")])
    assert isinstance(_evict(admin, token), Performed)
    assert owner.requests == OWNER_SAW


def test_a_307_to_a_host_of_sources_brokers_carries_the_token(servers, token) -> None:
    """The operator named that host: no broker listing (a superuser's call) is needed."""
    owner = _owner(servers, "127.0.0.2")
    admin = _redirecting(servers, owner)
    source = AdminSource(admin.url, token_file=str(token), broker_hosts=("127.0.0.2",))
    (result,) = AdminEvictor(source).perform([EvictionOrder(TOPIC, "s", "size", messages=2)])
    assert isinstance(result, Performed), result
    assert [r[1] for r in admin.requests] == [STATS, SKIP]
    assert [r[2] for r in owner.requests] == ["Bearer the-token"] * 2


@pytest.mark.tools  # openssl makes the certificate
def test_a_redirect_from_https_to_http_is_refused(servers, token, tmp_path: Path) -> None:
    ca = ScratchCA(tmp_path / "pki")
    issued = ca.issue("admin", ip=("127.0.0.1",))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)
    plain = _owner(servers, "127.0.0.1")
    admin = _server(servers, "127.0.0.1", context)
    admin.answer("GET", STATS, 307, plain.url + STATS)
    http = AdminHttp(AdminSource(admin.url, token_file=str(token), ca_file=str(ca.cert)))
    with pytest.raises(RedirectRefused, match="downgrade from https to http"):
        http.call("GET", STATS)
    assert plain.requests == []
    assert admin.requests == [("GET", STATS, "Bearer the-token")]


def test_credentials_in_the_admin_url_are_sent_as_basic_auth_and_never_shown(servers) -> None:
    admin = _owner(servers, "127.0.0.1")
    source = AdminSource(admin.url.replace("http://", "http://ops:p%40ss@"))
    assert source.url == admin.url.replace("http://", "http://ops:<secret>@")
    assert "p%40ss" not in repr(source) and "p@ss" not in repr(source)
    assert json.loads(AdminHttp(source).call("GET", STATS)) == STATS_DOC
    assert admin.requests == [("GET", STATS, "Basic b3BzOnBAc3M=")]  # ops:p@ss
