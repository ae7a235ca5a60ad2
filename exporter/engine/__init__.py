"""The quota engine: three engines that never import each other, and one entry point.

- `backlog/`: backlog quotas (PIP-323 ages, Pulsar's per-type quota resolution, the
  eviction plans `BacklogQuotaManager` would make);
- `groups/`: resource-group rate quotas (PIP-82's usage exchange and quota calculators);
- `load/`: the load manager's verdicts (`ModularLoadManagerImpl`'s shedders).

`decide.py` runs all three over a cycle's tables, the one entry point. The modules
beside it are what the three share (`columns`, `javamath`, `systemtopics`) or what reads
all their decisions (`attention`: which topics the admin walk reads next).
The contract `engine-wings` in pyproject.toml keeps it so.
"""
