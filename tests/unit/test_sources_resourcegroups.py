"""Pulsar's resource groups and bindings over the admin REST (sources/resourcegroups.py),
as Apache Pulsar 4.0.8 answers (tests/integration/test_apache_pulsar_groups.py checks the
same on the real broker), and which groups apply (engine/groups.py)."""

from __future__ import annotations

import contextlib
import io
import urllib.error
from collections.abc import Callable, Sequence

import pytest

from exporter.config.model import PolicySource, RateLimit, ResourceGroup
from exporter.engine.groups import effective_groups
from exporter.sources.brokers import FetchFailure
from exporter.sources.model import ScrapeError
from exporter.sources.resourcegroups import GroupCache, binding_from_json, group_from_json

# GET /admin/v2/resourcegroups/rg-a after `PUT` with these four rates, as 4.0.8 answers.
RG_A = {"publishRateInMsgs": 50, "publishRateInBytes": 100000, "dispatchRateInMsgs": -1,
        "dispatchRateInBytes": -1}


class Admin:
    """Answers by path, like the admin REST; a missing path is a 404 as the broker's."""

    def __init__(self, answers: dict[str, object]):
        self.answers = answers
        self.asked: list[str] = []
        self.failing: set[str] = set()

    def get(self, path: str) -> object:
        self.asked.append(path)
        if path in self.failing:
            raise FetchFailure(ScrapeError.TIMEOUT, f"{path}: timed out")
        if path not in self.answers:
            try:
                raise urllib.error.HTTPError(path, 404, "Not Found", {}, io.BytesIO())  # type: ignore[arg-type]
            except urllib.error.HTTPError as exc:
                raise FetchFailure(ScrapeError.HTTP_ERROR, "404") from exc
        return self.answers[path]


def each(fn: Callable, items: Sequence) -> list:
    out = []
    for item in items:
        with contextlib.suppress(FetchFailure):  # the walk records it; we leave it out
            out.append(fn(item))
    return out


def cluster() -> Admin:
    return Admin({
        "/admin/v2/resourcegroups": ["rg-a", "rg-b"],
        "/admin/v2/resourcegroups/rg-a": RG_A,
        "/admin/v2/resourcegroups/rg-b": {"publishRateInMsgs": None},
        "/admin/v2/namespaces/t/one": {"resource_group_name": "rg-a"},
        "/admin/v2/namespaces/t/two": {"resource_group_name": "rg-a"},
        "/admin/v2/namespaces/t/three": {"bundles": {}},
    })


def test_group_limits_read_as_pulsar_sets_them() -> None:
    assert group_from_json("rg-a", RG_A) == ResourceGroup(
        "rg-a", RateLimit(50, 100000), RateLimit(-1, -1))
    assert group_from_json("g", {}) == ResourceGroup("g")  # left out: unlimited


@pytest.mark.parametrize("doc", [[], {"publishRateInMsgs": "50"}, {"dispatchRateInBytes": 1.5},
                                 {"publishRateInMsgs": True}])
def test_malformed_group_json_is_refused(doc: object) -> None:
    with pytest.raises(FetchFailure) as caught:
        group_from_json("g", doc)
    assert caught.value.failure.reason is ScrapeError.MALFORMED


def test_a_namespace_binding_is_its_resource_group_name() -> None:
    assert binding_from_json("t/n", {"resource_group_name": "rg-a"}) == "rg-a"
    assert binding_from_json("t/n", {"resource_group_name": ""}) is None
    assert binding_from_json("t/n", {}) is None
    with pytest.raises(FetchFailure):
        binding_from_json("t/n", {"resource_group_name": 3})


def test_groups_come_with_the_namespaces_bound_to_them() -> None:
    groups = GroupCache().read(each, cluster().get, ["t/one", "t/two", "t/three"], now=0.0)
    assert groups == {"rg-a": ResourceGroup("rg-a", RateLimit(50, 100000), RateLimit(-1, -1),
                                            namespaces=("t/one", "t/two")),
                      "rg-b": ResourceGroup("rg-b")}


def test_read_again_only_after_the_refresh_period_except_new_namespaces() -> None:
    admin, cache = cluster(), GroupCache(refresh_seconds=60)
    cache.read(each, admin.get, ["t/one"], now=0.0)
    admin.asked.clear()
    cache.read(each, admin.get, ["t/one", "t/two"], now=30.0)
    assert admin.asked == ["/admin/v2/namespaces/t/two"]
    admin.answers["/admin/v2/resourcegroups"] = ["rg-b"]
    groups = cache.read(each, admin.get, ["t/one", "t/two"], now=60.0)
    assert list(groups) == ["rg-b"]  # rg-a deleted in Pulsar: gone, its bindings with it


def test_a_failed_read_keeps_what_was_known() -> None:
    admin, cache = cluster(), GroupCache(refresh_seconds=60)
    before = cache.read(each, admin.get, ["t/one"], now=0.0)
    admin.failing = {"/admin/v2/resourcegroups", "/admin/v2/resourcegroups/rg-a"}
    assert cache.read(each, admin.get, ["t/one"], now=60.0) == before
    admin.failing = {"/admin/v2/resourcegroups/rg-a", "/admin/v2/namespaces/t/one"}
    assert cache.read(each, admin.get, ["t/one"], now=61.0) == before


def test_a_broker_without_resource_groups_has_none() -> None:
    assert GroupCache().read(each, Admin({}).get, ["t/one"], now=0.0) == {}


def test_a_namespace_not_listed_after_a_complete_walk_loses_its_binding() -> None:
    admin, cache = cluster(), GroupCache()
    cache.read(each, admin.get, ["t/one", "t/two"], now=0.0)
    kept = cache.read(each, admin.get, ["t/one"], now=1.0, complete=False)
    assert kept["rg-a"].namespaces == ("t/one", "t/two")
    assert cache.read(each, admin.get, ["t/one"], now=2.0)["rg-a"].namespaces == ("t/one",)


# --- which groups apply --------------------------------------------------------------------

PULSAR = {"rg-a": ResourceGroup("rg-a", RateLimit(50, -1), namespaces=("t/one", "t/two")),
          "rg-b": ResourceGroup("rg-b", RateLimit(10, -1), namespaces=("t/three",))}
YAML = {"rg-b": ResourceGroup("rg-b", RateLimit(99, -1), namespaces=("t/four",)),
        "mine": ResourceGroup("mine", RateLimit(5, -1), namespaces=("t/two",))}


def test_config_and_pulsar_take_one_side() -> None:
    assert effective_groups(YAML, PULSAR, PolicySource.CONFIG) == YAML
    assert effective_groups(YAML, PULSAR, PolicySource.PULSAR) == PULSAR
    assert effective_groups(YAML, None, PolicySource.PULSAR) == YAML  # not read yet


def test_both_the_yaml_replaces_a_group_and_takes_its_namespaces_from_pulsars() -> None:
    groups = effective_groups(YAML, PULSAR, PolicySource.BOTH)
    assert list(groups) == ["mine", "rg-a", "rg-b"]
    assert groups["rg-b"] == YAML["rg-b"]  # whole: t/three is no longer rg-b's
    assert groups["rg-a"].namespaces == ("t/one",)  # t/two is bound to mine here
    assert groups["mine"] == YAML["mine"]
