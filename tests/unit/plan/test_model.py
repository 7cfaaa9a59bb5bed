"""Presets carry their published shapes and parameter counts; FLOPs are 6·P + 12·L·H·Q·T."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cluster_tool.errors import UsageError
from cluster_tool.plan import PRESETS, ModelSpec, megatron_gpt, preset


@pytest.mark.parametrize(
    ("name", "published"),
    [
        # Llama 3 Herd of Models (Dubey et al. 2024), Table 3: 8B, 70B, 405B; the released
        # checkpoints count 8.03B, 70.6B and 405.9B parameters.
        ("llama3-8b", 8.03e9),
        ("llama3-70b", 70.6e9),
        ("llama3-405b", 405.9e9),
        # GPT-3 (Brown et al. 2020), Table 2.1: 175.0B.
        ("gpt3-175b", 175.0e9),
    ],
)
def test_preset_parameter_count_matches_the_published_size(name: str, published: float) -> None:
    assert PRESETS[name].params == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize(
    ("billions", "layers", "hidden", "heads"),
    # Narayanan et al. 2021 (SC'21), Table 1: the parameter counts of their GPT models.
    [(1.7, 24, 2304, 24), (39.1, 48, 8192, 64), (145.6, 80, 12288, 96), (1008.0, 128, 25600, 160)],
)
def test_megatron_gpt_shapes_count_like_the_paper(
    billions: float, layers: int, hidden: int, heads: int
) -> None:
    model = megatron_gpt("gpt", layers=layers, hidden=hidden, heads=heads)
    assert round(model.params / 1e9, 1) == billions


def test_model_flops_per_token_is_6p_plus_attention_term() -> None:
    m = PRESETS["llama3-405b"]
    # P excludes the input embedding lookup (no multiply) but includes the output layer.
    p = m.layers * m.layer_params + m.vocab * m.hidden
    assert m.model_flops_per_token() == pytest.approx(6 * p + 12 * 126 * 128 * 128 * 8192)
    # Doubling T adds exactly the 12·L·H·Q·ΔT term.
    delta = m.model_flops_per_token(16384) - m.model_flops_per_token(8192)
    assert delta == pytest.approx(12 * 126 * 16384 * 8192)


def test_params_override_scales_the_count() -> None:
    base = PRESETS["llama3-70b"]
    bigger = replace(base, params_override=2 * base.counted_params)
    assert bigger.params == 2 * base.counted_params
    assert bigger.matmul_params == pytest.approx(2 * base.matmul_params)


def test_unknown_preset_and_bad_shapes_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="llama3-70b"):
        preset("llama-9000")
    with pytest.raises(UsageError, match="divisible"):
        ModelSpec("bad", layers=2, hidden=100, heads=3, kv_heads=3, ffn=400, vocab=10, seq=8)
    with pytest.raises(UsageError, match="kv-heads"):
        ModelSpec("bad", layers=2, hidden=96, heads=8, kv_heads=3, ffn=400, vocab=10, seq=8)
