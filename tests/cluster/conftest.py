"""The cluster tier: a real Apache Pulsar 4.0.8 cluster (ZooKeeper, a bookie, two brokers,
each its own JVM; tests/harness/apache_cluster.py), started once for the tests in this folder
and stopped when they are done (about 25 s to start and 2.5 GB resident on 2 cores), so it
does not sit beside the rest of the suite. A missing install fails, never skips."""

from tests.harness.apache_cluster import apache_cluster_fixture

apache_cluster = apache_cluster_fixture(scope="package")
