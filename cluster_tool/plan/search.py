"""Enumerate TP × CP × PP × DP layouts that fit the cluster and rank them by step time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from cluster_tool.errors import UsageError
from cluster_tool.plan.cluster import ClusterShape
from cluster_tool.plan.estimate import (
    Assumptions,
    Estimate,
    Layout,
    Training,
    estimate,
    stage_layers,
)
from cluster_tool.plan.model import ModelSpec
from cluster_tool.plan.placement import placeable

# Context parallelism pays for its K/V exchange only on long sequences; below this length
# the planner does not try it (Llama 3 used CP only for its 128K-token stage).
CP_MIN_SEQ = 16384
MICRO_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True)
class PlanResult:
    """Layouts that fit, best (shortest step) first, and why the others were dropped."""

    layouts: tuple[Estimate, ...]
    rejected: Counter[str] = field(default_factory=Counter)
    closest_misfit: Estimate | None = None  # the lightest layout that did not fit in memory


def _powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def plan(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    assumptions: Assumptions | None = None,
) -> PlanResult:
    """Every placeable layout on the usable nodes, one per (TP, CP, PP) with its best micro-batch
    and virtual-stage count, that fits in memory; sorted by step time (the global batch is
    fixed, so that is throughput)."""
    a = assumptions or Assumptions()
    g = cluster.gpus_per_node
    usable = cluster.usable_gpus
    if usable == 0:
        raise UsageError("no usable GPU nodes (all drained?)")
    rejected: Counter[str] = Counter()
    results: list[Estimate] = []
    closest: Estimate | None = None

    tps = [t for t in _powers_of_two(min(cluster.nvlink_domain, g)) if model.heads % t == 0]
    cps = [1]
    if model.seq >= CP_MIN_SEQ:
        cps += [c for c in _powers_of_two(32)[1:] if model.seq % (2 * c) == 0]
    micro = [training.micro_batch] if training.micro_batch else list(MICRO_BATCHES)

    for tp in tps:
        for cp in cps:
            for pp in range(1, model.layers + 1):
                mp = tp * cp * pp
                if mp > usable:
                    break
                stages = stage_layers(model, pp)
                best: Estimate | None = None
                for b in micro:
                    dp = _largest_dp(usable // mp, training.global_batch, b, tp, cp, pp, g)
                    if dp is None:
                        rejected["batch or node boundaries"] += 1
                        continue
                    m = training.global_batch // (dp * b)
                    vps = [1]
                    if pp > 1 and m % pp == 0:
                        vps += [v for v in range(2, min(stages) + 1) if max(stages) % v == 0]
                    fitted = False
                    for vp in vps:
                        est = estimate(model, cluster, training, Layout(tp, pp, dp, cp, vp, b), a)
                        if not est.fits:
                            rejected["memory"] += 1
                            if closest is None or est.memory.total < closest.memory.total:
                                closest = est
                            continue
                        fitted = True
                        if best is None or est.step_time_s < best.step_time_s:
                            best = est
                    if not fitted:
                        # A bigger micro-batch keeps more activations, on no more DP ranks:
                        # if none of these fit, none of those will.
                        break
                if best is not None:
                    results.append(best)
    results.sort(key=lambda e: (e.step_time_s, e.layout.tp, e.layout.pp))
    return PlanResult(layouts=tuple(results), rejected=rejected, closest_misfit=closest)


def _largest_dp(
    limit: int, global_batch: int, micro_batch: int, tp: int, cp: int, pp: int, g: int
) -> int | None:
    for dp in range(limit, 0, -1):
        if global_batch % (dp * micro_batch):
            continue
        if placeable(Layout(tp, pp, dp, cp, 1, micro_batch), g):
            return dp
    return None


def check_layout(model: ModelSpec, cluster: ClusterShape, training: Training, lay: Layout) -> None:
    """A usage error naming the first thing that makes `lay` impossible to run as given: what
    Megatron-LM would refuse at start-up, or what the usable nodes cannot hold. Memory is not
    checked here: a layout that does not fit is still estimated, to say by how much."""
    g = cluster.gpus_per_node
    name = f"TP {lay.tp} PP {lay.pp} CP {lay.cp} DP {lay.dp}"
    if model.heads % lay.tp:
        raise UsageError(f"{name}: TP {lay.tp} does not divide {model.heads} attention heads")
    if lay.tp > cluster.nvlink_domain:
        raise UsageError(
            f"{name}: TP {lay.tp} is wider than the NVLink domain of {cluster.nvlink_domain}"
        )
    if lay.pp > model.layers:
        raise UsageError(f"{name}: {lay.pp} pipeline stages for {model.layers} layers")
    if model.seq % (2 * lay.cp):
        raise UsageError(f"{name}: CP {lay.cp} needs a sequence divisible by {2 * lay.cp}")
    if lay.vp > 1 and lay.pp == 1:
        raise UsageError(f"{name}: virtual stages need PP > 1")
    if training.global_batch % (lay.dp * lay.micro_batch):
        raise UsageError(
            f"{name}: global batch {training.global_batch} is not a multiple of DP {lay.dp} × "
            f"micro-batch {lay.micro_batch}"
        )
    if lay.gpus > cluster.usable_gpus:
        raise UsageError(f"{name}: {lay.gpus} GPUs, {cluster.usable_gpus} are usable")
    if not placeable(lay, g):
        raise UsageError(f"{name}: does not line up with {g}-GPU nodes")


def estimate_layout(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    lay: Layout,
    assumptions: Assumptions | None = None,
) -> Estimate:
    """`plan --layout`: the estimate of one given layout, the same the search computes for it."""
    check_layout(model, cluster, training, lay)
    return estimate(model, cluster, training, lay, assumptions or Assumptions())
