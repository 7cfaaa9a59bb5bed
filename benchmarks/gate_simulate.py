"""`gate simulate`'s cost per node at 256, 1,024 and 4,096 nodes, side by side in one run: the
controller's CPU per node (the whole ladder on the simulated fleet, localisation and the
verdicts of every node) and the GPU-hours per node the gate would spend, with where they go.

One planted bad node under the adversarial fault model (hard, marginal or intermittent, a bad
path between two healthy nodes, two stragglers), `--seeds` seeds per size. CPU is this
process's (`time.process_time`) for `simulate()`, the median over seeds. Prints the table and
the growth per node against the smallest size; exits 1 when the CPU per node grows past
`--limit` (1.3x). Never a test assertion.

Run: `.venv/bin/python benchmarks/gate_simulate.py [--sizes 256 1024 4096] [--seeds 3]`.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.gate.simulate import plant_fleet, simulate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--limit", type=float, default=1.3)
    args = ap.parse_args()
    sizes = sorted(args.sizes)
    cpu: dict[int, list[float]] = {n: [] for n in sizes}
    hours: dict[int, list[float]] = {n: [] for n in sizes}
    by_rung: dict[int, dict[str, float]] = {n: {} for n in sizes}
    goal: dict[int, int] = dict.fromkeys(sizes, 0)
    for seed in range(1, args.seeds + 1):
        for n in sizes:  # the sizes take turns, seed by seed
            fleet = plant_fleet(n, 1, seed=seed, fault_model="adversarial")
            gc.collect()
            start = time.process_time()
            result, _ = simulate(fleet)
            cpu[n].append((time.process_time() - start) / n)
            hours[n].append(result.gpu_hours / n)
            goal[n] += result.met_goal
            for rung, h in result.gpu_hours_by_rung.items():
                by_rung[n][rung] = by_rung[n].get(rung, 0.0) + h / args.seeds
    first = statistics.median(cpu[sizes[0]])
    print(f"{'N':>6} {'CPU ms/node':>12} {'x smallest':>10} {'GPU-h/node':>11} {'GPU-h':>9}  goal")
    worst = 0.0
    for n in sizes:
        per = statistics.median(cpu[n])
        worst = max(worst, per / first)
        mean_h = statistics.mean(hours[n])
        print(
            f"{n:>6} {per * 1e3:>12.2f} {per / first:>10.2f} {mean_h:>11.2f} "
            f"{mean_h * n:>9.0f}  {goal[n]}/{args.seeds}"
        )
    print("\nGPU-hours by rung (mean over seeds):")
    for n in sizes:
        print(f"{n:>6}  " + ", ".join(f"{r}={h:.0f}" for r, h in by_rung[n].items()))
    print(
        f"\n--bad 1 --fault-model adversarial, seeds 1-{args.seeds}; CPU medians; worst growth "
        f"of CPU per node {worst:.2f}x (limit {args.limit:g}x)"
    )
    return 1 if worst > args.limit else 0


if __name__ == "__main__":
    raise SystemExit(main())
