"""Launcher arguments for a chosen layout: Megatron-LM flags, torchrun per node, a hostfile."""

from __future__ import annotations

from cluster_tool.plan.estimate import Assumptions, Estimate, Training
from cluster_tool.plan.model import ModelSpec
from cluster_tool.plan.placement import Placement


def pipeline_layout(stages: tuple[int, ...], vp: int) -> str:
    """Megatron-Core `--pipeline-model-parallel-layout` for uneven stages: `E` embedding,
    `t` a transformer layer, `L` the loss/output layer, `|` ends a virtual stage; virtual
    stage i runs on pipeline rank i mod PP, so the string lists chunk 0 of every rank, then
    chunk 1, and so on."""
    pp = len(stages)
    chunks: list[list[int]] = []
    for layers in stages:
        base, extra = divmod(layers, vp)
        chunks.append([base + (1 if c < extra else 0) for c in range(vp)])
    parts: list[str] = []
    for c in range(vp):
        for r in range(pp):
            n = chunks[r][c]
            text = "t" if n == 1 else (f"t*{n}" if n else "")
            if c == 0 and r == 0:
                text = "E" + text
            if c == vp - 1 and r == pp - 1:
                text += "L"
            parts.append(text)
    return _compress(parts)


def _compress(parts: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(parts):
        j = i
        while j + 1 < len(parts) and parts[j + 1] == parts[i]:
            j += 1
        run = j - i + 1
        is_last = j == len(parts) - 1
        if run >= 3 and not is_last:
            out.append(f"({parts[i]}|)*{run}")
        else:
            out.extend(p + "|" for p in parts[i : j + 1])
        i = j + 1
    text = "".join(out)
    return text[:-1] if text.endswith("|") else text


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
    stages = est.stage_layers
    even = len(set(stages)) == 1
    if lay.pp > 1 and not even:
        args.append(f"--pipeline-model-parallel-layout '{pipeline_layout(stages, lay.vp)}'")
    elif lay.vp > 1:
        args.append(f"--num-layers-per-virtual-pipeline-stage {stages[0] // lay.vp}")
    if training.zero in ("1", "2"):
        args.append("--use-distributed-optimizer")
    elif training.zero in ("3", "fsdp"):
        args.append("--use-torch-fsdp2")
    if lay.dp > 1 and assumptions.overlap > 0:
        args += ["--overlap-grad-reduce", "--overlap-param-gather"]
    if lay.tp > 1 and assumptions.tp_overlap > 0:
        args.append("--tp-comm-overlap")
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
