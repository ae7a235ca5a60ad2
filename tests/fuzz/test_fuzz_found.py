"""Crashes the fuzzing found (tests/fuzz, tests/bench/fuzz.py), one test each, smallest
input first, with the fix each called for: all fixed, and kept fixed by these tests. A new
one gets its test here and, while its fix is pending, its site in `inputs.KNOWN_CRASHES`.

1. parse.py `_labels`: a body (or a piece of one) whose samples of the families
   read carry no quoted label value at all indexes an empty array (`opening[pair]` with
   every `pair` -1): IndexError. The task's catch-all turns it into a fetch failed for
   reason `other`, so the broker is reported down and its body dropped. Fix: in
   `_labels`, when `opening` is empty give every label column nulls (or index with
   `np.where(present, pair, 0)` only when `len(opening)`).
2. adminjson.py `_int` and policies.py `broker_default_from_json`: `int()` of a JSON
   number that is not finite (`1e999` is valid JSON and reads as inf; Python's json also
   takes `NaN`, `Infinity`): OverflowError / ValueError instead of FetchFailure
   (malformed), so the walk counts the item as `other`. Fix: in `_number` refuse a value
   that is not `math.isfinite` (MALFORMED); in `broker_default_from_json.number` likewise
   after `float(value)`.
3. config/units.py `parse_duration` (`float(Fraction)` of a 400-digit number),
   config/values.py `number` (`math.isfinite` of a huge int) and `bandwidth`
   (`float(int)`): OverflowError escapes `Reader.check`, which catches ValueError only.
   Fix: catch OverflowError in `Reader.check` (or raise ValueError("… too large") in the
   three converters).
   config/sections.py `resource_group_engine`: `max_suppressed_rounds` takes any integer
   ≥ 0, then `ResourceGroupEngine.max_report_gap` (config/settings.py) multiplies it into a
   float: OverflowError for one above ~1.8e308. Fix: give `cv.integer` an upper bound for
   it (a few thousand rounds is already days), or check the product before comparing.
4. config/auth.py `read`: a file name holding NUL makes `Path.read_text` raise ValueError
   ("embedded null byte"), not caught with OSError. Fix: catch ValueError there too.
5. config/load.py `load`: PyYAML raises outside `yaml.YAMLError` — ValueError from its
   constructors (an integer of more than 4300 digits, a date such as 2001-13-45) — and
   `yaml.reader.ReaderError` (a control character such as \\x07 or \\x00) already in
   `_Loader(text)`, which is outside the `try`. Both leave `load` (and so `validate-config`
   crashes with a traceback and exit 1 instead of exit 2; a reload fails the whole cycle
   instead of being counted as a failed reload). Fix: build the loader inside the `try`,
   and turn a ValueError of `get_single_data` into a ConfigError naming the file.
6. engine/decide.py `_topic_state`: `int()` of a subscription's backlog that is NaN or
   ±Inf (the text format allows them on any sample), and `round()` of a backlog size of
   +Inf: ValueError / OverflowError out of `decide`, so every cycle failed and kept its
   last decisions, every broker's, for as long as one broker printed it. Found by hand,
   putting NaN, ±Inf and 1e30 in place of each read family's values: the fuzz's random
   mutations do not reach it in their 300 examples (one in ~13 seeds holds such a line at
   all), so that sweep is now a test of its own (test_fuzz_metrics.py,
   `inputs.with_values`), which finds 6 and 7 with either fix undone. Fix: the pipeline
   skips a count family's sample that no Java long holds, counted as `not_a_count`
   (pipeline/tables.py).
7. engine/load/loadview.py `_shares`: a negative `pulsar_topics_count` (a broker with
   topic-level metrics off) became a bundle's topic count, which `BundleStats` refuses:
   ValueError out of `decide`, every cycle, as in 6. Found the same way. Fix: read it as
   the other counts are, negative or not finite as 0 (`_number`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config.load import ConfigError, load, parse
from exporter.config.settings import AdminSource, BrokerSource
from exporter.pipeline.parse import parse_text
from exporter.pipeline.scrape import BrokerScrape, in_process
from exporter.sources.admin import AdminScraper
from exporter.sources.adminjson import topic_stats_from_json
from exporter.sources.brokers import FetchFailed, FetchFailure
from exporter.sources.policies import broker_default_from_json
from exporter.sources.results import ScrapeError
from tests.fakes.admin_server import FakeAdminServer
from tests.fuzz import inputs
from tests.fuzz.brokerserver import BrokerServer, Response

UNLABELLED = b"# TYPE pulsar_lb_cpu_usage gauge\npulsar_lb_cpu_usage 12.5\n"
BROKER = {"url": "http://broker:8080/metrics"}


# --- 1. /metrics ------------------------------------------------------------------------------

def test_samples_without_labels_parse() -> None:
    parsed = parse_text(UNLABELLED)  # IndexError in _labels
    assert parsed.samples.num_rows == 1


def test_a_broker_serving_samples_without_labels_is_up() -> None:
    server = BrokerServer()
    try:
        server.response = Response(UNLABELLED)
        source = BrokerSource(server.url, 2.0)
        health = BrokerScrape([source], in_process([source])).run().health[0]
    finally:
        server.stop()
    # now: down, last_error "other", detail "IndexError: index -1 is out of bounds …"
    assert health.up, (health.last_error, health.last_error_detail)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e30"])
@pytest.mark.parametrize("family", ["pulsar_subscription_back_log",
                                    "pulsar_storage_backlog_size", "pulsar_in_messages_total"])
def test_a_count_no_long_holds_is_skipped_and_the_topics_decided(family: str,
                                                                 value: str) -> None:
    lines = inputs.metrics_seed(0, 0, 0).split(b"\n")
    hit = [i for i, line in enumerate(lines) if line.startswith(family.encode() + b"{")]
    for i in hit:
        lines[i] = lines[i].rsplit(b" ", 1)[0] + b" " + value.encode()
    outcome = inputs.metrics_body(b"\n".join(lines))  # ValueError / OverflowError in decide
    assert hit and outcome.lines == Counter({"not_a_count": len(hit)})


def test_a_negative_topic_count_is_none_and_the_topics_decided() -> None:
    fixture = inputs.METRICS_FIXTURES.index(
        "apache-pulsar-2.12.0-SNAPSHOT-test-broker-metrics.txt")  # topic-level metrics off
    lines = inputs.metrics_seed(fixture, 0, 0).split(b"\n")
    hit = [i for i, line in enumerate(lines) if line.startswith(b"pulsar_topics_count{")]
    for i in hit:
        lines[i] = lines[i].rsplit(b" ", 1)[0] + b" -5"
    assert hit and inputs.metrics_body(b"\n".join(lines)).accepted == 1  # ValueError


# --- 2. admin JSON ----------------------------------------------------------------------------

@pytest.mark.parametrize("body", ['{"subscriptions": {}, "backlogSize": 1e999}',
                                  '{"subscriptions": {}, "msgInCounter": NaN}',
                                  '{"subscriptions": {"s": {"consumers": [], "msgBacklog": '
                                  'Infinity, "unackedMessages": 0}}}'])
def test_a_topic_stats_number_that_is_not_finite_is_malformed(body: str) -> None:
    with pytest.raises(FetchFailure) as caught:  # OverflowError / ValueError in _int
        topic_stats_from_json("persistent://public/default/t", json.loads(body))
    assert caught.value.failure.reason is ScrapeError.MALFORMED


@pytest.mark.parametrize("body", ['{"subscriptions": {}, "oldestBacklogMessageAgeSeconds": 1e300}',
                                  '{"subscriptions": {}, "oldestBacklogMessageAgeSeconds": '
                                  '3200000000}',  # a century and more: older than the epoch
                                  '{"subscriptions": {}, "backlogSize": 1e30}',
                                  '{"subscriptions": {}, "msgInCounter": 9223372036854775808}'])
def test_a_topic_stats_number_no_broker_prints_is_malformed(body: str) -> None:
    """Finite, but past a Java long (every stats number is one) or an age past a century:
    accepted before, an age of 1e300 s published as a backlog age."""
    with pytest.raises(FetchFailure) as caught:
        topic_stats_from_json("persistent://public/default/t", json.loads(body))
    assert caught.value.failure.reason is ScrapeError.MALFORMED


def test_a_real_age_and_the_largest_java_long_are_kept() -> None:
    stats = topic_stats_from_json("persistent://public/default/t", json.loads(
        '{"subscriptions": {}, "oldestBacklogMessageAgeSeconds": 3000000000, '
        '"msgInCounter": 9223372036854775807}'))
    assert stats.oldest_backlog_message_age_seconds == 3e9
    assert stats.msg_in_counter == 2**63 - 1


@pytest.mark.parametrize("doc", [{"backlogQuotaDefaultLimitGB": "1e999"},
                                 {"backlogQuotaDefaultLimitGB": 1e308},  # finite GB, inf bytes
                                 {"backlogQuotaDefaultLimitBytes": "NaN"},
                                 {"backlogQuotaDefaultLimitBytes": "Infinity"}])
def test_a_broker_default_quota_that_is_not_finite_is_malformed(doc: dict) -> None:
    with pytest.raises(FetchFailure) as caught:  # OverflowError / ValueError
        broker_default_from_json(doc)
    assert caught.value.failure.reason is ScrapeError.MALFORMED


@pytest.mark.parametrize(("name", "shown"), [
    ('a"].x', 'resource_groups["a\\"].x"]'),
    ("back\\slash", 'resource_groups["back\\\\slash"]'),
    ("new\nline", 'resource_groups["new\\nline"]'),
])
def test_a_users_key_is_quoted_unambiguously_in_a_key_path(name: str, shown: str) -> None:
    """Quotes, backslashes and control characters in a user's key were printed raw, so a
    key path could read as another."""
    with pytest.raises(ConfigError) as caught:
        parse({"cluster": "c", "sources": {"brokers": [BROKER]},
               "resource_groups": {name: {"publish": {"messages_per_second": "x"}}}}, "f.yaml")
    assert any(e.startswith(f"f.yaml: {shown}.publish") for e in caught.value.errors), \
        caught.value.errors


def test_admin_json_nested_past_the_decoders_depth_is_malformed() -> None:
    """json.loads raises RecursionError, which was filed as `other`."""
    with FakeAdminServer(token=None) as replay:
        replay.routes["/admin/v2/tenants"] = b"[" * 100_000 + b"]" * 100_000
        result = AdminScraper(AdminSource(url=replay.url, timeout=10.0)).scrape()
    assert isinstance(result.outcome, FetchFailed)
    assert result.outcome.reason is ScrapeError.MALFORMED


# --- 3, 4. config mappings --------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "path"), [
    ({"check_interval": 10**400}, "check_interval"),
    ({"check_interval": "9" * 400 + "s"}, "check_interval"),
    ({"load_manager": {"overload_threshold_percent": 10**400}},
     "load_manager.overload_threshold_percent"),
    ({"load_manager": {"bundle_max_bandwidth": 10**400}}, "load_manager.bundle_max_bandwidth"),
    ({"resource_group_engine": {"max_suppressed_rounds": 10**400}},
     "resource_group_engine.max_suppressed_rounds"),
    ({"sources": {"brokers": [{**BROKER, "authorization": {"credentials_file": "a\x00b"}}]}},
     "sources.brokers[0].authorization.credentials_file"),
])
def test_a_value_out_of_any_range_is_a_config_error_naming_its_key(settings: dict,
                                                                   path: str) -> None:
    with pytest.raises(ConfigError) as caught:  # OverflowError / ValueError now
        parse({"cluster": "c", "sources": {"brokers": [BROKER]}, **settings}, "fuzz.yaml")
    assert any(e.startswith(f"fuzz.yaml: {path}: ") for e in caught.value.errors), \
        caught.value.errors


# --- 5. config files --------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "cluster: c\ncheck_interval: " + "9" * 5000 + "\n",  # ValueError from PyYAML's int
    "cluster: c\ncheck_interval: 2001-13-45\n",  # ValueError from PyYAML's date
    "cluster: c\x07\n",  # yaml.reader.ReaderError, raised by _Loader(text)
    "cluster: c\x00\n",
    "cluster: c\nx: " + "[" * 20_000 + "]" * 20_000 + "\n",  # RecursionError in PyYAML
])
def test_a_file_yaml_cannot_read_is_a_config_error_naming_the_file(tmp_path: Path,
                                                                   text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert all(e.startswith(f"{path}: ") for e in caught.value.errors)


def test_validate_config_exits_2_on_a_control_character(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("cluster: c\x07\nsources:\n  brokers:\n    - url: http://b:8080/metrics\n")
    with pytest.raises(SystemExit) as caught:  # ReaderError with a traceback now
        main(["validate-config", str(path)])
    assert caught.value.code == 2
