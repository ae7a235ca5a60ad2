"""Who acts on a limit (`publish.enforcer`), as the `enforced_by` label says."""

from __future__ import annotations

import pytest

from exporter.catalogue import ENFORCERS
from exporter.config.model import RetentionPolicy
from exporter.exposition.build import enforcer

HOLD, EXC, EVICT = (RetentionPolicy.PRODUCER_REQUEST_HOLD, RetentionPolicy.PRODUCER_EXCEPTION,
                    RetentionPolicy.CONSUMER_BACKLOG_EVICTION)


@pytest.mark.parametrize(("origin", "policy", "enforce", "expected"), [
    ("pulsar:namespace", HOLD, False, "broker"),  # Pulsar's own quota: the broker acts
    ("pulsar:default", EVICT, True, "broker"),  # it evicts itself, whatever we do
    ("config:topic", EVICT, True, "exporter"),  # only our eviction acts
    ("config:topic", EVICT, False, "none"),  # dry run
    ("config:namespace", HOLD, True, "none"),  # we cannot hold producers
    ("config:default", EXC, True, "none"),
])
def test_who_enforces(origin: str, policy: RetentionPolicy, enforce: bool, expected: str):
    assert enforcer(origin, policy, enforce) == expected
    assert expected in ENFORCERS
