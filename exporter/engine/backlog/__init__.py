"""Backlog quotas: which quota applies to a topic (`quotas`), whether it is exceeded and how
far to evict (`check`), from the publish times (`publishtimes`, `measures`) and the age
tables (`agetable`) kept between cycles, as Pulsar's `BacklogQuotaManager` would."""
