"""`local[*]` means the container's cores: the cgroup's CPU quota and the scheduler
affinity, not the node's count. The cgroup trees here are written as the kernel lays them
out (v2 `cpu.max`, v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`); the last test reads this
machine's own."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from exporter.config.settings import Spark
from exporter.pipeline.spark.cores import available_cores, cgroup_quota
from exporter.pipeline.spark.session import local_cores, session_conf


def _tree(tmp_path: Path, files: dict[str, str], cgroup: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(cgroup)
    return root, proc


@pytest.mark.parametrize(("files", "cgroup", "quota"), [
    ({"cpu.max": "200000 100000\n"}, "0::/\n", 2.0),  # v2, a cgroup namespace: the root
    ({"cpu.max": "max 100000\n"}, "0::/\n", None),
    ({"kubepods/pod1/c1/cpu.max": "150000 100000\n", "cpu.max": "max 100000\n"},
     "0::/kubepods/pod1/c1\n", 1.5),  # v2 without a namespace: its own directory
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"},
     "4:cpu,cpuacct:/\n0::/\n", 0.5),  # v1
    ({"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "300000\n",
      "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n"},
     "4:cpu,cpuacct:/docker/x\n", 3.0),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
     "1:cpu:/\n", None),  # v1, unlimited
    ({}, "", None),  # no cgroup files at all
])
def test_the_cgroup_quota_in_cpus(tmp_path: Path, files: dict[str, str], cgroup: str,
                                  quota: float | None) -> None:
    assert cgroup_quota(*_tree(tmp_path, files, cgroup)) == quota


def test_local_star_is_the_quota_rounded_up_within_the_affinity(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    root, proc = _tree(tmp_path, {"cpu.max": "50000 100000\n"}, "0::/\n")
    assert available_cores(root, proc) == 1  # half a CPU still runs one worker
    root, proc = _tree(tmp_path / "b", {"cpu.max": "6400000 100000\n"}, "0::/\n")
    assert available_cores(root, proc) == affinity  # 64 CPUs of quota, our cores fewer


def test_on_this_machine_local_star_is_its_cores_and_spark_is_told_so() -> None:
    """No quota is set here: the cores this process may run on, and `local[N]` for Spark."""
    expected = len(os.sched_getaffinity(0))
    if (quota := cgroup_quota()) is not None:
        expected = min(expected, math.ceil(quota))
    assert available_cores() == local_cores("local[*]") == expected
    assert session_conf(Spark(master="local[*]"))["spark.master"] == f"local[{expected}]"
    assert session_conf(Spark(master="local[3]"))["spark.master"] == "local[3]"
