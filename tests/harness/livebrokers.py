"""The broker side of a cycle for tests on one real broker, without Spark: its /metrics
fetched and parsed in the test process, as a Spark task would parse it."""

from __future__ import annotations

import time
from typing import Protocol

from exporter.pipeline.parse import parse_text
from exporter.pipeline.tables import BrokerData, source_tables
from exporter.sources.brokers import HealthLedger
from exporter.sources.results import SourceKind


class OneBroker(Protocol):
    metrics_url: str

    def metrics_text(self) -> str: ...


class LiveBrokers:
    def __init__(self, broker: OneBroker):
        self.broker = broker
        self.ledger = HealthLedger(broker.metrics_url, SourceKind.BROKER)
        self.last_body = ""

    def run(self) -> BrokerData:
        self.last_body = self.broker.metrics_text()
        tables = source_tables([parse_text(self.last_body.encode())])
        self.ledger.record(up=True, at=time.time())
        return BrokerData(((self.broker.metrics_url, tables),), (self.ledger.health(),),
                          {self.broker.metrics_url: tables.malformed})
