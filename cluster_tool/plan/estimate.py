"""Memory per GPU and step time / MFU of one parallel layout: the planner's cost model.

Symbols (as in `cluster_tool.plan.model`): t TP, p PP, c CP, d DP, e EP, v virtual stages per
rank, m micro-batches per step, b micro-batch, s sequence length, h hidden, f FFN, V vocabulary,
L layers, P parameters in matrix multiplies. docs/planner.md walks through every term with its
source; in short:

Memory (per GPU, the pipeline rank that needs the most):
- weights bf16 (2 B per parameter; +1 B with fp8, Transformer Engine's cached fp8 copy),
  fp32 main gradients (4 B), Adam in fp32 (master weights, m, v: 12 B); Megatron's distributed
  optimizer shards the 12 B over the DP × CP group (its data-parallel group includes context
  parallelism); ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights. Expert weights are
  split over EP.
- activations: Korthikanti et al. 2022 (arXiv:2205.05198), Table 2, generalised by
  `layer_activation_bytes` per recomputation mode; rank i of 1F1B holds min(p − i, m)
  micro-batches, the interleaved schedule (1 + (p−1)/(p·v)) times as many; the last rank
  holds fp32 logits.
- fits when the total is within the GPU's memory less a reserve (`Assumptions.reserved_gib`).

Time (one step):
- per micro-batch on each rank: its layers' GEMMs (at the fitted efficiency of their shape,
  bf16 or fp8), attention (FlashAttention, causal), element-wise kernels (HBM bandwidth),
  exposed TP, CP and EP communication; the last rank also the output layer and the loss;
- pipeline: m micro-batches at the pace of the slowest rank, plus the fill and drain of the
  largest virtual stage (p − 1 of them; Narayanan et al. 2021, 2.2); point-to-point transfers
  exposed in 1F1B, overlapped with compute when interleaved (Megatron's default);
- data parallel: bucketed reduce-scatter of gradients and all-gather of weights (distributed
  optimizer) over the DP × CP group, overlapped with the last micro-batch's backward and the
  first one's forward (Megatron's --overlap-grad-reduce/--overlap-param-gather);
- the optimizer step, paced by HBM bandwidth.
- MFU = tokens/s × model FLOPs per token (`ModelSpec.model_flops_per_token`, by the chosen
  convention) / (GPUs × dense peak of the precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cluster_tool.errors import UsageError
from cluster_tool.plan.calibration import FITTED, Calibration
from cluster_tool.plan.model import FLOPS_CONVENTIONS
from cluster_tool.plan.stages import StageSplit, split_stages

if TYPE_CHECKING:  # annotations only: the cost model loads without the cluster model
    from cluster_tool.plan.cluster import ClusterShape
    from cluster_tool.plan.comm import Fabric
    from cluster_tool.plan.model import ModelSpec

GIB = 1024**3
ZERO_STAGES = ("0", "1", "2", "3", "fsdp")
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
STATE_DTYPES = ("fp32", "bf16")
# How context parallelism moves K and V (Megatron-LM's --cp-comm-type): `p2p` is the ring
# (Megatron-Core's default, Transformer Engine's P2P CP), each chunk sent on beside the
# attention of the one held; `allgather` gathers K and V whole before attention starts (the
# Llama 3 paper, Section 3.3.2, "all-gather based" CP), so nothing hides the transfer.
CP_COMM_TYPES = ("p2p", "allgather")

# What the CUDA context, NCCL's buffers and the cuBLAS / Transformer Engine workspaces take on
# each GPU before any tensor of the model: about 0.5 GiB of context, NCCL's channels' buffers
# (NCCL_BUFFSIZE 4 MiB per peer and channel), GEMM workspaces; 2 GiB covers them on H100.
RESERVED_GIB = 2.0

# Megatron-Core's DDP bucket: max(40M, 1M × data-parallel size) parameters
# (megatron/core/distributed/distributed_data_parallel.py, bucket_size default).
BUCKET_MIN_PARAMS = 40_000_000
BUCKET_PARAMS_PER_DP_RANK = 1_000_000

# Adam step on the local shard: read fp32 master, m, v, gradient (16 B), write master, m, v
# (12 B) and the bf16 weight (2 B) per parameter.
OPTIMIZER_BYTES_PER_PARAM = 30.0

# FlashAttention's backward runs five matrix multiplies where the forward runs two
# (Dao 2023, FlashAttention-2, Section 3.1.2): 2.5 × the forward's FLOPs.
ATTENTION_BACKWARD_RATIO = 2.5

# The gate's alltoall expectation: 0.75 of the bound (cluster_tool.gate.thresholds).
ALLTOALL_EFFICIENCY = 0.75


@dataclass(frozen=True)
class Assumptions:
    """The knobs of the model that are choices or fits rather than facts about the cluster."""

    calibration: Calibration = FITTED
    # Megatron --tp-comm-overlap (Transformer Engine userbuffers) where TP > 1.
    tp_overlap: bool = True
    # Keep this fraction of HBM free on top of `reserved_gib`.
    memory_margin: float = 0.0
    reserved_gib: float = RESERVED_GIB
    # Override the GPU's datasheet peak (TFLOP/s), e.g. to check a model against A100 runs.
    peak_tflops: float | None = None
    # How MFU counts FLOPs (`ModelSpec.model_flops_per_token`).
    flops_convention: str = "full"
    # Megatron-LM --cp-comm-type (`CP_COMM_TYPES`).
    cp_comm: str = "p2p"

    def __post_init__(self) -> None:
        if not 0.0 <= self.memory_margin < 1.0:
            raise UsageError(f"memory_margin must be within 0..1, got {self.memory_margin}")
        if self.reserved_gib < 0:
            raise UsageError(f"reserved_gib cannot be negative, got {self.reserved_gib}")
        if self.cp_comm not in CP_COMM_TYPES:
            raise UsageError(
                f"CP communication {self.cp_comm!r}: one of {', '.join(CP_COMM_TYPES)}"
            )
        if self.flops_convention not in FLOPS_CONVENTIONS:
            raise UsageError(
                f"FLOP convention {self.flops_convention!r}: one of {', '.join(FLOPS_CONVENTIONS)}"
            )


@dataclass(frozen=True)
class Training:
    """What the training run fixes: batch, precision, sharding, recomputation."""

    global_batch: int
    micro_batch: int | None = None  # None: the planner picks
    precision: str = "bf16"
    zero: str = "1"
    recompute: str = "selective"
    # Gradients accumulated and reduced in fp32 (Megatron-LM's bf16 default,
    # megatron/training/arguments.py) or bf16 (--grad-reduce-in-bf16; NeMo's recipes).
    grad_dtype: str = "fp32"
    # Adam's moments in fp32, or bf16 (--use-precision-aware-optimizer --exp-avg-dtype bf16
    # --exp-avg-sq-dtype bf16; the master weights stay fp32).
    optimizer_dtype: str = "fp32"

    def __post_init__(self) -> None:
        for name in ("grad_dtype", "optimizer_dtype"):
            if getattr(self, name) not in STATE_DTYPES:
                raise UsageError(f"{name} must be one of {', '.join(STATE_DTYPES)}")
        if self.global_batch <= 0:
            raise UsageError("global batch must be positive")
        if self.micro_batch is not None and self.micro_batch <= 0:
            raise UsageError("micro batch must be positive")
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision must be one of {', '.join(PRECISIONS)}")
        if self.zero not in ZERO_STAGES:
            raise UsageError(f"zero must be one of {', '.join(ZERO_STAGES)}")
        if self.recompute not in RECOMPUTE:
            raise UsageError(f"recompute must be one of {', '.join(RECOMPUTE)}")


@dataclass(frozen=True)
class Layout:
    """One way to split the job: tensor, context, pipeline, data parallel sizes, virtual
    pipeline stages per rank (`vp`, 1 = plain 1F1B), the micro-batch size and, for
    mixture-of-experts models, expert parallelism (`ep` ranks of the data-parallel group
    share the experts)."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    vp: int = 1
    micro_batch: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def microbatches(self, global_batch: int) -> int:
        return global_batch // (self.dp * self.micro_batch)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """`TP,PP,CP,DP[,VP][,MBS][,EP]`, as `plan --layout` takes it (the rest default to 1)."""
        parts = text.split(",")
        if not 4 <= len(parts) <= 7:
            raise UsageError(f"--layout {text!r}: give TP,PP,CP,DP[,VP][,MBS][,EP]")
        names = ("TP", "PP", "CP", "DP", "VP", "MBS", "EP")
        values = []
        for name, part in zip(names, parts, strict=False):
            if not part.strip().isdigit() or not 1 <= int(part) <= 1 << 20:
                raise UsageError(f"--layout {text!r}: {name} must be a whole number from 1")
            values.append(int(part))
        values += [1] * (7 - len(values))
        tp, pp, cp, dp, vp, mbs, ep = values
        return cls(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch=mbs, ep=ep)


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the fullest pipeline rank, by kind."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    usable: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    @property
    def margin(self) -> float:
        """Bytes left free (negative: how far over)."""
        return self.usable - self.total

    def largest(self) -> tuple[str, float]:
        """The kind that takes the most, and its bytes."""
        parts = {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer state": self.optimizer,
            "activations": self.activations,
        }
        kind = max(parts, key=lambda k: parts[k])
        return kind, parts[kind]


@dataclass(frozen=True)
class Overlap:
    """Communication of one kind in a step: how long it takes, how much of it compute hides,
    and why."""

    kind: str
    total_s: float
    exposed_s: float
    reason: str


@dataclass(frozen=True)
class Estimate:
    """The model's verdict on one layout."""

    layout: Layout
    stage_layers: tuple[int, ...]
    split: StageSplit
    microbatches: int
    memory: Memory
    step_time_s: float
    mfu: float
    achieved_tflops: float  # hardware FLOPs per GPU per second, recomputation included
    bubble: float  # fraction of the pipeline's time the ranks idle in fill and drain
    compute_s: float  # GEMMs, attention, element-wise kernels of the slowest rank
    tp_comm_s: float  # exposed
    pp_comm_s: float
    cp_comm_s: float
    dp_comm_s: float
    tokens_per_s: float
    ep_comm_s: float = 0.0
    optimizer_s: float = 0.0
    bubble_s: float = 0.0
    overlaps: tuple[Overlap, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return self.memory.fits


# ---------------------------------------------------------------- pipeline partition


def head_layer_equivalents(model: ModelSpec) -> float:
    """The output projection's work in units of one transformer layer (same tokens)."""
    layer = 6.0 * model.active_layer_params + 12.0 * model.hidden * model.seq
    return 6.0 * model.vocab * model.hidden / layer


def pipeline_split(model: ModelSpec, pp: int, vp: int = 1, microbatches: int = 1) -> StageSplit:
    """How the layers are split over `pp` ranks of `vp` virtual stages (`plan.stages`)."""
    head = round(head_layer_equivalents(model), 4)
    return split_stages(model.layers, pp, vp, head, microbatches)


def stage_layers(model: ModelSpec, pp: int, vp: int = 1, microbatches: int = 1) -> tuple[int, ...]:
    """Transformer layers per pipeline rank, first to last."""
    return pipeline_split(model, pp, vp, microbatches).layers


# ---------------------------------------------------------------- memory


def layer_activation_bytes(
    model: ModelSpec, *, tokens: int, micro_batch: int, tp: int, recompute: str
) -> float:
    """Bytes one layer keeps for backward for one micro-batch, with sequence parallelism.

    Korthikanti et al. 2022, Section 4 (per layer, s tokens, b micro-batch, h hidden, a heads):
    attention 11·sbh + 5·as²b, MLP 19·sbh, two layer norms 4·sbh → `sbh·(34 + 5as/h)`, all
    divided by t under tensor + sequence parallelism. Generalised here for what the paper's GPT
    did not have: grouped-query attention (K, V are `kv_dim` wide), SwiGLU (gate and up outputs
    and their product kept: 6·sbf instead of GeLU's 4·sbf), no dropout (no masks),
    FlashAttention (no s² terms, only the fp32 log-sum-exp per head and token), and experts
    (each token's MLP activations once per expert it goes through).
    """
    s, b, h, f, a = tokens, micro_batch, model.hidden, model.expert_ffn, model.heads
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh / tp
    # What cheap element-wise recomputation saves once FlashAttention has removed the s²
    # terms: the norm outputs (the QKV and first-MLP inputs, recomputed from the norm inputs)
    # and the SwiGLU product (recomputed from the gate and up outputs).
    lean = recompute == "selective" and model.flash_attention
    attention = 2 * sbh + 2 * s * b * model.kv_dim  # Q, K
    attention += 2 * s * b * model.kv_dim + 2 * sbh  # V, output-projection input
    if not lean:
        attention += 2 * sbh  # QKV input (the first norm's output)
    if model.dropout:
        attention += sbh  # dropout mask after the output projection
    if model.flash_attention:
        attention += 4 * a * s * b  # log-sum-exp, fp32
    elif recompute != "selective":
        scores = 2 * a * s * s * b  # softmax output
        if model.dropout:
            scores += a * s * s * b + 2 * a * s * s * b  # its dropout mask and output
        attention += scores
    # SwiGLU: gate and up outputs (+ their product); GeLU: its input and output.
    mlp = 4 * s * b * f
    if model.gated_mlp and not lean:
        mlp += 2 * s * b * f
    mlp *= model.top_k if model.moe else 1
    if not lean:
        mlp += 2 * sbh  # first linear's input (the second norm's output)
    if model.dropout:
        mlp += sbh
    norms = 4 * sbh  # the two norms' inputs
    return (attention + mlp + norms) / tp


def _rank_params(model: ModelSpec, layers: int, first: bool, last: bool, lay: Layout) -> float:
    """Parameters one GPU of a pipeline rank holds: its layers' share over TP (experts also
    over EP), the embedding on the first rank, the output layer on the last."""
    embed = model.embedding_params
    # Megatron keeps a copy of tied word embeddings on the last stage for the output layer.
    head = model.head_params if not model.tied_embeddings else (embed if lay.pp > 1 else 0)
    dense = model.layer_params - model.expert_layer_params
    counted = layers * (dense + model.expert_layer_params / lay.ep)
    counted += (embed if first else 0) + (head if last else 0)
    return counted * model.scale / lay.tp


def memory(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    layout: Layout,
    assumptions: Assumptions,
    split: StageSplit | None = None,
) -> Memory:
    """Memory per GPU of the pipeline rank that needs the most."""
    t, p, d, cp, v, b = layout.tp, layout.pp, layout.dp, layout.cp, layout.vp, layout.micro_batch
    m = layout.microbatches(training.global_batch)
    stages = (split or pipeline_split(model, p, v, m)).layers
    tokens = model.seq // cp
    per_layer = layer_activation_bytes(
        model, tokens=tokens, micro_batch=b, tp=t, recompute=training.recompute
    )
    full_layer = layer_activation_bytes(model, tokens=tokens, micro_batch=b, tp=t, recompute="none")
    worst: tuple[float, float, float, float] | None = None
    # Later ranks hold fewer micro-batches, so among ranks of equal size the earliest is
    # the fullest: only the first, the last and the first of each size can be the worst.
    for index in sorted({0, p - 1} | {stages.index(n) for n in set(stages)}):
        layers = stages[index]
        first, last = index == 0, index == p - 1
        params = _rank_params(model, layers, first, last, layout)
        experts = layers * model.expert_layer_params / layout.ep * model.scale / t
        # Rank i of 1F1B holds p − i micro-batches in flight; the interleaved schedule
        # (1 + (p−1)/(p·v)) times as many (Korthikanti et al. 2022, Section 4.2.3).
        flight = float(min(p - index, m))
        if v > 1:
            flight *= 1.0 + (p - 1) / (p * v)
        acts = layers * per_layer * flight
        if training.recompute == "full":
            acts += full_layer  # the layer being recomputed, in full, during its backward
        if last:
            acts += 4.0 * tokens * b * model.vocab / t  # fp32 logits for the loss
        # Expert weights' optimizer state is sharded over the expert-data-parallel group
        # (DP × CP / EP): the other ranks of the data-parallel group hold other experts.
        dense = _states(params - experts, d * cp, training, model, t)
        expert = _states(experts, max(1, d * cp // layout.ep), training, model, t)
        candidate = (dense[0] + expert[0], dense[1] + expert[1], dense[2] + expert[2], acts)
        if worst is None or sum(candidate) > sum(worst):
            worst = candidate
    assert worst is not None
    weights, grads, optim, acts = worst
    usable = cluster.hbm_gib * GIB * (1.0 - assumptions.memory_margin) - (
        assumptions.reserved_gib * GIB
    )
    return Memory(
        weights=weights, gradients=grads, optimizer=optim, activations=acts, usable=usable
    )


def _states(
    params: float, shards: int, training: Training, model: ModelSpec, tp: int
) -> tuple[float, float, float]:
    """Weights, gradients and optimizer state of `params`, sharded by the ZeRO stage over
    `shards` ranks (DP × CP: Megatron's data-parallel group with context parallelism)."""
    weight_bytes = 2.0 + (1.0 if training.precision == "fp8" else 0.0)  # + fp8 weight cache
    zero = training.zero
    weights = params * weight_bytes
    grads = params * (4.0 if training.grad_dtype == "fp32" else 2.0)
    # fp32 master weights and, in fp32 or bf16, Adam's two moments.
    optim = params * (12.0 if training.optimizer_dtype == "fp32" else 8.0)
    if zero in ("1", "2", "3", "fsdp"):
        optim /= shards
    if zero in ("2", "3", "fsdp"):
        grads /= shards
    if zero in ("3", "fsdp"):
        # Sharded weights plus two layers gathered at a time (current and prefetched).
        weights = weights / shards + 2 * 2.0 * model.layer_params * model.scale / tp
    return weights, grads, optim


# ---------------------------------------------------------------- compute


def gemm_efficiency(
    calibration: Calibration, precision: str, m: float, k: float, n: float
) -> float:
    """The fraction of the peak an M×K·K×N GEMM reaches (`Calibration`)."""
    intensity = 1.0 / (1.0 / m + 1.0 / k + 1.0 / n)
    top = calibration.gemm_fp8 if precision == "fp8" else calibration.gemm_bf16
    return top * intensity / (intensity + calibration.gemm_half_size)


def elementwise_bytes(model: ModelSpec, tokens: float, tp: int, precision: str = "bf16") -> float:
    """HBM traffic of one layer's element-wise kernels for `tokens` tokens, forward and backward,
    before the fitted multiplier: per token, the two norms read and write h (4h), the two
    residual adds read 2h and write h (6h), rotary embedding reads and writes Q and K
    (2(h + kv)), the MLP's activation reads its input and writes its output (SwiGLU 3f, plain
    2f, per expert used); backward about twice the forward; bf16, sharded over TP; fp8 adds
    the casts of the GEMMs' inputs."""
    h, kv = model.hidden, model.kv_dim
    experts = model.top_k if model.moe else 1
    act = (3 if model.gated_mlp else 2) * model.expert_ffn * experts
    total = 3.0 * 2.0 * tokens * (10 * h + 2 * kv + act) / tp
    if precision == "fp8":
        # Transformer Engine casts every GEMM input to fp8 (read 2 B, write 1 B) with a
        # transposed copy for the weight gradient (1 B more), forward (the inputs of QKV,
        # projection, fc1, fc2) and backward (their output gradients).
        fc1 = (2 if model.gated_mlp else 1) * model.expert_ffn * experts
        inputs = 3 * h + model.expert_ffn * experts
        outputs = (h + 2 * kv) + h + fc1 + h
        total += 4.0 * tokens * (inputs + outputs) / tp
    return total


def _gemm_seconds(
    cal: Calibration, precision: str, peak: float, shapes: list[tuple[float, float, float]]
) -> tuple[float, float]:
    """Forward + backward time and FLOPs of a list of (M, K, N) GEMMs: the backward's two
    GEMMs (data and weight gradients) have the forward's FLOPs twice over."""
    seconds = flops = 0.0
    for m, k, n in shapes:
        work = 6.0 * m * k * n
        flops += work
        seconds += work / (peak * gemm_efficiency(cal, precision, m, k, n))
    return seconds, flops


@dataclass(frozen=True)
class _Layer:
    """One transformer layer for one micro-batch on one GPU: times (s) and FLOPs by part."""

    gemm: float
    attention: float
    elementwise: float
    flops: float  # hardware FLOPs, recomputation included
    tp_total: float
    tp_exposed: float
    cp_total: float
    cp_exposed: float
    ep_total: float

    @property
    def compute(self) -> float:
        return self.gemm + self.attention + self.elementwise

    @property
    def time(self) -> float:
        return self.compute + self.tp_exposed + self.cp_exposed + self.ep_total


def _layer(
    model: ModelSpec,
    cluster: ClusterShape,
    fabric: Fabric,
    training: Training,
    lay: Layout,
    a: Assumptions,
) -> _Layer:
    cal = a.calibration
    t, cp, b = lay.tp, lay.cp, lay.micro_batch
    g = cluster.gpus_per_node
    bf16_peak = (a.peak_tflops or cluster.gpu.peak("bf16")) * 1e12
    gemm_peak = (a.peak_tflops or cluster.gpu.peak(training.precision)) * 1e12
    tokens = b * model.seq / cp  # this GPU's share of the micro-batch's sequence
    h, kv, f = model.hidden, model.kv_dim, model.expert_ffn
    fc1 = (2 if model.gated_mlp else 1) * f
    shapes = [(tokens, h, (h + 2 * kv) / t), (tokens, h / t, h)]
    if model.moe:
        # Each rank's experts see its tokens × top-k, split evenly over the experts it holds.
        per_expert = max(1.0, tokens * model.top_k * lay.ep / model.experts)
        local = model.experts / lay.ep
        shapes += [(per_expert, h, fc1 / t)] * round(local)
        shapes += [(per_expert, f / t, h)] * round(local)
        shapes.append((tokens, h, model.experts))  # router
    else:
        shapes += [(tokens, h, fc1 / t), (tokens, f / t, h)]
    gemm, gemm_flops = _gemm_seconds(cal, training.precision, gemm_peak, shapes)
    gemm, gemm_flops = gemm * model.scale, gemm_flops * model.scale  # a --params override
    # FlashAttention skips the tiles the causal mask hides: half the s² work is done; CP's
    # load-balanced split gives each rank 1/c of it.
    attn_fwd = 2.0 * b * h * model.seq * model.seq / cp / t
    attn_flops = attn_fwd * (1.0 + ATTENTION_BACKWARD_RATIO)
    hbm = cluster.gpu.hbm_tbs * 1e12
    elementwise = cal.elementwise * elementwise_bytes(model, tokens, t, training.precision) / hbm
    if training.recompute == "full":
        gemm *= 4.0 / 3.0
        gemm_flops *= 4.0 / 3.0
        attn_flops += attn_fwd
        elementwise *= 4.0 / 3.0
    elif training.recompute == "selective":
        if model.flash_attention:
            # The norms' outputs and the SwiGLU product are recomputed: a few more passes.
            elementwise *= 1.15
        else:
            attn_flops += attn_fwd  # the attention core is recomputed
    attention = attn_flops / (bf16_peak * cal.attention)

    tp_total = tp_exposed = 0.0
    if t > 1:
        # Sequence parallelism: forward all-gathers the inputs of QKV and of the MLP and
        # reduce-scatters the outputs of the projection and of the MLP (4); backward does the
        # reverse (4) and gathers the inputs again for the weight gradients (2); full
        # recomputation repeats the forward's 4.
        forward = 4 + (4 if training.recompute == "full" else 0)
        size = 2.0 * tokens * h  # bf16, the whole gathered tensor
        one = fabric.ring_time("all_gather", size, t, min(t, g))
        tp_total = (forward + 6) * one
        # Without userbuffers Megatron still overlaps the backward's collectives with the
        # data- and weight-gradient GEMMs (asynchronous all-gather and reduce-scatter in
        # megatron/core/tensor_parallel/layers.py); the forward's wait.
        overlapped = forward + 6 if a.tp_overlap else 6
        tp_exposed = tp_total - overlapped * one * cal.overlap

    cp_total = cp_exposed = 0.0
    if cp > 1 and a.cp_comm == "allgather":
        # K and V gathered whole from the CP group before attention starts, gathered again for
        # the backward (the gathered copy is not kept between the passes) and their gradients
        # reduce-scattered after it: each waits, nothing runs beside it.
        kv_width = model.head_dim * max(1, model.kv_heads // t)
        gathered = 2.0 * 2.0 * tokens * kv_width * cp  # K and V of the whole sequence, bf16
        per_node = max(1, min(cp, g // t))
        gather = fabric.ring_time("all_gather", gathered, cp, per_node)
        scatter = fabric.ring_time("reduce_scatter", gathered, cp, per_node)
        passes = 2 if training.recompute == "full" else 1
        cp_total = cp_exposed = passes * gather + gather + scatter
    elif cp > 1:
        # Ring attention (Megatron-Core's CP): c − 1 rounds, each sending this rank's K and V
        # chunk on while attending to the one it holds; backward sends K, V and their
        # gradients. A round costs only what its transfer takes beyond the attention it hides
        # behind.
        kv_width = model.head_dim * max(1, model.kv_heads // t)
        chunk = 2.0 * 2.0 * tokens * kv_width  # K and V, bf16
        across = t * cp > g
        rounds = cp - 1
        fwd_round = fabric.p2p_time(chunk, across)
        bwd_round = fabric.p2p_time(2 * chunk, across)
        attn_round_fwd = attn_fwd / cp / (bf16_peak * cal.attention)
        attn_round_bwd = attn_round_fwd * ATTENTION_BACKWARD_RATIO
        fwd_exposed = fwd_round - cal.cp_overlap * min(fwd_round, attn_round_fwd)
        bwd_exposed = bwd_round - cal.cp_overlap * min(bwd_round, attn_round_bwd)
        passes = 2 if training.recompute == "full" else 1
        cp_total = rounds * (passes * fwd_round + bwd_round)
        cp_exposed = rounds * (passes * fwd_exposed + bwd_exposed)

    ep_total = 0.0
    if model.moe and lay.ep > 1:
        # Token dispatch and combine, forward and backward: four all-to-alls of the routed
        # tokens' hidden states within the EP group, not hidden (the experts wait for them).
        routed = 2.0 * tokens * model.top_k * h / t
        per_node = max(1, min(lay.ep, g // max(1, t * cp)))
        busbw = fabric.group_busbw(routed, lay.ep, per_node) * ALLTOALL_EFFICIENCY
        ep_total = 4.0 * routed * (lay.ep - 1) / lay.ep / busbw

    return _Layer(
        gemm=gemm,
        attention=attention,
        elementwise=elementwise,
        flops=gemm_flops + attn_flops,
        tp_total=tp_total,
        tp_exposed=tp_exposed,
        cp_total=cp_total,
        cp_exposed=cp_exposed,
        ep_total=ep_total,
    )


def _head(
    model: ModelSpec, cluster: ClusterShape, fabric: Fabric, lay: Layout, a: Assumptions
) -> tuple[float, float, float]:
    """The output layer and the loss on the last rank, one micro-batch: (compute time, exposed
    TP time, FLOPs). The output GEMM stays bf16 in fp8 recipes; the vocabulary-parallel
    cross-entropy reads and writes fp32 logits (~16 B per vocabulary entry and token)."""
    t = lay.tp
    tokens = lay.micro_batch * model.seq / lay.cp
    peak = (a.peak_tflops or cluster.gpu.peak("bf16")) * 1e12
    gemm, flops = _gemm_seconds(
        a.calibration, "bf16", peak, [(tokens, model.hidden, model.vocab / t)]
    )
    loss = 16.0 * tokens * model.vocab / t / (cluster.gpu.hbm_tbs * 1e12)
    tp = 0.0
    if t > 1:
        size = 2.0 * tokens * model.hidden
        g = cluster.gpus_per_node
        tp = 2 * fabric.ring_time("all_gather", size, t, min(t, g))
        tp *= 1.0 - (a.calibration.overlap if a.tp_overlap else 0.0)
    return gemm * model.scale + loss, tp, flops * model.scale


def _dp_comm(
    params_gpu: float,
    overlap: float,
    fabric: Fabric,
    cluster: ClusterShape,
    training: Training,
    lay: Layout,
    fwd_window: float,
    bwd_window: float,
    microbatches: int,
) -> Overlap | None:
    """Gradient reduction and weight gathering over the data-parallel group (DP × CP)."""
    ranks = lay.dp * lay.cp
    if ranks <= 1:
        return None
    g = cluster.gpus_per_node
    per_node = max(1, min(ranks, g // lay.tp))
    bucket = min(params_gpu, max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * ranks))
    buckets = max(1, math.ceil(params_gpu / bucket))
    zero = training.zero
    grad = 4.0 if training.grad_dtype == "fp32" else 2.0
    if zero == "0":
        reduce = buckets * fabric.ring_time("all_reduce", grad * bucket, ranks, per_node)
        gather = 0.0
    else:
        reduce = buckets * fabric.ring_time("reduce_scatter", grad * bucket, ranks, per_node)
        gather = buckets * fabric.ring_time("all_gather", 2.0 * bucket, ranks, per_node)
    if zero in ("3", "fsdp"):
        # Weights gathered for every micro-batch's forward and backward, gradients reduced
        # after each; prefetched and overlapped with that micro-batch's compute.
        total = microbatches * (2 * gather + reduce)
        hideable = min(total * (1 - 1 / (buckets * 3)), microbatches * (fwd_window + bwd_window))
        exposed = total - overlap * hideable
        return Overlap(
            "dp",
            total,
            exposed,
            "FSDP gathers each layer's weights ahead of its forward and backward and reduces "
            "its gradients behind, overlapped with every micro-batch's compute",
        )
    if zero == "2":
        # Gradients sharded: each micro-batch's backward reduce-scatters its gradients
        # (nothing is accumulated whole), overlapped with that backward; the weights are
        # gathered once per step, behind the first forward.
        total_reduce = microbatches * reduce
        hidden = min(total_reduce - reduce / buckets, microbatches * bwd_window)
        exposed_reduce = total_reduce - overlap * hidden
        exposed_gather = gather - overlap * min(gather - gather / buckets, fwd_window)
        return Overlap(
            "dp",
            total_reduce + gather,
            exposed_reduce + exposed_gather,
            f"ZeRO-2: {buckets} bucket(s) reduce-scattered after every micro-batch's backward, "
            "beside it; weights gathered behind the first forward",
        )
    # Megatron --overlap-grad-reduce: a bucket's reduction starts when the last micro-batch's
    # backward has produced it, so only that backward hides it, and the last bucket never;
    # --overlap-param-gather hides the gathers behind the next step's first forward.
    exposed_reduce = reduce - overlap * min(reduce - reduce / buckets, bwd_window)
    exposed_gather = gather - overlap * min(gather - gather / buckets, fwd_window)
    return Overlap(
        "dp",
        reduce + gather,
        exposed_reduce + exposed_gather,
        f"{buckets} bucket(s): gradient reduce-scatter behind the last micro-batch's backward, "
        "weight all-gather behind the first forward (the last and first bucket exposed)",
    )


def estimate(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    layout: Layout,
    assumptions: Assumptions | None = None,
) -> Estimate:
    """Memory, step time and MFU of `layout`; it does not check that the layout is legal
    for the cluster (see `cluster_tool.plan.search.check_layout` for that)."""
    a = assumptions or Assumptions()
    t, p, d, cp, v, b = layout.tp, layout.pp, layout.dp, layout.cp, layout.vp, layout.micro_batch
    m = layout.microbatches(training.global_batch)
    if m < 1:
        raise UsageError(
            f"global batch {training.global_batch} is smaller than DP {d} × micro-batch {b}"
        )
    split = pipeline_split(model, p, v, m)
    stages = split.layers
    fabric = cluster.fabric()
    layer = _layer(model, cluster, fabric, training, layout, a)
    head_compute, head_tp, head_flops = _head(model, cluster, fabric, layout, a)
    head_time = head_compute + head_tp

    # Per micro-batch on each rank; the last also runs the output layer and the loss.
    # Only the last rank (which also runs the output layer) or the one with the most layers
    # can be the slowest.
    heaviest = max(range(p - 1), key=lambda i: stages[i]) if p > 1 else 0
    last_time = stages[-1] * layer.time + head_time
    if p > 1 and stages[heaviest] * layer.time > last_time:
        slowest, per_microbatch = heaviest, stages[heaviest] * layer.time
    else:
        slowest, per_microbatch = p - 1, last_time
    rank_compute = stages[slowest] * layer.compute + (head_compute if slowest == p - 1 else 0.0)

    pp_total = pp_exposed = 0.0
    if p > 1:
        boundary = 2.0 * b * model.seq / cp * model.hidden / t  # sequence-parallel shard
        across = t * cp * d >= cluster.gpus_per_node
        one = fabric.p2p_time(boundary, across)
        pp_total = 2.0 * v * one * m  # a send forward and one backward per virtual stage
        # Interleaved: Megatron overlaps each transfer with the next chunk's compute
        # (--overlap-p2p-communication, its default); 1F1B waits for each one.
        pp_exposed = pp_total * (1.0 - a.calibration.overlap) if v > 1 else pp_total
    # The fill and drain: p − 1 virtual stages' time, at the largest one's pace.
    chunk = max(
        split.largest_chunk * layer.time,
        split.chunks[-1][-1] * layer.time + head_time,
    )
    fill = (p - 1) * chunk if p > 1 else 0.0
    pipeline = per_microbatch * m + pp_exposed + fill

    params_gpu = max(
        _rank_params(model, stages[0], True, p == 1, layout),
        _rank_params(model, stages[-1], p == 1, True, layout),
        _rank_params(model, max(stages), False, False, layout),
    )
    dp = _dp_comm(
        params_gpu,
        a.calibration.overlap,
        fabric,
        cluster,
        training,
        layout,
        fwd_window=rank_compute / 3.0,
        bwd_window=rank_compute * 2.0 / 3.0,
        microbatches=m,
    )
    dp_exposed = dp.exposed_s if dp else 0.0
    shards = d * cp if training.zero != "0" else 1
    optimizer = params_gpu / shards * OPTIMIZER_BYTES_PER_PARAM / (cluster.gpu.hbm_tbs * 1e12)
    step = pipeline + dp_exposed + optimizer

    global_tokens = m * d * b * model.seq
    gpus = layout.gpus
    peak = (a.peak_tflops or cluster.gpu.peak(training.precision)) * 1e12
    model_flops = global_tokens * model.model_flops_per_token(convention=a.flops_convention)
    sequences = m * d * b
    per_sequence = (model.layers * layer.flops * t * cp / b) + head_flops * t * cp / b
    hw_flops = sequences * per_sequence
    mem = memory(model, cluster, training, layout, a, split)

    overlaps = [
        Overlap(
            "tp",
            m * stages[slowest] * layer.tp_total,
            m * stages[slowest] * layer.tp_exposed,
            "Transformer Engine userbuffers overlap each all-gather and reduce-scatter with the "
            "GEMM it feeds (--tp-comm-overlap)"
            if a.tp_overlap
            else "--tp-comm-overlap off: every TP collective waits",
        ),
        Overlap(
            "cp",
            m * stages[slowest] * layer.cp_total,
            m * stages[slowest] * layer.cp_exposed,
            "ring attention sends the next K/V chunk while attending to the current one"
            if a.cp_comm == "p2p"
            else "--cp-comm-type allgather: K and V are gathered whole before attention starts",
        ),
        Overlap(
            "pp",
            pp_total,
            pp_exposed,
            "interleaved: transfers overlap the next virtual stage's compute"
            if v > 1
            else "1F1B: each rank waits for its activations and gradients",
        ),
        Overlap(
            "ep",
            m * stages[slowest] * layer.ep_total,
            m * stages[slowest] * layer.ep_total,
            "token dispatch and combine: the experts wait for them",
        ),
    ]
    if dp:
        overlaps.append(dp)
    notes: list[str] = []
    if m * d * b != training.global_batch:
        notes.append(f"global batch {training.global_batch} not a multiple of DP × micro-batch")
    if not split.even:
        notes.append(f"uneven stages {'/'.join(str(n) for n in stages)} ({split.kind} split)")
    return Estimate(
        layout=layout,
        stage_layers=stages,
        split=split,
        microbatches=m,
        memory=mem,
        step_time_s=step,
        mfu=model_flops / (step * gpus * peak),
        achieved_tflops=hw_flops / (step * gpus) / 1e12,
        bubble=fill / pipeline,
        compute_s=rank_compute * m,
        tp_comm_s=m * (stages[slowest] * layer.tp_exposed + (head_tp if slowest == p - 1 else 0)),
        pp_comm_s=pp_exposed,
        cp_comm_s=m * stages[slowest] * layer.cp_exposed,
        dp_comm_s=dp_exposed,
        tokens_per_s=global_tokens / step,
        ep_comm_s=m * stages[slowest] * layer.ep_total,
        optimizer_s=optimizer,
        bubble_s=fill,
        overlaps=tuple(o for o in overlaps if o.total_s > 0),
        notes=tuple(notes),
    )
