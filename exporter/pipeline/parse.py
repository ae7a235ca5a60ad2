"""Broker body text → samples, vectorised: RE2 (Arrow compute) validates, numpy cuts.

Parsing is the exporter's hot path: a 10k-topic Apache Pulsar body is ~500k lines, and a
fleet is a hundred of them per check interval. So no step runs Python per line:

1. the body is split at "\\n" into one zero-copy string array (`slices.split_lines`);
2. lines of the families the exporter reads are picked first, by one anchored RE2 match
   (most of a Pulsar body is JVM, bookie and per-topic families it never reads);
3. those lines are validated against the text format's grammar by one RE2 match (a DFA,
   no captures);
4. names, values and label pairs of valid lines are cut by byte arithmetic over the
   buffer (`slices`), and only the eight labels the exporter reads are gathered.

What the parse tolerates, because real bodies have it: several expositions concatenated
(a TYPE line twice, a family split apart, samples with no TYPE line), HELP/TYPE/other
comments (dropped unread), indented lines, a space before "{", trailing commas and spaces
in label sets, empty label values (= label absent, as in Prometheus), escaped quotes,
backslashes and newlines in label values, `NaN`, `±Inf`, Java's `-Infinity`, integers
without a decimal point, millisecond timestamps, "\\r\\n" line ends.

Counted, never fatal (`MalformedReason`): a line of a read family that does not fit the
grammar, or any other line that is not `name[{…}] value…` (syntax); a read family's
sample naming a label twice (duplicate_label); a short topic name with no namespace to
complete it (unkeyed_topic). Label values holding U+0000–U+0003 count as syntax errors
(the parse uses them as placeholders). Lines of other families are checked for that
shape only, not label by label: that would cost most of the parse, for series nobody
reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.names import PARTITION_SUFFIX
from exporter.pipeline import slices
from exporter.pipeline.model import TOPIC_ONLY, Level, MalformedReason
from exporter.pipeline.otel import LABEL_ALIASES, OTEL_TOPIC_FAMILIES

# Families the exporter reads, by the level whose labels they carry (model.Level).
SUBSCRIPTION_FAMILIES: dict[str, str] = {
    "pulsar_subscription_back_log": "backlog_messages",
    "pulsar_subscription_unacked_messages": "unacked_messages",
    "pulsar_out_messages_total": "msg_out_total",
    "pulsar_out_bytes_total": "bytes_out_total",
    "pulsar_subscription_consumers_count": "consumers",
    "pulsar_subscription_msg_rate_out": "rate_out",
    "pulsar_subscription_msg_throughput_out": "throughput_out",
    "pulsar_subscription_last_acked_timestamp": "last_acked_seconds",
    "pulsar_subscription_last_consumed_timestamp": "last_consumed_seconds",
    # PIP-492 (Pulsar 5.0, exposeSubscriptionBacklogAgeInPrometheus): not printed when unknown
    "pulsar_subscription_storage_backlog_age_seconds": "backlog_age_seconds",
}
CLASSIC_TOPIC_FAMILIES: dict[str, str] = {
    "pulsar_in_messages_total": "msg_in_total",
    "pulsar_in_bytes_total": "bytes_in_total",
    "pulsar_out_messages_total": "msg_out_total",
    "pulsar_out_bytes_total": "bytes_out_total",
    "pulsar_storage_size": "storage_size_bytes",
    "pulsar_storage_backlog_size": "backlog_size_bytes",
    "pulsar_msg_backlog": "msg_backlog",
    "pulsar_producers_count": "producers",
    "pulsar_consumers_count": "consumers",
    "pulsar_subscriptions_count": "subscriptions",
    "pulsar_rate_in": "rate_in",
    "pulsar_rate_out": "rate_out",
    "pulsar_throughput_in": "throughput_in",
    "pulsar_throughput_out": "throughput_out",
    # PIP-323 (Apache Pulsar >= 3.2), per topic only: the slowest cursor's backlog age as of
    # the broker's last backlog-quota check, and the topic's effective quota limits.
    "pulsar_storage_backlog_age_seconds": "backlog_age_seconds",
    "pulsar_storage_backlog_quota_limit": "backlog_quota_limit_bytes",
    "pulsar_storage_backlog_quota_limit_time": "backlog_quota_limit_seconds",
    # One sample per remote cluster (`remote_cluster`), summed: the replication class of
    # Pulsar master's resource groups pools every remote cluster's.
    "pulsar_replication_rate_out": "replication_rate_out",
    "pulsar_replication_throughput_out": "replication_throughput_out",
}
# Columns summed over their samples (one per remote cluster), not maxed.
REPLICATION_COLUMNS = ("replication_rate_out", "replication_throughput_out")
# The same columns from the OpenTelemetry exposition (otel.py): a column may be filled by
# a classic family and an OpenTelemetry one.
TOPIC_FAMILIES: dict[str, str] = {**CLASSIC_TOPIC_FAMILIES, **OTEL_TOPIC_FAMILIES}
# Apache Pulsar's namespace-level series (topic-level metrics off) use the topic names;
# ages and limits make no sense summed over a namespace (model.TOPIC_ONLY). OpenTelemetry
# has no namespace-level backlog series.
NAMESPACE_FAMILIES: dict[str, str] = {
    **{f: c for f, c in CLASSIC_TOPIC_FAMILIES.items() if c not in TOPIC_ONLY},
    "pulsar_topics_count": "topics"}
# Broker-wide: Apache Pulsar's load-manager resource usage, percent of each limit
# (`ResourceUsage.percentUsage()`), labelled {cluster, broker=<advertised host>,
# metric="loadBalancing"} (pulsar-lite has none of them), and the process start time.
BROKER_FAMILIES: dict[str, str] = {
    "pulsar_lb_cpu_usage": "cpu_percent",
    "pulsar_lb_memory_usage": "memory_percent",
    "pulsar_lb_directMemory_usage": "direct_memory_percent",
    "pulsar_lb_bandwidth_in_usage": "bandwidth_in_percent",
    "pulsar_lb_bandwidth_out_usage": "bandwidth_out_percent",
    # The process collector's start time (Pulsar's and pulsar-lite's alike): a broker that
    # restarted between two cycles shows a new one (pipeline/lastgood.py).
    "process_start_time_seconds": "started_at",
}
FAMILIES: tuple[str, ...] = tuple(sorted(
    set(SUBSCRIPTION_FAMILIES) | set(TOPIC_FAMILIES) | set(NAMESPACE_FAMILIES)
    | set(BROKER_FAMILIES)))

_REPLICATION_CODES = pa.array([FAMILIES.index(f) for f, c in TOPIC_FAMILIES.items()
                               if c in REPLICATION_COLUMNS], pa.int32())

# Labels read from kept samples; the others are ignored. OpenTelemetry's spellings of the
# same labels fill the same columns (otel.LABEL_ALIASES).
LABELS = ("cluster", "namespace", "topic", "partition", "subscription",
          "consumer_name", "consumer_id", "remote_cluster")
_SPELLINGS: dict[str, tuple[str, ...]] = {
    label: (label, *(o for o, c in LABEL_ALIASES.items() if c == label)) for label in LABELS}
assert max(len(s) for names in _SPELLINGS.values() for s in names) <= 24, \
    "label names are matched by their length and bytes 0-8, 8-16 and the last 8"

# --- the text format, in RE2 syntax (linear time: no backtracking to guard against) -------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_QUOTED = r'"(?:[^"\\\n]|\\[^\n])*"'  # escapes: \\ \" \n (any escaped char accepted)
_PAIR = rf"{_LABEL_NAME}[ \t]*=[ \t]*{_QUOTED}"
_VALUE = (r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf(?:inity)?))"
          r"|(?i:nan)")
_LABEL_SET = rf"[ \t]*(?:{_PAIR}(?:[ \t]*,[ \t]*{_PAIR})*[ \t]*,?[ \t]*)?"
SAMPLE_LINE = (rf"^[ \t]*{_NAME}(?:[ \t]*\{{{_LABEL_SET}\}}[ \t]*|[ \t]+)(?:{_VALUE})"
               r"(?:[ \t]+-?[0-9]+)?[ \t]*\r?\n?$")
_READ_FAMILY = "^[ \t]*(?:" + "|".join(FAMILIES) + ")[ \t{]"
_COMMENT_OR_BLANK = r"^[ \t]*(?:#|\r?\n?$)"
# A sample of a family not read: its shape is checked (name, braces, value), not its labels.
_ANY_SAMPLE = rf"^[ \t]*{_NAME}(?:[ \t]*\{{.*\}}[ \t]*|[ \t]+)(?:{_VALUE})(?:[ \t]|\r?\n?$)"
# One RE2 pass over the lines of families not read (one alternation, one DFA).
_COMMENT_OR_SAMPLE = f"(?:{_COMMENT_OR_BLANK})|(?:{_ANY_SAMPLE})"
_PLACEHOLDERS = "[\x00-\x03]"
_ESCAPED_BACKSLASH, _ESCAPED_QUOTE = "\x00", "\x01"

_S = pa.large_string()
# One row per kept sample of a read family, labels raw: keys are built per entity
# (tables.py), not per sample.
SAMPLES = pa.schema([
    ("family", pa.int32()),  # index into FAMILIES
    ("value", pa.float64()),
    *[(label, pa.dictionary(pa.int32(), _S)) for label in LABELS],
])


@dataclass(frozen=True)
class Parsed:
    """One chunk of a body: its samples and its skipped lines by reason."""

    samples: pa.Table  # SAMPLES
    malformed: dict[MalformedReason, int]


def parse_text(data: bytes | memoryview) -> Parsed:
    """Whole lines of exposition text → `Parsed` (see the module docstring)."""
    lines = slices.split_lines(data)
    read = pc.match_substring_regex(lines, _READ_FAMILY)
    other = lines.filter(pc.invert(read))
    unreadable = pc.invert(pc.match_substring_regex(other, _COMMENT_OR_SAMPLE))
    candidates = lines.filter(read)
    valid = pc.match_substring_regex(candidates, SAMPLE_LINE)
    raw = np.frombuffer(data, np.uint8)
    if len(raw) and raw.min() < 4:  # a placeholder byte somewhere: which lines
        valid = pc.and_(valid, pc.invert(pc.match_substring_regex(candidates, _PLACEHOLDERS)))
    syntax = pc.sum(unreadable).as_py() or 0
    syntax += len(candidates) - (pc.sum(valid).as_py() or 0)
    good = candidates.filter(valid)
    # A backslash anywhere in the piece (memchr on bytes: a comparison array cost 80 ms on
    # a 65 MB body) sends the good lines through the unescaping; it is a no-op on others.
    escaped = b"\\" in data if isinstance(data, bytes) else bool((raw == ord("\\")).any())
    samples, duplicates = _cut(good, escaped)
    return Parsed(samples, {MalformedReason.SYNTAX: syntax,
                            MalformedReason.DUPLICATE_LABEL: duplicates})


def _cut(good: pa.LargeStringArray, escaped: bool) -> tuple[pa.Table, int]:
    """Valid sample lines → SAMPLES rows, and how many named a label twice (left out).
    `escaped`: whether the lines may hold a backslash."""
    off, data = slices.buffers(good)
    if escaped:  # quotes of the label syntax are then the only '"' left in a line
        good = pc.replace_substring(good, "\\\\", _ESCAPED_BACKSLASH)
        good = pc.replace_substring(good, '\\"', _ESCAPED_QUOTE)
        good = pc.replace_substring(good, "\\n", "\n")
        good = pc.replace_substring_regex(good, r"\\(.)", r"\1")
        off, data = slices.buffers(good)
    n = len(good)
    start = slices.skip(data, off[:-1], off[1:], b" \t")
    end = slices.back(data, off[1:], start, b" \t\r\n")
    brace_rel = pc.find_substring(good, "{").to_numpy(zero_copy_only=False)
    braced = brace_rel >= 0
    brace = off[:-1] + brace_rel
    name_end = slices.back(data, brace, start, b" \t")
    bare = np.flatnonzero(~braced)  # `name value`: the name ends at the first blank
    name_end[bare] = slices.until(data, start[bare], end[bare], b" \t")
    closes = np.flatnonzero(data == ord("}"))
    last_close = closes[np.maximum(np.searchsorted(closes, end, "left") - 1, 0)] \
        if len(closes) else np.zeros(n, np.int64)
    after_labels = np.where(braced, last_close + 1, name_end)
    value_start = slices.skip(data, after_labels, end, b" \t")
    value_end = slices.until(data, value_start, end, b" \t")
    names = slices.distinct(data, start, name_end)
    family = pc.take(pc.index_in(names.dictionary, pa.array(FAMILIES, _S)), names.indices)
    values = pc.cast(slices.views(data, value_start, value_end), pa.float64())
    labels, duplicate = _labels_per_set(data, brace, last_close, braced, escaped)
    table = pa.table({"family": family.cast(pa.int32()), "value": values, **labels},
                     schema=SAMPLES)
    return table.filter(pa.array(~duplicate)), int(duplicate.sum())


def _labels_per_set(data: np.ndarray, brace: np.ndarray, close: np.ndarray,
                    braced: np.ndarray, escaped: bool) -> tuple[dict[str, pa.Array], np.ndarray]:
    """`_labels` of each line, worked out once per distinct label set: a broker prints the
    same set on every series of an entity (~30 families per topic), so a body has a few
    sets per topic, not one per sample. The sets are the lines' `{…}` slices, dictionary-
    encoded; each line takes its set's labels by index (none without a set)."""
    sets = slices.distinct(data, brace, close + 1, braced)
    set_off, set_data = slices.buffers(sets.dictionary)
    columns, duplicate = _labels(set_data, set_off, set_off[:-1], set_off[1:] - 1, escaped)
    which = sets.indices
    per_line = {label: pa.DictionaryArray.from_arrays(pc.take(column.indices, which),
                                                      column.dictionary)
                for label, column in columns.items()}
    index = which.fill_null(0).to_numpy(zero_copy_only=False)
    return per_line, braced & duplicate[index] if len(duplicate) else np.zeros(len(brace), bool)


def _labels(data: np.ndarray, off: np.ndarray, brace: np.ndarray, close: np.ndarray,
            escaped: bool) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The `LABELS` columns of each line (null when absent or empty) and whether the line
    names any label twice. Label sets span (brace, close); a line without one has
    brace == close."""
    n = len(brace)
    quotes = np.flatnonzero(data == ord('"'))
    row = np.searchsorted(off, quotes, "right") - 1
    inside = (quotes > brace[row]) & (quotes < close[row])
    quotes, row = quotes[inside], row[inside]
    opening, closing, row = quotes[0::2], quotes[1::2], row[0::2]
    first = np.ones(len(row), bool)
    first[1:] = row[1:] != row[:-1]
    key_from = np.where(first, brace[row] + 1, np.roll(closing, 1) + 1)
    key_start = slices.skip(data, key_from, opening, b" \t,")
    key_end = slices.back(data, opening, key_start, b" \t=")
    # Label names are compared by their length and first and last 8 bytes, and bytes 8-16
    # for a name longer than 16: exact up to 24 bytes (every name read here); duplicates
    # are found by a hash of the first, each confirmed byte for byte.
    length, head, tail = slices.short_key(data, key_start, key_end)
    word = (head * np.uint64(0x9E3779B97F4A7C15) ^ tail) * np.uint64(0xBF58476D1CE4E5B9) \
        ^ length.astype(np.uint64)

    def same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which of the key pairs (x, y) are byte-equal (few: hash-equal already)."""
        def text(i: int) -> bytes:
            return bytes(data[key_start[i]:key_end[i]])

        return np.array([text(i) == text(j) for i, j in zip(x, y, strict=True)], bool)

    duplicate = np.zeros(n, bool)
    for gap in range(1, int(np.bincount(row).max(initial=1)) if len(row) else 1):
        x = np.flatnonzero((row[gap:] == row[:-gap]) & (word[gap:] == word[:-gap]))
        duplicate[row[x[same(x, x + gap)]]] = True
    columns = {}
    for label in LABELS:
        pair = np.full(n, -1, np.int64)
        for spelling in _SPELLINGS[label]:
            hit = _named(data, key_start, key_end, length, head, tail, spelling.encode())
            pair[row[hit]] = hit
        present = pair >= 0
        if len(opening):
            v_start = np.where(present, opening[pair] + 1, 0)
            v_end = np.where(present, closing[pair], 0)
        else:  # no quoted value in the whole piece (e.g. only `name value` lines)
            v_start = v_end = np.zeros(n, np.int64)
        values = slices.distinct(data, v_start, v_end, present & (v_end > v_start))
        if escaped:
            words = pc.replace_substring(values.dictionary, _ESCAPED_BACKSLASH, "\\")
            words = pc.replace_substring(words, _ESCAPED_QUOTE, '"')
            values = pa.DictionaryArray.from_arrays(values.indices, words)
        columns[label] = values
    return columns, duplicate


def _named(data: np.ndarray, key_start: np.ndarray, key_end: np.ndarray, length: np.ndarray,
           head: np.ndarray, tail: np.ndarray, name: bytes) -> np.ndarray:
    """Indexes of the label pairs whose name is `name` (at most 24 bytes)."""
    want_length, want_head, want_tail = slices.short_key_of(name)
    hit = np.flatnonzero((head == want_head) & (length == want_length) & (tail == want_tail))
    if want_length > 16 and len(hit):
        hit = hit[slices.middle(data, key_start[hit], key_end[hit]) == slices.middle_of(name)]
    return hit


# --- keys: computed once per distinct label combination, not per sample -------------------
def topic_key(topic: pa.Array, namespace: pa.Array, partition: pa.Array) -> pa.Array:
    """The full topic name. Apache Pulsar reports it in `topic` already; pulsar-lite
    reports the short name, completed with `namespace` as persistent (its labels carry no
    domain, so a pulsar-lite non-persistent topic cannot be told apart). A `partition`
    label ≥ 0 (pulsar-lite, or Pulsar's splitTopicAndPartitionIndexLabel) becomes the
    `-partition-N` suffix unless the name has it; -1 means not partitioned. Null when a
    short name has no namespace."""
    def text(word: str) -> pa.Scalar:
        return pa.scalar(word, topic.type)

    full = pc.if_else(
        pc.match_substring(topic, "://"), topic,
        pc.binary_join_element_wise(text("persistent://"), namespace, text("/"), topic,
                                    text("")))
    numeric = pc.match_substring_regex(partition, r"^-?[0-9]{1,9}$")
    index = pc.cast(pc.if_else(numeric, partition, pa.scalar(None, partition.type)), pa.int64())
    suffix = pc.and_(pc.greater_equal(index, 0),
                     pc.invert(pc.match_substring_regex(full, PARTITION_SUFFIX)))
    suffixed = pc.binary_join_element_wise(full, text("-partition-"),
                                           pc.cast(index, topic.type), text(""))
    return pc.if_else(pc.fill_null(suffix, False), suffixed, full)


def namespace_of(topic: pa.Array) -> pa.Array:
    """`tenant/ns` (or v1 `tenant/cluster/ns`) of a full topic name; null otherwise."""
    if isinstance(topic, pa.ChunkedArray):
        topic = topic.combine_chunks()
    return pc.struct_field(pc.extract_regex(topic, r"^[^:/]+://(?P<ns>.+)/[^/]+$"), [0])


def level_of(samples: pa.Table) -> pa.Array:
    """model.Level of each sample, by the labels it carries; null for a broker-wide sample
    of a family that is not broker-wide (left out)."""
    topic, sub, ns = (samples[c].is_valid() for c in ("topic", "subscription", "namespace"))
    broker = pc.is_in(samples["family"], pa.array(
        [FAMILIES.index(f) for f in BROKER_FAMILIES], pa.int32()))
    return pc.case_when(
        pc.make_struct(pc.and_(sub, topic), topic, ns, broker),
        Level.SUBSCRIPTION.value, Level.TOPIC.value, Level.NAMESPACE.value, Level.BROKER.value)


def entity_samples(samples: pa.Table) -> pa.Table:
    """Samples that describe an entity: per-consumer samples (`consumer_name` or
    `consumer_id`) and other families' replication samples (`remote_cluster` other than
    "local": `pulsar_msg_backlog` per remote cluster) are left out, uncounted; a `level`
    column is added."""
    own = pc.and_(samples["consumer_name"].is_null(), samples["consumer_id"].is_null())
    local = pc.or_(pc.fill_null(_on_values(samples["remote_cluster"],
                                           lambda v: pc.equal(v, "local")), True),
                   pc.is_in(samples["family"], _REPLICATION_CODES))
    kept = samples.filter(pc.and_(own, local))
    level = level_of(kept)
    return kept.append_column("level", level).filter(level.is_valid())


def _on_values(column: pa.Array | pa.ChunkedArray, fn) -> pa.Array:
    """`fn` of each value of a dictionary-encoded (or plain) column, computed once per
    distinct value."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_dictionary(column.type):
        return fn(column)
    return pc.take(fn(column.dictionary), column.indices)


def unkeyed(samples: pa.Table) -> int:
    """Samples whose short topic name has no namespace to complete it."""
    short = pc.invert(_on_values(samples["topic"], lambda v: pc.match_substring(v, "://")))
    return pc.sum(pc.and_(short, samples["namespace"].is_null())).as_py() or 0
