"""The config contract: example files load, every kind of mistake yields one precise line."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import socket
import subprocess
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from exporter.config.load import ConfigError, load, parse
from exporter.config.settings import (
    Allocator,
    BacklogQuota,
    Config,
    LoadManager,
    ResourceGroup,
    RetentionPolicy,
    SheddingStrategy,
)
from exporter.config.units import format_duration, format_size
from tests.harness.fixtures import THROWAWAY_CERT, THROWAWAY_KEY

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "exporter" / "data" / "demo.yaml"
REFERENCE = ROOT / "examples" / "reference.yaml"
FILE = "t.yaml"
BCRYPT = "$2b$10$KqI677T4a8We1qSJDfEZr./bXXHXGVv5GfM/h.Z7Cu.EUsAfj6YSW"


def minimal() -> dict:
    return {"cluster": "c", "sources": {"brokers": [{"url": "http://b:8080/metrics"}]}}


def merged(base: dict, patch: dict) -> dict:
    """`base` with `patch` merged in, mapping by mapping."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def errors_of(data: object) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(data, FILE)
    assert str(caught.value) == "\n".join(caught.value.errors)
    return caught.value.errors


def single_error(patch: dict) -> str:
    errors = errors_of(merged(minimal(), patch))
    assert len(errors) == 1, errors
    return errors[0]


# ----------------------------------------------------------------------------- examples


def test_demo_file_loads_with_the_values_the_demo_relies_on() -> None:
    c = load(DEMO)
    assert c.cluster == "demo"
    assert c.check_interval == 5.0
    assert [b.url for b in c.sources.brokers] == ["http://127.0.0.1:18080/metrics"]
    assert c.sources.service_url == "pulsar://127.0.0.1:16650"
    assert c.backlog_quotas.default == BacklogQuota(
        limit_size=10 * 1024 * 1024, limit_time=3600.0, policy=RetentionPolicy.PRODUCER_REQUEST_HOLD
    )
    eviction = RetentionPolicy.CONSUMER_BACKLOG_EVICTION
    assert c.backlog_quotas.namespaces["public/demo-time"] == BacklogQuota(
        limit_time=30.0, policy=eviction
    )
    assert c.backlog_quotas.namespaces["public/demo-size"] == BacklogQuota(
        limit_size=256 * 1024, policy=eviction
    )
    assert c.backlog_quotas.enforce is True
    (group,) = c.resource_groups.values()
    assert group.name == "rg-demo"
    assert group.tenants == ("public",)
    assert group.publish.messages_per_second > 0
    assert c.exposition.listen == "127.0.0.1:10049"
    assert c.spark.master == "local[2]"


def test_reference_file_loads(tmp_path: Path) -> None:
    """With its secret files where it says they are (under tmp_path here): secrets are
    read when the config loads, so a missing one is an error (test_sources_secured.py)."""
    text = REFERENCE.read_text()
    for path in sorted(set(re.findall(r"(/(?:etc|var/run)/[\w./-]+)", text))):
        staged = tmp_path / path.lstrip("/")
        staged.parent.mkdir(parents=True, exist_ok=True)
        pem = {".pem": THROWAWAY_CERT, ".crt": THROWAWAY_CERT, ".key": THROWAWAY_KEY}.get(
            staged.suffix)  # files that must load as TLS certificates and keys
        staged.write_text(pem.read_text() if pem else "staged-0123456789abcdef\n")
        text = text.replace(path, str(staged))
    (tmp_path / "reference.yaml").write_text(text)
    c = load(tmp_path / "reference.yaml")
    assert c.cluster == "prod-eu"
    assert c.sources.brokers[1].authorization == "Bearer staged-0123456789abcdef"
    tls = c.sources.brokers[1].tls
    assert tls is not None and tls.ca_pem == THROWAWAY_CERT.read_text()
    assert c.sources.admin is not None
    assert c.exposition.tls is not None
    assert set(c.exposition.basic_auth) == {"prometheus"}
    assert c.spark.conf["spark.driver.memory"] == "2g"
    signing = c.resource_group_engine.report_signing
    assert signing is not None and signing.rotation_grace == 600


def _schema_paths(cls: type, prefix: str = "") -> set[str]:
    """Every key a user can write, as dotted paths, read off the dataclasses' type hints;
    `*` stands where the user picks the name (namespaces, topics, group names)."""
    paths: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if cls is ResourceGroup and f.name == "name":  # the key above it, not a key of its own
            continue
        if "yaml" in f.metadata and f.metadata["yaml"] is None:  # derived, not written
            continue
        path = f"{prefix}{f.metadata.get('yaml', f.name)}"
        paths.add(path)
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
        if dataclasses.is_dataclass(hint):
            paths |= _schema_paths(hint, f"{path}.")
        elif typing.get_origin(hint) is Mapping and dataclasses.is_dataclass(args[-1]):
            paths |= _schema_paths(args[-1], f"{path}.*.")
        elif len(args) == 1 and dataclasses.is_dataclass(args[0]):  # X | None, tuple[X, ...]
            paths |= _schema_paths(args[0], f"{path}.")
    return paths


def _yaml_paths(value: object, prefix: str = "", named: frozenset[str] = frozenset()) -> set[str]:
    """Dotted paths of a loaded YAML document; children of `named` paths become `*`."""
    paths: set[str] = set()
    if isinstance(value, list):
        for item in value:
            paths |= _yaml_paths(item, prefix, named)
    elif isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}*" if prefix.rstrip(".") in named else f"{prefix}{key}"
            paths.add(path)
            paths |= _yaml_paths(item, f"{path}.", named)
    return paths


def test_reference_file_shows_every_key() -> None:
    named = frozenset({"backlog_quotas.namespaces", "backlog_quotas.topics", "resource_groups"})
    written = _yaml_paths(yaml.safe_load(REFERENCE.read_text()), named=named)
    # The Pulsar client verifies the service URL's host: a config error (configsections).
    expected = _schema_paths(Config) - {"sources.service_tls_config.server_name"}
    assert "resource_groups.*.publish.bytes_per_second" in expected  # the walk goes deep
    assert not expected - written, f"reference.yaml lacks {sorted(expected - written)}"


# ------------------------------------------------------------------------------ defaults


def test_minimal_config_takes_the_dataclass_defaults() -> None:
    c = parse(minimal(), FILE)
    assert c.check_interval == Config.check_interval
    assert c.backlog_quotas.default == BacklogQuota()
    assert c.backlog_quotas.enforce is False
    assert c.load_manager == LoadManager()
    assert c.resource_group_engine.allocator is Allocator.PULSAR
    assert c.exposition.tls is None
    assert c.sources.admin is None
    assert c.sources.brokers[0].timeout == 10.0


def test_admin_namespaces_default_to_every_tenants_and_keep_their_order() -> None:
    admin = {"url": "https://a"}
    parsed = parse(merged(minimal(), {"sources": {"admin": admin}}), FILE).sources.admin
    assert parsed is not None and parsed.namespaces == ()
    admin["namespaces"] = ["t/b", "t/a"]
    parsed = parse(merged(minimal(), {"sources": {"admin": admin}}), FILE).sources.admin
    assert parsed is not None and parsed.namespaces == ("t/b", "t/a")


def test_participant_defaults_to_the_host_name() -> None:
    assert parse(minimal(), FILE).resource_group_engine.participant == socket.gethostname()


def test_collections_are_immutable() -> None:
    c = parse(
        merged(
            minimal(),
            {
                "backlog_quotas": {"namespaces": {"a/b": {"limit_time": 5}}},
                "resource_groups": {"g": {"tenants": ["t"], "namespaces": ["x/y"]}},
                "exposition": {"basic_auth": {"u": BCRYPT}},
                "spark": {"conf": {"spark.ui.enabled": False}},
            },
        ),
        FILE,
    )
    for mapping in (
        c.backlog_quotas.namespaces,
        c.backlog_quotas.topics,
        c.resource_groups,
        c.exposition.basic_auth,
        c.spark.conf,
    ):
        assert isinstance(mapping, MappingProxyType)
    assert isinstance(c.sources.brokers, tuple)
    assert c.resource_groups["g"].tenants == ("t",)
    assert c.resource_groups["g"].namespaces == ("x/y",)
    assert c.spark.conf["spark.ui.enabled"] == "false"  # Spark's spelling, not Python's


def test_null_means_absent() -> None:
    c = parse(merged(minimal(), {"check_interval": None, "load_manager": None}), FILE)
    assert c.check_interval == Config.check_interval
    assert c.load_manager == LoadManager()


def test_a_quota_object_replaces_the_default_as_a_whole() -> None:
    c = parse(
        merged(
            minimal(),
            {
                "backlog_quotas": {
                    "default": {"limit_size": "1GiB", "limit_time": "1h"},
                    "topics": {"persistent://a/b/c/d": {"limit_time": "10m"}},
                }
            },
        ),
        FILE,
    )
    assert c.backlog_quotas.topics["persistent://a/b/c/d"] == BacklogQuota(limit_time=600.0)


def test_rates_accept_minus_one_sizes_and_per_second_suffix() -> None:
    c = parse(
        merged(
            minimal(),
            {
                "resource_groups": {
                    "g": {
                        "publish": {"messages_per_second": -1, "bytes_per_second": "10MiB/s"},
                        "dispatch": {"messages_per_second": 0, "bytes_per_second": -1},
                    }
                },
                "load_manager": {"bundle_max_bandwidth": "100MB"},
            },
        ),
        FILE,
    )
    g = c.resource_groups["g"]
    assert (g.publish.messages_per_second, g.publish.bytes_per_second) == (-1, 10 * 2**20)
    assert (g.dispatch.messages_per_second, g.dispatch.bytes_per_second) == (0, -1)
    assert c.load_manager.bundle_max_bandwidth == 100 * 10**6


def test_zero_sessions_turns_the_sessions_split_check_off_as_in_pulsar() -> None:
    c = parse(merged(minimal(), {"load_manager": {"bundle_max_sessions": 0}}), FILE)
    assert c.load_manager.bundle_max_sessions == 0


def test_load_manager_defaults_are_pulsar_4_0s() -> None:
    # ServiceConfiguration / broker.conf of Pulsar 4.0.8
    d = parse(minimal(), FILE).load_manager
    assert d.load_shedding_strategy is SheddingStrategy.THRESHOLD  # since 2.10
    assert (d.shedding_enabled, d.shedding_interval, d.shedding_grace_period) == (
        True, 60.0, 1800.0)
    assert (d.cpu_resource_weight, d.direct_memory_resource_weight,
            d.bandwidth_in_resource_weight, d.bandwidth_out_resource_weight) == (1, 0, 1, 1)
    assert (d.broker_threshold_shedder_percentage, d.history_resource_percentage) == (10, 0.9)
    assert d.bundle_unload_min_throughput_threshold == 10 * 2**20
    assert d.lower_boundary_shedding_enabled is False
    assert (d.msg_rate_difference_shedder_threshold,
            d.msg_throughput_multiplier_difference_shedder_threshold) == (50, 4)
    assert (d.max_unload_percentage, d.max_unload_bundle_num_per_shedding) == (0.2, -1)
    assert (d.min_unload_message, d.min_unload_message_throughput) == (1000, 2**20)


@pytest.mark.parametrize(("name", "strategy"), [
    ("threshold", SheddingStrategy.THRESHOLD),
    ("ThresholdShedder", SheddingStrategy.THRESHOLD),
    ("org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder", SheddingStrategy.THRESHOLD),
    ("uniform", SheddingStrategy.UNIFORM),
    ("UniformLoadShedder", SheddingStrategy.UNIFORM),
    ("org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder", SheddingStrategy.UNIFORM),
    ("overload", SheddingStrategy.OVERLOAD),
    ("OverloadShedder", SheddingStrategy.OVERLOAD),
    ("org.apache.pulsar.broker.loadbalance.impl.OverloadShedder", SheddingStrategy.OVERLOAD),
    ("avg", SheddingStrategy.AVG),
    ("AvgShedder", SheddingStrategy.AVG),
    ("org.apache.pulsar.broker.loadbalance.impl.AvgShedder", SheddingStrategy.AVG),
])
def test_shedding_strategy_takes_pulsars_class_names(name: str,
                                                     strategy: SheddingStrategy) -> None:
    c = parse(merged(minimal(), {"load_manager": {"load_shedding_strategy": name}}), FILE)
    assert c.load_manager.load_shedding_strategy is strategy
    assert strategy.pulsar_class.endswith(name) or name == strategy.value


def test_load_manager_takes_broker_conf_values() -> None:
    c = parse(merged(minimal(), {"load_manager": {
        "shedding_grace_period": 0,  # loadBalancerSheddingGracePeriodMinutes=0
        "shedding_interval": "2m",
        "bundle_unload_min_throughput_threshold": "5MiB/s",
        "min_unload_message_throughput": 0,
        "history_resource_percentage": 0,
        "msg_rate_difference_shedder_threshold": -1,  # ≤ 0: off, as in Pulsar
        "max_unload_bundle_num_per_shedding": 3,
        "direct_memory_resource_weight": 1.5,
        "lower_boundary_shedding_enabled": True,
        "shedding_enabled": False,
    }}), FILE).load_manager
    assert (c.shedding_grace_period, c.shedding_interval) == (0.0, 120.0)
    assert c.bundle_unload_min_throughput_threshold == 5 * 2**20
    assert c.min_unload_message_throughput == 0
    assert c.history_resource_percentage == 0.0
    assert c.msg_rate_difference_shedder_threshold == -1
    assert c.max_unload_bundle_num_per_shedding == 3
    assert c.direct_memory_resource_weight == 1.5
    assert c.lower_boundary_shedding_enabled and not c.shedding_enabled


def test_namespace_binding_may_sit_under_another_groups_tenant() -> None:
    c = parse(
        merged(
            minimal(),
            {"resource_groups": {"a": {"tenants": ["t"]}, "b": {"namespaces": ["t/critical"]}}},
        ),
        FILE,
    )
    assert c.resource_groups["b"].namespaces == ("t/critical",)


# -------------------------------------------------------------------------------- errors

CASES = [
    # (patch, exact key path, gist of the message)
    ({"cluster": ""}, "cluster", "must not be empty"),
    ({"cluster": 42}, "cluster", "expected a string, found a number (42)"),
    ({"check_interval": "0s"}, "check_interval", "must be longer than 0"),
    ({"check_interval": -5}, "check_interval", "must not be negative"),
    ({"check_interval": "soon"}, "check_interval", "'soon' is not a duration"),
    ({"check_intervall": "5s"}, "check_intervall", "unknown key (did you mean 'check_interval'?)"),
    (
        {"backlog_quotas": {"default": {"limit_sise": "1GiB"}}},
        "backlog_quotas.default.limit_sise",
        "unknown key (did you mean 'limit_size'?)",
    ),
    (
        {"backlog_quotas": {"default": {"limit_size": "10Gb"}}},
        "backlog_quotas.default.limit_size",
        "did you mean 'GB'?",
    ),
    (
        {"backlog_quotas": {"default": {"limit_size": -1}}},
        "backlog_quotas.default.limit_size",
        "must not be negative",
    ),
    (
        {"backlog_quotas": {"default": {"limit_time": "-1s"}}},
        "backlog_quotas.default.limit_time",
        "leave the key out for no limit",
    ),
    (
        {"backlog_quotas": {"default": {"policy": "consumer_backlog_evict"}}},
        "backlog_quotas.default.policy",
        "unknown policy 'consumer_backlog_evict' (did you mean 'consumer_backlog_eviction'?)",
    ),
    (
        {"backlog_quotas": {"namespaces": {"just-a-tenant": {"limit_time": 5}}}},
        "backlog_quotas.namespaces.just-a-tenant",
        "expected a namespace as tenant/namespace",
    ),
    (
        {"backlog_quotas": {"namespaces": {"a/b/c": {"limit_time": 5}}}},
        'backlog_quotas.namespaces["a/b/c"]',
        "expected a namespace as tenant/namespace",
    ),
    (
        {"backlog_quotas": {"namespaces": {"t/caf\u00e9": {"limit_time": 5}}}},
        'backlog_quotas.namespaces["t/caf\u00e9"]',
        "expected a namespace as tenant/namespace",
    ),
    (
        {"backlog_quotas": {"namespaces": {"a/b": None}}},
        'backlog_quotas.namespaces["a/b"]',
        "expected a mapping, found nothing (null)",
    ),
    (
        {"backlog_quotas": {"topics": {"a/b/t": {"limit_time": 5}}}},
        'backlog_quotas.topics["a/b/t"]',
        "did you mean 'persistent://a/b/t'?",
    ),
    (
        {"backlog_quotas": {"topics": {"non-persistent://a/b/t": {"limit_time": 5}}}},
        'backlog_quotas.topics["non-persistent://a/b/t"]',
        "expected persistent://tenant/namespace/topic",
    ),
    (
        {"backlog_quotas": {"enforce": "true"}},
        "backlog_quotas.enforce",
        "expected true or false, found a string ('true')",
    ),
    (
        {"backlog_quotas": {"enforce": True}},
        "backlog_quotas.enforce",
        "needs sources.service_url",
    ),
    (
        {"sources": {"brokers": [{"url": "127.0.0.1:8080/metrics"}]}},
        "sources.brokers[0].url",
        "expected a URL starting with http://… or https://…",
    ),
    ({"sources": {"brokers": [{"timeout": "5s"}]}}, "sources.brokers[0].url", "required"),
    ({"sources": {"brokers": []}}, "sources.brokers", "at least one broker"),
    ({"sources": None}, "sources.brokers", "at least one broker"),
    (
        {"sources": {"brokers": [{"url": "http://b/metrics", "timout": 5}]}},
        "sources.brokers[0].timout",
        "did you mean 'timeout'?",
    ),
    (
        {"sources": {"brokers": {"url": "http://b/metrics"}}},
        "sources.brokers",
        "expected a list, found a mapping",
    ),
    ({"sources": {"admin": {"timeout": "5s"}}}, "sources.admin.url", "required"),
    ({"sources": {"admin": "https://a"}}, "sources.admin", "expected a mapping, found a string"),
    (
        {"sources": {"brokers": ["http://b/metrics"]}},
        "sources.brokers[0]",
        "expected a mapping, found a string",
    ),
    ({"exposition": {"tls": True}}, "exposition.tls", "expected a mapping, found a boolean"),
    (
        {"sources": {"admin": {"url": "https://a", "insecure_skip_verify": "no"}}},
        "sources.admin.insecure_skip_verify",
        "expected true or false",
    ),
    (
        {"sources": {"admin": {"url": "https://a", "namespaces": ["public"]}}},
        "sources.admin.namespaces[0]",
        "expected a namespace as tenant/namespace",
    ),
    (
        {"sources": {"admin": {"url": "https://a", "namespaces": ["t/a", "t/b", "t/a"]}}},
        "sources.admin.namespaces[2]",
        "'t/a' is listed twice",
    ),
    (
        {"sources": {"admin": {"url": "https://a", "namespaces": []}}},
        "sources.admin.namespaces",
        "leave the key out to walk every tenant",
    ),
    (
        {"sources": {"admin": {"url": "https://a", "namespaces": "public/default"}}},
        "sources.admin.namespaces",
        "expected a list, found a string",
    ),
    (
        {"sources": {"service_url": "http://pulsar:6650"}},
        "sources.service_url",
        "pulsar://… or pulsar+ssl://…",
    ),
    (
        {"resource_groups": {"g": {"publish": {"messages_per_second": -2}}}},
        "resource_groups.g.publish.messages_per_second",
        "must be at least -1 (-1 means unlimited)",
    ),
    (
        {"resource_groups": {"g": {"dispatch": {"bytes_per_second": "-10MiB"}}}},
        "resource_groups.g.dispatch.bytes_per_second",
        "must be -1 (unlimited)",
    ),
    (
        {"resource_groups": {"g": {"publish": {"messages_per_second": 1.5}}}},
        "resource_groups.g.publish.messages_per_second",
        "expected an integer",
    ),
    (
        {"resource_groups": {"g": {"publsh": {}}}},
        "resource_groups.g.publsh",
        "did you mean 'publish'?",
    ),
    (
        {"resource_groups": {"g": {"tenants": ["t", "t"]}}},
        "resource_groups.g.tenants[1]",
        "tenant 't' is listed twice",
    ),
    (
        {"resource_groups": {"g": {"namespaces": ["t"]}}},
        "resource_groups.g.namespaces[0]",
        "expected a namespace as tenant/namespace",
    ),
    (
        {"resource_group_engine": {"allocator": "fiar"}},
        "resource_group_engine.allocator",
        "unknown allocator 'fiar' (did you mean 'fair'?)",
    ),
    (
        {"resource_group_engine": {"report_interval": "1m", "stale_after": "6m"}},
        "resource_group_engine.stale_after",
        "must be longer than report_interval × (max_suppressed_rounds + 1) (6m,",
    ),
    (
        {"resource_group_engine": {"suppression_tolerance_percent": 101}},
        "resource_group_engine.suppression_tolerance_percent",
        "percentage from 0 to 100",
    ),
    (
        {"resource_group_engine": {"max_suppressed_rounds": -1}},
        "resource_group_engine.max_suppressed_rounds",
        "must be at least 0",
    ),
    (
        {"resource_group_engine": {"topic": "persistent://pulsar/system/usage"}},
        "resource_group_engine.topic",
        "expected non-persistent://tenant/namespace/topic",
    ),
    (
        {"resource_group_engine": {"participant": ""}},
        "resource_group_engine.participant",
        "must not be empty",
    ),
    (
        {"load_manager": {"overload_threshold_percent": -1}},
        "load_manager.overload_threshold_percent",
        "percentage from 0 to 100",
    ),
    (
        {"load_manager": {"shed_margin_percent": "5%"}},
        "load_manager.shed_margin_percent",
        "expected a number",
    ),
    (
        {"load_manager": {"bundle_max_topics": 0}},
        "load_manager.bundle_max_topics",
        "must be at least 1",
    ),
    (
        {"load_manager": {"bundle_max_sessions": -1}},
        "load_manager.bundle_max_sessions",
        "must be at least 0 (0 turns it off)",
    ),
    (
        {"load_manager": {"bundle_max_msg_rate": 0}},
        "load_manager.bundle_max_msg_rate",
        "must be greater than 0",
    ),
    (
        {"load_manager": {"bundle_max_bandwidth": "100Mbps"}},
        "load_manager.bundle_max_bandwidth",
        "unknown size unit 'Mbps'",
    ),
    (
        {"load_manager": {"load_shedding_strategy": "tresholdShedder"}},
        "load_manager.load_shedding_strategy",
        "unknown load shedding strategy 'tresholdShedder' (did you mean 'ThresholdShedder'?)",
    ),
    (
        {"load_manager": {"load_shedding_strategy": "round-robin"}},
        "load_manager.load_shedding_strategy",
        "(expected one of threshold, uniform, overload, avg, or Pulsar's class name",
    ),
    (
        {"load_manager": {"load_shedding_strategy": ["threshold"]}},
        "load_manager.load_shedding_strategy",
        "expected one of threshold, uniform, overload, avg (or Pulsar's class name), found a list",
    ),
    (
        {"load_manager": {"shedding_enabled": "false"}},
        "load_manager.shedding_enabled",
        "expected true or false",
    ),
    (
        {"load_manager": {"shedding_grace_period": "-30m"}},
        "load_manager.shedding_grace_period",
        "must not be negative",
    ),
    (
        {"load_manager": {"shedding_interval": 0}},
        "load_manager.shedding_interval",
        "must be longer than 0",
    ),
    (
        {"load_manager": {"cpu_resource_weight": -1}},
        "load_manager.cpu_resource_weight",
        "must be at least 0",
    ),
    (
        {"load_manager": {"broker_threshold_shedder_percentage": 110}},
        "load_manager.broker_threshold_shedder_percentage",
        "percentage from 0 to 100",
    ),
    (
        {"load_manager": {"history_resource_percentage": 90}},
        "load_manager.history_resource_percentage",
        "must be a fraction from 0 to 1 as in broker.conf (0.9 = 90 %), found 90",
    ),
    (
        {"load_manager": {"max_unload_percentage": 1.5}},
        "load_manager.max_unload_percentage",
        "must be a fraction from 0 to 1",
    ),
    (
        {"load_manager": {"bundle_unload_min_throughput_threshold": "10Mbit"}},
        "load_manager.bundle_unload_min_throughput_threshold",
        "unknown size unit 'Mbit'",
    ),
    (
        {"load_manager": {"max_unload_bundle_num_per_shedding": -2}},
        "load_manager.max_unload_bundle_num_per_shedding",
        "must be at least -1 (-1 means no limit)",
    ),
    (
        {"load_manager": {"min_unload_message": 1.5}},
        "load_manager.min_unload_message",
        "expected an integer",
    ),
    (
        {"load_manager": {"msg_throughput_multiplier_difference_shedder_threshold": "4x"}},
        "load_manager.msg_throughput_multiplier_difference_shedder_threshold",
        "expected a number",
    ),
    (
        {"load_manager": {"load_shedding_stratgy": "threshold"}},
        "load_manager.load_shedding_stratgy",
        "unknown key (did you mean 'load_shedding_strategy'?)",
    ),
    ({"exposition": {"listen": "10049"}}, "exposition.listen", "expected host:port"),
    ({"exposition": {"listen": "host:99999"}}, "exposition.listen", "expected host:port"),
    ({"exposition": {"topic_level": "yes"}}, "exposition.topic_level", "expected true or false"),
    ({"exposition": {"tls": {"cert_file": "/c"}}}, "exposition.tls.key_file", "required"),
    (
        {"exposition": {"basic_auth": {"admin": "$1$notbcrypt"}}},
        "exposition.basic_auth.admin",
        "expected a bcrypt hash starting with $2a$, $2b$ or $2y$",
    ),
    (
        {"exposition": {"basic_auth": {"a:b": BCRYPT}}},
        'exposition.basic_auth["a:b"]',
        "cannot contain ':'",
    ),
    ({"spark": {"master": "local[two]"}}, "spark.master", "expected local, local[N]"),
    ({"spark": {"conf": {"shuffle": 4}}}, "spark.conf.shuffle", "starting with 'spark.'"),
    (
        {"spark": {"conf": {"spark.x": [1]}}},
        'spark.conf["spark.x"]',
        "expected a string, number or boolean",
    ),
    ({"spark": "local[*]"}, "spark", "expected a mapping, found a string"),
]


@pytest.mark.parametrize(("patch", "path", "gist"), CASES, ids=[c[1] for c in CASES])
def test_each_mistake_is_one_line_naming_its_key_path(patch: dict, path: str, gist: str) -> None:
    line = single_error(patch)
    assert line.startswith(f"{FILE}: {path}: "), line
    assert gist in line


def test_missing_cluster_is_required() -> None:
    data = minimal()
    del data["cluster"]
    assert errors_of(data) == [
        f"{FILE}: cluster: required: the cluster name, put as a label on every series"
    ]


def test_a_group_name_is_named_alongside_the_other_group_binding_the_same_tenant() -> None:
    line = single_error(
        {"resource_groups": {"gold": {"tenants": ["t"]}, "silver": {"tenants": ["t"]}}}
    )
    assert line.startswith(f"{FILE}: resource_groups.silver.tenants[0]: ")
    assert "'gold'" in line and "'silver'" in line


def test_a_namespace_bound_to_two_groups_names_both() -> None:
    line = single_error(
        {"resource_groups": {"a": {"namespaces": ["t/n"]}, "b": {"namespaces": ["x/y", "t/n"]}}}
    )
    assert line.startswith(f"{FILE}: resource_groups.b.namespaces[1]: ")
    assert "'a'" in line and "'b'" in line


@pytest.mark.parametrize("prefix", ["$2a$", "$2b$", "$2y$"])
def test_basic_auth_accepts_the_bcrypt_variants(prefix: str) -> None:
    hashed = prefix + BCRYPT[4:]
    c = parse(merged(minimal(), {"exposition": {"basic_auth": {"u": hashed}}}), FILE)
    assert c.exposition.basic_auth["u"] == hashed


@pytest.mark.parametrize(
    "hashed",
    ["$2x$" + BCRYPT[4:], "$2b$03$" + BCRYPT[7:], BCRYPT[:-1], BCRYPT + "x", 12345],
    ids=["2x", "cost-3", "short", "long", "number"],
)
def test_basic_auth_rejects_what_is_not_a_bcrypt_hash(hashed: object) -> None:
    line = single_error({"exposition": {"basic_auth": {"u": hashed}}})
    assert line.startswith(f"{FILE}: exposition.basic_auth.u: expected a bcrypt hash")


def test_basic_auth_error_never_echoes_the_password() -> None:
    line = single_error({"exposition": {"basic_auth": {"admin": "hunter2-secret"}}})
    assert "hunter2-secret" not in line


def test_every_error_in_a_file_is_reported_in_one_go() -> None:
    data = merged(
        minimal(),
        {
            "check_interval": "0s",
            "backlog_quotas": {"default": {"limit_sise": 1, "policy": "drop"}},
            "resource_group_engine": {"allocator": "greedy"},
            "exposition": {"listen": "nowhere"},
            "bogus": 1,
        },
    )
    paths = [line.split(": ")[1] for line in errors_of(data)]
    assert sorted(paths) == sorted(
        [
            "check_interval",
            "backlog_quotas.default.limit_sise",
            "backlog_quotas.default.policy",
            "resource_group_engine.allocator",
            "exposition.listen",
            "bogus",
        ]
    )


@pytest.mark.parametrize(
    ("data", "found"),
    [(None, "an empty document"), ([1, 2], "a list"), ("cluster: x", "a string")],
)
def test_top_level_must_be_a_mapping(data: object, found: str) -> None:
    (line,) = errors_of(data)
    assert line.startswith(f"{FILE}: top level: expected a mapping")
    assert found in line


# ----------------------------------------------------------------------------- load()


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def load_errors(path: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(path)
    return caught.value.errors


def test_missing_file_cannot_be_read(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.yaml")
    assert load_errors(path) == [f"{path}: cannot read: No such file or directory"]


def test_directory_cannot_be_read(tmp_path: Path) -> None:
    (line,) = load_errors(str(tmp_path))
    assert line.startswith(f"{tmp_path}: cannot read: ")


def test_file_name_is_reported_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("rel.yaml").write_text("cluster: ''\nsources: {brokers: [{url: 'http://b/m'}]}\n")
    assert load_errors("rel.yaml") == ["rel.yaml: cluster: must not be empty"]


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "cluster: c\nsources:\n  brokers: [\n  - x\n")
    (line,) = load_errors(path)
    assert line.startswith(f"{path}: line ")
    assert ": not valid YAML: " in line


def test_invalid_yaml_line_number_is_the_offending_line(tmp_path: Path) -> None:
    path = write(tmp_path, "cluster: c\ncheck_interval: 5s\n  bad: indent\n")
    (line,) = load_errors(path)
    assert line.startswith(f"{path}: line 3: not valid YAML: ")


def test_two_documents_are_not_one_config(tmp_path: Path) -> None:
    path = write(tmp_path, "cluster: a\n---\ncluster: b\n")
    (line,) = load_errors(path)
    assert "not valid YAML" in line


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing here\n")
    (line,) = load_errors(path)
    assert line.startswith(f"{path}: top level: expected a mapping")


def test_non_utf8_file_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("cluster: caf\xe9\n".encode("latin-1"))
    (line,) = load_errors(str(path))
    assert line.startswith(f"{path}: cannot read: not UTF-8")


def test_duplicate_keys_are_reported_with_their_line(tmp_path: Path) -> None:
    text = "cluster: c\nsources: {brokers: [{url: 'http://b/m'}]}\ncheck_interval: 5s\n"
    path = write(tmp_path, text + "check_interval: 0s\n")
    errors = load_errors(path)
    assert f"{path}: line 4: duplicate key 'check_interval'" in errors[0]
    assert any(e.startswith(f"{path}: check_interval: must be longer than 0") for e in errors)


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = (
        "cluster: c\nsources: {brokers: [{url: 'http://b/m'}]}\n"
        "backlog_quotas:\n"
        "  default: &q {limit_time: 1h, policy: producer_exception}\n"
        "  namespaces:\n"
        "    a/b: {<<: *q, limit_time: 5m}\n"
    )
    c = load(write(tmp_path, text))
    assert c.backlog_quotas.namespaces["a/b"] == BacklogQuota(
        limit_time=300.0, policy=RetentionPolicy.PRODUCER_EXCEPTION
    )


def test_load_accepts_a_path_object() -> None:
    assert load(Path(DEMO)).cluster == "demo"


# --------------------------------------------------------------------------------- laws


@given(st.integers(min_value=0, max_value=2**60), st.integers(min_value=1, max_value=10**9))
def test_formatted_limits_load_back_to_the_same_numbers(size: int, millis: int) -> None:
    quota = {"limit_size": format_size(size), "limit_time": format_duration(millis / 1000)}
    c = parse(merged(minimal(), {"backlog_quotas": {"default": quota}}), FILE)
    assert c.backlog_quotas.default.limit_size == size
    assert c.backlog_quotas.default.limit_time == millis / 1000


NAME = st.from_regex(r"[a-z][a-z0-9_.=-]{0,15}", fullmatch=True)


@given(st.lists(st.tuples(NAME, NAME), min_size=1, max_size=5, unique=True))
def test_any_pulsar_namespace_name_is_accepted_and_kept(names: list[tuple[str, str]]) -> None:
    namespaces = {f"{t}/{n}": {"limit_time": 60} for t, n in names}
    c = parse(merged(minimal(), {"backlog_quotas": {"namespaces": namespaces}}), FILE)
    assert list(c.backlog_quotas.namespaces) == list(namespaces)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20))
def test_unknown_top_level_keys_are_always_reported(key: str) -> None:
    assume(key not in {f.name for f in dataclasses.fields(Config)})
    data = minimal()
    data[key] = 1
    assert f"{FILE}: {key}: unknown key" in "\n".join(errors_of(data))


# ------------------------------------------------------------------------------- the CLI


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


def test_cli_validate_config_accepts_the_demo_file() -> None:
    done = run_cli("validate-config", "exporter/data/demo.yaml")
    assert (done.returncode, done.stdout.strip()) == (0, "OK"), done.stderr


def test_cli_validate_config_prints_each_error_and_exits_2(tmp_path: Path) -> None:
    bad = write(
        tmp_path,
        "cluster: c\nsources: {brokers: [{url: 'http://b/m'}]}\n"
        "backlog_quotas:\n  default: {limit_sise: 1GiB}\nexposition: {listen: nowhere}\n",
    )
    done = run_cli("validate-config", bad)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"{bad}: backlog_quotas.default.limit_sise: unknown key (did you mean 'limit_size'?)",
        f"{bad}: exposition.listen: expected host:port such as 127.0.0.1:10049, found 'nowhere'",
    ]


# --------------------------------------------------------- the brokers' own usage reports


def test_broker_reports_topic_defaults_to_pulsars_and_false_turns_it_off() -> None:
    assert (parse(minimal(), FILE).resource_group_engine.broker_reports_topic
            == "non-persistent://pulsar/system/resource-usage")
    off = merged(minimal(), {"resource_group_engine": {"broker_reports_topic": False}})
    assert parse(off, FILE).resource_group_engine.broker_reports_topic is None


@pytest.mark.parametrize(("value", "says"), [
    ("persistent://pulsar/system/resource-usage", "expected non-persistent://"),
    (True, "expected non-persistent://"),
    ("non-persistent://pulsar/system/pulsar-quota-exporter-usage", "must differ from"),
])
def test_broker_reports_topic_errors_name_the_key(value: str, says: str) -> None:
    error = single_error({"resource_group_engine": {"broker_reports_topic": value}})
    assert "resource_group_engine.broker_reports_topic" in error and says in error


def test_a_password_in_a_url_is_used_and_shown_as_secret_even_in_errors() -> None:
    config = parse({"cluster": "c", "sources": {
        "brokers": [{"url": "http://prom:hunter2@b1:8080/metrics"}],
        "admin": {"url": "https://ops:hunter2@admin:8443"}}}, "c.yaml")
    (broker,) = config.sources.brokers
    assert broker.url == "http://prom:<secret>@b1:8080/metrics"
    assert broker.authorization == "Basic cHJvbTpodW50ZXIy"  # prom:hunter2
    assert config.sources.admin is not None
    assert config.sources.admin.url == "https://ops:<secret>@admin:8443"
    assert config.sources.admin.broker_hosts == ("b1",)  # where its 307s may go
    assert "hunter2" not in repr(config)
    with pytest.raises(ConfigError) as caught:
        parse({"cluster": "c", "sources": {"brokers": [
            {"url": "ftp://prom:hunter2@b1/metrics"},
            {"url": "http://prom:hunter2@b 2/metrics"},
            {"url": "http://prom:hunter2@b3/metrics",
             "authorization": {"credentials_file": "/nonexistent"}}]}}, "c.yaml")
    errors = "\n".join(caught.value.errors)
    assert "hunter2" not in errors
    assert "prom:<secret>@b1" in errors and "give one" in errors, errors
