"""Distinct label sets → the label columns the exporter reads, vectorised like the parse.

A broker prints the same label set on every series of an entity (~30 families a topic),
so a body holds a few sets a topic, not one a sample: the parse (parse.py) validates and
cuts each distinct set once, here, and its lines take their set's labels by index.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline import slices
from exporter.pipeline.otel import LABEL_ALIASES

# Labels read from kept samples; the others are ignored. OpenTelemetry's spellings of the
# same labels fill the same columns (otel.LABEL_ALIASES).
LABELS = ("cluster", "namespace", "topic", "partition", "subscription",
          "consumer_name", "consumer_id", "remote_cluster")
_SPELLINGS: dict[str, tuple[str, ...]] = {
    label: (label, *(o for o, c in LABEL_ALIASES.items() if c == label)) for label in LABELS}
assert max(len(s) for names in _SPELLINGS.values() for s in names) <= 24, \
    "label names are matched by their length and bytes 0-8, 8-16 and the last 8"

# Escapes in label values stand in as these bytes while values are cut, so that the
# quotes of the label syntax are the only '"' left (the parse refuses lines holding them).
PLACEHOLDERS = "[\x00-\x03]"
_ESCAPED_BACKSLASH, _ESCAPED_QUOTE = "\x00", "\x01"


def label_columns(sets: pa.LargeStringArray, escaped: bool,
                  ) -> tuple[dict[str, pa.DictionaryArray], np.ndarray]:
    """Valid label sets (`{…}` as printed, grammar checked) → the `LABELS` columns, one row
    a set (null when absent or empty), and whether the set names any label twice.
    `escaped`: whether the sets may hold a backslash (then unescaped first)."""
    if escaped:
        sets = pc.replace_substring(sets, "\\\\", _ESCAPED_BACKSLASH)
        sets = pc.replace_substring(sets, '\\"', _ESCAPED_QUOTE)
        sets = pc.replace_substring(sets, "\\n", "\n")
        sets = pc.replace_substring_regex(sets, r"\\(.)", r"\1")
    off, data = slices.buffers(sets)
    return _labels(data, off, escaped)


def _labels(data: np.ndarray, off: np.ndarray, escaped: bool,
            ) -> tuple[dict[str, pa.DictionaryArray], np.ndarray]:
    """The `LABELS` columns of each set (set i is data[off[i]:off[i + 1]], its "{" first and
    its "}" last) and whether it names any label twice."""
    brace, close = off[:-1], off[1:] - 1
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
        else:  # no quoted value in any set (e.g. only `{}`)
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
