"""What the tests start, build and wait for, one module each: real components on loopback
(pulsar-lite, Apache Pulsar standalone and cluster, Spark, Prometheus, the exporter process),
the tools they install (Go tools, the OCI image), and the few stand-ins whose names say so
(`admin_standin`, `counting_proxy`, `loopback`)."""
