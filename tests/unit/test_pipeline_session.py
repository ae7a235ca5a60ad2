"""The SparkSession's configuration: loopback-bound locally, operator overrides win."""

import os

from exporter.config import Spark
from exporter.pipeline.session import REQUIRED, get_session, local_cores, session_conf


def test_local_masters_are_bound_to_loopback_with_few_shuffle_partitions():
    conf = session_conf(Spark(master="local[3]"))
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.shuffle.partitions"] == "6"  # 2 × cores
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"


def test_cluster_masters_are_not_bound_to_loopback():
    # Executors elsewhere must reach the driver: binding it to 127.0.0.1 would cut them off.
    conf = session_conf(Spark(master="spark://spark-master:7077"))
    assert "spark.driver.host" not in conf
    assert "spark.driver.bindAddress" not in conf
    assert conf["spark.sql.shuffle.partitions"] == str(2 * (os.cpu_count() or 1))


def test_config_conf_overrides_defaults_but_not_what_the_parse_requires():
    conf = session_conf(Spark(master="local[2]", conf={
        "spark.sql.shuffle.partitions": "64",
        "spark.driver.memory": "4g",
        "spark.sql.mapKeyDedupPolicy": "EXCEPTION",
    }))
    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert conf["spark.driver.memory"] == "4g"
    assert conf["spark.sql.mapKeyDedupPolicy"] == REQUIRED["spark.sql.mapKeyDedupPolicy"]


def test_local_cores():
    assert local_cores("local") == 1
    assert local_cores("local[4]") == 4
    assert local_cores("local[4,2]") == 4
    assert local_cores("local[*]") == (os.cpu_count() or 1)
    assert local_cores("k8s://https://api:6443") is None
    assert local_cores("spark://host:7077") is None


def test_one_session_per_process_reused_whatever_the_later_config():
    first = get_session(Spark(master="local[2]"))
    again = get_session(Spark(master="local[1]", conf={"spark.app.name": "other"}))
    assert again is first
    assert first.conf.get("spark.driver.host") == "127.0.0.1"
    assert first.conf.get("spark.ui.enabled") == "false"
    assert first.range(3).count() == 3
