"""Fuzz: Apache Pulsar admin REST answers, mutated from the recorded topic stats and the
other endpoints' answers as Apache Pulsar 4.0.8 gives them. A bad answer is counted as
malformed or missing_fields (the walk leaves that item out), never anything else; through
the whole walk, a failed tenant listing keeps the last good snapshot."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config.settings import AdminSource
from exporter.sources.admin import AdminFetched, AdminScraper
from exporter.sources.brokers import FetchFailed
from exporter.sources.policies import PolicyCache
from exporter.sources.resourcegroups import GroupCache
from tests.fakes.admin_server import PARTITIONED_TOPIC, TOPIC, FakeAdminServer
from tests.fuzz import inputs
from tests.fuzz.brokerserver import byte_ops

tree_ops = st.lists(st.tuples(st.integers(0, inputs.TREE_OPS - 1), st.integers(0, 1 << 20),
                              st.integers(0, 1 << 20)), min_size=1, max_size=4)
seeds = st.sampled_from(inputs.admin_seeds())


def test_every_seed_is_accepted() -> None:
    for kind, body in inputs.admin_seeds():
        assert inputs.admin_answer(kind, body).accepted == 1, kind


@inputs.fuzz_settings(7.5)
@given(seed=seeds, ops=byte_ops)
def test_a_mutated_json_body_is_converted_or_counted_as_malformed(
        seed: tuple[str, bytes], ops: list) -> None:
    kind, body = seed
    mutated = inputs.apply_bytes(body, ops, inputs.ADMIN_WORDS)
    inputs.tolerating_known(lambda: inputs.admin_answer(kind, mutated))


@inputs.fuzz_settings(7.5)
@given(seed=seeds, ops=tree_ops)
def test_a_mutated_document_is_converted_or_counted_by_reason(
        seed: tuple[str, bytes], ops: list) -> None:
    kind, body = seed
    doc = inputs.apply_tree(json.loads(body), ops, inputs.ADMIN_VALUES, inputs.ADMIN_KEYS)
    inputs.tolerating_known(lambda: inputs.admin_answer(kind, json.dumps(doc).encode()))


# --- the whole walk ------------------------------------------------------------------------

STATS = f"/admin/v2/persistent/{TOPIC.split('://')[1]}/stats"
PARTITIONED = f"/admin/v2/persistent/{PARTITIONED_TOPIC.split('://')[1]}/partitioned-stats"
EXTRA = {  # what the policy and group reads ask for, as 4.0.8 answers it
    "/admin/v2/brokers/configuration/runtime": "broker_runtime_config",
    "/admin/v2/namespaces/public/default/backlogQuotaMap": "backlog_quota_map",
    "/admin/v2/namespaces/my-tenant/my-namespace/backlogQuotaMap": "backlog_quota_map",
    "/admin/v2/persistent/public/default/Fibonacci/backlogQuotaMap": "backlog_quota_map",
    "/admin/v2/persistent/my-tenant/my-namespace/my-topic/backlogQuotaMap":
        "backlog_quota_map",
    "/admin/v2/resourcegroups/rg-a": "resource_group",
    "/admin/v2/namespaces/public/default": "namespace_policies",
    "/admin/v2/namespaces/my-tenant/my-namespace": "namespace_policies",
}
FUZZED = {STATS: "topic_stats", PARTITIONED: "partitioned_stats",
          "/admin/v2/namespaces/public/default/bundles": "bundles",
          "/admin/v2/tenants": "listing", **EXTRA}


@pytest.fixture(scope="module")
def replay() -> Iterator[FakeAdminServer]:
    with FakeAdminServer(token=None) as server:
        seeds = dict(inputs.admin_seeds())
        for path, kind in EXTRA.items():
            server.routes[path] = seeds[kind]
        server.routes["/admin/v2/resourcegroups"] = b'["rg-a"]'
        server.routes["/admin/v2/tenants"] = b'["my-tenant", "public"]'
        yield server


@inputs.fuzz_settings(0.2)
@given(path=st.sampled_from(sorted(FUZZED)), ops=st.one_of(
    st.tuples(st.just("bytes"), byte_ops), st.tuples(st.just("tree"), tree_ops)))
def test_the_walk_counts_bad_answers_by_reason_and_keeps_the_last_good_snapshot(
        replay: FakeAdminServer, path: str, ops: tuple) -> None:
    scraper = AdminScraper(AdminSource(url=replay.url, timeout=2.0), max_concurrency=2,
                           policies=PolicyCache(), groups=GroupCache())
    good = scraper.scrape()
    assert isinstance(good.outcome, AdminFetched) and good.outcome.item_errors == ()
    original = replay.routes[path]
    how, mutations = ops
    if how == "bytes":
        mutated = inputs.apply_bytes(original, mutations, inputs.ADMIN_WORDS)
    else:
        mutated = json.dumps(inputs.apply_tree(json.loads(original), mutations,
                                               inputs.ADMIN_VALUES, inputs.ADMIN_KEYS)).encode()
    replay.routes[path] = mutated
    try:
        after = scraper.scrape()  # never raises
    finally:
        replay.routes[path] = original
    counted = {r.value: n for r, n in after.health.errors if n}
    failures = after.outcome.item_errors if isinstance(after.outcome, AdminFetched) \
        else (after.outcome,)
    assert sum(counted.values()) == len(failures)
    for failure in failures:
        if failure.reason.value == "other":  # the walk's catch-all: a converter crashed
            assert inputs.tolerating_known(
                lambda: inputs.admin_answer(FUZZED[path], mutated)) is None, failure
        elif path == "/admin/v2/tenants" and failure.reason.value == "http_error":
            pass  # a tenant the mutation made up: the replay answers 404 for its namespaces
        else:
            assert failure.reason.value in ("malformed", "missing_fields"), failure
    if isinstance(after.outcome, FetchFailed):  # the walk could not start
        assert path == "/admin/v2/tenants"
        assert after.snapshot is good.snapshot  # nothing already fetched is lost
    else:
        assert after.snapshot is after.outcome.snapshot
