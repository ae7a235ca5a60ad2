"""The publish times the brokers measured in a cycle, kept for the next one.

A subscription measured by its broker (PIP-323's gauge, PIP-492's age, the admin REST) in
one cycle and not in the next keeps that time while its backlog has not shrunk
(publishtimes.py `carry`): every measured subscription is remembered, for the few that lose
their measure. On a broker that prints PIP-323's gauge that is a subscription a topic with a
backlog, too many for a dict of tuples to hold between cycles (docs/design.md, "The driver
once every age table is full"). So they are columns, 40 bytes an entry, found by a hash of
each key (its topic's and
subscription's str hashes: CPython keeps a str's, and a topic's str is its age table's,
kept across cycles) and told apart by the names themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_EMPTY_NAMES = np.zeros(0, object)


def hashes(topics: Sequence[str], subscriptions: Sequence[str]) -> np.ndarray:
    """Each (topic, subscription)'s key hash, int64 (wrapping: collisions are told apart
    by the names)."""
    t = np.fromiter(map(hash, topics), np.int64, len(topics))
    s = np.fromiter(map(hash, subscriptions), np.int64, len(subscriptions))
    with np.errstate(over="ignore"):
        return t * np.int64(1_000_003) ^ s


@dataclass(frozen=True)
class Measures:
    """(topic, subscription) → (publish time, backlog), in the order of `keys`."""

    keys: np.ndarray  # int64 `hashes`, ascending
    topics: np.ndarray  # object: each one's topic
    subscriptions: np.ndarray  # object
    times: np.ndarray  # float64, epoch seconds
    backlogs: np.ndarray  # int64, messages

    @classmethod
    def of(cls, topics: Sequence[str], subscriptions: Sequence[str], times: np.ndarray,
           backlogs: np.ndarray) -> Measures:
        keys = hashes(topics, subscriptions)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], _objects(topics)[order], _objects(subscriptions)[order],
                   np.asarray(times, np.float64)[order], np.asarray(backlogs, np.int64)[order])

    @classmethod
    def empty(cls) -> Measures:
        return cls.of([], [], np.zeros(0), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return self.keys.size

    def get(self, topic: str, subscription: str) -> tuple[float, int] | None:
        (at,) = self.find([topic], [subscription], hashes([topic], [subscription])).tolist()
        return None if at < 0 else (float(self.times[at]), int(self.backlogs[at]))

    def find(self, topics: Sequence[str], subscriptions: Sequence[str],
             keys: np.ndarray) -> np.ndarray:
        """Each key's entry, -1 where none (`keys`: their `hashes`)."""
        lo = np.searchsorted(self.keys, keys, "left")
        hi = np.searchsorted(self.keys, keys, "right")
        found = np.full(keys.size, -1, np.int64)
        for k in np.flatnonzero(hi > lo).tolist():  # the hash matches: the names decide
            for i in range(int(lo[k]), int(hi[k])):
                if self.topics[i] == topics[k] and self.subscriptions[i] == subscriptions[k]:
                    found[k] = i
                    break
        return found

    def within(self, keys: np.ndarray) -> bool:
        """Whether every entry's key is among `keys` (sorted): then none is lost."""
        at = np.minimum(np.searchsorted(keys, self.keys), max(keys.size - 1, 0))
        return bool(keys.size and (keys[at] == self.keys).all()) or not len(self)

    def taken(self, entries: np.ndarray) -> Measures:
        """These entries (indices, each once), still in key order: their keys kept, not
        hashed again."""
        i = np.sort(entries)
        return Measures(self.keys[i], self.topics[i], self.subscriptions[i], self.times[i],
                        self.backlogs[i])

    def joined(self, other: Measures) -> Measures:
        """Both's entries (no key in both)."""
        if not len(other):
            return self
        order = np.argsort(np.concatenate([self.keys, other.keys]), kind="stable")
        return Measures(*(np.concatenate([mine, theirs])[order] for mine, theirs in (
            (self.keys, other.keys), (self.topics, other.topics),
            (self.subscriptions, other.subscriptions), (self.times, other.times),
            (self.backlogs, other.backlogs))))


def _objects(values: Sequence[str]) -> np.ndarray:
    """The strs themselves in an object array (np.array would make them a str dtype)."""
    if not len(values):
        return _EMPTY_NAMES
    out = np.empty(len(values), object)
    out[:] = values
    return out
