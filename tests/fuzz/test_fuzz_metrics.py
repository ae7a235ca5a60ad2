"""Fuzz: broker /metrics bodies, mutated from the recorded Apache Pulsar bodies in
tests/fixtures. A body is parsed (its bad lines skipped and counted by `MalformedReason`)
or rejected whole as malformed; over HTTP every failed fetch has a reason of the closed
set, never `other` (what the task's catch-all gives an exception it did not expect), and
the broker's last good tables stay in use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import SCRAPE_ERROR_REASONS
from exporter.config.settings import BrokerSource
from exporter.pipeline.scrape import BrokerScrape, in_process
from tests.fuzz import inputs
from tests.fuzz.brokerserver import BrokerServer, Response, mutated_bodies, responses

GOOD = inputs.metrics_seed(0, 0, 0)  # the whole recorded Apache Pulsar 4.0 body


@inputs.fuzz_settings(1.5)
@given(body=mutated_bodies(), piece=st.sampled_from((256, 4096, 1 << 20)))
def test_a_mutated_body_is_parsed_or_rejected_as_malformed(body: bytes, piece: int) -> None:
    outcome = inputs.tolerating_known(lambda: inputs.metrics_body(body, piece))
    if outcome is not None:
        assert outcome.accepted + outcome.rejected.total() == 1
        assert set(outcome.rejected) <= {"malformed"}


@pytest.mark.parametrize("name", inputs.METRICS_FIXTURES)
def test_every_recorded_body_is_accepted_whole(name: str) -> None:
    outcome = inputs.metrics_body(inputs.metrics_seed(inputs.METRICS_FIXTURES.index(name), 0, 0))
    assert outcome.accepted == 1 and not outcome.lines


@pytest.mark.parametrize("name", inputs.METRICS_FIXTURES)
def test_any_value_on_any_sample_of_a_family_read_is_counted_or_taken(name: str) -> None:
    """NaN, ±Inf, 2^63, 1e30, negatives and fractions, each on every sample of every family
    the exporter reads, of each recorded body: the body is accepted, through the engine
    and publication, and what it skips is counted (`metrics_body` checks the counts)."""
    lines = inputs.metrics_lines(name)
    skipped = 0
    for shift in range(len(inputs.VALUE_WORDS)):
        outcome = inputs.metrics_body(inputs.with_values(lines, shift))
        assert outcome.accepted == 1, (shift, outcome)
        skipped += outcome.lines["not_a_count"]
    if name != "apache-pulsar-4.0.8-otel-metrics.txt":  # no count family read there
        assert skipped > 0


@pytest.fixture(scope="module")
def server() -> Iterator[BrokerServer]:
    s = BrokerServer()
    yield s
    s.stop()


@inputs.fuzz_settings(0.2)
@given(answers=st.lists(responses(), min_size=1, max_size=3))
def test_a_fetch_fails_only_by_a_known_reason_and_the_last_good_tables_stay(
        server: BrokerServer, answers: list[Response]) -> None:
    source = BrokerSource(server.url, 2.0)
    scrape = BrokerScrape([source], in_process([source]))
    server.response = Response(GOOD)
    first = scrape.run()
    assert first.health[0].up
    last_good = first.tables[0][1]
    errors = dict.fromkeys(SCRAPE_ERROR_REASONS, 0)
    for answer in answers:
        server.response = answer
        data = scrape.run()
        health = data.health[0]
        ((_, tables),) = data.tables
        if health.up:
            assert answer.expected() is None
            last_good = tables
        else:
            reason = health.last_error.value
            assert reason in SCRAPE_ERROR_REASONS
            errors[reason] += 1
            if answer.expected() is not None:
                assert reason == answer.expected(), health.last_error_detail
            elif reason == "other":  # the task's catch-all: only a crash the parse is known for
                body = answer.body
                assert inputs.tolerating_known(lambda b=body: inputs.metrics_body(b)) is None
            else:
                assert reason == "malformed", health.last_error_detail
            assert tables == last_good  # nothing already fetched is lost (kept packed)
        assert {r.value: n for r, n in health.errors} == errors
