"""3D-parallelism planner: TP × CP × PP × DP layouts that fit a validated cluster, their step
time and MFU, rank placement (TP in a node, pipelines in an SU, DP on rails), launch flags."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The cost model loads with the package; `estimate` is bound here so the function, not the
# submodule, is what `from cluster_tool.plan import estimate` gives.
from cluster_tool.plan.calibration import FITTED, Calibration
from cluster_tool.plan.estimate import (
    Assumptions,
    Estimate,
    Layout,
    Memory,
    Overlap,
    Training,
    estimate,
    layer_activation_bytes,
    pipeline_split,
    stage_layers,
)
from cluster_tool.plan.model import PRESETS, ModelSpec, megatron_gpt, preset

if TYPE_CHECKING:
    from cluster_tool.plan.cluster import (
        GPUS,
        ClusterShape,
        GateResults,
        GpuSpec,
        PlanNode,
        gpu_spec,
        parse_hostlist,
        read_gate_results,
    )
    from cluster_tool.plan.launch import (
        hostfile_text,
        megatron_args,
        pipeline_layout,
        slurm_hostfile_text,
        torchrun_args,
    )
    from cluster_tool.plan.placement import Placement, RankSlot, place, placeable
    from cluster_tool.plan.report import layout_doc, layout_json, plan_json
    from cluster_tool.plan.search import PlanResult, check_layout, estimate_layout, plan

# The rest of the planner (the cluster model with ClusterShell, search, placement, launch)
# loads on first use: `cluster-tool plan` declares its options without it.
_LAZY_MODULES = ("cluster", "launch", "placement", "report", "search")

__all__ = [
    "FITTED",
    "GPUS",
    "PRESETS",
    "Assumptions",
    "Calibration",
    "ClusterShape",
    "Estimate",
    "GateResults",
    "GpuSpec",
    "Layout",
    "Memory",
    "ModelSpec",
    "Overlap",
    "Placement",
    "PlanNode",
    "PlanResult",
    "RankSlot",
    "Training",
    "check_layout",
    "estimate",
    "estimate_layout",
    "gpu_spec",
    "hostfile_text",
    "layer_activation_bytes",
    "layout_doc",
    "layout_json",
    "megatron_args",
    "megatron_gpt",
    "parse_hostlist",
    "pipeline_layout",
    "pipeline_split",
    "place",
    "placeable",
    "plan",
    "plan_json",
    "preset",
    "read_gate_results",
    "slurm_hostfile_text",
    "stage_layers",
    "torchrun_args",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        for module in _LAZY_MODULES:
            found = getattr(importlib.import_module(f"{__name__}.{module}"), name, None)
            if found is not None:
                globals()[name] = found
                return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
