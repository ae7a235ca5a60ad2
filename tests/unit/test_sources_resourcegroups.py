"""Pulsar's resource groups and bindings over the admin REST (sources/resourcegroups.py),
as Apache Pulsar 4.0.8 answers (tests/integration/test_apache_pulsar_groups.py checks the
same on the real broker) and as Pulsar's master does where 4.0.8 has nothing (replication
limits, topic bindings: `ResourceGroup` admin JSON and `PersistentTopics.getResourceGroup` as
of ascentstream/pulsar 5d63c25e and 4d230ab3, which track apache/pulsar's master), and which
groups apply (engine/groups/applicable.py)."""

from __future__ import annotations

import contextlib
import io
import urllib.error
from collections.abc import Callable, Sequence

import pytest

from exporter.config.settings import PolicySource, RateLimit, ResourceGroup
from exporter.engine.groups.applicable import effective_groups
from exporter.sources.brokers import FetchFailure
from exporter.sources.resourcegroups import (
    GroupCache,
    binding_from_json,
    group_from_json,
    topic_binding_from_text,
)
from exporter.sources.results import ScrapeError

# GET /admin/v2/resourcegroups/rg-a after `PUT` with these four rates, as 4.0.8 answers.
RG_A = {"publishRateInMsgs": 50, "publishRateInBytes": 100000, "dispatchRateInMsgs": -1,
        "dispatchRateInBytes": -1}


class Admin:
    """Answers by path, like the admin REST; a missing path is a 404 as the broker's.
    `texts`: raw bodies (`get_text`); without them, a topic's binding is Jetty's HTML 404
    for a resource 4.0.8 does not have."""

    def __init__(self, answers: dict[str, object], texts: dict[str, str] | None = None):
        self.answers = answers
        self.texts = texts
        self.asked: list[str] = []
        self.failing: set[str] = set()

    def get_text(self, path: str) -> str:
        self.asked.append(path)
        if self.texts is None or path not in self.texts:
            html = self.texts is None  # 4.0.8: no such resource; master: no such topic
            headers = {"Content-Type": "text/html;charset=iso-8859-1" if html
                       else "application/json"}
            try:
                raise urllib.error.HTTPError(path, 404, "Not Found", headers,  # type: ignore[arg-type]
                                             io.BytesIO())
            except urllib.error.HTTPError as exc:
                raise FetchFailure(ScrapeError.HTTP_ERROR, "404") from exc
        return self.texts[path]

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
    master = {**RG_A, "replicationDispatchRateInMsgs": 400, "replicationDispatchRateInBytes": -1,
              "replicatorDispatchRate": {"c1->c2": {"dispatchThrottlingRateInMsg": 300}}}
    assert group_from_json("rg-a", master).replication_dispatch == RateLimit(400, -1)


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


def test_a_topic_binding_is_the_raw_name_or_nothing() -> None:
    assert topic_binding_from_text("t", "rg-a") == "rg-a"  # a String resource, written raw
    assert topic_binding_from_text("t", '"rg-a"\n') == "rg-a"
    assert topic_binding_from_text("t", "") is None  # 204: unset
    for bad in ("<html>", '{"reason": "x"}', "two words", '"unterminated'):
        with pytest.raises(FetchFailure) as caught:
            topic_binding_from_text("t", bad)
        assert caught.value.failure.reason is ScrapeError.MALFORMED


# --- topic bindings (Pulsar's master) -------------------------------------------------------

TOPICS = [f"persistent://t/one/topic-{i}" for i in range(20)]


def _binding_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/resourceGroup"


def master() -> Admin:
    admin = cluster()
    admin.texts = {_binding_path(t): "" for t in TOPICS}
    admin.texts[_binding_path(TOPICS[3])] = "rg-b"
    return admin


def _read(admin: Admin, cache: GroupCache, now: float, topics: Sequence[str] = TOPICS,
          complete: bool = True):
    return cache.read(each, admin.get, ["t/one"], now, topics=topics, get_text=admin.get_text,
                      complete=complete)


def _bindings_asked(admin: Admin) -> list[str]:
    asked = [p for p in admin.asked if p.endswith("/resourceGroup")]
    admin.asked.clear()
    return asked


def test_topic_bindings_are_read_when_first_seen_and_beat_the_namespace() -> None:
    admin, cache = master(), GroupCache()
    groups = _read(admin, cache, 0.0)
    assert groups["rg-b"].topics == (TOPICS[3],)
    assert groups["rg-a"].namespaces == ("t/one",) and groups["rg-a"].topics == ()
    assert len(_bindings_asked(admin)) == 20
    _read(admin, cache, 30.0)
    assert _bindings_asked(admin) == []  # nothing new, nothing due


def test_a_bound_topic_is_read_again_each_period_the_others_a_share_each_walk() -> None:
    admin, cache = master(), GroupCache(refresh_seconds=60)
    _read(admin, cache, 0.0)
    _bindings_asked(admin)
    _read(admin, cache, 60.0)
    assert _bindings_asked(admin) == [_binding_path(TOPICS[3])]  # bound: every 60 s
    admin.texts[_binding_path(TOPICS[3])] = ""  # unbound in Pulsar
    assert "rg-b" not in {g for g, rg in _read(admin, cache, 120.0).items() if rg.topics}
    _bindings_asked(admin)
    asked = []
    for now in range(180, 1200, 60):  # unbound: read again after 600 s, 2 per 60 s walk
        _read(admin, cache, float(now))
        asked.append(_bindings_asked(admin))
    assert [len(a) for a in asked] == [0] * 7 + [2] * 10
    assert {p for a in asked for p in a} == {_binding_path(t) for t in TOPICS}


def test_a_broker_without_topic_bindings_is_asked_once_a_period() -> None:
    admin, cache = cluster(), GroupCache(refresh_seconds=60)  # 4.0.8's HTML 404
    groups = _read(admin, cache, 0.0)
    assert all(g.topics == () for g in groups.values())
    assert len(_bindings_asked(admin)) == 1  # one probe, not one request per topic
    _read(admin, cache, 30.0)
    assert _bindings_asked(admin) == []
    _read(admin, cache, 60.0)
    assert len(_bindings_asked(admin)) == 1
    admin.texts = master().texts  # the broker upgraded
    assert _read(admin, cache, 120.0)["rg-b"].topics == (TOPICS[3],)


def test_a_role_refused_topic_bindings_is_refused_once_a_period() -> None:
    admin, cache = master(), GroupCache(refresh_seconds=60)
    errors: list[FetchFailure] = []

    def refuse(path: str) -> str:
        admin.asked.append(path)
        raise FetchFailure(ScrapeError.AUTH, "HTTP 403 Forbidden")

    def recording(fn: Callable, items: Sequence) -> list:
        out = []
        for item in items:
            try:
                out.append(fn(item))
            except FetchFailure as exc:
                errors.append(exc)
        return out

    for now in (0.0, 30.0):
        cache.read(recording, admin.get, ["t/one"], now, topics=TOPICS, get_text=refuse)
    assert len(_bindings_asked(admin)) == 1 and len(errors) == 1  # one refusal, counted
    assert errors[0].failure.reason is ScrapeError.AUTH


def test_a_topic_gone_since_listed_is_an_error_not_a_broker_without_bindings() -> None:
    admin, cache = master(), GroupCache()
    del admin.texts[_binding_path(TOPICS[0])]  # Pulsar's JSON 404: deleted meanwhile
    groups = _read(admin, cache, 0.0)
    assert groups["rg-b"].topics == (TOPICS[3],)
    assert len(_bindings_asked(admin)) == 20


def test_a_topic_not_listed_after_a_complete_walk_loses_its_binding() -> None:
    admin, cache = master(), GroupCache()
    _read(admin, cache, 0.0)
    assert _read(admin, cache, 1.0, TOPICS[:3], complete=False)["rg-b"].topics == (TOPICS[3],)
    assert _read(admin, cache, 2.0, TOPICS[:3])["rg-b"].topics == ()


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


def test_both_a_topic_the_yaml_binds_leaves_its_pulsar_group() -> None:
    pulsar = {"rg-a": ResourceGroup("rg-a", topics=("persistent://t/one/x", "persistent://t/one/y"))}
    yaml = {"mine": ResourceGroup("mine", topics=("persistent://t/one/y",))}
    groups = effective_groups(yaml, pulsar, PolicySource.BOTH)
    assert groups["rg-a"].topics == ("persistent://t/one/x",)
    assert groups["mine"].topics == ("persistent://t/one/y",)
