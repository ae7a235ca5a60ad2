"""Which entity each sample describes (model.Level), decided once per label set.

The labels a sample carries decide its entity: a subscription has `subscription` and
`topic`, a topic `topic`, a namespace `namespace` only, and a broker none (kept only for
parse.BROKER_FAMILIES). All of a set's samples carry its labels, so each rule runs over a
body's few thousand sets and its samples take the answer by row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.pipeline.aggregates import Level
from exporter.pipeline.parse import (
    BROKER_FAMILIES,
    FAMILIES,
    REPLICATION_COLUMNS,
    TOPIC_FAMILIES,
    Parsed,
)
from exporter.pipeline.pivot import Samples

LEVELS = tuple(Level)  # a level's code: its index here
_BROKER = np.isin(np.arange(len(FAMILIES)), [FAMILIES.index(f) for f in BROKER_FAMILIES])
_REPLICATION = np.isin(np.arange(len(FAMILIES)), [
    FAMILIES.index(f) for f, c in TOPIC_FAMILIES.items() if c in REPLICATION_COLUMNS])


def body_samples(parts: Sequence[Parsed]) -> Samples:
    """Every chunk of one body as one `Samples`: the chunks' sets stacked, each chunk's
    rows shifted to where its sets land (by none when its rows count over the body
    already, `Parsed.base`), one dictionary per label for the whole body (filters then
    move indices, and label values are copied per entity, not per sample)."""
    sets = pa.concat_tables([p.sets for p in parts]).unify_dictionaries().combine_chunks()
    shift = np.cumsum([0] + [p.sets.num_rows for p in parts[:-1]]) - [p.base for p in parts]
    return Samples(
        family=np.concatenate([p.samples["family"].to_numpy() for p in parts]),
        value=np.concatenate([p.samples["value"].to_numpy() for p in parts]),
        set=np.concatenate([p.samples["set"].to_numpy().astype(np.int64) + at
                            for p, at in zip(parts, shift, strict=True)]),
        sets=sets)


def unkeyed(samples: Samples) -> int:
    """Samples whose short topic name has no namespace to complete it."""
    short = _per_set(samples, "topic", lambda v: pc.invert(pc.match_substring(v, "://")))
    lone = short & ~_present(samples, "namespace")
    return int(lone[samples.set].sum())


def entity_samples(samples: Samples) -> tuple[Samples, np.ndarray]:
    """Samples that describe an entity, and the code of each one's level (`LEVELS`):
    per-consumer samples (`consumer_name` or `consumer_id`), other families' replication
    samples (`remote_cluster` other than "local": `pulsar_msg_backlog` per remote cluster)
    and broker-wide samples of families that are not are left out, uncounted."""
    own = ~_present(samples, "consumer_name") & ~_present(samples, "consumer_id")
    remote = _per_set(samples, "remote_cluster", lambda v: pc.not_equal(v, "local"))
    topic, namespace = _present(samples, "topic"), _present(samples, "namespace")
    level = np.select([topic & _present(samples, "subscription"), topic, namespace],
                      [LEVELS.index(Level.SUBSCRIPTION), LEVELS.index(Level.TOPIC),
                       LEVELS.index(Level.NAMESPACE)], -1)[samples.set]
    level[(level < 0) & _BROKER[samples.family]] = LEVELS.index(Level.BROKER)
    keep = (own[samples.set] & (~remote[samples.set] | _REPLICATION[samples.family])
            & (level >= 0))
    return samples.where(keep), level[keep]


def _present(samples: Samples, label: str) -> np.ndarray:
    """Whether each set has `label`."""
    return samples.labels(label).is_valid().to_numpy(zero_copy_only=False)


def _per_set(samples: Samples, label: str,
             fn: Callable[[pa.Array], pa.Array]) -> np.ndarray:
    """`fn` of each set's `label`, computed once per distinct value; False where absent."""
    labels = samples.labels(label)
    answer = pc.take(fn(labels.dictionary), labels.indices)
    return pc.fill_null(answer, False).to_numpy(zero_copy_only=False)
