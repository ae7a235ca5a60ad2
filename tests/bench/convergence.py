"""Seconds and rounds to converge, per allocator, in a live three-instance fleet.

Three `run` processes (one per pulsar-lite broker, the usage topic on the first) with
demands 10/50/30 msg/s against a quota of 100, report_interval 8 s, stale_after 40 s.
"Converged" means the local quotas sum to within 10 % of the quota; rounds are seconds
divided by the report interval. Scenarios, in order: join (cold start), quota 100 → 200,
crash (SIGKILL of one: survivors converge after stale_after), leave (SIGTERM of another:
the last one gets the whole quota at the goodbye). Pulsar's own allocator is the
baseline the `fair` one is compared with.

    .venv/bin/python -m tests.bench.convergence [pulsar fair]
"""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

from tests.harness.fleet import Fleet

DEMANDS = {"p-a": 10.0, "p-b": 50.0, "p-c": 30.0}


def converged(fleet: Fleet, quota: float, names: list[str]) -> bool:
    q = fleet.quotas()
    values = [q.get(n) for n in names]
    return all(v is not None for v in values) and abs(sum(values) - quota) <= 0.1 * quota


def scenario_times(allocator: str) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Fleet(Path(tmp), DEMANDS, quota=100.0, allocator=allocator)
        try:
            fleet.start()
            out = []
            names = list(DEMANDS)
            out.append(("join (cold start, incl. Spark start)", fleet.wait_for(
                "join", lambda: all(fleet.peers_known(n) == 3 for n in names)
                and converged(fleet, 100.0, names), 600)))
            fleet.set_quota(200.0)
            out.append(("quota 100 → 200", fleet.wait_for(
                "quota", lambda: converged(fleet, 200.0, names), 300)))
            fleet.kill("p-c", signal.SIGKILL)
            names = ["p-a", "p-b"]
            out.append(("crash (SIGKILL), stale_after 40 s", fleet.wait_for(
                "crash", lambda: fleet.peers_known("p-a") == 2
                and converged(fleet, 200.0, names), 300)))
            fleet.kill("p-b", signal.SIGTERM)
            out.append(("leave (SIGTERM, goodbye)", fleet.wait_for(
                "leave", lambda: fleet.peers_known("p-a") == 1
                and converged(fleet, 200.0, ["p-a"]), 300)))
            return out
        finally:
            fleet.close()


def main(allocators: list[str]) -> None:
    results = {a: scenario_times(a) for a in allocators}
    interval = 8.0
    print(f"{'scenario':40} " + " ".join(f"{a + ' s':>10} {a + ' rounds':>14}"
                                          for a in allocators))
    for i, (name, _) in enumerate(results[allocators[0]]):
        cells = " ".join(f"{results[a][i][1]:10.1f} {results[a][i][1] / interval:14.1f}"
                         for a in allocators)
        print(f"{name:40} {cells}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["pulsar", "fair"])
