"""The plan as data: the `--json` document of `cluster-tool plan`, best layout first."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ClusterShell.NodeSet import NodeSet

from cluster_tool.plan.cluster import ClusterShape
from cluster_tool.plan.estimate import GIB, Assumptions, Estimate, Training
from cluster_tool.plan.launch import launch_env, megatron_args, torchrun_args
from cluster_tool.plan.model import ModelSpec
from cluster_tool.plan.placement import Placement, place
from cluster_tool.plan.search import PlanResult


def _gib(value: float) -> float:
    return round(value / GIB, 2)


def placement_json(placement: Placement) -> dict[str, Any]:
    return {
        "nodes": len(placement.hostfile),
        "hostfile": list(placement.hostfile),
        "pp_chains_whole_in_su": placement.pp_chains_whole_in_su,
        "pp_pairs_across_su": placement.pp_pairs_across_su(),
        "idle_nodes": str(NodeSet.fromlist(placement.idle_nodes)) if placement.idle_nodes else "",
    }


def layout_json(est: Estimate, placement: Placement | None = None) -> dict[str, Any]:
    lay = est.layout
    out: dict[str, Any] = {
        "tp": lay.tp,
        "pp": lay.pp,
        "dp": lay.dp,
        "cp": lay.cp,
        "vp": lay.vp,
        "micro_batch": lay.micro_batch,
        "ep": lay.ep,
        "microbatches": est.microbatches,
        "gpus": lay.gpus,
        "stage_layers": list(est.stage_layers),
        "mfu": round(est.mfu, 4),
        "step_time_s": round(est.step_time_s, 4),
        "achieved_tflops_per_gpu": round(est.achieved_tflops, 1),
        "tokens_per_s": round(est.tokens_per_s, 1),
        "bubble": round(est.bubble, 4),
        "memory_per_gpu_gib": _gib(est.memory.total),
        "fits": est.fits,
        "memory": {
            "weights_gib": _gib(est.memory.weights),
            "gradients_gib": _gib(est.memory.gradients),
            "optimizer_gib": _gib(est.memory.optimizer),
            "activations_gib": _gib(est.memory.activations),
            "usable_gib": _gib(est.memory.usable),
            "margin_gib": _gib(est.memory.margin),
        },
        "pipeline_split": est.split.kind,
        "time_s": {
            "compute": round(est.compute_s, 4),
            "tp_comm_exposed": round(est.tp_comm_s, 4),
            "cp_comm_exposed": round(est.cp_comm_s, 4),
            "ep_comm_exposed": round(est.ep_comm_s, 4),
            "pp_comm_exposed": round(est.pp_comm_s, 4),
            "bubble": round(est.bubble_s, 4),
            "dp_comm_exposed": round(est.dp_comm_s, 4),
            "optimizer": round(est.optimizer_s, 4),
        },
        "overlap": [
            {
                "kind": o.kind,
                "total_s": round(o.total_s, 4),
                "exposed_s": round(o.exposed_s, 4),
                "reason": o.reason,
            }
            for o in est.overlaps
        ],
        "notes": list(est.notes),
    }
    if placement is not None:
        out["placement"] = placement_json(placement)
    return out


def _context_json(
    model: ModelSpec, cluster: ClusterShape, training: Training, assumptions: Assumptions
) -> dict[str, Any]:
    """What every plan document starts with: the model, the training, the cluster, the knobs."""
    return {
        "model": {
            "name": model.name,
            "params": model.params,
            "layers": model.layers,
            "hidden": model.hidden,
            "heads": model.heads,
            "kv_heads": model.kv_heads,
            "ffn": model.ffn,
            "vocab": model.vocab,
            "seq": model.seq,
            "mlp": "gated" if model.gated_mlp else "plain",
            "experts": model.experts,
            "top_k": model.top_k,
            "flops_convention": assumptions.flops_convention,
            "model_flops_per_token": model.model_flops_per_token(
                convention=assumptions.flops_convention
            ),
        },
        "training": asdict(training),
        "cluster": {
            "gpu": cluster.gpu.name,
            "hbm_gib": cluster.hbm_gib,
            "gpus_per_node": cluster.gpus_per_node,
            "nvlink_domain": cluster.nvlink_domain,
            "nodes": len(cluster.nodes),
            "usable_nodes": len(cluster.usable_nodes),
            "drained": str(NodeSet.fromlist([n.name for n in cluster.nodes if n.drained])),
            "su_sizes": {str(k): v for k, v in sorted(cluster.su_sizes().items())},
            "fabric_busbw_gbs": cluster.fabric_busbw_gbs,
            "nvlink_busbw_gbs": cluster.nvlink_busbw_gbs,
            "busbw_source": cluster.busbw_source,
        },
        "assumptions": asdict(assumptions),
    }


def _launch_json(
    model: ModelSpec,
    training: Training,
    assumptions: Assumptions,
    est: Estimate,
    placement: Placement,
    sharp: bool = False,
) -> dict[str, Any]:
    return {
        "megatron_args": megatron_args(model, training, est, assumptions),
        "torchrun_args": torchrun_args(placement),
        "env": launch_env(sharp=sharp),
    }


def plan_json(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    assumptions: Assumptions,
    result: PlanResult,
    *,
    top: int,
    sharp: bool = False,
) -> dict[str, Any]:
    """Everything the text view shows, as one JSON-able document; `sharp`: the run wants
    SHARP, so its launch exports CollNet (nccl.conf leaves it off for every job)."""
    shown = result.layouts[:top]
    placements = [place(est.layout, cluster) for est in shown]
    doc = _context_json(model, cluster, training, assumptions)
    doc["mode"] = "search"
    doc["layouts"] = [layout_json(est, pl) for est, pl in zip(shown, placements, strict=True)]
    doc["feasible"] = len(result.layouts)
    doc["rejected"] = dict(result.rejected)
    if shown:
        doc["launch"] = _launch_json(
            model, training, assumptions, shown[0], placements[0], sharp=sharp
        )
    elif result.closest_misfit is not None:
        doc["closest_misfit"] = layout_json(result.closest_misfit)
    return doc


def layout_doc(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    assumptions: Assumptions,
    est: Estimate,
    *,
    sharp: bool = False,
) -> dict[str, Any]:
    """`plan --layout`: one given layout's estimate, whether it fits and by how much, and
    (when it fits) how to launch it; the same fields as each layout of a search."""
    placement = place(est.layout, cluster)
    doc = _context_json(model, cluster, training, assumptions)
    doc["mode"] = "layout"
    doc["layout"] = layout_json(est, placement)
    doc["fits"] = est.fits
    if est.fits:
        doc["launch"] = _launch_json(model, training, assumptions, est, placement, sharp=sharp)
    else:
        kind, size = est.memory.largest()
        doc["why_not"] = (
            f"needs {_gib(est.memory.total)} GiB per GPU of {_gib(est.memory.usable)} usable, "
            f"{_gib(-est.memory.margin)} GiB over; the largest part is {kind}, {_gib(size)} GiB"
        )
    return doc
