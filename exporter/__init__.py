"""pulsar-quota-exporter: Prometheus exporter and embedded quota engine for Apache Pulsar."""

import os

__version__ = "0.1.0"  # the one place: pyproject.toml reads it ([tool.setuptools.dynamic])

# Arrow's buffers from the C library's malloc, not Arrow's default pool (mimalloc): set here,
# before anything of this package loads pyarrow, so the exporter, its Spark JVM and the
# Python workers that JVM forks all inherit it. mimalloc commits an arena in every process
# that imports pyarrow and keeps what a task freed; the system pool is trimmed after each
# task (docs/design.md, "Start-up and memory"). Set the variable to choose another.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
