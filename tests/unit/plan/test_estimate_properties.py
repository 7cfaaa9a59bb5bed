"""Invariants of the step-time and memory model over many layouts (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_tool.plan import PRESETS, Assumptions, ClusterShape, Layout, Training, estimate

CLUSTER = ClusterShape.synthetic(nodes=512)

layouts = st.builds(
    Layout,
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(min_value=1, max_value=32),
    dp=st.integers(min_value=1, max_value=64),
    cp=st.sampled_from([1, 2]),
    vp=st.sampled_from([1, 2]),
    micro_batch=st.sampled_from([1, 2]),
)
trainings = st.builds(
    Training,
    global_batch=st.just(1024),
    micro_batch=st.none(),
    precision=st.sampled_from(["bf16", "fp8"]),
    zero=st.sampled_from(["0", "1", "2", "3", "fsdp"]),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
models = st.sampled_from(sorted(PRESETS))


def _runnable(name: str, layout: Layout) -> Layout:
    """Virtual stages only where each has a layer (Megatron refuses the rest)."""
    if layout.pp == 1 or PRESETS[name].layers // layout.pp < layout.vp:
        return replace(layout, vp=1)
    return layout


@settings(max_examples=300, deadline=None)
@given(models, layouts, trainings)
def test_throughput_bounded_by_the_kernels_and_bubble_is_a_fraction(
    name: str, layout: Layout, training: Training
) -> None:
    layout = _runnable(name, layout)
    est = estimate(PRESETS[name], CLUSTER, training, layout)
    cal = Assumptions().calibration
    # No layout executes FLOPs faster than its fastest kernel runs alone.
    fastest = max(cal.gemm_fp8 if training.precision == "fp8" else cal.gemm_bf16, cal.attention)
    assert 0 < est.achieved_tflops <= CLUSTER.gpu.peak(training.precision) * fastest
    assert 0 < est.mfu < 1
    assert 0 <= est.bubble < 1
    assert (est.bubble == 0) == (layout.pp == 1)
    # Step time covers at least the pure compute of the slowest stage.
    assert est.step_time_s >= est.compute_s * (1 - 1e-9)
    assert est.memory.total > 0


@settings(max_examples=150, deadline=None)
@given(models, layouts, trainings)
def test_more_tensor_parallelism_never_needs_more_memory(
    name: str, layout: Layout, training: Training
) -> None:
    if layout.tp == 8:
        return
    layout = _runnable(name, layout)
    wider = Layout(layout.tp * 2, layout.pp, layout.dp, layout.cp, layout.vp, layout.micro_batch)
    model = PRESETS[name]
    if model.heads % wider.tp:
        return
    narrow = estimate(model, CLUSTER, training, layout).memory.total
    assert estimate(model, CLUSTER, training, wider).memory.total < narrow


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_more_recomputation_less_memory_more_time(recompute: str) -> None:
    model = PRESETS["gpt3-175b"]
    layout = Layout(tp=8, pp=8, dp=4)
    order = ["none", "selective", "full"]
    here = estimate(model, CLUSTER, Training(global_batch=256, recompute=recompute), layout)
    for other in order[order.index(recompute) + 1 :]:
        there = estimate(model, CLUSTER, Training(global_batch=256, recompute=other), layout)
        assert there.memory.activations < here.memory.activations
        assert there.step_time_s >= here.step_time_s
