"""The cluster tier: a real Apache Pulsar 4.0.8 cluster (ZooKeeper, a bookie, two brokers,
each its own JVM; tests/harness/apache_cluster.py), started once for the tests in this folder
and stopped when they are done (about 25 s to start and 2.5 GB resident on 2 cores), so it
does not sit beside the rest of the suite. A missing install fails, never skips. A test that
fails shows every part's warnings, errors and long pauses since it began."""

import pytest

from tests.harness.apache_cluster import ApacheCluster, apache_cluster_fixture

apache_cluster = apache_cluster_fixture(scope="package")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    cluster = getattr(item, "funcargs", {}).get("apache_cluster")
    if report.failed and report.when == "call" and isinstance(cluster, ApacheCluster):
        report.sections.append(("the cluster's logs since the test began",
                                cluster.logs_since(call.start)))
    return report
