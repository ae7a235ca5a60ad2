"""`backlog_quotas.source` and `resource_group_engine.source`: each default follows
`sources.admin`, and `pulsar` needs one."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config.load import ConfigError, parse
from exporter.config.settings import PolicySource
from tests.unit.test_config import run_cli

FILE = "q.yaml"
ADMIN = {"url": "http://pulsar-admin:8080"}


def config(admin: bool, **quotas: object) -> dict:
    sources: dict = {"brokers": [{"url": "http://b:8080/metrics"}]}
    if admin:
        sources["admin"] = ADMIN
    return {"cluster": "c", "sources": sources, "backlog_quotas": quotas}


@pytest.mark.parametrize(("admin", "expected"), [
    (True, PolicySource.BOTH), (False, PolicySource.CONFIG)])
def test_the_default_follows_the_admin_source(admin: bool, expected) -> None:
    assert parse(config(admin), FILE).backlog_quotas.source is expected


@pytest.mark.parametrize("given", ["pulsar", "config", "both"])
def test_every_source_is_accepted_with_an_admin_source(given: str) -> None:
    assert parse(config(True, source=given), FILE).backlog_quotas.source.value == given


def test_config_needs_no_admin_source() -> None:
    assert parse(config(False, source="config"), FILE).backlog_quotas.source is \
        PolicySource.CONFIG


def test_pulsar_without_an_admin_source_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(False, source="pulsar"), FILE)
    assert caught.value.errors == [
        f"{FILE}: backlog_quotas.source: pulsar needs sources.admin: Pulsar's backlog quotas "
        "are read over the admin REST"]


def test_an_unknown_source_names_the_choices() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(True, source="brokers"), FILE)
    assert caught.value.errors == [
        f"{FILE}: backlog_quotas.source: unknown source 'brokers' "
        "(expected one of: pulsar, config, both)"]


def test_cli_exits_2_on_pulsar_without_admin(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c\nsources: {brokers: [{url: 'http://b/m'}]}\n"
                   "backlog_quotas: {source: pulsar}\n")
    done = run_cli("validate-config", str(bad))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"{bad}: backlog_quotas.source: pulsar needs sources.admin: Pulsar's backlog quotas "
        "are read over the admin REST"]


def groups(admin: bool, **engine: object) -> dict:
    return {**config(admin), "resource_group_engine": engine}


@pytest.mark.parametrize(("admin", "expected"), [
    (True, PolicySource.BOTH), (False, PolicySource.CONFIG)])
def test_resource_groups_follow_the_admin_source_too(admin: bool, expected) -> None:
    assert parse(groups(admin), FILE).resource_group_engine.source is expected
    assert parse(groups(True, source="pulsar"), FILE).resource_group_engine.source is \
        PolicySource.PULSAR


def test_resource_groups_from_pulsar_need_an_admin_source() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(groups(False, source="pulsar"), FILE)
    assert caught.value.errors == [
        f"{FILE}: resource_group_engine.source: pulsar needs sources.admin: Pulsar's "
        "resource groups are read over the admin REST"]
