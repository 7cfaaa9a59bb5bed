"""The memory model: Korthikanti et al. 2022 activations, ZeRO sharding, fit or reject."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_tool.plan import (
    PRESETS,
    ClusterShape,
    Layout,
    Training,
    estimate,
    layer_activation_bytes,
    megatron_gpt,
    plan,
)
from cluster_tool.plan.estimate import Assumptions, head_layer_equivalents, memory, stage_layers

H100 = ClusterShape.synthetic(nodes=16)
GIB = 1024**3


def test_gpt_layer_activations_are_korthikanti_table_2() -> None:
    """Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    Models", Table 2: per layer with tensor + sequence parallelism `sbh·(34/t + 5as/(ht))`;
    with selective recomputation `34·sbh/t`; with full recomputation `2·sbh/t`."""
    m = megatron_gpt("gpt-22b", layers=48, hidden=6144, heads=64)
    s, b, h, a, t = 2048, 1, 6144, 64, 8
    none = layer_activation_bytes(m, tokens=s, micro_batch=b, tp=t, recompute="none")
    assert none == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))
    selective = layer_activation_bytes(m, tokens=s, micro_batch=b, tp=t, recompute="selective")
    assert selective == pytest.approx(34 * s * b * h / t)
    full = layer_activation_bytes(m, tokens=s, micro_batch=b, tp=t, recompute="full")
    assert full == pytest.approx(2 * s * b * h / t)


def test_llama_layer_without_attention_scores_and_with_gqa() -> None:
    # FlashAttention keeps no s² scores; GQA makes K and V 1/8 of h for Llama 3 70B.
    m = PRESETS["llama3-70b"]
    s, h, f, kv = 8192, 8192, 28672, 1024
    none = layer_activation_bytes(m, tokens=s, micro_batch=1, tp=1, recompute="none")
    # Q, QKV input, output-projection input, first MLP input (2·sh each); K and V; gate,
    # up and their product (2·sf each); two norm inputs; fp32 log-sum-exp per head.
    expected = 4 * (2 * s * h) + 4 * s * kv + 6 * s * f + 4 * s * h + 4 * 64 * s
    assert none == pytest.approx(expected)
    lean = layer_activation_bytes(m, tokens=s, micro_batch=1, tp=1, recompute="selective")
    assert lean < none
    assert none - lean == pytest.approx(2 * 2 * s * h + 2 * s * f)


def test_70b_on_one_gpu_per_replica_without_sharding_does_not_fit_on_80gb() -> None:
    """70B with TP 1, PP 1, no ZeRO: 18 bytes per parameter alone is ~1.2 TiB."""
    model = PRESETS["llama3-70b"]
    training = Training(global_batch=128, micro_batch=1, zero="0", recompute="full")
    est = estimate(model, H100, training, Layout(tp=1, pp=1, dp=128))
    assert not est.fits
    assert est.memory.total / GIB > 1000
    # ... and the planner never offers it, nor any other unsharded TP 1 PP 1 layout.
    result = plan(model, H100, training)
    assert all((e.layout.tp, e.layout.pp) != (1, 1) for e in result.layouts)
    assert result.rejected["memory"] > 0


def test_known_good_llama3_405b_layout_fits_on_80gb() -> None:
    """Llama 3 405B pre-training ran TP 8, PP 16 on 80 GB H100s without activation
    checkpointing at 8K tokens (Dubey et al. 2024, Table 4 and Section 3.3.2)."""
    cluster = ClusterShape.synthetic(nodes=2048)
    training = Training(global_batch=2048, micro_batch=1, zero="1", recompute="selective")
    est = estimate(PRESETS["llama3-405b"], cluster, training, Layout(tp=8, pp=16, dp=128, vp=4))
    assert est.fits
    # The same layout without any recomputation does not fit.
    heavy = Training(global_batch=2048, micro_batch=1, zero="1", recompute="none")
    assert not estimate(
        PRESETS["llama3-405b"], cluster, heavy, Layout(tp=8, pp=16, dp=128, vp=4)
    ).fits


def test_known_good_megatron_145b_layout_fits_on_80gb_a100() -> None:
    """Narayanan et al. 2021, Table 1: 145.6B GPT, TP 8, PP 8 on 1,536 80 GB A100s, with
    full activation recomputation and no optimizer sharding."""
    cluster = ClusterShape.synthetic(nodes=192, gpu="a100")
    model = megatron_gpt("gpt-145.6b", layers=80, hidden=12288, heads=96)
    training = Training(global_batch=2304, micro_batch=1, zero="0", recompute="full")
    assert estimate(model, cluster, training, Layout(tp=8, pp=8, dp=24)).fits


def test_zero_stages_shard_more_and_more() -> None:
    model = PRESETS["llama3-70b"]
    layout = Layout(tp=8, pp=2, dp=8)
    totals = []
    for zero in ("0", "1", "2", "3"):
        training = Training(global_batch=64, micro_batch=1, zero=zero, recompute="full")
        mem = memory(model, H100, training, layout, Assumptions())
        totals.append(mem.weights + mem.gradients + mem.optimizer)
    assert totals == sorted(totals, reverse=True)
    assert len(set(totals)) == 4
    # ZeRO-1 at DP 8: 2 + 4 + 12/8 bytes per parameter of the stage.
    per_gpu = max(stage_layers(model, 2)) * model.layer_params / 8
    assert totals[1] == pytest.approx(per_gpu * (6 + 12 / 8), rel=0.05)


def test_hbm_margin_moves_the_verdict() -> None:
    model = PRESETS["llama3-70b"]
    training = Training(global_batch=64, micro_batch=1, zero="1", recompute="selective")
    layout = Layout(tp=8, pp=1, dp=8)
    need = estimate(model, H100, training, layout).memory.total / GIB
    roomy = ClusterShape.synthetic(nodes=8, gpu="h200")
    assert estimate(model, roomy, training, layout).fits
    # Just big enough with no margin and no reserve, too small with the default margin.
    tight = Assumptions(memory_margin=0.0, reserved_gib=0.0)
    exact = replace(H100, hbm_gib=need * 1.001)
    assert estimate(model, exact, training, layout, tight).fits
    assert not estimate(model, exact, training, layout).fits


def test_stage_partition_balances_the_output_layer() -> None:
    # 126 layers on 16 stages: first and last take 7, like the Llama 3 405B run.
    stages = stage_layers(PRESETS["llama3-405b"], 16)
    assert stages[0] == 7 and stages[-1] == 7 and set(stages[1:-1]) == {8}
    assert sum(stages) == 126
    for pp in range(1, 33):
        split = stage_layers(PRESETS["llama3-70b"], pp)
        assert sum(split) == 80 and min(split) >= 1 and len(split) == pp


def test_context_parallel_is_searched_at_every_length_and_wins_long_ones() -> None:
    """At 128K tokens (the Llama 3 long-context stage) the best layouts split the sequence
    (CP > 1); at 8K CP is tried too (NVIDIA's Llama 3.1 recipes run CP 2 at 8K) and the search
    keeps the best layout of every CP it can place."""
    cluster = ClusterShape.synthetic(nodes=2048)
    training = Training(global_batch=128, micro_batch=1, zero="1", recompute="selective")
    long = plan(PRESETS["llama3-405b"].with_seq(131072), cluster, training)
    assert all(e.layout.cp > 1 for e in long.layouts[:3])
    short = plan(PRESETS["llama3-405b"], cluster, Training(global_batch=2048, micro_batch=1))
    assert {1, 2, 4} <= {e.layout.cp for e in short.layouts}


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=200), st.integers(min_value=1, max_value=64))
def test_pipeline_partition_covers_every_layer_and_stays_balanced(layers: int, pp: int) -> None:
    if pp > layers:
        return
    model = replace(PRESETS["llama3-70b"], layers=layers)
    split = stage_layers(model, pp)
    assert len(split) == pp and sum(split) == layers and min(split) >= 1
    head = head_layer_equivalents(model)
    loads = [*split[:-1], split[-1] + head]
    # Never worse than the plain even split with the output layer on the last stage.
    assert max(loads) <= max(-(-layers // pp), layers // pp + head) + 1e-9
