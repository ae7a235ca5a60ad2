"""The pivot of samples into one row per entity (pipeline/pivot.py), held to a plain
Python reading of its contract: groups by the key labels in the order of their first
sample, a cell the max of its samples (NaN only when all are) or their sum, null without
one, `cluster` the greatest."""

import math

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from exporter.pipeline.parse import FAMILIES, SETS
from exporter.pipeline.pivot import Samples, pivot

COLUMNS = {FAMILIES[0]: "a", FAMILIES[1]: "a", FAMILIES[2]: "b"}  # two families fill `a`
_WORD = st.sampled_from([None, "x", "y", "z"])
_VALUE = st.sampled_from([0.0, 1.0, -2.5, math.nan, math.inf])


def _samples(sets: list[dict], rows: list[tuple[int, float, int]]) -> Samples:
    """`sets` as SETS, and the samples (family, value, set) naming them."""
    columns = {}
    for field in SETS:
        words = [s.get(field.name) for s in sets]
        dictionary = sorted({w for w in words if w is not None}, reverse=True)
        indices = pa.array([None if w is None else dictionary.index(w) for w in words], pa.int32())
        columns[field.name] = pa.DictionaryArray.from_arrays(
            indices, pa.array(dictionary, pa.large_string()))
    family, value, set_ = zip(*rows, strict=True) if rows else ((), (), ())
    return Samples(np.array(family, np.int32), np.array(value, np.float64),
                   np.array(set_, np.int64), pa.table(columns, schema=SETS))


def _expected(sets: list[dict], rows, keys: list[str], summed: set[str]) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for family, value, at in rows:
        key = tuple(sets[at].get(k) for k in keys)
        group = groups.setdefault(key, {"cells": {}, "clusters": set()})
        if sets[at].get("cluster") is not None:
            group["clusters"].add(sets[at]["cluster"])
        column = COLUMNS.get(FAMILIES[family])
        if column is not None:
            group["cells"].setdefault(column, []).append(value)
    out = []
    for key, group in groups.items():
        row = dict(zip(keys, key, strict=True))
        row["cluster"] = max(group["clusters"], default=None)
        for column in ("a", "b"):
            values = group["cells"].get(column)
            if values is None:
                row[column] = None
            elif column in summed:
                row[column] = math.fsum(values) if not any(map(math.isnan, values)) else math.nan
            else:
                finite = [v for v in values if not math.isnan(v)]
                row[column] = max(finite) if finite else math.nan
        out.append(row)
    return out


def _plain(rows: list[dict]) -> list[str]:
    return [repr(sorted(r.items())) for r in rows]  # NaN reprs alike, so NaN equals NaN


@given(sets=st.lists(st.fixed_dictionaries({"topic": _WORD, "namespace": _WORD,
                                            "cluster": _WORD}), min_size=1, max_size=6),
       data=st.data(), summed=st.sampled_from([set(), {"b"}]),
       keys=st.sampled_from([["topic"], ["topic", "namespace"], []]))
def test_pivot_is_its_contract(sets, data, summed, keys):
    rows = data.draw(st.lists(st.tuples(st.integers(0, 3), _VALUE,
                                        st.integers(0, len(sets) - 1)), max_size=25))
    got = pivot(_samples(sets, rows), keys, COLUMNS, summed)
    assert _plain(got.to_pylist()) == _plain(_expected(sets, rows, keys, summed))


def test_keys_beyond_one_int64_group_alike():
    """Four labels of 2^17 - 1 words each: 2^68 combinations, more than an int64 holds.
    Topics 0 and 2^13 apart would wrap onto one key without the dense renumbering."""
    words = pa.array([f"w{i}" for i in range(2**17 - 1)], pa.large_string())
    topics = [0, 2**13, 0]
    columns = {f.name: pa.DictionaryArray.from_arrays(pa.array(
        topics if f.name == "topic" else [0, 0, 0] if f.name in (
            "namespace", "partition", "subscription") else [None] * 3, pa.int32()), words)
        for f in SETS}
    samples = Samples(np.zeros(4, np.int32), np.array([1.0, 2.0, 3.0, 4.0]),
                      np.array([0, 1, 2, 1]), pa.table(columns, schema=SETS))
    got = pivot(samples, ["topic", "namespace", "partition", "subscription"], COLUMNS)
    assert [(r["topic"], r["a"]) for r in got.to_pylist()] == [("w0", 3.0), ("w8192", 4.0)]
