"""The load manager's verdicts: the brokers' load as the leader sees it (`loadbalance`),
the shedders of `ModularLoadManagerImpl` (`shedders`, `avgshedder`) and the verdicts
published per cycle (`loadview`)."""
