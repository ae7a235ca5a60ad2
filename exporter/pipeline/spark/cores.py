"""How many cores this process may use: what `local[*]` means here.

`os.cpu_count()` counts the node's cores. In a pod the container's CPU limit is a cgroup
quota (`cpu.max` in cgroup v2, `cpu.cfs_quota_us` / `cpu.cfs_period_us` in v1) and a
cpuset may pin it to some cores (the scheduler affinity): on a 64-core node a pod limited
to 2 CPUs that sized Spark by the node would start dozens of Python workers against its
memory limit. The JVM's own count is container-aware since Java 15; ours is made the same
way, and `local[*]` is passed to Spark as `local[N]` so both sides agree.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_cores(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = Path(
        "/proc/self/cgroup")) -> int:
    """The fewest of: the cores this process may run on, and its cgroup's CPU quota
    rounded up; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_quota(root, proc_self_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_quota(root: Path = CGROUP_ROOT,
                 proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs the cgroup may use (quota / period), None when unlimited or unknown. Looks in
    this process's own cgroup (from /proc/self/cgroup) and then at the root, which is the
    container's own under a cgroup namespace."""
    for directory in _own_directories(root, proc_self_cgroup):
        v2 = _read(directory / "cpu.max")
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            return None if quota == "max" else _ratio(quota, period)
        quota_us = _read(directory / "cpu.cfs_quota_us")
        period_us = _read(directory / "cpu.cfs_period_us")
        if quota_us is not None and period_us is not None:
            return None if quota_us.startswith("-") else _ratio(quota_us, period_us)
    return None


def _own_directories(root: Path, proc_self_cgroup: Path) -> list[Path]:
    """Where this process's CPU controller files may be: its cgroup path under the v2
    root and the v1 `cpu` hierarchies, then those roots themselves."""
    paths: list[Path] = []
    for line in (_read(proc_self_cgroup) or "").splitlines():
        _, controllers, relative = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        relative = relative.lstrip("/")
        if controllers == "":  # cgroup v2's single hierarchy
            paths.append(root / relative)
        elif "cpu" in controllers.split(","):
            paths += [root / name / relative for name in ("cpu", "cpu,cpuacct")]
    paths += [root, root / "cpu", root / "cpu,cpuacct"]
    return [p for p in dict.fromkeys(paths) if p.is_dir()]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None
