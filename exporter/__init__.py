"""pulsar-quota-exporter: Prometheus exporter and embedded quota engine for Apache Pulsar."""

__version__ = "0.1.0"  # the one place: pyproject.toml reads it ([tool.setuptools.dynamic])
