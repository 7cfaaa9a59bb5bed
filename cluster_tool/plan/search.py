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
    memory,
    pipeline_split,
)
from cluster_tool.plan.model import ModelSpec
from cluster_tool.plan.placement import placeable

MICRO_BATCHES = (1, 2, 4, 8)
# Context parallelism splits the sequence into 2·CP chunks (Megatron-Core's load-balanced
# causal split); CP groups larger than this are not tried (Llama 3's 128K stage used 16).
CP_MAX = 32
# Every PP up to this is tried, whatever the split; past it only PPs that divide the layers
# (or the layers plus the embedding and loss slots) evenly, as production recipes use them
# (Megatron-LM's 462B: PP 16; its 1T: PP 64 of 128 layers).
PP_ANY_UP_TO = 16


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


def tensor_parallel_sizes(model: ModelSpec, cluster: ClusterShape) -> list[int]:
    """TP sizes: powers of two that divide the heads, up to the NVLink domain."""
    return [t for t in _powers_of_two(cluster.nvlink_domain) if model.heads % t == 0]


def context_parallel_sizes(model: ModelSpec) -> list[int]:
    """CP sizes at any sequence length: powers of two that divide the heads and split the
    sequence into 2·CP equal chunks."""
    return [c for c in _powers_of_two(CP_MAX) if model.heads % c == 0 and model.seq % (2 * c) == 0]


def pipeline_sizes(model: ModelSpec) -> list[int]:
    layers = model.layers
    return [
        p
        for p in range(1, layers + 1)
        if p <= PP_ANY_UP_TO or layers % p == 0 or (layers + 2) % p == 0
    ]


def virtual_stage_sizes(model: ModelSpec, pp: int, microbatches: int) -> list[int]:
    """VP sizes for `pp` ranks: 1, and every VP that divides a rank's layers (or its layer
    slots with the embedding and the loss counted) when the micro-batches fill the
    interleaved schedule (a multiple of PP, as Megatron-Core's interleaving requires)."""
    if pp == 1 or microbatches % pp:
        return [1]
    per = model.layers / pp
    bases = {model.layers // pp, -(-model.layers // pp), (model.layers + 2) // pp}
    return sorted({1} | {v for n in bases for v in range(2, n + 1) if n % v == 0 and v <= per})


def expert_parallel_sizes(model: ModelSpec, dp: int, cp: int) -> list[int]:
    """EP sizes for a MoE model: powers of two dividing the experts and the DP × CP ranks the
    experts are spread over (Megatron-Core carves EP out of the data-parallel group)."""
    if not model.moe:
        return [1]
    return [
        e for e in _powers_of_two(model.experts) if model.experts % e == 0 and (dp * cp) % e == 0
    ]


def plan(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    assumptions: Assumptions | None = None,
) -> PlanResult:
    """Every placeable layout on the usable nodes, one per (TP, CP, PP, and EP for a MoE model)
    with its best micro-batch and virtual-stage count, that fits in memory; sorted by step time
    (the global batch is fixed, so that is throughput)."""
    a = assumptions or Assumptions()
    g = cluster.gpus_per_node
    usable = cluster.usable_gpus
    if usable == 0:
        raise UsageError("no usable GPU nodes (all drained?)")
    rejected: Counter[str] = Counter()
    results: list[Estimate] = []
    closest: Estimate | None = None

    micro = [training.micro_batch] if training.micro_batch else list(MICRO_BATCHES)
    for tp in tensor_parallel_sizes(model, cluster):
        for cp in context_parallel_sizes(model):
            for pp in pipeline_sizes(model):
                mp = tp * cp * pp
                if mp > usable:
                    break
                best_by_ep: dict[int, Estimate] = {}
                for b in micro:
                    dp = _largest_dp(usable // mp, training.global_batch, b, tp, cp, pp, g)
                    if dp is None:
                        rejected["batch or node boundaries"] += 1
                        continue
                    m = training.global_batch // (dp * b)
                    fitted = False
                    for vp in virtual_stage_sizes(model, pp, m):
                        try:
                            split = pipeline_split(model, pp, vp, m)
                        except UsageError:
                            rejected["no stage split"] += 1
                            continue
                        for ep in expert_parallel_sizes(model, dp, cp):
                            lay = Layout(tp, pp, dp, cp, vp, b, ep)
                            # Memory first: it is cheap, and most layouts of a large search
                            # fail it.
                            need = memory(model, cluster, training, lay, a, split)
                            if not need.fits:
                                rejected["memory"] += 1
                                if closest is None or need.total < closest.memory.total:
                                    closest = estimate(model, cluster, training, lay, a)
                                continue
                            est = estimate(model, cluster, training, lay, a)
                            fitted = True
                            held = best_by_ep.get(ep)
                            if held is None or est.step_time_s < held.step_time_s:
                                best_by_ep[ep] = est
                    if not fitted:
                        # A bigger micro-batch keeps more activations, on no more DP ranks:
                        # if none of these fit, none of those will.
                        break
                results.extend(best_by_ep.values())
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
    if model.heads % lay.cp:
        raise UsageError(f"{name}: CP {lay.cp} does not divide {model.heads} attention heads")
    if training.global_batch % (lay.dp * lay.micro_batch):
        raise UsageError(
            f"{name}: global batch {training.global_batch} is not a multiple of DP {lay.dp} × "
            f"micro-batch {lay.micro_batch}"
        )
    if lay.ep > 1 and (not model.moe or model.experts % lay.ep or (lay.dp * lay.cp) % lay.ep):
        raise UsageError(
            f"{name}: EP {lay.ep} must divide the model's experts and DP × CP "
            f"({model.experts} experts)"
        )
    if lay.gpus > cluster.usable_gpus:
        raise UsageError(f"{name}: {lay.gpus} GPUs, {cluster.usable_gpus} are usable")
    if not placeable(lay, g):
        raise UsageError(f"{name}: does not line up with {g}-GPU nodes")
    try:
        pipeline_split(model, lay.pp, lay.vp, lay.microbatches(training.global_batch))
    except UsageError as exc:
        raise UsageError(f"{name}: VP {lay.vp}: {exc}") from None


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
