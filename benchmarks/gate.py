"""Cost of naming the bad node: the gate's localisation against all-pairs and bisection.

For N = 128 and 1,024 nodes with K = 1 and 4 planted bad nodes, every strategy runs
against the same simulated fleet (same faults, same noise) and the table shows rounds
(sets of jobs run in parallel), jobs, GPU-hours and whether it named exactly the planted
nodes, with the ratio of each baseline's GPU-hours to ours. A job is charged the same
minutes whatever its size, which flatters bisection (a 1,024-node NCCL job takes longer
to start than a pair).

Run: `.venv/bin/python benchmarks/gate.py [--seed S] [--job-minutes M]`. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.gate.plan import pair_rotation
from cluster_tool.gate.simulate import SimulatedFleet, plant_fleet, simulate

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-minutes", type=float, default=5.0)
    args = ap.parse_args()
    row = "{:>5} {:>2}  {:<11} {:>6} {:>7} {:>9} {:>7}  {}"
    head = row.format("N", "K", "strategy", "rounds", "jobs", "GPU-h", "x ours", "named")
    print(head)
    print("-" * len(head))
    for n in (128, 1024):
        for k in (1, 4):
            rows = []
            fleet = plant_fleet(n, k, seed=args.seed, job_minutes=args.job_minutes)
            ours, _ = simulate(fleet, gpus_per_node=GPUS)
            rows.append(("ours", ours.rounds, ours.jobs, ours.gpu_hours, ours.found))
            for name, fn in (("all-pairs", all_pairs), ("bisection", bisection)):
                fleet = plant_fleet(n, k, seed=args.seed, job_minutes=args.job_minutes)
                rounds, jobs, found = fn(fleet)
                rows.append((name, rounds, jobs, fleet.gpu_hours(GPUS), found))
            planted = ours.bad_nodes
            for name, rounds, jobs, hours, found in rows:
                ratio = hours / ours.gpu_hours if ours.gpu_hours else float("nan")
                ok = "exactly" if found == planted else f"{len(found)} (planted {len(planted)})"
                print(row.format(n, k, name, rounds, jobs, f"{hours:.1f}", f"{ratio:.2f}", ok))
    print(f"\n{GPUS} GPUs per node, {args.job_minutes:g} min per job, seed {args.seed}")


if __name__ == "__main__":
    main()
