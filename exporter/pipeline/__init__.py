"""Pipeline: PySpark plan from raw broker bodies to per-entity aggregates."""
