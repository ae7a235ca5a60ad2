"""Benchmark: the resource-group allocators side by side, in the round-by-round model.

Not a test: prints one table. Each scenario is a list of phases (a quota and constant
demands for some rounds); runs chain `simulate` phase by phase, handing each phase the
previous phase's last limits. Per allocator:

- rounds: worst over the phases of the rounds, from the phase's start, until every
  participant's usage is within 10 % of its max-min fair share of the true demands
  (its demand when all fit) and stays there to the phase's end; "never" if some phase
  gets there not even in its last round;
- over %: worst (Σ usage − quota) / quota over the rounds whose limits the allocator
  computed under the current quota (round 0 runs on the initial limits, and the first
  round after a quota change on limits computed for the old quota: both left out);
- Jain: Jain's fairness index (Σx)² / (n Σx²) at the end over x_i = usage_i ÷ fair
  share_i, i.e. allocations normalised by what each should get given its demand
  (1 = exactly max-min fair; idle participants left out).

    .venv/bin/python -m tests.bench.quota_sim [--rounds 20]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from exporter.engine.groups.resourcegroups import max_min_fair_share, simulate

ALLOCATORS = ("pulsar", "fair")
TOLERANCE = 0.10


@dataclass(frozen=True)
class Phase:
    quota: float
    demands: tuple[float, ...]
    rounds: int


@dataclass(frozen=True)
class Scenario:
    name: str
    phases: tuple[Phase, ...]
    initial_limits: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Result:
    rounds: int | None  # None: never within the phase
    overshoot_percent: float
    jain: float


def scenarios(n: int) -> tuple[Scenario, ...]:
    def one(name, quota, demands, initial=None):
        return Scenario(name, (Phase(quota, demands, n),), initial)

    return (
        one("PIP-82 10/50/30 of 100 (fits)", 100, (10, 50, 30)),
        one("PIP-82 10/50/30, then all want 40", 100, (40, 40, 40), (10, 50, 30)),
        one("PIP-82 80/20, both want more", 100, (200, 200), (80, 20)),
        one("PIP-82 70/30, both loaded 70", 100, (70, 70), (70, 30)),
        one("skewed 5 (5/10/20/60/120 of 100)", 100, (5, 10, 20, 60, 120)),
        one("skewed 5, from an equal split", 100, (5, 10, 20, 60, 120), (20,) * 5),
        Scenario(
            "join then leave (80/80 + 80)",
            (
                Phase(100, (80, 80, 0), n),
                Phase(100, (80, 80, 80), n),
                Phase(100, (80, 80, 0), n),
            ),
        ),
        Scenario(
            "quota 100 → 200 → 60 (30/60/90)",
            (
                Phase(100, (30, 60, 90), n),
                Phase(200, (30, 60, 90), n),
                Phase(60, (30, 60, 90), n),
            ),
        ),
    )


def within(usage: list[float], fair: list[float]) -> bool:
    return all(abs(u - t) <= TOLERANCE * t + 1e-9 for u, t in zip(usage, fair, strict=True))


def jain(usage: list[float], fair: list[float]) -> float:
    x = [u / t for u, t in zip(usage, fair, strict=True) if t > 0]
    if not x:
        return 1.0
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x))


def run(allocator: str, scenario: Scenario) -> Result:
    first = scenario.phases[0]
    limits = list(scenario.initial_limits or [first.quota] * len(first.demands))
    worst_rounds: int | None = 0
    overshoot = 0.0
    previous_quota = first.quota
    usage: list[float] = []
    fair: list[float] = []
    for number, phase in enumerate(scenario.phases):
        fair = max_min_fair_share(phase.quota, list(phase.demands))
        history = simulate(allocator, phase.quota, [list(phase.demands)] * phase.rounds, limits)
        ran_on = [limits, *history[:-1]]  # the limits each round's usage ran under
        settled_from: int | None = None
        for r, lim in enumerate(ran_on):
            usage = [min(d, x) for d, x in zip(phase.demands, lim, strict=True)]
            if within(usage, fair):
                settled_from = r if settled_from is None else settled_from
            else:
                settled_from = None
            skip = (number == 0 and r == 0) or (r == 0 and phase.quota != previous_quota)
            if not skip:
                overshoot = max(overshoot, (sum(usage) - phase.quota) / phase.quota * 100)
        if settled_from is None or worst_rounds is None:
            worst_rounds = None
        else:
            worst_rounds = max(worst_rounds, settled_from)
        limits = history[-1]
        previous_quota = phase.quota
    return Result(worst_rounds, overshoot, jain(usage, fair))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per phase (N)")
    args = parser.parse_args()
    n = args.rounds

    name_width = 36
    cell = f"{'rounds':>7} {'over %':>7} {'Jain':>6}"
    print(f"{'':{name_width}} | " + " | ".join(f"{a:^22}" for a in ALLOCATORS))
    print(f"{'scenario':{name_width}} | " + " | ".join(cell for _ in ALLOCATORS))
    print("-" * name_width + "-+-" + "-+-".join("-" * 22 for _ in ALLOCATORS))
    for scenario in scenarios(n):
        cells = []
        for allocator in ALLOCATORS:
            res = run(allocator, scenario)
            rounds = "never" if res.rounds is None else str(res.rounds)
            cells.append(f"{rounds:>7} {res.overshoot_percent:>7.1f} {res.jain:>6.3f}")
        print(f"{scenario.name:{name_width}} | " + " | ".join(cells))
    print(
        f"rounds: to within {TOLERANCE:.0%} of the max-min fair share, worst phase "
        f"('never' = not within {n} rounds); over %: worst usage above the quota; "
        "Jain: on usage ÷ fair share, at the end."
    )


if __name__ == "__main__":
    main()
