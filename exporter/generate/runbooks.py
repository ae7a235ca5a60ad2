"""The README's runbook section: one entry per alert, the target of every `runbook_url`.

The alert list comes from the rendered rules (so a new alert without a runbook fails the
generator); the prose is here, written with the same thresholds object as the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.catalogue import Domain
from exporter.generate import alerts as alert_rules
from exporter.generate.thresholds import DEFAULT, Thresholds, percent, template_environment

BEGIN = "<!-- BEGIN GENERATED RUNBOOKS -->"
END = "<!-- END GENERATED RUNBOOKS -->"

TITLES: Mapping[Domain, str] = {
    Domain.BACKLOG: "Backlog-quota alerts",
    Domain.RESOURCE_GROUPS: "Resource-group alerts",
    Domain.LOAD: "Load alerts",
    Domain.EXPORTER: "Exporter alerts",
}


@dataclass(frozen=True)
class Runbook:
    impact: str
    diagnose: str
    mitigate: str


# What Pulsar 4.0.8 does, measured (tests/integration/test_apache_pulsar_producer_policies.py):
# `BacklogQuotaManager` disconnects the producers at its next check, `ServerCnx.handleProducer`
# then refuses them with a policy-specific server error.
_BLOCKED = (
    "from the broker's next quota check (`backlogQuotaCheckIntervalInSeconds`), if the quota "
    "is the broker's own (label `enforced_by=\"broker\"`; with `enforced_by=\"none\"` the "
    "quota is only in the exporter's YAML and blocks nothing): the broker "
    "disconnects them and refuses them until the backlog is back under the quota. "
    "`producer_request_hold`: the client keeps reconnecting and holds their sends until its "
    "send timeout (`pulsar.Timeout` in Python); a new producer fails with "
    "`ProducerBlockedQuotaExceededError`. `producer_exception`: sends and new producers fail "
    "at once with `ProducerBlockedQuotaExceededException`.")


def _texts(t: Thresholds) -> dict[str, Runbook]:
    topic_stats = "`pulsar-admin topics stats <topic>` (per subscription: `msgBacklog`, " \
        "`backlogSize`, `msgRateOut`, consumers)"
    return {
        "PulsarBacklogAgeNearQuota": Runbook(
            impact="None yet. When the age reaches the quota the topic's policy applies: "
            "producers are held or failed, or the oldest backlog is evicted.",
            diagnose=f"Find the subscription holding the oldest message (`pulsar_storage_backlog_"
            f"oldest_subscription_info`) and look at it with {topic_stats}. A subscription "
            "without consumers, or whose consumers stopped acknowledging, is the usual cause.",
            mitigate="Restart or scale the slow consumers; drop a subscription nobody reads "
            "(`pulsar-admin topics unsubscribe`); or raise the time quota "
            "(`backlog_quotas` in the exporter's config and the broker's backlog quota).",
        ),
        "PulsarBacklogSubscriptionAgeNearQuota": Runbook(
            impact="None yet for this subscription's consumers. When the topic's oldest "
            "message reaches the quota the topic's policy applies to every subscription.",
            diagnose=f"{topic_stats} for the subscription named in the alert: connected "
            "consumers, `msgRateOut`, unacknowledged messages.",
            mitigate="Get this subscription's consumers going, or drop it if nobody reads "
            "it (`pulsar-admin topics unsubscribe`). The alert needs "
            "`exposition.subscription_backlog_age: true`.",
        ),
        "PulsarBacklogAgeOverQuota": Runbook(
            impact=f"Producers of the topic are blocked now, {_BLOCKED}",
            diagnose=f"As for PulsarBacklogAgeNearQuota: {topic_stats}. Check whether the "
            "consumers are connected and acknowledging.",
            mitigate="Get the consumers going. To unblock producers at once, skip the oldest "
            "backlog of the slow subscription (`pulsar-admin topics skip` or `clear-backlog`) "
            "knowing those messages are lost for it, or raise the quota; a connected producer "
            "then resumes at its client's next reconnect.",
        ),
        "PulsarBacklogSizeNearQuota": Runbook(
            impact="None yet. At the size quota the topic's policy applies.",
            diagnose=f"{topic_stats}; compare `backlogSize` with the quota "
            "(`pulsar_storage_backlog_quota_limit`). A burst of large messages or a stalled "
            "subscription are the usual causes.",
            mitigate="Speed up or scale the consumers, or raise the size quota (it must fit "
            "the bookies' disk).",
        ),
        "PulsarBacklogSizeOverQuota": Runbook(
            impact=f"Producers of the topic are blocked now, {_BLOCKED}",
            diagnose=f"{topic_stats}.",
            mitigate="As for PulsarBacklogAgeOverQuota: consumers first; skipping backlog or "
            "raising the quota unblocks producers at once (new ones; connected ones at their "
            "client's next reconnect).",
        ),
        "PulsarBacklogEvictions": Runbook(
            impact="Slow subscriptions lose messages: the exporter moved their cursors past "
            "unacknowledged backlog to bring the topic back under its quota.",
            diagnose="Which subscriptions fall behind: "
            f"{topic_stats}. The eviction rate per quota type is on the Backlog quotas dashboard.",
            mitigate="If the data matters, fix the consumers or raise the quota; if eviction is "
            "the intended policy for this topic, silence the alert for it.",
        ),
        "PulsarBacklogWouldEvict": Runbook(
            impact="None: enforcement is off (`backlog_quotas.enforce: false`). With it on, "
            "these evictions would have dropped messages for slow subscriptions.",
            diagnose="The Backlog quotas dashboard shows would-evict decisions per quota type.",
            mitigate="Before turning enforcement on, make sure these topics are meant to evict.",
        ),
        "PulsarBacklogQuotaCheckSlow": Runbook(
            impact="A check taking longer than the check interval makes the "
            "next one skip (`pulsar_quota_exporter_cycles_skipped_total`): quotas are checked "
            "and enforced less often than configured.",
            diagnose="Exporter health dashboard: which stage takes the time "
            "(`pulsar_quota_exporter_cycle_stage_duration_seconds`), how many topics "
            "(`pulsar_quota_exporter_topics`), slow sources (staleness).",
            mitigate="Give the Spark pipeline more cores or a cluster (`spark.master`), turn "
            "off topic-level series (`exposition.topic_level: false`), or lengthen "
            "`check_interval` (a restart applies it; the rule follows by itself).",
        ),
        "PulsarResourceGroupSaturated": Runbook(
            impact="The group's producers or consumers are throttled to its quota.",
            diagnose="Resource groups dashboard: usage per participant against its local quota, "
            "and the throttle delay.",
            mitigate="If the demand is legitimate, raise the group's quota "
            "(`resource_groups.<name>`); otherwise this is the quota working.",
        ),
        "PulsarResourceGroupQuotaOvershoot": Runbook(
            impact=f"The group uses more than {percent(t.rg_overshoot_ratio)} of its quota: "
            "other tenants are not protected from it.",
            diagnose="Resource groups dashboard: are all participants reporting (participants, "
            "report flow, report age)? A participant whose usage is unknown gets no share in "
            "the split. Compare local quotas with usage per participant.",
            mitigate="Restore the usage-report flow (see the stale and rejected report alerts); "
            "check that every broker serving the group enforces its local quota; with the "
            "`pulsar` allocator stuck on an uneven split, consider `allocator: fair`.",
        ),
        "PulsarResourceGroupUsageReportsStale": Runbook(
            impact="The quota split uses the participant's old usage; after "
            "`stale_after` it is dropped and its share goes to the others.",
            diagnose="Is the participant's exporter up (PulsarQuotaExporterDown)? Can it "
            "publish to the usage topic (`resource_group_engine.topic`)? Its "
            "`pulsar_quota_exporter_usage_reports_sent_total` should grow.",
            mitigate="Restart the silent participant's exporter or restore its connection to "
            "Pulsar (`sources.service_url`).",
        ),
        "PulsarResourceGroupParticipantMissing": Runbook(
            impact="The participant's usage no longer counts: until it reports again, the "
            "other participants share its quota, so the group can exceed its quota if it is "
            "in fact still serving traffic.",
            diagnose="Which participant: `pulsar_quota_exporter_usage_peer_report_age_seconds` "
            "before the drop. A clean shutdown says goodbye and is not counted here.",
            mitigate="Bring the participant's exporter back, or confirm it was retired.",
        ),
        "PulsarResourceGroupUsageReportsRejected": Runbook(
            impact="The sender's usage is missing from the quota split.",
            diagnose="The `reason` label: `malformed`, `truncated`, `oversized` or "
            "`unknown_version` point to a mismatched exporter version; `replayed`, `spoofed` "
            "or `too_old` to clock skew or someone else writing to the usage topic; "
            "`unsigned`, `unknown_key` or `bad_signature` (with `report_signing` on) to a "
            "peer without the secret, a secret rotated on some peers only, or a forger.",
            mitigate="Run one exporter version across participants; sync clocks; restrict "
            "who may produce to the usage topic; give every participant the same secret "
            "file (rotation: new secret second, then first, then alone).",
        ),
        "PulsarLoadBrokerOverloaded": Runbook(
            impact="The broker is short of CPU, memory or bandwidth: latency rises for every "
            "topic it serves.",
            diagnose="Load dashboard: which resource (`pulsar_load_broker_resource_usage_ratio`) "
            "and how much the load manager would shed.",
            mitigate="Let Pulsar's load shedding move bundles (or unload the hottest ones with "
            "`pulsar-admin namespaces unload`); add brokers if all are busy.",
        ),
        "PulsarLoadBundleSplitCandidate": Runbook(
            impact="None yet; a bundle that is too large cannot be moved off a busy broker in "
            "small enough pieces.",
            diagnose="The `reason` label names the threshold (topics, sessions, msg rate, "
            "bandwidth); see the Load dashboard.",
            mitigate="Split it (`pulsar-admin namespaces split-bundle`), or enable automatic "
            "splitting on the brokers.",
        ),
        "PulsarQuotaExporterDown": Runbook(
            impact="No backlog-quota checks or evictions, no resource-group quota split, no "
            "metrics from this instance.",
            diagnose="The pod's or process' logs; `/healthz` and `/readyz`; Prometheus' target "
            "page shows the scrape error.",
            mitigate="Restart it. `pulsar-quota-exporter validate-config` finds a config that "
            "no longer loads.",
        ),
        "PulsarQuotaExporterAbsent": Runbook(
            impact="As for PulsarQuotaExporterDown, and none of the exporter's other alerts "
            "can fire.",
            diagnose=f"Prometheus' service discovery: is there an `up` series matching "
            f"`{{{t.selector_text}}}`? (Scraped under another job, the exporter needs the rules "
            "rendered with `generate --selector`, see above.)",
            mitigate="Deploy the exporter, or fix the scrape configuration.",
        ),
        "PulsarQuotaExporterCyclesStalled": Runbook(
            impact="The exporter serves old data and neither checks nor enforces quotas.",
            diagnose="`/api/v1/status` and `/healthz` show the last cycle; the logs show where "
            "it hangs (often the Spark session or a source that never answers).",
            mitigate="Restart the exporter; lower the sources' `timeout` below `check_interval`.",
        ),
        "PulsarQuotaExporterSourceDown": Runbook(
            impact="The exporter keeps that source's last good data: backlog ages and rates "
            "from it grow stale, and decisions are made on them.",
            diagnose="The `reason` of `pulsar_quota_exporter_source_scrape_errors_total` for "
            "the source; fetch its URL by hand from the exporter's host.",
            mitigate="Fix the broker or the network path; fix TLS or token settings for "
            "`auth` and `tls` errors.",
        ),
        "PulsarQuotaExporterSourceErrors": Runbook(
            impact="Some cycles run on old data from that source.",
            diagnose="The `reason` label; the Exporter health dashboard shows errors by reason "
            "over time.",
            mitigate="`timeout`: raise the source's `timeout` (below `check_interval`) or "
            "reduce the broker's metrics size; `malformed`: the broker's metrics text does "
            "not parse (report it with a sample).",
        ),
        "PulsarQuotaExporterEvictionsFailing": Runbook(
            impact="Topics over a `consumer_backlog_eviction` quota keep their backlog, which "
            "grows until storage or the quota's size limit bites.",
            diagnose="The `reason` label and the exporter's logs: `no_service_url` means "
            "`sources.service_url` is not set; `forbidden`, the role lacks `consume` "
            "([Permissions](#permissions)); `consumer_connected`, the admin REST refused to "
            "expire while consumers are connected (it passes once the oldest message ages), or "
            "the binary protocol met a connected consumer; `system_cursor`, a `__compaction` "
            "cursor over the quota was left alone; `lease_lost`, another instance took over.",
            mitigate="Grant what is missing, fix the connection, or for `system_cursor` raise "
            "the quota or set `backlog_quotas.evict_system_cursors`; then watch the eviction "
            "counter.",
        ),
        "PulsarQuotaExporterNoEnforcer": Runbook(
            impact="Nothing evicts: topics over a `consumer_backlog_eviction` quota keep "
            "their backlog while every enforcing instance stands by.",
            diagnose="The instances' logs: \"this role may not hold the enforcer lease\" (it "
            "needs `produce` on the namespace of `backlog_quotas.lock_topic`), or \"cannot "
            "reach the enforcer lease\" (the broker or the topic's namespace); an instance "
            "outside this Prometheus holding the same lock topic also keeps these standing by.",
            mitigate="Grant `produce` on the lock topic's namespace, or point "
            "`backlog_quotas.lock_topic` at a namespace the role may produce to.",
        ),
        "PulsarQuotaExporterTopicSeriesCapped": Runbook(
            impact="Topics beyond `filters.max_topics` are checked and enforced, but have no "
            "topic-level series: their panels are empty and topic alerts cannot fire for them "
            "(namespace-level series still include them).",
            diagnose="`pulsar_quota_exporter_topics` against `filters.max_topics`; the topics "
            "kept are those over a quota first, then the oldest and largest backlogs.",
            mitigate="Raise `filters.max_topics` if Prometheus can take the series, or leave "
            "topics that need no watching out with `filters.topics.deny`.",
        ),
    }


def runbook_section(thresholds: Thresholds = DEFAULT) -> str:
    """The markdown between the markers (markers included)."""
    rules = alert_rules.alerts(thresholds)
    texts = _texts(thresholds)
    names = [a.name for a in rules]
    missing, extra = set(names) - set(texts), set(texts) - set(names)
    if missing or extra:
        raise ValueError(f"runbooks missing for {sorted(missing)}, left over for {sorted(extra)}")
    env = template_environment(alert_rules.TEMPLATES)
    body = env.get_template("runbooks.md.j2").render(
        t=thresholds, alerts=rules, texts=texts, titles=TITLES, files=alert_rules.RULE_FILES,
    )
    return f"{BEGIN}\n{body.strip()}\n{END}"


def update(readme_text: str) -> str:
    """Replace the section between the markers. A README without them is left alone (a
    fork may drop the section); the tests assert that ours has them."""
    head, sep, rest = readme_text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        return readme_text
    return head + runbook_section() + tail
