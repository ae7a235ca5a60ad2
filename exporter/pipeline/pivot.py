"""One body's samples → one row per entity, a column per family, by numpy scatter.

A sample names its label set by row (parse.py), and a broker prints a few sets a topic,
each on ~30 families. So an entity (a distinct combination of some of a set's labels: a
topic is its `topic`, `namespace` and `partition`) is found once per set, and each sample
is then scattered into its entity's cell: no hash aggregate over the samples. A cell is
the max of its samples (NaN skipped unless all are, as Arrow's `max` and numpy's `fmax`
do), or their sum for the columns summed over remote clusters (NaN kept, as Arrow's
`sum`); null without a sample.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline.parse import FAMILIES

_F, _S = pa.float64(), pa.string()


@dataclass(frozen=True)
class Samples:
    """Samples as numpy columns, and the label sets they name (parse.SETS, one chunk, its
    dictionaries shared by the whole body)."""

    family: np.ndarray  # int32: index into FAMILIES
    value: np.ndarray  # float64
    set: np.ndarray  # int64: row of `sets`
    sets: pa.Table

    def where(self, mask: np.ndarray) -> Samples:
        return Samples(self.family[mask], self.value[mask], self.set[mask], self.sets)

    def labels(self, name: str) -> pa.DictionaryArray:
        """The label `name` of each set (null where absent); `sets` is one chunk, and a
        chunk's sets end with the row of none, so there is always one."""
        return self.sets[name].chunk(0)


def pivot(samples: Samples, keys: Sequence[str], families: Mapping[str, str],
          summed: Collection[str] = ()) -> pa.Table:
    """One row per distinct `keys` (label values; null is a value), in the order of their
    first sample: the keys, `cluster` (the max) and one column per column `families`
    names (a family → its column; several may fill one), as strings and float64."""
    names = list(dict.fromkeys(families.values()))
    seen = np.zeros(samples.sets.num_rows, bool)
    seen[samples.set] = True
    members = np.flatnonzero(seen)  # the sets with a sample here
    member_group, groups = _groups(samples, members, keys)
    group = member_group[(np.cumsum(seen) - 1)[samples.set]]
    # Groups renumbered in the order of their first sample (as Arrow's group_by orders).
    first = np.full(groups, len(group), np.int64)
    np.minimum.at(first, group, np.arange(len(group)))
    renumber = np.empty(groups, np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(groups)
    group, member_group = renumber[group], renumber[member_group]
    one = np.zeros(groups, np.int64)  # a set of each group, for its keys
    one[member_group] = members
    columns: dict[str, pa.Array] = {
        k: samples.labels(k).take(pa.array(one)).cast(_S) for k in keys}
    columns["cluster"] = _max_label(samples.labels("cluster"), members, member_group, groups)
    code = np.full(len(FAMILIES), -1, np.int64)
    for family, column in families.items():
        code[FAMILIES.index(family)] = names.index(column)
    column_of = code[samples.family]
    hit = np.flatnonzero(column_of >= 0)
    cell = group[hit] * len(names) + column_of[hit]
    filled = np.zeros(groups * len(names), bool)
    filled[cell] = True
    maxed = np.full(groups * len(names), np.nan)
    np.fmax.at(maxed, cell, samples.value[hit])
    totals = np.zeros(groups * len(names))
    adding = [names.index(c) for c in summed if c in names]
    if adding:
        take = np.isin(column_of[hit], adding)
        np.add.at(totals, cell[take], samples.value[hit][take])
    for j, name in enumerate(names):
        cells = (totals if j in adding else maxed)[j::len(names)]
        columns[name] = pa.array(cells, _F, mask=~filled[j::len(names)])
    return pa.table(columns)


def _groups(samples: Samples, members: np.ndarray, keys: Sequence[str],
            ) -> tuple[np.ndarray, int]:
    """The group of each member set by its `keys` labels (dictionary indices, null -1),
    and how many groups."""
    labels = [samples.labels(k) for k in keys]
    index = [pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False)[members] + 1
             for column in labels]
    key, bound = np.zeros(len(members), np.int64), 1
    for column, size in zip(index, (len(c.dictionary) + 1 for c in labels), strict=True):
        if bound * size >= 1 << 62:  # one int64 a set, mixed radix: renumbered densely first
            key, bound = np.unique(key, return_inverse=True)[1].reshape(-1), len(members)
        key, bound = key * size + column, bound * size
    distinct, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1), len(distinct)


def _max_label(labels: pa.DictionaryArray, members: np.ndarray, group: np.ndarray,
               groups: int) -> pa.Array:
    """Each group's greatest label value (as strings compare; null when none has one)."""
    words = labels.dictionary
    order = pc.sort_indices(words).to_numpy(zero_copy_only=False).astype(np.int64)
    rank = np.append(np.argsort(order), -1)  # a word's place in that order; -1 for none
    index = pc.fill_null(labels.indices, -1).to_numpy(zero_copy_only=False)[members]
    best = np.full(groups, -1, np.int64)
    np.maximum.at(best, group, rank[index])
    return words.take(pa.array(np.append(order, 0)[best], mask=best < 0)).cast(_S)
