"""The generated alert rules in a real Prometheus, routed by the example Alertmanager config
to a webhook in the test: a stalled subscription crosses its backlog time quota, the
critical backlog-age alert pages with its labels and annotations, and it resolves once the
consumer catches up. Polling timeouts are generous; nothing asserts how fast it happens."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.e2e.scenario import REPO, Scenario, rule_files
from tests.harness import markdown
from tests.harness.prometheus import Notification
from tests.harness.wait import poll

AGE_ALERT = "PulsarBacklogAgeOverQuota"
EVICTION_ALERT = "PulsarBacklogEvictions"


def _rules() -> dict[str, dict[str, Any]]:
    """Alert name → rule, from the generated rule files."""
    rules = {}
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                rules[rule["alert"]] = rule
    return rules


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def _timestamp(value: str) -> float:
    # Alertmanager sends RFC 3339 with nanoseconds; Python parses microseconds at most.
    trimmed = re.sub(r"(\.\d{6})\d+", r"\1", value).replace("Z", "+00:00")
    return datetime.fromisoformat(trimmed).timestamp()


def _alert(n: Notification, name: str, topic: str, status: str) -> dict[str, Any] | None:
    return next((a for a in n.alerts if a["labels"].get("alertname") == name
                 and a["labels"].get("topic") == topic and a.get("status") == status), None)


def _wait_for_alert(scenario: Scenario, name: str, topic: str, status: str,
                    ) -> tuple[Notification, dict[str, Any]]:
    """The first notification carrying `name` for `topic` in `status`, and that alert."""
    notification = scenario.webhook.wait_for(
        lambda n: _alert(n, name, topic, status) is not None,
        timeout=300, what=f"{name} for {topic} {status} at the webhook")
    alert = _alert(notification, name, topic, status)
    assert alert is not None
    return notification, alert


def test_every_generated_rule_is_loaded_and_evaluates(scenario: Scenario) -> None:
    expected = set(_rules())
    prometheus = scenario.prometheus

    def all_evaluated() -> list[tuple[str, str, str]] | None:
        health = prometheus.rule_health()
        return health if all(h == "ok" for _, h, _ in health) and health else None

    health = poll(all_evaluated, timeout=60, what="every rule evaluated with health ok",
                  show=prometheus.rule_health)
    assert sorted(name for name, _, _ in health) == sorted(expected)


def test_recurring_evictions_open_a_ticket_not_a_page(scenario: Scenario) -> None:
    """Severity routing of the example config: a warning goes to the ticket receiver.

    The topic is refilled once its first eviction shows in Prometheus: a per-topic eviction
    counter appears at its first value (1), which `increase()` cannot tell from a counter
    that was always 1, so only a later eviction makes PulsarBacklogEvictions fire."""
    work, prometheus = scenario.workload, scenario.prometheus
    topic = work.sized_topic
    counter = f'pulsar_storage_backlog_quota_exceeded_evictions_total{{topic="{topic}"}}'
    poll(lambda: prometheus.instant(f"{counter} >= 1"), timeout=300, interval=1.0,
         what=f"a size eviction of {topic} in Prometheus", show=scenario.diagnostics)
    scenario.broker.produce(topic, 100, 1000)  # producers go on: the backlog grows again
    notification, alert = _wait_for_alert(scenario, EVICTION_ALERT, topic, "firing")
    assert notification.path == "/ticket"
    assert notification.payload["receiver"] == "ticket"
    assert alert["labels"]["severity"] == "warning"
    assert alert["labels"]["quota_type"] == "size"
    assert alert["labels"]["cluster"] == work.cluster
    assert topic in alert["annotations"]["description"]
    assert not any(_alert(n, EVICTION_ALERT, topic, "firing")
                   for n in scenario.webhook.received if n.path != "/ticket")


def test_stalled_backlog_pages_over_its_time_quota_and_resolves_after_catch_up(
        scenario: Scenario) -> None:
    work, webhook, prometheus = scenario.workload, scenario.webhook, scenario.prometheus
    topic = work.stalled_topic
    rule = _rules()[AGE_ALERT]

    firing, alert = _wait_for_alert(scenario, AGE_ALERT, topic, "firing")

    # Routed as the example says: critical pages, grouped by cluster and namespace.
    assert firing.path == "/pager"
    assert firing.payload["receiver"] == "pager"
    assert firing.payload["groupLabels"] == {"cluster": work.cluster,
                                             "namespace": "workload/app"}
    labels = alert["labels"]
    assert labels["alertname"] == AGE_ALERT
    assert labels["severity"] == "critical" == rule["labels"]["severity"]
    assert labels["cluster"] == work.cluster
    assert labels["namespace"] == "workload/app"
    assert labels["topic"] == topic
    assert labels["policy"] == "producer_request_hold"
    assert labels["enforced_by"] == "none"  # pulsar-lite has no backlog quotas of its own
    assert labels["job"] == work.job

    annotations = alert["annotations"]
    assert set(annotations) >= {"summary", "description", "runbook_url"}
    assert annotations["summary"] == rule["annotations"]["summary"]  # one title per alert
    assert topic in annotations["description"]
    assert "workload/app" in annotations["description"]
    assert "nothing happens to the producers" in annotations["description"]
    for text in annotations.values():
        assert "{{" not in text and "error expanding" not in text, text
    runbook = urlsplit(annotations["runbook_url"])
    assert runbook.path.endswith("/RUNBOOK.md")
    assert runbook.fragment == AGE_ALERT.lower()
    assert runbook.fragment in markdown.anchors((REPO / "RUNBOOK.md").read_text())

    # It crossed the quota after the stall began and stayed over it for the rule's `for`
    # (Prometheus sends startsAt = when the alert went from pending to firing).
    assert _timestamp(alert["startsAt"]) >= work.stalled_at + _seconds(rule["for"]) - 1.0
    # Instant queries over a range a failed scrape cannot empty (Prometheus scrapes each
    # second with a 1 s timeout; a scrape that times out marks every series stale).
    [limit] = prometheus.instant(
        f'last_over_time(pulsar_storage_backlog_quota_limit_time{{topic="{topic}"}}[30s])')
    assert float(limit["value"][1]) == work.time_limit_seconds
    over = prometheus.instant(f'max_over_time(pulsar_storage_backlog_age_seconds'
                              f'{{topic="{topic}"}}[30s]) >= {work.time_limit_seconds}')
    assert len(over) == 1

    # The consumer catches up: everything is acknowledged and the page resolves.
    caught_up = scenario.broker.consume_all(topic, work.stalled_subscription)
    assert caught_up == work.stalled_messages
    resolved, ended = _wait_for_alert(scenario, AGE_ALERT, topic, "resolved")
    assert resolved.path == "/pager"
    assert resolved.payload["status"] == "resolved"
    assert ended["labels"] == labels
    assert _timestamp(ended["endsAt"]) > _timestamp(ended["startsAt"])
    assert webhook.received.index(resolved) > webhook.received.index(firing)
    poll(lambda: prometheus.instant(f'pulsar_storage_backlog_age_seconds{{topic="{topic}"}} == 0'),
         timeout=60, what="backlog age back to 0 in Prometheus")
