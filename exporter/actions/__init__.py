"""Actions: perform the engine's decisions on the cluster (evictions; dry-run by default)."""
