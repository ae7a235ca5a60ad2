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


class SeenSets:
    """The distinct label sets of one body's pieces parsed so far, by text. A broker prints
    each family's samples for every topic together, so each 16 MB piece of a big body
    holds most of the body's sets again (docs/design.md, "The driver once every age table
    is full").
    Each is checked and cut once a body, in the piece it first appears in, and becomes rows
    that count over the body (parse.Parsed.base); later pieces' lines take its row."""

    def __init__(self) -> None:
        self._texts = pa.array([], pa.large_string())  # every distinct set seen
        self._rows = np.zeros(0, np.int64)  # each one's row over the body, -1: not valid
        self.twice = np.zeros(0, bool)  # each row over the body: names a label twice

    @property
    def count(self) -> int:
        """Rows over the body so far."""
        return len(self.twice)

    def rows_of(self, texts: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
        """Each of the distinct `texts`' row over the body (-1: not valid, or not seen),
        and which of them were not seen."""
        at = pc.index_in(texts, value_set=self._texts).fill_null(-1).to_numpy()
        known = np.flatnonzero(at >= 0)
        rows = np.full(len(texts), -1, np.int64)
        rows[known] = self._rows[at[known]]
        return rows, np.flatnonzero(at < 0)

    def add(self, texts: pa.LargeStringArray, valid: np.ndarray, twice: np.ndarray,
            ) -> np.ndarray:
        """Sets not seen before, whether each is valid, and whether each valid one names a
        label twice → the rows over the body of the valid ones (-1 for the others), which
        follow the rows before, then one row of none."""
        rows = np.where(valid, self.count + np.cumsum(valid) - 1, -1)
        self._texts = pa.concat_arrays([self._texts, texts])
        self._rows = np.concatenate([self._rows, rows])
        self.twice = np.concatenate([self.twice, twice, [False]])
        return rows


def label_columns(sets: pa.LargeStringArray,
                  ) -> tuple[dict[str, pa.DictionaryArray], np.ndarray]:
    """Valid label sets (`{…}` as printed, grammar checked) → the `LABELS` columns, one row
    a set (null when absent or empty), and whether the set names any label twice. Sets
    holding a backslash anywhere are unescaped first (a no-op on the others)."""
    off, data = slices.buffers(sets)
    escaped = bool((data == ord("\\")).any())  # the sets' bytes: a few MB, not the body
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
    its "}" last) and whether it names any label twice. Every '"' left is a label value's
    (the grammar was checked, escaped ones stand in as placeholders), so they pair up in
    order, each pair inside one set."""
    n = len(off) - 1
    quotes = np.flatnonzero(data == ord('"'))
    opening, closing = quotes[0::2], quotes[1::2]
    pairs = np.diff(np.searchsorted(opening, off))  # a set's pairs are consecutive
    row = np.repeat(np.arange(n), pairs)
    first = np.ones(len(row), bool)
    first[1:] = row[1:] != row[:-1]
    key_from = np.where(first, off[:-1][row] + 1, np.roll(closing, 1) + 1)
    key_start = slices.skip(data, key_from, opening, b" \t,")
    key_end = slices.back(data, opening, key_start, b" \t=")
    # A name's hash of its length and first and last 8 bytes finds its label among the
    # spellings, confirmed by those and bytes 8-16 (exact up to 24 bytes, every name read
    # here): one lookup a pair, not a comparison a spelling. Duplicates are found by the
    # hash too, each confirmed byte for byte.
    length, head, tail = slices.short_key(data, key_start, key_end)
    word = _hashed(length, head, tail)

    def same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which of the key pairs (x, y) are byte-equal (few: hash-equal already)."""
        def text(i: int) -> bytes:
            return bytes(data[key_start[i]:key_end[i]])

        return np.array([text(i) == text(j) for i, j in zip(x, y, strict=True)], bool)

    duplicate = np.zeros(n, bool)
    for gap in range(1, int(pairs.max(initial=1))):
        x = np.flatnonzero((row[gap:] == row[:-gap]) & (word[gap:] == word[:-gap]))
        duplicate[row[x[same(x, x + gap)]]] = True
    label, rank = _label_of(data, key_start, key_end, length, head, tail, word)
    columns = {}
    for which, name in enumerate(LABELS):
        hit = np.flatnonzero(label == which)
        if len(hit) and rank[hit].any():  # several spellings: the later one holds the label
            hit = hit[np.lexsort((hit, rank[hit], row[hit]))]
        # A set naming the label twice holds it at its last pair (and is left out).
        last = np.ones(len(hit), bool)
        last[:-1] = row[hit[1:]] != row[hit[:-1]]
        hit = hit[last]
        hit = hit[closing[hit] > opening[hit] + 1]  # an empty value is the label absent
        index = np.full(n, -1, np.int32)
        if len(hit):
            values = pc.dictionary_encode(slices.views(data, opening[hit] + 1, closing[hit]))
            index[row[hit]] = values.indices.to_numpy()
            words = values.dictionary.cast(pa.large_string())
        else:
            words = pa.array([], pa.large_string())
        if escaped:
            words = pc.replace_substring(words, _ESCAPED_BACKSLASH, "\\")
            words = pc.replace_substring(words, _ESCAPED_QUOTE, '"')
        columns[name] = pa.DictionaryArray.from_arrays(pa.array(index, mask=index < 0), words)
    return columns, duplicate


def _hashed(length: np.ndarray, head: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """One uint64 of a name's `slices.short_key`: equal names, equal hashes."""
    return (head * np.uint64(0x9E3779B97F4A7C15) ^ tail) * np.uint64(0xBF58476D1CE4E5B9) \
        ^ length.astype(np.uint64)


def _spelling_keys() -> tuple[np.ndarray, ...]:
    """Each spelling's hash (sorted), its label's index in LABELS, its rank among the
    label's spellings, its length and its bytes 0-8, 8-16 and its last 8."""
    spellings = [(s.encode(), i, r) for i, label in enumerate(LABELS)
                 for r, s in enumerate(_SPELLINGS[label])]
    length, head, tail = (np.array(part) for part in zip(
        *(slices.short_key_of(s) for s, _, _ in spellings), strict=True))
    middle = np.array([slices.middle_of(s) for s, _, _ in spellings])
    hashes = _hashed(length, head, tail)
    order = np.argsort(hashes)
    label = np.array([i for _, i, _ in spellings], np.int8)
    rank = np.array([r for _, _, r in spellings], np.int8)
    return tuple(part[order] for part in (hashes, label, rank, length, head, tail, middle))


_SPELLING = _spelling_keys()


def _label_of(data: np.ndarray, key_start: np.ndarray, key_end: np.ndarray,
              length: np.ndarray, head: np.ndarray, tail: np.ndarray, word: np.ndarray,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each label pair's label (its index in LABELS, -1 for a name not read) and its
    spelling's rank: its hash looked up among the spellings', then confirmed."""
    hashes, labels, ranks, s_length, s_head, s_tail, s_middle = _SPELLING
    at = np.minimum(np.searchsorted(hashes, word), len(hashes) - 1)
    hit = np.flatnonzero(hashes[at] == word)
    at = at[hit]
    same = (length[hit] == s_length[at]) & (head[hit] == s_head[at]) & (tail[hit] == s_tail[at])
    long = np.flatnonzero(same & (s_length[at] > 16))
    if len(long):
        same[long] = slices.middle(data, key_start[hit[long]], key_end[hit[long]]) \
            == s_middle[at[long]]
    label = np.full(len(word), -1, np.int8)
    rank = np.zeros(len(word), np.int8)
    label[hit[same]] = labels[at[same]]
    rank[hit[same]] = ranks[at[same]]
    return label, rank
