"""Launcher arguments for a chosen layout: Megatron-LM flags, torchrun per node, a hostfile."""

from __future__ import annotations

from cluster_tool.plan.estimate import Assumptions, Estimate, Training
from cluster_tool.plan.model import ModelSpec
from cluster_tool.plan.placement import Placement
from cluster_tool.plan.stages import pipeline_layout as stages_layout


def pipeline_layout(stages: tuple[int, ...], vp: int) -> str:
    """Megatron-Core `--pipeline-model-parallel-layout` for `stages` layers per rank, each
    spread over `vp` virtual stages (see `cluster_tool.plan.stages.pipeline_layout`)."""
    chunks = []
    for layers in stages:
        base, extra = divmod(layers, vp)
        chunks.append(tuple(base + (1 if c < extra else 0) for c in range(vp)))
    return stages_layout(tuple(chunks))


def megatron_args(
    model: ModelSpec, training: Training, est: Estimate, assumptions: Assumptions
) -> list[str]:
    """Flags for Megatron-LM's `pretrain_gpt.py` that reproduce the layout and the model."""
    lay = est.layout
    args = [
        f"--tensor-model-parallel-size {lay.tp}",
        f"--pipeline-model-parallel-size {lay.pp}",
        f"--context-parallel-size {lay.cp}",
        f"--micro-batch-size {lay.micro_batch}",
        f"--global-batch-size {training.global_batch}",
        f"--num-layers {model.layers}",
        f"--hidden-size {model.hidden}",
        f"--ffn-hidden-size {model.ffn}",
        f"--num-attention-heads {model.heads}",
        f"--seq-length {model.seq}",
        f"--max-position-embeddings {model.seq}",
    ]
    if model.kv_heads != model.heads:
        args += ["--group-query-attention", f"--num-query-groups {model.kv_heads}"]
    if model.gated_mlp:
        args.append("--swiglu")
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if lay.tp > 1:
        args.append("--sequence-parallel")
    args += est.split.megatron_args()
    if training.zero in ("1", "2"):
        args.append("--use-distributed-optimizer")
    elif training.zero in ("3", "fsdp"):
        args.append("--use-torch-fsdp2")
    if training.grad_dtype == "bf16":
        args.append("--grad-reduce-in-bf16")
    if training.optimizer_dtype == "bf16":
        args += [
            "--use-precision-aware-optimizer",
            "--exp-avg-dtype bf16",
            "--exp-avg-sq-dtype bf16",
        ]
    if lay.dp * lay.cp > 1:
        # The cost model counts on these (cluster_tool.plan.estimate._dp_comm).
        args += ["--overlap-grad-reduce", "--overlap-param-gather"]
    if lay.cp > 1 and assumptions.cp_comm != "p2p":
        args.append(f"--cp-comm-type {assumptions.cp_comm}")
    if lay.tp > 1 and assumptions.tp_overlap:
        args.append("--tp-comm-overlap")
    if model.moe:
        args += [f"--num-experts {model.experts}", f"--moe-router-topk {model.top_k}"]
        if model.moe_ffn:
            args.append(f"--moe-ffn-hidden-size {model.moe_ffn}")
        if lay.ep > 1:
            args.append(f"--expert-model-parallel-size {lay.ep}")
    if training.recompute == "full":
        args += [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ]
    elif training.recompute == "selective":
        args.append("--recompute-granularity selective")
    if model.flash_attention:
        args.append("--use-flash-attn")
    args.append("--bf16")
    if training.precision == "fp8":
        args += ["--fp8-format hybrid"]
    return args


def launch_env(*, sharp: bool) -> list[str]:
    """What the run exports beside the node's /etc/nccl.conf: CollNet, for a run that wants
    SHARP (nccl.conf leaves it off, as it is mounted into every job)."""
    return ["NCCL_COLLNET_ENABLE=1"] if sharp else []


def torchrun_args(placement: Placement, *, port: int = 29500) -> list[str]:
    """Static rendezvous so that node rank k is the k-th hostfile line (a c10d rendezvous
    would hand out node ranks in arrival order and undo the placement)."""
    return [
        f"--nnodes={len(placement.hostfile)}",
        f"--nproc-per-node={placement.gpus_per_node}",
        "--node-rank=$NODE_RANK",
        f"--master-addr={placement.hostfile[0]}",
        f"--master-port={port}",
    ]


def hostfile_text(placement: Placement) -> str:
    """One node per line in node-rank order, with its node rank: `gpu017 # node_rank=0`."""
    return "".join(f"{name}  # node_rank={i}\n" for i, name in enumerate(placement.hostfile))


def slurm_hostfile_text(placement: Placement) -> str:
    """For `srun --distribution=arbitrary` with `SLURM_HOSTFILE`: one line per task, one task
    per GPU, in rank order."""
    return "".join(
        f"{name}\n" for name in placement.hostfile for _ in range(placement.gpus_per_node)
    )
