"""The one thresholds object the alert rules, their runbooks and the dashboards are rendered with.

As in a monitoring mixin, each number lives here once and appears in the alert expression, the
alert's description and the dashboard's threshold line. A few values are not thresholds but
settings of the exporter that Prometheus cannot see (no metric carries the check interval or
the load manager's overload threshold): they default to `exporter.config`'s defaults and
`Thresholds.for_config` copies them from a deployment's config.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import jinja2

from exporter.config.settings import Config, LoadManager, ResourceGroupEngine
from exporter.config.units import format_duration
from exporter.generate import selector as selectors

# The Prometheus job of the exporter's target: the Helm chart's ServiceMonitor sets it
# (helm/pulsar-quota-exporter/values.yaml, serviceMonitor.job).
EXPORTER_JOB = "pulsar-quota-exporter"
DEFAULT_SELECTOR = f'job="{EXPORTER_JOB}"'
RUNBOOK_BASE_URL = (
    "https://github.com/pulsar-quota-exporter/pulsar-quota-exporter/blob/main/RUNBOOK.md"
)


@dataclass(frozen=True)
class Thresholds:
    """Durations are seconds, ratios fractions (0.8 = 80 %)."""

    # --- where things are -------------------------------------------------------------------
    # Label matchers every alert expression and dashboard query adds to each of our series
    # (`label op "value"`, comma-separated), so a broker's own same-named PIP-323 series,
    # scraped under its job, never fire our alerts nor show on our dashboards.
    selector: str = DEFAULT_SELECTOR
    runbook_base_url: str = RUNBOOK_BASE_URL  # runbook_url = this + "#" + lower-case alert name

    # --- mirrored exporter settings (not visible as metrics) -----------------------------------
    check_interval: float = Config.check_interval
    report_interval: float = ResourceGroupEngine.report_interval
    max_suppressed_rounds: int = ResourceGroupEngine.max_suppressed_rounds
    stale_after: float = ResourceGroupEngine.stale_after
    overload_ratio: float = LoadManager.overload_threshold_percent / 100

    # --- backlog quotas (PIP-323) ---------------------------------------------------------------
    backlog_near_ratio: float = 0.8  # warn when age or size reaches this share of its quota
    backlog_near_for: float = 300
    backlog_over_for: float = 60  # the verdict changes once per check; one more tick is enough
    eviction_window: float = 600
    check_slow_fraction: float = 0.5  # p99 check duration above this share of check_interval
    check_slow_window: float = 900
    check_slow_for: float = 300

    # --- resource groups (PIP-82) ---------------------------------------------------------------
    rg_saturated_ratio: float = 0.95
    rg_saturated_for: float = 600
    rg_overshoot_ratio: float = 1.1  # PIP-82 tolerates converging "within, say, 10%"
    rg_overshoot_for: float = 300
    report_stale_slack_rounds: int = 1
    report_stale_for: float = 60
    participant_window: float = 900
    reports_rejected_window: float = 900

    # --- load -------------------------------------------------------------------------------
    broker_overloaded_for: float = 300
    split_candidate_for: float = 900

    # --- the exporter itself ----------------------------------------------------------------
    exporter_down_for: float = 300
    exporter_absent_for: float = 900
    source_down_for: float = 300
    source_errors_window: float = 900
    source_errors_min: int = 3
    cycle_stalled_intervals: int = 3
    cycle_stalled_for: float = 300
    evictions_failed_window: float = 900
    no_enforcer_for: float = 300
    no_usage_reporter_for: float = 300
    topics_capped_for: float = 900

    def __post_init__(self) -> None:
        problems = []
        try:
            selectors.parse(self.selector)
        except ValueError as e:
            problems.append(str(e))
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                continue
            if not (math.isfinite(value) and value >= 0):
                problems.append(f"{f.name} must be a number >= 0, found {value}")
            elif value == 0 and f.name.endswith(("_window", "_interval", "_after", "_min")):
                problems.append(f"{f.name} must be above 0")  # a [0s] range selects nothing
        if not 0 < self.backlog_near_ratio < 1:
            problems.append("backlog_near_ratio must be between 0 and 1 (1 is the quota itself)")
        if not self.rg_saturated_ratio < self.rg_overshoot_ratio:
            problems.append("rg_saturated_ratio must be below rg_overshoot_ratio")
        if not self.report_stale_after < self.stale_after:
            problems.append(
                f"usage reports count as stale after {self.report_stale_after:g}s, which must be "
                f"before peers are dropped (stale_after {self.stale_after:g}s)"
            )
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def for_config(cls, config: Config, **overrides: Any) -> Thresholds:
        """Thresholds whose mirrored settings match a deployment's config."""
        engine, load = config.resource_group_engine, config.load_manager
        return cls(**{
            "check_interval": config.check_interval,
            "report_interval": engine.report_interval,
            "max_suppressed_rounds": engine.max_suppressed_rounds,
            "stale_after": engine.stale_after,
            "overload_ratio": load.overload_threshold_percent / 100,
            **overrides,
        })

    def with_(self, **changes: Any) -> Thresholds:
        return replace(self, **changes)

    @property
    def check_slow_seconds(self) -> float:
        return self.check_slow_fraction * self.check_interval

    @property
    def report_forced_every(self) -> float:
        """A live peer reports at least this often even when its usage does not move: after
        max_suppressed_rounds skipped rounds the next report is forced (Pulsar's rule)."""
        return (self.max_suppressed_rounds + 1) * self.report_interval

    @property
    def report_stale_after(self) -> float:
        return self.report_forced_every + self.report_stale_slack_rounds * self.report_interval

    @property
    def cycle_stalled_after(self) -> float:
        return self.cycle_stalled_intervals * self.check_interval

    @property
    def selector_text(self) -> str:
        """The selector as the expressions carry it: `job="a", env="b"`."""
        return selectors.text(self.selector)

    def runbook_url(self, alert: str) -> str:
        return f"{self.runbook_base_url}#{alert.lower()}"


DEFAULT = Thresholds()


def percent(ratio: float) -> str:
    """`0.95` → `95%`, `1.1` → `110%` (no float noise)."""
    return f"{round(ratio * 100, 6):g}%"


def number(value: float) -> str:
    """`420.0` → `420`, `0.95` → `0.95`: PromQL literals without float noise or lost digits."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def template_environment(*directories: Path) -> jinja2.Environment:
    """Jinja with `[[ ]]`/`[% %]` delimiters, so Prometheus' and Grafana's own `{{ }}` pass
    through untouched; undefined names fail the render instead of printing nothing."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in directories]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        block_start_string="[%",
        block_end_string="%]",
        variable_start_string="[[",
        variable_end_string="]]",
        comment_start_string="[#",
        comment_end_string="#]",
    )
    env.filters["dur"] = format_duration  # `10m`, `1h30m`, `250ms`: also Prometheus syntax
    env.filters["window"] = lambda seconds: f"[{format_duration(seconds)}]"  # a range selector
    env.filters["pct"] = percent
    env.filters["num"] = number
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env
