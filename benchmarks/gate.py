"""What the gate costs and whom it would admit, on simulated fleets under both fault models.

For N = 128 and 1,024 nodes with K = 1 and 4 planted faulty nodes, the whole gate (single,
pairs, full) runs on a simulated fleet over 20 seeds, once under the `ideal` fault model (bad
nodes far under the floor, bad paths on screen pairs) and once under `adversarial` (hard,
marginal 0.78-0.90x and intermittent 30-70 % nodes, a bad path anywhere, two stragglers). The
table shows mean rounds (sets of jobs run in parallel, every rung counted) and GPU-hours, the
planted must-catch faults `cluster_tool.verdicts` would admit (sum over seeds), marginal nodes
above 0.85x admitted (allowed), healthy nodes blamed (sum and worst seed), and on how many
seeds the issue's goal held (nothing must-catch admitted, at most 1 % of N blamed).

`--baselines` adds the old comparison of the pair localisation alone against all-pairs and
bisection on the ideal model (one seed).

Run: `.venv/bin/python benchmarks/gate.py [--seeds 20] [--job-minutes M] [--baselines]`.
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.gate.localize import Localizer
from cluster_tool.gate.plan import pair_rotation
from cluster_tool.gate.simulate import SimulatedFleet, SimulationResult, plant_fleet, simulate

GPUS = 8


def all_pairs(fleet: SimulatedFleet) -> tuple[int, int, list[str]]:
    """Every pair once (N-1 rounds of the circle schedule); bad = fails with most partners."""
    fails: Counter[str] = Counter()
    rounds = jobs = 0
    n = len(fleet.nodes)
    for r in range(n - 1 if n % 2 == 0 else n):
        pairs, _ = pair_rotation(fleet.nodes, r, fleet.su_of)
        rounds += 1
        for res in fleet.run_round(list(pairs)):
            jobs += 1
            if not res.passed:
                fails.update(res.nodes)
    found = sorted(node for node, k in fails.items() if k > (n - 1) / 2)
    return rounds, jobs, found


def bisection(fleet: SimulatedFleet) -> tuple[int, int, list[str]]:
    """Group testing: run the whole fleet; split every failing group in halves, level by level
    (one round per level); a failing pair ends with each member re-run beside a proven node."""
    groups = [list(fleet.nodes)]
    good: list[str] = []
    suspects: list[str] = []
    rounds = jobs = 0
    while groups:
        rounds += 1
        results = fleet.run_round([tuple(g) for g in groups])
        jobs += len(groups)
        nxt: list[list[str]] = []
        for g, res in zip(groups, results, strict=True):
            if res.passed:
                good += g
            elif len(g) <= 2:
                suspects += g
            else:
                half = len(g) // 2
                nxt += [g[:half], g[half:]]
        groups = nxt
    found: list[str] = []
    if suspects and good:
        rounds += 1
        jobs += len(suspects)
        partners = (good * (len(suspects) // len(good) + 1))[: len(suspects)]
        results = fleet.run_round([(s, p) for s, p in zip(suspects, partners, strict=True)])
        found = sorted(s for s, res in zip(suspects, results, strict=True) if not res.passed)
    return rounds, jobs, found


def one(args: tuple[int, int, int, str, float]) -> SimulationResult:
    n, k, seed, model, minutes = args
    fleet = plant_fleet(n, k, seed=seed, fault_model=model, job_minutes=minutes)  # type: ignore[arg-type]
    return simulate(fleet)[0]


def gate_table(seeds: int, minutes: float) -> None:
    row = "{:>5} {:>2}  {:<11} {:>6} {:>8} {:>12} {:>13} {:>12} {:>10} {:>7}"
    head = row.format(
        "N", "K", "model", "rounds", "GPU-h", "admitted_bad", "adm_marginal", "blamed_good",
        "blamed_max", "goal",
    )  # fmt: skip
    print(head)
    print("-" * len(head))
    with ProcessPoolExecutor() as pool:
        for n in (128, 1024):
            for k in (1, 4):
                for model in ("ideal", "adversarial"):
                    jobs = [(n, k, s, model, minutes) for s in range(1, seeds + 1)]
                    results = list(pool.map(one, jobs))
                    blamed = [len(r.blamed_good) for r in results]
                    print(
                        row.format(
                            n,
                            k,
                            model,
                            f"{sum(r.rounds for r in results) / seeds:.1f}",
                            f"{sum(r.gpu_hours for r in results) / seeds:.0f}",
                            sum(len(r.admitted_bad) for r in results),
                            sum(len(r.admitted_marginal) for r in results),
                            sum(blamed),
                            max(blamed),
                            f"{sum(r.met_goal for r in results)}/{seeds}",
                        )
                    )
    print(
        f"\nmeans over seeds 1-{seeds}; admitted and blamed are sums; {GPUS} GPUs per node, "
        f"{minutes:g} min per job"
    )


def baselines(seed: int, minutes: float) -> None:
    row = "{:>5} {:>2}  {:<11} {:>6} {:>7} {:>9} {:>7}  {}"
    head = row.format("N", "K", "strategy", "rounds", "jobs", "GPU-h", "x ours", "named")
    print(head)
    print("-" * len(head))
    for n in (128, 1024):
        for k in (1, 4):
            rows = []
            fleet = plant_fleet(n, k, seed=seed, job_minutes=minutes)
            loc = Localizer(fleet.nodes, su_of=fleet.su_of).run(fleet.run_round)
            ours_h = fleet.gpu_hours(GPUS)
            rows.append(("ours", loc.rounds, loc.jobs, ours_h, sorted(loc.bad)))
            for name, fn in (("all-pairs", all_pairs), ("bisection", bisection)):
                fleet = plant_fleet(n, k, seed=seed, job_minutes=minutes)
                rounds, jobs, found = fn(fleet)
                rows.append((name, rounds, jobs, fleet.gpu_hours(GPUS), found))
            planted = fleet.bad_nodes
            for name, rounds, jobs, hours, found in rows:
                ratio = hours / ours_h if ours_h else float("nan")
                ok = "exactly" if found == planted else f"{len(found)} (planted {len(planted)})"
                print(row.format(n, k, name, rounds, jobs, f"{hours:.1f}", f"{ratio:.2f}", ok))
    print(f"\npair localisation only, ideal model, seed {seed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--job-minutes", type=float, default=5.0)
    ap.add_argument("--baselines", action="store_true")
    args = ap.parse_args()
    gate_table(args.seeds, args.job_minutes)
    if args.baselines:
        print()
        baselines(1, args.job_minutes)


if __name__ == "__main__":
    main()
