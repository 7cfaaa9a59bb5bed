"""The planner's fitted constants: the few things about kernels that no datasheet states.

Every other figure the cost model uses is named with its source where it is used (datasheet
peaks and HBM bandwidth, NCCL's latency model, the gate's busbw curves, Megatron-Core's bucket
size and schedules). Of these seven, `gemm_half_size` comes from measured GEMMs (below); the
other six were fitted on the `fit` rows of the published table
(`cluster_tool/plan/data/published_runs.csv`) by `benchmarks/planner_fit.py --fit`, which
minimises the mean absolute log error of the published layouts' MFU; the `held-out` rows are
never seen by the fit, and the error the benchmark prints on them is the model's stated error
(README, docs/planner.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from cluster_tool.errors import UsageError


@dataclass(frozen=True)
class Calibration:
    """What the kernels reach, as fractions of the datasheet's dense peak.

    - `gemm_bf16`, `gemm_fp8`: a large matrix multiply in bf16 / fp8 (Transformer Engine);
      a GEMM of M×K by K×N reaches `gemm · I / (I + gemm_half_size)` of the peak, where
      `I = 1 / (1/M + 1/K + 1/N)` grows with every dimension (its arithmetic intensity, in
      elements): small hidden sizes, wide TP and small expert batches run below the large-GEMM
      figure.
    - `attention`: FlashAttention forward and backward (causal: the masked half is skipped),
      of the bf16 peak; fp8 recipes keep attention in bf16.
    - `overlap`: the share of communication that runs beside compute which the compute actually
      hides (NCCL's and userbuffers' kernels take SMs and HBM bandwidth from the GEMMs they
      overlap): TP collectives beside their GEMMs, the data-parallel buckets beside the last
      backward and first forward, interleaved pipeline transfers beside the next virtual
      stage.
    - `cp_overlap`: the same share for the context-parallel ring (Megatron-Core's ring
      attention, Transformer Engine's P2P CP): its K/V transfers are point-to-point sends on
      their own stream beside a FlashAttention kernel, not collectives beside GEMMs, so they
      hide differently from the rest; fitted on its own, on the long-context fit rows (the
      only rows where the ring matters: up to 32 rounds a layer at 1M tokens).
    - `elementwise`: the memory traffic of a layer's element-wise kernels (norms, residual adds,
      rotary embedding, the MLP's activation; forward and backward) as a multiple of the count
      in `cluster_tool.plan.estimate.elementwise_bytes`.
    """

    gemm_bf16: float
    gemm_fp8: float
    gemm_half_size: float
    attention: float
    overlap: float
    elementwise: float
    cp_overlap: float

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not value > 0:
                raise UsageError(f"calibration {f.name} must be positive, got {value}")
        for name in ("gemm_bf16", "gemm_fp8", "attention", "overlap", "cp_overlap"):
            if getattr(self, name) > 1:
                raise UsageError(f"calibration {name} is a fraction, got {getattr(self, name)}")


# `benchmarks/planner_fit.py --fit` on the 33 fit rows (the 28 of before and five of NeMo's
# long-sequence table, 4K to 1M tokens) printed: gemm_bf16 0.959, gemm_fp8 0.99 (its upper
# bound), attention 0.35 (its lower bound, FlashAttention-2's figure: the long rows, where
# attention is up to 97 % of the FLOPs, want it no higher), overlap 0.620, elementwise 2.74,
# cp_overlap 0.828 (mean error 4.3 % on those rows). Before the long rows the fit had no row
# where attention passed 8 % of the FLOPs and put attention at 0.462. gemm_half_size: the law
# `0.99 · I / (I + 689)` through DeepGEMM's fp8 GEMMs measured on H800-SXM, the compute of an
# H100 SXM (deepseek-ai/DeepGEMM PR #81: 777 to 1,500 TFLOP/s for K from 512 to 16,384).
FITTED = Calibration(
    gemm_bf16=0.959,
    gemm_fp8=0.99,
    gemm_half_size=689.0,
    attention=0.35,
    overlap=0.620,
    elementwise=2.74,
    cp_overlap=0.828,
)
