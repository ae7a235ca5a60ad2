"""The brokers' measured publish times as columns (engine/backlog/measures.py): found by key hash,
told apart by the names where hashes collide, and checked for a lost one at a glance."""

from __future__ import annotations

import numpy as np

from exporter.engine.backlog.measures import Measures, hashes

T = "persistent://acme/orders/t"


def test_each_measure_is_found_by_its_topic_and_subscription() -> None:
    measures = Measures.of([f"{T}{i}" for i in range(50)], ["s"] * 50,
                           np.arange(50) + 1000.0, np.arange(50) * 10)
    assert len(measures) == 50
    assert measures.get(f"{T}7", "s") == (1007.0, 70)
    assert measures.get(f"{T}7", "other") is None and measures.get(f"{T}99", "s") is None
    asked = [f"{T}3", f"{T}99", f"{T}49"]
    found = measures.find(asked, ["s"] * 3, hashes(asked, ["s"] * 3))
    assert found[1] == -1
    assert measures.times[found[[0, 2]]].tolist() == [1003.0, 1049.0]


def test_keys_that_share_a_hash_are_told_apart_by_their_names() -> None:
    """The key is a hash; two entries with one are both kept, and each found by its names."""
    colliding = Measures(np.array([5, 5], np.int64), np.array(["a", "b"], object),
                         np.array(["s", "s"], object), np.array([1.0, 2.0]),
                         np.array([10, 20], np.int64))
    assert colliding.find(["b", "a", "c"], ["s", "s", "s"],
                          np.array([5, 5, 5], np.int64)).tolist() == [1, 0, -1]


def test_a_lost_measure_is_seen_and_the_carried_ones_join_the_next() -> None:
    before = Measures.of([f"{T}1", f"{T}2"], ["s", "s"], np.array([1.0, 2.0]),
                         np.array([1, 2], np.int64))
    now = Measures.of([f"{T}2", f"{T}1", f"{T}3"], ["s", "s", "s"], np.array([3.0, 4.0, 5.0]),
                      np.array([3, 4, 5], np.int64))
    assert before.within(now.keys) and Measures.empty().within(now.keys)
    partly = Measures.of([f"{T}2"], ["s"], np.array([3.0]), np.array([3], np.int64))
    assert not before.within(partly.keys) and not before.within(Measures.empty().keys)
    carried = Measures.of([f"{T}1"], ["s"], np.array([1.0]), np.array([1], np.int64))
    both = partly.joined(carried)
    assert (both.get(f"{T}1", "s"), both.get(f"{T}2", "s")) == ((1.0, 1), (3.0, 3))
    # still in key order (compared pairwise: np.diff of 64-bit hashes wraps around)
    assert (both.keys[1:] >= both.keys[:-1]).all()
    taken = now.taken(np.array([2, 0]))  # entries kept as they are, in key order
    assert taken.keys.tolist() == now.keys[[0, 2]].tolist()
    assert taken.get(now.topics[2], "s") == (float(now.times[2]), int(now.backlogs[2]))
