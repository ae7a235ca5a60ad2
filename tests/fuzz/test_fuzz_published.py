"""Nothing already published is lost: a bad input after a good one leaves every published
series of the good one in place, and the rejection is counted by reason.

The real exporter (`Exporter.cycle` with its `PublishedState`) over a loopback broker
whose /metrics answers the recorded Apache Pulsar 4.0 body, then fuzzed answers a fetch
must fail on (`brokerserver.rejected_responses`: error statuses, HTML pages, binary, cut
gzip streams, short bodies…), fetched by the Spark task's own code run in this process;
and a fuzzed config file put in place of the running one (a reload rejected). The clock
is fixed, so a series kept is the same line, value included. What may change is the
exporter's account of itself (domain `exporter`: health, error counters, durations) and
the check-duration histogram, which counts every check."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from exporter.catalogue import CATALOGUE, SCRAPE_ERROR_REASONS, Domain, MetricType
from exporter.config.load import parse
from exporter.config.reload import ConfigFile
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.runtime.cycle import Exporter
from tests.fuzz import inputs
from tests.fuzz.brokerserver import BrokerServer, Response, byte_ops, rejected_responses
from tests.harness.pulsar import Metrics

GOOD = inputs.metrics_seed(0, 0, 0)  # the recorded Apache Pulsar 4.0 body
DATA = frozenset(name for m in CATALOGUE if m.domain is not Domain.EXPORTER
                 and m.type is not MetricType.HISTOGRAM for name in m.sample_names)
ERRORS = "pulsar_quota_exporter_source_scrape_errors_total"
RELOADS = "pulsar_quota_exporter_config_reloads_total"


def data_series(body: bytes) -> frozenset[str]:
    """The published lines of the data the exporter derives (name, labels and value)."""
    return frozenset(line for line in body.decode().splitlines()
                     if re.split(r"[{ ]", line, maxsplit=1)[0] in DATA)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerServer]:
    server = BrokerServer()
    yield server
    server.stop()


@pytest.fixture(autouse=True, scope="module")
def quiet() -> Iterator[None]:
    logging.disable(logging.ERROR)  # every rejected fetch and reload logs: expected here
    yield
    logging.disable(logging.NOTSET)


def config_text(url: str) -> str:
    return f"cluster: fuzz\ncheck_interval: 60s\nsources:\n  brokers:\n    - url: {url}\n" \
           f"      timeout: 2s\n"


def exporter_for(url: str, config_file: Path | None = None) -> Exporter:
    config = parse({"cluster": "fuzz", "check_interval": "60s",
                    "sources": {"brokers": [{"url": url, "timeout": "2s"}]}}, "fuzz.yaml")
    sources = config.sources.brokers
    return Exporter(config, brokers=BrokerScrape(sources, in_process(sources), lambda: inputs.NOW),
                    clock=lambda: inputs.NOW,
                    config_file=ConfigFile(config_file, config) if config_file else None)


@inputs.fuzz_settings(0.2)
@given(answers=st.lists(rejected_responses(), min_size=1, max_size=3))
def test_a_rejected_fetch_after_a_good_one_leaves_every_published_series(
        broker: BrokerServer, answers: list[Response]) -> None:
    exporter = exporter_for(broker.url)
    try:
        broker.response = Response(GOOD)
        good = exporter.cycle()
        published = data_series(good.body)
        assert any(s.startswith("pulsar_storage_backlog_size{") for s in published)
        counted = dict.fromkeys(SCRAPE_ERROR_REASONS, 0)
        for answer in answers:
            broker.response = answer
            bad = exporter.cycle()
            assert bad.body == exporter.state.current.body  # what /metrics serves now
            assert data_series(bad.body) == published
            reason = answer.expected() or "malformed"
            counted[reason] += 1
            event(f"rejected: {reason}")
            metrics = Metrics(bad.body.decode())
            assert metrics.value("pulsar_quota_exporter_source_up", source=broker.url) == 0
            assert {r: metrics.value(ERRORS, source=broker.url, reason=r) for r in counted} \
                == counted
    finally:
        exporter.close()


@inputs.fuzz_settings(0.2)
@given(ops=byte_ops.filter(bool))
def test_a_rejected_config_reload_leaves_the_running_config_and_every_series(
        broker: BrokerServer, ops: list) -> None:
    path = inputs.config_path().with_name("running.yaml")
    good_text = config_text(broker.url).encode()
    path.write_bytes(good_text)
    exporter = exporter_for(broker.url, path)
    try:
        broker.response = Response(GOOD)
        good = exporter.cycle()
        running = exporter.config
        published = data_series(good.body)
        bad_text = inputs.apply_bytes(good_text, ops, inputs.CONFIG_WORDS)
        outcome = inputs.tolerating_known(lambda: inputs.config_file(bad_text, path))
        if outcome is not None and outcome.accepted:
            event("the mutation still loads: a reload, nothing to check")
            return
        path.write_bytes(bad_text)
        exporter.config_file.request()  # as SIGHUP does: even an unchanged digest reloads
        if outcome is None:  # a crash of the loader: the cycle fails, nothing is replaced
            event("known crash of the loader")
            with pytest.raises(Exception):  # noqa: B017 (test_fuzz_found.py shows which)
                exporter.cycle()
            assert exporter.state.current is not None
            assert exporter.state.current.body == good.body
        else:
            event("reload rejected")
            after = exporter.cycle()
            assert Metrics(after.body.decode()).value(RELOADS, result="failure") == 1
            assert data_series(after.body) == published
        assert exporter.config is running
    finally:
        exporter.close()
