"""An exporter watching one real Apache Pulsar broker, as the integration tests configure it:
`one_broker` writes its config (the broker's /metrics, optionally its admin REST and service
URL, plus any sections), and `live_exporter` runs that config in this process with the broker
side read without Spark (tests/harness/livebrokers.py), unless another is given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from exporter.config.load import parse
from exporter.runtime.cycle import Exporter
from tests.harness.livebrokers import LiveBrokers

__all__ = ["live_exporter", "one_broker"]


class Broker(Protocol):
    """What of a broker the config names (ApachePulsar, SecuredPulsar)."""

    cluster: str
    metrics_url: str
    web_url: str
    service_url: str

    def metrics_text(self) -> str: ...


def one_broker(broker: Broker, *, check_interval: str = "2s",
               admin: bool | Mapping[str, Any] = False, service_url: bool = False,
               timeout: str | None = None, sources: Mapping[str, Any] | None = None,
               **sections: Any) -> dict[str, Any]:
    """The config map: `cluster` (the broker's), `check_interval` and `sources`, then
    `sections` (which may replace `cluster`). `sources` has the broker's /metrics, then with
    `admin` its admin REST (True: its web URL; a mapping: that admin source), with
    `service_url` its binary service URL, then the keys of `sources`. `timeout` is the
    /metrics source's, and the admin source's when `admin` is True."""
    metrics: dict[str, Any] = {"url": broker.metrics_url}
    if timeout is not None:
        metrics["timeout"] = timeout
    chosen: dict[str, Any] = {"brokers": [metrics]}
    if admin is True:
        chosen["admin"] = {"url": broker.web_url}
        if timeout is not None:
            chosen["admin"]["timeout"] = timeout
    elif admin:
        chosen["admin"] = dict(admin)
    if service_url:
        chosen["service_url"] = broker.service_url
    chosen.update(sources or {})
    return {"cluster": broker.cluster, "check_interval": check_interval, "sources": chosen,
            **sections}


def live_exporter(broker: Broker, name: str, config: dict[str, Any],
                  **given: Any) -> Exporter:
    """An exporter of `config` (parsed as if read from `name`.yaml) in this process; its broker
    side is LiveBrokers(broker) unless `given` names one (`brokers=`), and `given` goes to
    Exporter as it is (`participate=True`)."""
    if "brokers" not in given:
        given["brokers"] = LiveBrokers(broker)
    return Exporter(parse(config, f"{name}.yaml"), **given)
