"""The performance model against published training runs, with the sources.

Megatron-LM: D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", SC'21 (arXiv:2104.04473), Table 1 (weak scaling): GPT models,
sequence 2,048, vocabulary 51,200, on DGX A100 80 GB (312 TFLOP/s bf16 peak, 8× 200 Gb/s HDR
per node), with activation recomputation, TFLOP/s counted with their formula
`96·B·s·l·h²·(1 + s/6h + V/16lh)` — i.e. hardware FLOPs, recomputation included, which is
what `Estimate.achieved_tflops` reports.

Llama 3: A. Dubey et al., "The Llama 3 Herd of Models" (arXiv:2407.21783), Table 4: 405B
on 8,192 H100 (TP 8, CP 1, PP 16, DP 64, 430 TFLOP/s, 43 % BF16 MFU) and on 16,384 H100
(TP 8, CP 1, PP 16, DP 128, 400 TFLOP/s, 41 %), 16M tokens per batch at 8,192 tokens.

The model's stated error is ±15 % (`MODEL_ERROR`). The kernel efficiency was calibrated on
ONE point, the 145.6B row; everything else here is out of sample.
"""

from __future__ import annotations

import pytest

from cluster_tool.plan import (
    KERNEL_EFFICIENCY,
    MODEL_ERROR,
    PRESETS,
    Assumptions,
    ClusterShape,
    Layout,
    Training,
    estimate,
    megatron_gpt,
    plan,
)

# DGX A100 (Selene): 8× HDR 200 Gb/s per node → ~23 GB/s per rail, ~184 GB/s all-GPU busbw.
A100_FABRIC_BUSBW = 8 * 23.0

# (billions, heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU) — Table 1.
MEGATRON_TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
ROWS = {row[0]: row for row in MEGATRON_TABLE_1}


def _megatron(billions: float) -> tuple:
    _, heads, hidden, layers, tp, pp, gpus, batch, tflops = ROWS[billions]
    model = megatron_gpt(f"gpt-{billions}b", layers=layers, hidden=hidden, heads=heads)
    cluster = ClusterShape.synthetic(
        nodes=gpus // 8, gpu="a100", fabric_busbw_gbs=A100_FABRIC_BUSBW
    )
    # No distributed optimizer in 2021; full recomputation; micro-batch 1.
    training = Training(global_batch=batch, micro_batch=1, zero="0", recompute="full")
    return model, cluster, training, tp, pp, gpus, tflops


def _published_layout_estimate(billions: float):
    model, cluster, training, tp, pp, gpus, _ = _megatron(billions)
    dp = gpus // (tp * pp)
    vps = [1] if pp == 1 else [v for v in range(1, 11) if (model.layers // pp) % v == 0]
    return max(
        (estimate(model, cluster, training, Layout(tp=tp, pp=pp, dp=dp, vp=v)) for v in vps),
        key=lambda e: e.achieved_tflops,
    )


def test_calibration_point() -> None:
    """KERNEL_EFFICIENCY was solved on the 145.6B row (148 TFLOP/s per A100); this pins the
    documented calibration, so changing the model without recalibrating fails here."""
    est = _published_layout_estimate(145.6)
    assert est.achieved_tflops == pytest.approx(148, rel=0.005)
    assert Assumptions().kernel_efficiency == KERNEL_EFFICIENCY


@pytest.mark.parametrize("billions", [7.5, 18.4, 39.1, 76.1, 310.1, 529.6, 1008.0])
def test_megatron_weak_scaling_rows_within_model_error(billions: float) -> None:
    """Out of sample: achieved TFLOP/s per GPU of the published layout within ±15 %.
    (The 1.7B and 3.6B rows are outside: their small GEMMs run below the calibrated kernel
    efficiency — the model over-predicts them by 21 % and 14 %; a known limit.)"""
    published = ROWS[billions][-1]
    est = _published_layout_estimate(billions)
    assert est.fits
    assert est.achieved_tflops == pytest.approx(published, rel=MODEL_ERROR)


@pytest.mark.parametrize("billions", [39.1, 76.1, 145.6, 310.1])
def test_planner_finds_the_published_megatron_layout(billions: float) -> None:
    """Given the model, batch and GPU count, the planner ranks the paper's TP × PP among its
    top four, with a step time the model cannot tell from the best one's (within its error),
    and predicts its TFLOP/s within the model error. (39.1B: the model prefers TP 4 × PP 4 by
    6 %; the paper follows its Takeaway #1: TP up to the server size, then PP.)"""
    model, cluster, training, tp, pp, gpus, tflops = _megatron(billions)
    result = plan(model, cluster, training)
    top = [(e.layout.tp, e.layout.pp) for e in result.layouts[:4]]
    assert (tp, pp) in top
    found = next(e for e in result.layouts if (e.layout.tp, e.layout.pp) == (tp, pp))
    assert found.step_time_s <= result.layouts[0].step_time_s * (1 + MODEL_ERROR)
    assert found.layout.gpus == gpus
    assert found.achieved_tflops == pytest.approx(tflops, rel=MODEL_ERROR)


def test_gpu_peak_is_a_parameter() -> None:
    """The same layout at a hypothetical 2× peak runs faster but not 2× (communication and
    bubble do not scale with compute)."""
    model, cluster, training, tp, pp, gpus, _ = _megatron(145.6)
    layout = Layout(tp=tp, pp=pp, dp=gpus // (tp * pp))
    base = estimate(model, cluster, training, layout)
    fast = estimate(model, cluster, training, layout, Assumptions(peak_tflops=624.0))
    assert fast.step_time_s < base.step_time_s
    assert fast.step_time_s > base.step_time_s / 2


LLAMA3_TABLE_4 = [
    # (GPUs, DP, published TFLOP/s per GPU, published BF16 MFU)
    (8192, 64, 430, 0.43),
    (16384, 128, 400, 0.41),
]


@pytest.mark.parametrize(("gpus", "dp", "tflops", "mfu"), LLAMA3_TABLE_4)
def test_llama3_405b_layout_is_a_top_feasible_layout_in_the_mfu_band(
    gpus: int, dp: int, tflops: int, mfu: float
) -> None:
    """Table 4 of the Llama 3 paper: TP 8, CP 1, PP 16 at 8K tokens, 16M tokens per batch
    (2,048 sequences), MFU 38–43 % across its rows. The planner must offer TP 8 / PP 16 /
    the published DP among its top three and estimate MFU within the band widened by the
    model error."""
    cluster = ClusterShape.synthetic(nodes=gpus // 8, nodes_per_su=32)
    training = Training(global_batch=2048, micro_batch=1, zero="1", recompute="selective")
    result = plan(PRESETS["llama3-405b"], cluster, training)
    top = result.layouts[:3]
    match = [e for e in top if (e.layout.tp, e.layout.pp, e.layout.cp) == (8, 16, 1)]
    assert match, [e.layout for e in top]
    est = match[0]
    assert est.layout.dp == dp
    assert 0.38 * (1 - MODEL_ERROR) <= est.mfu <= 0.43 * (1 + MODEL_ERROR)
    assert est.mfu == pytest.approx(mfu, rel=MODEL_ERROR)
    assert est.mfu * 989 == pytest.approx(tflops, rel=MODEL_ERROR)
