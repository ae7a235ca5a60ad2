"""A real Apache Pulsar 4.0.8 that requires token authentication everywhere (its /metrics
too) and TLS with client certificates on its binary TLS port (tests/harness/secured_pulsar.py):
the exporter's /metrics fetch, usage exchange and evictions get in with the configured
credentials and are refused without them, each failure with its own reason."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from exporter.actions.binary import BinaryEvictor
from exporter.actions.orders import EvictionFailed, EvictionOrder, Performed
from exporter.config.load import parse
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.sources.results import ScrapeError
from exporter.transport.channel import SENT, UsageChannel
from exporter.transport.client import client_options
from tests.harness.apache_pulsar import poll
from tests.harness.exporter_process import ExporterProcess
from tests.harness.secured_pulsar import SecuredPulsar

# The broker (SecuredPulsar) is an Apache Pulsar standalone with certificates made by openssl.
pytestmark = [pytest.mark.apache, pytest.mark.tools]

TOPIC = "non-persistent://public/default/secured-exchange"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredPulsar]:
    broker = SecuredPulsar(tmp_path_factory.mktemp("secured-pulsar"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def sources(broker: SecuredPulsar, *, token: bool = True, client_cert: bool = True,
            service_url: str | None = None, **endpoint: object):
    tls: dict = {"ca_file": str(broker.ca.cert)}
    if client_cert:
        tls |= {"cert_file": str(broker.client_cert.cert), "key_file": str(broker.client_cert.key)}
    given: dict = {"brokers": [{"url": broker.metrics_url, **endpoint}],
                   "service_url": service_url or broker.tls_service_url,
                   "service_tls_config": tls}
    if token:
        given["service_token_file"] = str(broker.token_file)
    return parse({"cluster": broker.cluster, "sources": given}, "secured.yaml").sources


def scrape(broker: SecuredPulsar, **endpoint: object):
    brokers = sources(broker, **endpoint).brokers
    data = BrokerScrape(brokers, in_process(brokers), clock=time.time).run()
    return data.health[0], data.tables


def test_metrics_need_the_token(secured: SecuredPulsar) -> None:
    health, tables = scrape(secured)
    assert not health.up and health.last_error is ScrapeError.AUTH, health
    assert "401" in health.last_error_detail and not tables
    health, tables = scrape(secured, authorization={"credentials_file": str(secured.token_file)})
    assert health.up and tables, health


def _https(broker: SecuredPulsar, **tls: object):
    endpoint = {"url": broker.tls_metrics_url,
                "authorization": {"credentials_file": str(broker.token_file)}}
    if tls:
        endpoint["tls_config"] = tls
    brokers = parse({"cluster": "c", "sources": {"brokers": [endpoint]}}, "s.yaml").sources.brokers
    return BrokerScrape(brokers, in_process(brokers), clock=time.time).run().health[0]


def test_metrics_over_mutual_tls_with_the_token(secured: SecuredPulsar) -> None:
    """The broker's TLS web port wants a client certificate from its CA as well."""
    ca, client = str(secured.ca.cert), secured.client_cert
    assert _https(secured, ca_file=ca, cert_file=str(client.cert), key_file=str(client.key)).up
    refused = _https(secured, ca_file=ca)  # no client certificate
    assert refused.last_error is ScrapeError.TLS, refused
    unknown = _https(secured)  # our CA is not among the system's
    assert unknown.last_error is ScrapeError.TLS and "CERTIFICATE_VERIFY_FAILED" in \
        unknown.last_error_detail, unknown


def _channel(broker: SecuredPulsar, name: str, **given: object) -> UsageChannel:
    s = sources(broker, **given)
    assert s.service_url is not None
    return UsageChannel(s.service_url, TOPIC, name, client_options=client_options(s),
                        backoff_initial=0.5, backoff_max=2.0)


def test_usage_exchange_over_tls_with_token_and_client_certificate(
        secured: SecuredPulsar) -> None:
    with _channel(secured, "a") as a, _channel(secured, "b") as b:
        assert a.wait_connected(30) and b.wait_connected(30)

        def sent_and_heard() -> bool:
            # Sent again each time: a non-persistent topic drops a message that arrives
            # before the reader's flow permits (so one send may never be read).
            assert a.send(b"report") == SENT
            return b"report" in b.drain()

        poll(sent_and_heard, "b reads a's report", timeout=30)


@pytest.mark.parametrize("missing", ["token", "client_cert"])
def test_without_credentials_the_channel_never_connects(secured: SecuredPulsar,
                                                        missing: str) -> None:
    with _channel(secured, f"no-{missing}", **{missing: False}) as channel:
        assert not channel.wait_connected(8)
        assert channel.connect_failures >= 1 and channel.send(b"x").reason == "not_connected"


def test_eviction_over_tls_with_the_token(secured: SecuredPulsar, tmp_path: Path) -> None:
    namespace = secured.create_namespace("secured-evict")
    topic = f"persistent://{namespace}/t"
    secured.create_subscription(topic, "stalled")
    secured.produce(topic, 20)
    s = sources(secured, authorization={"credentials_file": str(secured.token_file)})
    assert s.service_url is not None
    evictor = BinaryEvictor(s.service_url, timeout=10.0, client_options=client_options(s))
    poll(lambda: secured.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"] == 20,
         "the backlog is 20")
    (done,) = evictor.perform([EvictionOrder(topic, "stalled", "size", messages=15,
                                             consumers=0)])
    assert isinstance(done, Performed) and done.messages == 15, done
    poll(lambda: secured.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"] == 5,
         "the broker's backlog falls to 5")
    unauthenticated = sources(secured, token=False,
                              authorization={"credentials_file": str(secured.token_file)})
    assert unauthenticated.service_url is not None
    refused = BinaryEvictor(unauthenticated.service_url, timeout=5.0,
                            client_options=client_options(unauthenticated))
    (failed,) = refused.perform([EvictionOrder(topic, "stalled", "size", messages=5,
                                               consumers=0)])
    assert isinstance(failed, EvictionFailed), failed
    assert secured.topic_stats(topic)["subscriptions"]["stalled"]["msgBacklog"] == 5


def _with_userinfo(url: str, user: str, password: str) -> str:
    return url.replace("http://", f"http://{quote(user, safe='')}:{quote(password, safe='')}@")


@pytest.mark.spark  # the exporter process runs its cycles on Spark
def test_credentials_in_a_url_are_used_and_never_shown(secured: SecuredPulsar,
                                                      tmp_path: Path) -> None:
    """`http://user:password@host/…` for the broker's /metrics and the admin REST: the broker
    (basic auth, `AuthenticationProviderBasic`) lets both in, and the password appears in no
    label, status document or log line (debug included): it is shown as `<secret>`."""
    user, password = secured.basic_user, secured.basic_password
    metrics = _with_userinfo(secured.metrics_url, user, password)
    admin = _with_userinfo(secured.web_url, user, password)
    shown = {u: u.replace(quote(password, safe=""), "<secret>") for u in (metrics, admin)}
    exporter = ExporterProcess(tmp_path, {
        "cluster": secured.cluster, "check_interval": "2s",
        "sources": {"brokers": [{"url": metrics}], "admin": {"url": admin}},
        "spark": {"master": "local[1]"}}, log_level="debug").start()
    try:
        exporter.wait_ready(180)
        poll(lambda: all(s["up"] for s in exporter.status()["sources"]), "both sources up",
             timeout=30)
        status, body = exporter.status(), exporter.get("/metrics")[2].decode()
        assert sorted(s["url"] for s in status["sources"]) == sorted(shown.values())
        for url in shown.values():
            assert f'source="{url}"' in body, url
    finally:
        exporter.stop()
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    for secret in (password, quote(password, safe=""), basic):
        for where, text in (("status", json.dumps(status)), ("metrics", body),
                            ("log", exporter.log())):
            assert secret not in text, f"the password is in the {where}"
