"""Sources: fetch what the cluster looks like now (broker /metrics, admin REST) into a Snapshot."""
