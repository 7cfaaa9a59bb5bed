"""How far the planner is from published H100 training runs: the error it states.

For every run of the project's table (`cluster_tool/plan/data/published_runs.csv`, each figure
read by hand from its source) the planner is given what the run fixed (model, GPUs, global
batch, sequence, precision, sharding, recomputation) and asked two things:

- its MFU for the published layout (where the source does not state the virtual stages or the
  micro-batch, the best the planner finds for them), against the published MFU;
- its own search on a cluster of the run's size: is the published TP × CP × PP × DP among its
  first three, and how far is the MFU it promises for its pick from the published one.

MFU is compared by one convention (`full`, 6·P + 12·L·h·s) on both sides, so a source's own
convention does not count as error. The figures that matter are those of the held-out rows
(the model's constants are fitted on the others; `split` in the table, fixed).

Run: `.venv/bin/python benchmarks/planner_fit.py [--all]` (--all also lists the fit rows).
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataclasses import dataclass  # noqa: E402

from cluster_tool.plan import Estimate, estimate, plan  # noqa: E402
from cluster_tool.plan.published import (  # noqa: E402
    PublishedRun,
    load_runs,
    published_layouts,
    run_cluster,
    run_training,
)


@dataclass(frozen=True)
class Row:
    """The planner against one published run."""

    run: PublishedRun
    published: float  # MFU, full convention
    estimate: Estimate  # the published layout, as the planner estimates it
    fits: bool
    in_top3: bool
    pick: Estimate | None  # the planner's own first layout
    search_s: float

    @property
    def error(self) -> float:
        return self.estimate.mfu / self.published - 1

    @property
    def pick_error(self) -> float | None:
        return None if self.pick is None else self.pick.mfu / self.published - 1


def published_estimate(run: PublishedRun) -> tuple[Estimate, bool]:
    """The planner's estimate of the run's own layout (the best over what the source left
    unsaid), and whether it fits in memory."""
    cluster, training = run_cluster(run), run_training(run)
    estimates = [estimate(run.model, cluster, training, lay) for lay in published_layouts(run)]
    fitting = [e for e in estimates if e.fits]
    return max(fitting or estimates, key=lambda e: e.mfu), bool(fitting)


def evaluate(run: PublishedRun) -> Row:
    est, fits = published_estimate(run)
    start = time.perf_counter()
    result = plan(run.model, run_cluster(run), run_training(run))
    search_s = time.perf_counter() - start
    top = [_key(e) for e in result.layouts[:3]]
    return Row(
        run=run,
        published=run.mfu(),
        estimate=est,
        fits=fits,
        in_top3=(run.tp, run.cp, run.pp, run.dp) in top,
        pick=result.layouts[0] if result.layouts else None,
        search_s=search_s,
    )


def _key(est: Estimate) -> tuple[int, int, int, int]:
    lay = est.layout
    return lay.tp, lay.cp, lay.pp, lay.dp


def _layout(key: tuple[int, int, int, int]) -> str:
    return "×".join(str(n) for n in key)


def report(rows: list[Row], title: str) -> None:
    print(f"\n{title}: {len(rows)} runs")
    head = f"{'run':<28}{'TP×CP×PP×DP':>14}{'pub MFU':>9}{'est':>8}{'err':>8}"
    print(head + f"{'fits':>6}{'top3':>6}{'pick':>16}{'pick MFU':>10}{'err':>8}")
    for r in rows:
        run = r.run
        pick = "none fits" if r.pick is None else _layout(_key(r.pick))
        pick_mfu = "-" if r.pick is None else f"{r.pick.mfu:.3f}"
        pick_err = "-" if r.pick_error is None else f"{r.pick_error:+.1%}"
        print(
            f"{run.id:<28}{_layout((run.tp, run.cp, run.pp, run.dp)):>14}"
            f"{r.published:>9.3f}{r.estimate.mfu:>8.3f}{r.error:>+8.1%}"
            f"{'yes' if r.fits else 'NO':>6}{'yes' if r.in_top3 else 'no':>6}"
            f"{pick:>16}{pick_mfu:>10}{pick_err:>8}"
        )
    errors = [abs(r.error) for r in rows]
    picks = [abs(r.pick_error) for r in rows if r.pick_error is not None]
    worst = max(rows, key=lambda r: abs(r.error))
    print(
        f"published layout: MFU error mean {sum(errors) / len(errors):.1%}, worst "
        f"{abs(worst.error):.1%} ({worst.run.id}); fits in memory "
        f"{sum(1 for r in rows if r.fits)}/{len(rows)}"
    )
    print(
        f"published layout in the planner's top 3: {sum(1 for r in rows if r.in_top3)}"
        f"/{len(rows)}; planner's pick MFU vs published: mean "
        f"{sum(picks) / max(1, len(picks)):.1%} ({len(picks)} with a pick)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--all", action="store_true", help="also list the fit rows")
    args = parser.parse_args()
    runs = load_runs()
    start = time.perf_counter()
    held = [evaluate(r) for r in runs if r.split == "held-out"]
    if args.all:
        report([evaluate(r) for r in runs if r.split == "fit"], "fit rows")
    report(held, "held-out rows")
    slowest = max(held, key=lambda r: r.search_s)
    print(
        f"(whole benchmark {time.perf_counter() - start:.1f} s; slowest search "
        f"{slowest.search_s:.2f} s for {slowest.run.id} on {slowest.run.gpus} GPUs)"
    )


if __name__ == "__main__":
    main()
