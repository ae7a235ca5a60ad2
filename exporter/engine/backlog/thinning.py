"""Which points of full backlog-age tables to merge away (engine/backlog/agetable.py's rule).

A quarter of each table's points go: the interior points whose removal moves an
interpolated publish time the least relative to that point's age (of equal costs, the
older), never two neighbours in one pass. Apart from the store, so that the rule reads on
its own; why this rule, in engine/backlog/agetable.py.
"""

from __future__ import annotations

import numpy as np


def thinned(times: np.ndarray, counts: np.ndarray, quota: int) -> np.ndarray:
    """Which of each table's points to merge away (True), `quota` of them, those whose loss
    costs the least (see the module), for `k` tables of `n` points as (k, n) arrays: tables
    begun together fill together, so at a million topics every busy one thins in the same
    cycle, and they are scored side by side and chosen in lockstep (a loop over each
    table's points made that cycle last; docs/design.md, "The age tables")."""
    k, n = times.shape
    before, middle, after = counts[:, :-2], times[:, 1:-1], times[:, 2:]
    span = (counts[:, 2:] - before).astype(np.float64)  # > 0: no three equal in a row
    merged = times[:, :-2] + (counts[:, 1:-1] - before) / span * (after - times[:, :-2])
    error = np.abs(middle - merged) / np.maximum(times[:, -1:] - middle, 1e-9)
    # Least error first; times increase along a table, so a stable sort breaks ties by
    # time.
    order = np.argsort(error, axis=1, kind="stable") + 1
    taken = np.zeros((k, n), bool)
    lost = np.zeros(k, np.int64)
    rows = np.arange(k)
    for j in range(n - 2):  # each table's j-th cheapest point, all tables at once
        i = order[:, j]
        free = ~taken[rows, i - 1] & ~taken[rows, i + 1] & (lost < quota)
        taken[rows[free], i[free]] = True
        lost += free
        if lost.min() == quota:
            break
    # A greedy choice of points no two adjacent among n - 2 finds at least (n - 2) / 3,
    # so every table loses the same n // 4 (n ≥ 5): the kept points stay rectangular.
    return taken
