"""`--config.expand-env`: `${NAME}`, `${NAME:-default}` and `$$` in the config file, replaced
from the environment before the YAML is read (one file for every pod of a StatefulSet)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.config.load import ConfigError, expand_env, load
from tests.unit.test_config import run_cli

TEXT = """cluster: prod
sources:
  brokers:
    - url: http://pulsar-broker-${POD_INDEX}.pulsar-broker:8080/metrics
resource_group_engine:
  participant: ${POD_NAME:-exporter-x}
  topic: non-persistent://pulsar/system/${TOPIC:-usage}
"""


def test_references_are_replaced_and_defaults_apply() -> None:
    out = expand_env(TEXT, "c.yaml", {"POD_INDEX": "2", "POD_NAME": "pqe-2"})
    assert "http://pulsar-broker-2.pulsar-broker:8080/metrics" in out
    assert "participant: pqe-2" in out and "system/usage" in out


def test_dollar_dollar_is_a_dollar_and_plain_dollars_stay() -> None:
    assert expand_env("a: $$HOME $PATH x$", "c.yaml", {}) == "a: $HOME $PATH x$"
    assert expand_env("a: ${X:-}", "c.yaml", {}) == "a: "


def test_an_unset_variable_without_default_names_its_line() -> None:
    with pytest.raises(ConfigError) as caught:
        expand_env(TEXT, "c.yaml", {"POD_NAME": "p"})
    assert caught.value.errors == [
        "c.yaml: line 4: ${POD_INDEX} is not set in the environment "
        "(give a default with ${NAME:-value})"]


def test_load_expands_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(TEXT)
    monkeypatch.setenv("POD_INDEX", "0")
    monkeypatch.setenv("POD_NAME", "pqe-0")
    config = load(path, expand=True)
    assert config.sources.brokers[0].url == "http://pulsar-broker-0.pulsar-broker:8080/metrics"
    assert config.resource_group_engine.participant == "pqe-0"
    with pytest.raises(ConfigError) as caught:
        load(path)  # the literal ${POD_INDEX} is no valid host name
    assert "sources.brokers[0].url" in caught.value.errors[0]


def test_cli_flag_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(TEXT)
    env = {k: v for k, v in os.environ.items() if k not in ("POD_INDEX", "POD_NAME")}
    os.environ.pop("POD_INDEX", None)
    done = run_cli("validate-config", "--config.expand-env", str(path))
    assert done.returncode == 2 and "${POD_INDEX} is not set" in done.stderr
    os.environ["POD_INDEX"] = "1"
    try:
        done = run_cli("validate-config", "--config.expand-env", str(path))
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr
