"""Memory per GPU and step time / MFU of one parallel layout: the planner's analytic model.

Symbols (as in `cluster_tool.plan.model`): t TP, p PP, d DP, v virtual stages per GPU, m
micro-batches per step, b micro-batch, s = T sequence length (per CP rank: T/cp), h = H·Q hidden,
a = H heads, f FFN size, L layers, P parameters in matrix multiplies.

Memory (per GPU, the stage that needs the most):
- weights, gradients, optimizer: bf16 weights (2 B; +1 B fp8 copy with --precision fp8), fp32
  gradients (4 B), Adam in fp32 (master weights, m, v: 12 B) — Megatron-LM's bf16 defaults —
  sharded by ZeRO stage over the DP group (Rajbhandari et al. 2020, "ZeRO"): stage 0 nothing,
  1 the optimizer, 2 also the gradients, 3/FSDP also the weights (+ two layers gathered).
- activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", Table 2 generalised (`layer_activation_bytes`). With tensor and
  sequence parallelism one GPT layer keeps `s·b·h·(34 + 5·a·s/h)/t` bytes; selective
  recomputation (the attention core) drops the `5·a·s/h` term; full recomputation keeps only
  the layer input `2·s·b·h/t` (plus one whole layer while it is recomputed). For models with
  FlashAttention, which never store the s² terms, "selective" instead recomputes the cheap
  element-wise outputs: the two norm outputs and the SwiGLU product. Stage i of 1F1B holds
  `min(p−i, m)` micro-batches in flight, the interleaved schedule `(1 + (p−1)/(p·v))` times
  that (their Section 4.2.3). The last stage also holds fp32 logits, `4·s·b·V/t`.
- fits when the total ≤ HBM × (1 − `memory_margin`) − `reserved_gib`.

Time (one step; every stage waits for the slowest):
- compute: hardware FLOPs (model FLOPs `6·P + 12·L·H·Q·T` per token plus what recomputation
  repeats: one more forward, `2·P_layers + 4·L·H·Q·T`, for full) at peak dense TFLOP/s of the
  chosen precision × `kernel_efficiency`; the output layer counts on the last stage. With
  fp8 the same efficiency is applied to the fp8 peak, so fp8 estimates are an upper bound
  (real fp8 runs gain well under the 2× of the datasheet peaks: attention, norms and
  communication stay in bf16);
- pipeline bubble: `(p−1)/(p−1+m)` of the step for 1F1B, `(p−1)/(v·m + p−1)` interleaved
  (Narayanan et al. 2021, Sections 2.2.1 and 2.2.2): the step is `(m + (p−1)/v)` stage times;
- TP: 4 all-reduce-sized collectives of `2·s·b·h` bytes per layer and micro-batch (6 with full
  recomputation; all-gather + reduce-scatter under sequence parallelism move the same) at
  the NVLink busbw, exposed unless `tp_overlap`;
- PP: point-to-point of the stage boundary activation (`2·s·b·h/t` bytes thanks to the
  scatter/gather optimisation) over one rail and one leaf hop (the placement keeps pipelines
  in an SU), `2·v` transfers per micro-batch;
- CP: all-gather of K and V forward, reduce-scatter of their gradients backward;
- DP: reduce-scatter + all-gather of the stage's gradients in bf16, once per step; ZeRO-3/
  FSDP also gathers the weights for every micro-batch forward and backward; groups are
  rail-aligned, so each GPU gets one rail: `fabric busbw / rails`;
- overlap: PP, CP and DP communication is hidden behind compute up to the fraction `overlap`
  (default 0.8); the rest adds to the step. This is an assumption, not a measurement.
- MFU = model FLOPs of the step / (step time × GPUs × peak); `achieved_tflops` counts the
  hardware FLOPs (recomputation included), as Narayanan et al. report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from cluster_tool.errors import UsageError

if TYPE_CHECKING:  # annotations only: the cost model loads without the cluster model
    from cluster_tool.plan.cluster import ClusterShape
    from cluster_tool.plan.model import ModelSpec

GIB = 1024**3
ZERO_STAGES = ("0", "1", "2", "3", "fsdp")
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")

# Calibrated ONCE (see `tests/unit/plan/test_published.py::test_calibration_point`): the
# fraction of peak dense TFLOP/s that the GEMMs, attention and element-wise kernels of a layer
# reach while they run. It was solved so that the model reproduces the Megatron-LM 145.6B row
# of Narayanan et al. 2021, Table 1 (TP 8, PP 8, 1,536 A100, 148 TFLOP/s per GPU with full
# recomputation) exactly; every other published figure in the tests is out of sample.
KERNEL_EFFICIENCY = 0.541

# Stated error of the model on MFU and achieved TFLOP/s: ±15 % relative, the tolerance the
# out-of-sample published rows are held to in the tests.
MODEL_ERROR = 0.15


@dataclass(frozen=True)
class Assumptions:
    """The knobs of the model that are assumptions rather than facts about the cluster."""

    kernel_efficiency: float = KERNEL_EFFICIENCY
    # Fraction of DP, PP and CP communication hidden behind compute (Megatron's
    # --overlap-grad-reduce / --overlap-param-gather, asynchronous p2p).
    overlap: float = 0.8
    # Fraction of TP communication hidden (Megatron --tp-comm-overlap); off by default.
    tp_overlap: float = 0.0
    # Keep this fraction of HBM free, plus a fixed reserve for the CUDA context, NCCL
    # buffers and allocator fragmentation.
    memory_margin: float = 0.10
    reserved_gib: float = 3.0
    # Override the GPU's datasheet peak (TFLOP/s), e.g. to check a model against A100 runs.
    peak_tflops: float | None = None

    def __post_init__(self) -> None:
        for name in ("kernel_efficiency", "overlap", "tp_overlap", "memory_margin"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise UsageError(f"{name} must be within 0..1, got {value}")
        if self.kernel_efficiency == 0:
            raise UsageError("kernel_efficiency must be > 0")


@dataclass(frozen=True)
class Training:
    """What the training run fixes: batch, precision, sharding, recomputation."""

    global_batch: int
    micro_batch: int | None = None  # None: the planner picks
    precision: str = "bf16"
    zero: str = "1"
    recompute: str = "selective"

    def __post_init__(self) -> None:
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
    pipeline stages per GPU (`vp`, 1 = plain 1F1B) and the micro-batch size."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    vp: int = 1
    micro_batch: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def microbatches(self, global_batch: int) -> int:
        return global_batch // (self.dp * self.micro_batch)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """`TP,PP,CP,DP[,VP][,MBS]`, as `plan --layout` takes it (VP and MBS default to 1)."""
        parts = text.split(",")
        if not 4 <= len(parts) <= 6:
            raise UsageError(f"--layout {text!r}: give TP,PP,CP,DP[,VP][,MBS]")
        names = ("TP", "PP", "CP", "DP", "VP", "MBS")
        values = []
        for name, part in zip(names, parts, strict=False):
            if not part.strip().isdigit() or not 1 <= int(part) <= 1 << 20:
                raise UsageError(f"--layout {text!r}: {name} must be a whole number from 1")
            values.append(int(part))
        values += [1] * (6 - len(values))
        tp, pp, cp, dp, vp, mbs = values
        return cls(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch=mbs)


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the fullest stage, by kind."""

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
class Estimate:
    """The model's verdict on one layout."""

    layout: Layout
    stage_layers: tuple[int, ...]
    microbatches: int
    memory: Memory
    step_time_s: float
    mfu: float
    achieved_tflops: float  # hardware FLOPs per GPU per second, recomputation included
    bubble: float  # fraction of the step the pipeline is idle
    compute_s: float
    tp_comm_s: float
    pp_comm_s: float
    cp_comm_s: float
    dp_comm_s: float  # exposed, after overlap
    tokens_per_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return self.memory.fits


# ---------------------------------------------------------------- pipeline partition


def head_layer_equivalents(model: ModelSpec) -> float:
    """The output projection's work in units of one transformer layer (same tokens)."""
    layer = 6.0 * model.layer_params + 12.0 * model.hidden * model.seq
    return 6.0 * model.vocab * model.hidden / layer


@lru_cache(maxsize=4096)
def _partition(layers: int, pp: int, head_eq: float) -> tuple[int, ...]:
    if pp == 1:
        return (layers,)
    best: tuple[float, int] | None = None
    # Choose how many layers the last stage (which also runs the output layer) gets; the
    # rest are spread evenly, the spare ones to the middle stages, so the slowest stage is
    # as light as it can be (the Llama 3 405B run took one layer off the first and last).
    for last in range(1, layers - (pp - 1) + 1):
        rest = layers - last
        load = max(math.ceil(rest / (pp - 1)), last + head_eq)
        if best is None or load <= best[0] + 1e-9:
            best = (load, last)
    assert best is not None
    last = best[1]
    rest = layers - last
    base, extra = divmod(rest, pp - 1)
    stages = [base] * (pp - 1)
    # Spare layers go to the middle first, the first stage (embedding) last.
    for i in range(extra):
        stages[(pp - 2 - i) if i < pp - 2 else 0] += 1
    return (*stages, last)


def stage_layers(model: ModelSpec, pp: int) -> tuple[int, ...]:
    """Transformer layers per pipeline stage, first to last."""
    if pp > model.layers:
        raise UsageError(f"pipeline of {pp} stages for {model.layers} layers")
    return _partition(model.layers, pp, round(head_layer_equivalents(model), 4))


# ---------------------------------------------------------------- memory


def layer_activation_bytes(
    model: ModelSpec, *, tokens: int, micro_batch: int, tp: int, recompute: str
) -> float:
    """Bytes one layer keeps for backward for one micro-batch, with sequence parallelism.

    Korthikanti et al. 2022, Section 4 (per layer, s tokens, b micro-batch, h hidden, a heads):
    attention 11·sbh + 5·as²b, MLP 19·sbh, two layer norms 4·sbh → `sbh·(34 + 5as/h)`, all
    divided by t under tensor + sequence parallelism. Generalised here for what the paper's GPT
    did not have: grouped-query attention (K, V are `kv_dim` wide), SwiGLU (gate and up outputs
    and their product kept: 6·sbf instead of GeLU's 4·sbf), no dropout (no masks), and
    FlashAttention (no s² terms, only the fp32 log-sum-exp per head and token).
    """
    s, b, h, f, a = tokens, micro_batch, model.hidden, model.ffn, model.heads
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
    if not lean:
        mlp += 2 * sbh  # first linear's input (the second norm's output)
    if model.dropout:
        mlp += sbh
    norms = 4 * sbh  # the two norms' inputs
    return (attention + mlp + norms) / tp


def memory(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    layout: Layout,
    assumptions: Assumptions,
) -> Memory:
    """Memory per GPU of the pipeline stage that needs the most."""
    t, p, d, cp, v, b = layout.tp, layout.pp, layout.dp, layout.cp, layout.vp, layout.micro_batch
    stages = stage_layers(model, p)
    m = layout.microbatches(training.global_batch)
    tokens = model.seq // cp
    per_layer = layer_activation_bytes(
        model, tokens=tokens, micro_batch=b, tp=t, recompute=training.recompute
    )
    full_layer = layer_activation_bytes(model, tokens=tokens, micro_batch=b, tp=t, recompute="none")
    embed = model.embedding_params
    # Megatron keeps a copy of tied word embeddings on the last stage for the output layer.
    head = model.head_params if not model.tied_embeddings else (embed if p > 1 else 0)
    scale = model.scale  # honour a published --params figure
    candidates = []
    # Later stages hold fewer micro-batches, so among stages of equal size the earliest is
    # the fullest: only the first, the last and the first of each size can be the worst.
    worst_candidates = {0, len(stages) - 1} | {stages.index(n) for n in set(stages)}
    for index in sorted(worst_candidates):
        layers = stages[index]
        first, last = index == 0, index == len(stages) - 1
        counted = layers * model.layer_params + (embed if first else 0) + (head if last else 0)
        params = counted * scale / t
        # Stage i of 1F1B holds p − i micro-batches in flight; the interleaved schedule
        # (1 + (p−1)/(p·v)) times as many (Korthikanti et al. 2022, Section 4.2.3).
        flight = float(min(p - index, m))
        if v > 1:
            flight *= 1.0 + (p - 1) / (p * v)
        acts = layers * per_layer * flight
        if training.recompute == "full":
            acts += full_layer  # the layer being recomputed, in full, during its backward
        if last:
            acts += 4.0 * tokens * b * model.vocab / t  # fp32 logits for the loss
        candidates.append((params, acts))
    weights, grads, optim, acts = max(
        ((*_states(params, d, training, model, scale, t), acts) for params, acts in candidates),
        key=sum,
    )
    usable = cluster.hbm_gib * GIB * (1.0 - assumptions.memory_margin) - (
        assumptions.reserved_gib * GIB
    )
    return Memory(
        weights=weights, gradients=grads, optimizer=optim, activations=acts, usable=usable
    )


def _states(
    params: float, dp: int, training: Training, model: ModelSpec, scale: float, tp: int
) -> tuple[float, float, float]:
    weight_bytes = 2.0 + (1.0 if training.precision == "fp8" else 0.0)  # + fp8 weight cache
    zero = training.zero
    weights = params * weight_bytes
    grads = params * 4.0
    optim = params * 12.0
    if zero in ("1", "2", "3", "fsdp"):
        optim /= dp
    if zero in ("2", "3", "fsdp"):
        grads /= dp
    if zero in ("3", "fsdp"):
        # Sharded weights plus two layers gathered at a time (current and prefetched).
        weights = weights / dp + 2 * 2.0 * model.layer_params * scale / tp
    return weights, grads, optim


# ---------------------------------------------------------------- time


def hardware_flops_per_token(model: ModelSpec, recompute: str) -> float:
    """FLOPs the GPUs execute per token: model FLOPs plus what recomputation repeats."""
    flops = model.model_flops_per_token()
    attention_fwd = 4.0 * model.layers * model.hidden * model.seq
    if recompute == "full":
        flops += 2.0 * model.layers * model.layer_params * (model.scale)
        flops += attention_fwd
    elif recompute == "selective" and not model.flash_attention:
        flops += attention_fwd
    return flops


def estimate(
    model: ModelSpec,
    cluster: ClusterShape,
    training: Training,
    layout: Layout,
    assumptions: Assumptions | None = None,
) -> Estimate:
    """Memory, step time and MFU of `layout`; it does not check that the layout is legal
    for the cluster (see `cluster_tool.plan.search.plan` for that)."""
    a = assumptions or Assumptions()
    t, p, d, cp, v, b = layout.tp, layout.pp, layout.dp, layout.cp, layout.vp, layout.micro_batch
    m = layout.microbatches(training.global_batch)
    if m < 1:
        raise UsageError(
            f"global batch {training.global_batch} is smaller than DP {d} × micro-batch {b}"
        )
    stages = stage_layers(model, p)
    peak = (a.peak_tflops or cluster.gpu.peak(training.precision)) * 1e12
    rate = peak * a.kernel_efficiency
    tokens = b * model.seq // cp
    g = cluster.gpus_per_node
    nvlink = cluster.nvlink_busbw_gbs * 1e9
    rail = cluster.rail_busbw_gbs * 1e9
    scale = model.scale

    # One layer, one micro-batch, one GPU: forward 2 FLOPs per weight and token plus the
    # attention core over the full sequence (context parallelism splits the queries).
    layer_fwd = tokens * (2.0 * model.layer_params * scale + 4.0 * model.hidden * model.seq) / t
    passes = 3.0
    if training.recompute == "full":
        passes = 4.0
    layer_flops = layer_fwd * passes
    if training.recompute == "selective" and not model.flash_attention:
        layer_flops += tokens * 4.0 * model.hidden * model.seq / t
    layer_compute = layer_flops / rate

    tp_comm = 0.0
    if t > 1:
        collectives = 6 if training.recompute == "full" else 4
        size = 2.0 * tokens * model.hidden
        tp_comm = collectives * size * 2 * (t - 1) / t / nvlink * (1.0 - a.tp_overlap)

    cp_comm = 0.0
    if cp > 1:
        kv_shard = model.kv_dim / min(t, model.kv_heads)
        kv_bytes = 2.0 * 2.0 * b * model.seq * kv_shard  # K and V of the whole sequence
        bw = rail if t * cp > g else nvlink
        collectives = 3 if training.recompute == "full" else 2
        cp_comm = collectives * kv_bytes * (cp - 1) / cp / bw * (1.0 - a.overlap)

    # The output layer runs on the last stage, vocabulary-parallel over TP, never recomputed.
    head_compute = tokens * 6.0 * model.vocab * model.hidden * scale / t / rate
    times = [n * (layer_compute + tp_comm) for n in stages]
    times[-1] += head_compute
    slowest = max(range(p), key=lambda i: times[i])
    stage_compute = stages[slowest] * layer_compute + (head_compute if slowest == p - 1 else 0)
    stage_tp = stages[slowest] * tp_comm
    stage_cp = max(stages) * cp_comm

    pp_comm = 0.0
    if p > 1:
        boundary = 2.0 * tokens * model.hidden / t
        bw = rail if t * cp * d >= g else nvlink
        pp_comm = 2.0 * v * boundary / bw * (1.0 - a.overlap)

    per_microbatch = stage_compute + stage_tp + stage_cp + pp_comm
    bubble_units = (p - 1) / v
    pipeline = per_microbatch * (m + bubble_units)
    bubble = bubble_units / (m + bubble_units)

    # Data parallel: the gradients of this GPU's share of the model, bf16 on the wire.
    dp_comm = 0.0
    if d > 1:
        params_gpu = (
            max(
                stages[0] * model.layer_params + model.embedding_params,
                stages[-1] * model.layer_params + model.head_params,
            )
            * scale
            / t
        )
        bw = rail if t * cp * d > g else nvlink  # the group leaves the node: one rail each
        volume = 2.0 * params_gpu * 2 * (d - 1) / d  # reduce-scatter + all-gather
        if training.zero in ("3", "fsdp"):
            # Weights gathered for every micro-batch's forward and backward.
            volume += 2 * m * 2.0 * params_gpu * (d - 1) / d
        dp_comm = volume / bw * (1.0 - a.overlap)

    step = pipeline + dp_comm
    # What the step processes: a batch that DP × micro-batch does not divide loses the rest.
    global_tokens = m * d * b * model.seq
    gpus = layout.gpus
    model_flops = global_tokens * model.model_flops_per_token()
    hw_flops = global_tokens * hardware_flops_per_token(model, training.recompute)
    mem = memory(model, cluster, training, layout, a)
    notes: list[str] = []
    if m * d * b != training.global_batch:
        notes.append(f"global batch {training.global_batch} not a multiple of DP × micro-batch")
    if stages[0] != stages[-1] or len(set(stages)) > 1:
        notes.append("uneven stages " + "/".join(str(n) for n in stages))
    return Estimate(
        layout=layout,
        stage_layers=stages,
        microbatches=m,
        memory=mem,
        step_time_s=step,
        mfu=model_flops / (step * gpus * peak),
        achieved_tflops=hw_flops / (step * gpus) / 1e12,
        bubble=bubble,
        compute_s=stage_compute * m,
        tp_comm_s=stage_tp * m,
        pp_comm_s=pp_comm * m,
        cp_comm_s=stage_cp * m,
        dp_comm_s=dp_comm,
        tokens_per_s=global_tokens / step,
        notes=tuple(notes),
    )
