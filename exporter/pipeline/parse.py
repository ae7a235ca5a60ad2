"""Broker body text → samples, vectorised: RE2 (Arrow compute) validates, numpy cuts.

Parsing is the exporter's hot path: a 10k-topic Apache Pulsar body is ~500k lines, and a
fleet is a hundred of them per check interval. So no step runs Python per line:

1. the body is split at "\\n" into one zero-copy string array (`slices.split_lines`);
2. lines of the families the exporter reads are picked first, by one anchored RE2 match
   (most of a Pulsar body is JVM, bookie and per-topic families it never reads), in place:
   the other lines are nulled over the same buffers, not the picked ones copied out
   (`slices.only`);
3. names, label sets, values and what follows them are cut by byte arithmetic over the
   buffer (`slices`), and each piece is checked against its part of the text format's
   grammar: the name is one of `FAMILIES`, the value and its ending are matched by RE2,
   and a label set is matched, and its labels cut, once per distinct set of the body
   (labelsets.py), since a broker prints each set on ~30 families, in every piece of a
   big body. A line fits the whole-line grammar exactly when its pieces fit theirs (a
   property test holds the two together).

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

from exporter.pipeline import slices
from exporter.pipeline.aggregates import TOPIC_ONLY, MalformedReason
from exporter.pipeline.labelsets import LABELS, PLACEHOLDERS, SeenSets, label_columns
from exporter.pipeline.otel import OTEL_TOPIC_FAMILIES
from exporter.pulsarnames import LABEL_NAME, METRIC_NAME, PARTITION_SUFFIX

# Families the exporter reads, by the level whose labels they carry (model.Level).
SUBSCRIPTION_FAMILIES: dict[str, str] = {
    "pulsar_subscription_back_log": "backlog_messages",
    "pulsar_out_messages_total": "msg_out_total",
    "pulsar_out_bytes_total": "bytes_out_total",
    "pulsar_subscription_consumers_count": "consumers",
    "pulsar_subscription_msg_rate_out": "rate_out",
    "pulsar_subscription_msg_throughput_out": "throughput_out",
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

# --- the text format, in RE2 syntax (linear time: no backtracking to guard against) -------
_QUOTED = r'"(?:[^"\\\n]|\\[^\n])*"'  # escapes: \\ \" \n (any escaped char accepted)
_PAIR = rf"{LABEL_NAME}[ \t]*=[ \t]*{_QUOTED}"
_VALUE = (r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf(?:inity)?))"
          r"|(?i:nan)")
_LABEL_SET = rf"[ \t]*(?:{_PAIR}(?:[ \t]*,[ \t]*{_PAIR})*[ \t]*,?[ \t]*)?"
# A sample line is `[ \t]*NAME([ \t]*{LABEL_SET}[ \t]*|[ \t]+)VALUE([ \t]+-?[0-9]+)?[ \t]*\r?\n?`,
# checked piece by piece (`_cut`): its name against FAMILIES, its label set (the first "{"
# to the last "}") once per distinct set, its value, and what follows the value.
_SET = rf"^\{{{_LABEL_SET}\}}$"
_VALUE_ALONE = rf"^(?:{_VALUE})$"
_AFTER_VALUE = r"^(?:[ \t]+-?[0-9]+)?[ \t]*\r?\n?$"  # a timestamp, blanks, the line's end
_READ_FAMILY = "^[ \t]*(?:" + "|".join(FAMILIES) + ")[ \t{]"
_COMMENT_OR_BLANK = r"^[ \t]*(?:#|\r?\n?$)"
# A sample of a family not read: its shape is checked (name, braces, value), not its labels.
_ANY_SAMPLE = rf"^[ \t]*{METRIC_NAME}(?:[ \t]*\{{.*\}}[ \t]*|[ \t]+)(?:{_VALUE})(?:[ \t]|\r?\n?$)"
# One RE2 pass over the lines of families not read (one alternation, one DFA).
_COMMENT_OR_SAMPLE = f"(?:{_COMMENT_OR_BLANK})|(?:{_ANY_SAMPLE})"

_S = pa.large_string()
# One row per kept sample of a read family; its labels are those of its label set, by row:
# entities are found per set (pivot.py), not per sample.
SAMPLES = pa.schema([
    ("family", pa.int32()),  # index into FAMILIES
    ("value", pa.float64()),
    ("set", pa.int32()),  # row of the chunk's SETS
])
# One row per distinct label set of a chunk's kept samples, labels raw, and a last row of
# none (the samples printed without a set); keys are built per entity (tables.py).
SETS = pa.schema([(label, pa.dictionary(pa.int32(), _S)) for label in LABELS])


@dataclass(frozen=True)
class Parsed:
    """One chunk of a body: its samples, the label sets first seen in it, and its skipped
    lines by reason. Its sets' rows count over the body from `base`: a sample's `set` may
    be the row of a set seen in a chunk before it (labelsets.SeenSets)."""

    samples: pa.Table  # SAMPLES
    sets: pa.Table  # SETS
    malformed: dict[MalformedReason, int]
    base: int = 0


def parse_text(data: bytes | memoryview, seen: SeenSets | None = None,
               padding: int = 0) -> Parsed:
    """Whole lines of exposition text → `Parsed` (see the module docstring). `seen`: the
    label sets of the body's chunks before this one, which it adds to (None: a body of
    one chunk). `padding`: zero bytes after the text, not parsed (`slices.PADDING` or more
    spare the parse a copy of the text)."""
    seen = SeenSets() if seen is None else seen
    base = seen.count
    lines = slices.split_lines(data, padding)
    read = pc.match_substring_regex(lines, _READ_FAMILY)
    other = lines.filter(pc.invert(read))
    syntax = pc.sum(pc.invert(pc.match_substring_regex(other, _COMMENT_OR_SAMPLE))).as_py() or 0
    candidates = slices.only(lines, read)
    raw = np.frombuffer(data, np.uint8)[:len(data) - padding]
    clean = None
    if len(raw) and raw.min() < 4:  # a placeholder byte somewhere: which lines
        clean = pc.invert(pc.match_substring_regex(candidates, PLACEHOLDERS))
    rows = np.flatnonzero(read.to_numpy(zero_copy_only=False))
    samples, sets, invalid, duplicates = _cut(candidates, rows, clean, seen)
    return Parsed(samples, sets, {MalformedReason.SYNTAX: syntax + invalid,
                                  MalformedReason.DUPLICATE_LABEL: duplicates}, base)


def _cut(lines: pa.LargeStringArray, rows: np.ndarray, clean: pa.BooleanArray | None,
         seen: SeenSets) -> tuple[pa.Table, pa.Table, int, int]:
    """Lines `rows` (of read families; the others null) → SAMPLES rows of the valid ones,
    the SETS not in `seen` (added to it), how many lines are not valid, and how many valid
    ones named a label twice (left out). `clean`: which lines hold no placeholder byte
    (None: all)."""
    off, data = slices.buffers(lines)
    n = len(rows)
    line_start, line_end = off[rows], off[rows + 1]
    start = slices.skip(data, line_start, line_end, b" \t")
    end = slices.back(data, line_end, start, b" \t\r\n")
    found = pc.find_substring(lines, "{").fill_null(-1).to_numpy()[rows]  # -1: none
    braced, brace = found >= 0, line_start + found
    name_end = slices.back(data, brace, start, b" \t")
    bare = np.flatnonzero(~braced)  # `name value`: the name ends at the first blank
    name_end[bare] = slices.until(data, start[bare], end[bare], b" \t")
    # The set closes at the line's last "}": neither a value nor a timestamp holds one, so
    # it is found stepping back over them (a search of the whole body cost more).
    after = slices.after_last(data, end, np.where(braced, brace + 1, end), ord("}"))
    has_set = braced & (after > brace + 1)
    close = np.where(has_set, after - 1, brace)
    value_start = slices.skip(data, np.where(braced, close + 1, name_end), end, b" \t")
    value_end, value_text, value_ok = _values(data, value_start, end)
    names = slices.distinct(data, start, name_end)
    family = pc.take(pc.index_in(names.dictionary, pa.array(FAMILIES, _S)), names.indices)
    values = pc.cast(slices.only(value_text, pa.array(value_ok)), pa.float64())
    sets, row, set_ok, duplicate = _sets(data, brace, close, has_set, seen)
    valid = (family.is_valid().to_numpy(zero_copy_only=False)
             & value_ok & _ends_well(data, value_end, line_end) & (set_ok | ~braced))
    if clean is not None:
        valid &= clean.fill_null(False).to_numpy(zero_copy_only=False)[rows]
    duplicate &= valid
    table = pa.table({"family": family.cast(pa.int32()), "value": values,
                      "set": pa.array(row, pa.int32())}, schema=SAMPLES)
    return (table.filter(pa.array(valid & ~duplicate)), sets, n - int(valid.sum()),
            int(duplicate.sum()))


def _values(data: np.ndarray, start: np.ndarray, end: np.ndarray,
            ) -> tuple[np.ndarray, pa.LargeStringArray, np.ndarray]:
    """Each value's end, its text and whether it is one. A value runs to the line's last
    non-blank byte unless a timestamp follows it: so all are matched to there first, and
    only those that do not fit are cut at their first blank and matched again."""
    text = slices.views(data, start, end).cast(_S)
    fits = pc.match_substring_regex(text, _VALUE_ALONE).to_numpy(zero_copy_only=False)
    again = np.flatnonzero(~fits)
    if not len(again):
        return end, text, fits
    end = end.copy()
    end[again] = slices.until(data, start[again], end[again], b" \t")
    text = slices.views(data, start, end).cast(_S)
    fits[again] = pc.match_substring_regex(text.take(again), _VALUE_ALONE).to_numpy(
        zero_copy_only=False)
    return end, text, fits


def _ends_well(data: np.ndarray, value_end: np.ndarray, line_end: np.ndarray) -> np.ndarray:
    """Whether what follows each value is `_AFTER_VALUE`: checked by RE2 only where it is
    not just the line's end ("\\n", "\\r\\n" or nothing), as on most lines."""
    after = line_end - value_end
    first, second = data[value_end], data[value_end + 1]  # `data` is padded
    ok = (after == 0) | ((after == 1) & (first == ord("\n"))) \
        | ((after == 2) & (first == ord("\r")) & (second == ord("\n")))
    rest = np.flatnonzero(~ok)
    if len(rest):
        tails = slices.views(data, value_end[rest], line_end[rest]).cast(_S)
        ok[rest] = pc.match_substring_regex(tails, _AFTER_VALUE).to_numpy(zero_copy_only=False)
    return ok


def _sets(data: np.ndarray, brace: np.ndarray, close: np.ndarray, has_set: np.ndarray,
          seen: SeenSets) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct label sets not in `seen` that fit the grammar (SETS, their labels cut
    once a set by labelsets.py, a last row of none; added to `seen`), each line's row over
    the body (that last row without a fitting set), whether its set fits, and whether it
    names a label twice. The sets are the lines' `{…}` slices, dictionary-encoded."""
    sets = slices.distinct(data, brace, close + 1, has_set)
    rows, new = seen.rows_of(sets.dictionary)
    texts = sets.dictionary.take(new)
    fits = pc.match_substring_regex(texts, _SET).to_numpy(zero_copy_only=False)
    columns, twice = label_columns(texts.filter(pa.array(fits)))
    rows[new] = seen.add(texts, fits, twice)
    none = seen.count - 1
    which = sets.indices.fill_null(len(rows)).to_numpy(zero_copy_only=False)
    row = np.append(rows, -1)[which]
    line_ok = has_set & (row >= 0)
    row[~line_ok] = none
    table = pa.table({label: pa.DictionaryArray.from_arrays(
        pa.concat_arrays([column.indices, pa.nulls(1, pa.int32())]), column.dictionary)
        for label, column in columns.items()}, schema=SETS)
    return table, row, line_ok, seen.twice[row]


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

