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
        "microbatches": est.microbatches,
        "gpus": lay.gpus,
        "stage_layers": list(est.stage_layers),
        "mfu": round(est.mfu, 4),
        "step_time_s": round(est.step_time_s, 4),
        "achieved_tflops_per_gpu": round(est.achieved_tflops, 1),
        "tokens_per_s": round(est.tokens_per_s, 1),
        "bubble": round(est.bubble, 4),
        "memory_per_gpu_gib": _gib(est.memory.total),
        "memory": {
            "weights_gib": _gib(est.memory.weights),
            "gradients_gib": _gib(est.memory.gradients),
            "optimizer_gib": _gib(est.memory.optimizer),
            "activations_gib": _gib(est.memory.activations),
            "usable_gib": _gib(est.memory.usable),
        },
        "time_s": {
            "compute": round(est.compute_s, 4),
            "tp_comm": round(est.tp_comm_s, 4),
            "pp_comm_exposed": round(est.pp_comm_s, 4),
            "cp_comm_exposed": round(est.cp_comm_s, 4),
            "dp_comm_exposed": round(est.dp_comm_s, 4),
        },
        "notes": list(est.notes),
    }
    if placement is not None:
        out["placement"] = placement_json(placement)
    return out


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
    """Everything the text view shows, as one JSON-able document."""
    shown = result.layouts[:top]
    layouts = [layout_json(est, place(est.layout, cluster)) for est in shown]
    doc: dict[str, Any] = {
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
            "model_flops_per_token": model.model_flops_per_token(),
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
        "layouts": layouts,
        "feasible": len(result.layouts),
        "rejected": dict(result.rejected),
    }
    if shown:
        best = shown[0]
        placement = place(best.layout, cluster)
        doc["launch"] = {
            "megatron_args": megatron_args(model, training, best, assumptions),
            "torchrun_args": torchrun_args(placement),
            "env": launch_env(sharp=sharp),
        }
    elif result.closest_misfit is not None:
        doc["closest_misfit"] = layout_json(result.closest_misfit)
    return doc
