"""Which topics the admin REST must look at next cycle, so that its requests grow with what
needs looking at, not with the topics there are.

A topic's stats (`GET …/{topic}/stats`) add to the brokers' /metrics what only matters for
a topic over, or maybe over, a quota: which subscription holds the oldest message
(PIP-323), each subscription's backlog bytes, the broker's measured age where it prints no
age gauge (brokers before 3.2, or before its first backlog-quota check of a topic). Two
more reasons to read them are Pulsar's own: a stats request loads an unloaded topic on its
owner (`BrokerService.getTopic` creates it on demand), and only a loaded topic is on any
broker's /metrics. After its bundle moved or its broker died, an idle topic is loaded
nowhere until something asks for it; the per-topic walk used to be that something. So the
walk reads the stats of:

- topics over a quota, or with a time limit in force, a backlog and no age measured by the
  broker (`TimeSource.ESTIMATED` or `LOWER_BOUND`), or whose time limit has no measure;
- topics whose Pulsar limits as resolved here differ from the limits their broker prints
  it applies (`pulsar_storage_backlog_quota_limit{,_time}`; `backlog/quotas.disagrees`,
  asked by the decide): a topic-level policy set since we read it; the walk reads their
  policies again too;
- topics listed by the admin REST and not on any broker's fresh /metrics (kept by the
  topic filter): unloaded, or their broker's /metrics failing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from exporter.config.settings import TopicFilter
from exporter.engine.backlog.topicdecisions import UNKNOWN, WITHIN
from exporter.pipeline.tables import keep
from exporter.pulsarnames import after_domain

if TYPE_CHECKING:
    from exporter.engine.decide import Decisions



def stats_wanted(decisions: Decisions, listed: Sequence[str], *, rule: TopicFilter,
                 ours: Collection[str], stale: Collection[str]) -> set[str]:
    """The topics (of `listed`, partitions by their own names) whose stats to read, after
    `decisions` (the last cycle's): with `stale` the topics of theirs no broker listed
    afresh (held, or of a broker whose /metrics failed). A listed topic the decisions do
    not name was on no broker's tables, unless it is one of `ours` (the usage and lease
    topics, never decided; compared after the domain, as pulsar-lite names them without).

    The decisions' names are looked up in a set made here, on the admin walk's thread, not
    kept between cycles as the last cycle's Arrow topic column: cheaper in time and memory
    than `pc.is_in` over the listed names (docs/design.md, "The driver once every age table
    is full")."""
    c = decisions.topics.columns
    # over a quota, an age unknown, or within its time limit on an estimate
    wanted = {c.topic[k] for k in np.flatnonzero(
        c.over | (c.time == UNKNOWN) | ((c.time == WITHIN) & (c.messages > 0) & ~c.measured)
    ).tolist()}
    seen, own = set(c.topic), {after_domain(t) for t in ours}
    unseen = [t for t in listed if t not in seen and after_domain(t) not in own]
    del seen
    if unseen and rule.active:
        names = pa.array(unseen, pa.string())
        unseen = names.filter(keep(names, rule)).to_pylist()
    return wanted | decisions.doubted | set(unseen) | set(stale)
