"""ConfigFile: reload on content change or request; bad configs keep the running one."""

from __future__ import annotations

import dataclasses
import logging

from exporter.config.load import load
from exporter.config.reload import ConfigFile, Reloaded, ReloadRejected, Unchanged

BASE = """\
cluster: c1
check_interval: 10s
sources:
  brokers:
    - url: http://127.0.0.1:1/metrics
resource_groups:
  rg:
    publish: {messages_per_second: 100}
    tenants: [t]
"""


def write(path, text):
    path.write_text(text)
    return path


def test_unchanged_file_is_not_reloaded(tmp_path):
    f = write(tmp_path / "c.yaml", BASE)
    watch = ConfigFile(f, load(f))
    assert watch.poll() == Unchanged()
    assert watch.poll() == Unchanged()


def test_a_changed_quota_is_picked_up(tmp_path):
    f = write(tmp_path / "c.yaml", BASE)
    watch = ConfigFile(f, load(f))
    write(f, BASE.replace("100", "250"))
    outcome = watch.poll()
    assert isinstance(outcome, Reloaded)
    assert outcome.config.resource_groups["rg"].publish.messages_per_second == 250
    assert outcome.needs_restart == ()
    assert watch.running is outcome.config
    assert watch.poll() == Unchanged()


def test_an_invalid_file_is_rejected_once_and_the_running_config_stays(tmp_path, caplog):
    f = write(tmp_path / "c.yaml", BASE)
    running = load(f)
    watch = ConfigFile(f, running)
    write(f, BASE.replace("messages_per_second: 100", "messages_per_secnd: 100"))
    with caplog.at_level(logging.ERROR):
        outcome = watch.poll()
    assert isinstance(outcome, ReloadRejected)
    assert any("resource_groups.rg.publish.messages_per_secnd" in e for e in outcome.errors)
    assert "keeping the running config" in caplog.text
    assert watch.running is running
    assert watch.poll() == Unchanged()  # not re-reported every cycle
    write(f, BASE.replace("100", "300"))
    assert isinstance(watch.poll(), Reloaded)


def test_a_vanished_file_is_rejected_and_the_running_config_stays(tmp_path):
    f = write(tmp_path / "c.yaml", BASE)
    running = load(f)
    watch = ConfigFile(f, running)
    f.unlink()
    assert isinstance(watch.poll(), ReloadRejected)
    assert watch.running is running


def test_restart_only_settings_keep_their_running_values(tmp_path, caplog):
    f = write(tmp_path / "c.yaml", BASE)
    watch = ConfigFile(f, load(f))
    write(f, BASE.replace("check_interval: 10s", "check_interval: 30s").replace("100", "5"))
    with caplog.at_level(logging.WARNING):
        outcome = watch.poll()
    assert isinstance(outcome, Reloaded)
    assert outcome.needs_restart == ("check_interval",)
    assert outcome.config.check_interval == 10.0
    assert outcome.config.resource_groups["rg"].publish.messages_per_second == 5
    assert "after a restart" in caplog.text


def test_a_request_reloads_even_without_a_change_and_overrides_are_reapplied(tmp_path):
    f = write(tmp_path / "c.yaml", BASE)

    def adjust(c):
        return dataclasses.replace(c, cluster="from-flag")

    watch = ConfigFile(f, adjust(load(f)), adjust)
    watch.request()
    outcome = watch.poll()
    assert isinstance(outcome, Reloaded)
    assert outcome.config.cluster == "from-flag"
    assert watch.poll() == Unchanged()
