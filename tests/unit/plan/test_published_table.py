"""The table of published H100 runs: its figures as read from the sources, the conversion of
each published figure to tokens/s and MFU by the source's FLOP convention, the fixed split."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.plan.published import MODELS_CSV, RUNS_CSV, load_models, load_runs

RUNS = {run.id: run for run in load_runs()}


def test_every_run_names_its_source_and_a_consistent_layout() -> None:
    assert len(RUNS) >= 50
    for run in RUNS.values():
        assert run.source.startswith("https://"), run.id
        assert run.tp * run.pp * run.cp * run.dp == run.gpus
        assert run.global_batch % run.dp == 0, run.id
        if run.micro_batch:
            assert run.global_batch % (run.dp * run.micro_batch) == 0, run.id


@pytest.mark.parametrize(
    ("run_id", "tokens_per_s_per_gpu", "mfu"),
    [
        # dgxc-benchmarking llama3.1/README_70b.md: "Training step time 14.72" on 64 GPUs at
        # GBS 128 × 8,192 tokens, "Model flops utilization 54.10%".
        ("dgxc-llama70b-bf16-64", 128 * 8192 / 14.72 / 64, 0.5410),
        # The Llama 3 paper, Table 4: 430 TFLOPs/GPU, "BF16 MFU 43%" on 8,192 GPUs.
        ("llama3-405b-8k-8192", None, 0.43),
        # Nemotron-4 15B report, Table 2: 768 GPUs, 0.57 s per iteration of 384 × 4,096
        # tokens, MFU 34.3 %.
        ("nemotron4-15b-768", 384 * 4096 / 0.57 / 768, 0.343),
        # Megatron-LM README (r0.8 model table): 462B, 459.9 TFLOP/s per GPU, MFU 47 %.
        ("mlm-462b", None, 0.47),
        # NeMo 24.07 performance summary: LLAMA3-70B fp8 on 64 GPUs, 1,524 tokens/s/GPU,
        # 734 model TFLOP/s per GPU (of 1,979 fp8).
        ("nemo2407-llama3-70b", 1524, 734 / 1979),
        # NeMo's long-sequence table (NeMo 24.03.01, DGX-H100): LLAMA2-7B fp8 at 1024K tokens
        # on 1,024 GPUs (TP 8, CP 32, DP 4, batch 4), 536 TFLOPS/GPU. FLOPs per token by the
        # full count: 6 × Llama 2 7B's matrix weights (32 layers of 4h² attention and 3·h·f
        # SwiGLU, h 4096, f 11008, and the 4096 × 32000 output layer) + 12·L·h·s.
        (
            "nemo-longseq-llama2-7b-1024k",
            536e12
            / (
                6 * (32 * (4 * 4096**2 + 3 * 4096 * 11008) + 4096 * 32000)
                + 12 * 32 * 4096 * 1048576
            ),
            536 / 1979,
        ),
    ],
)
def test_published_figures_read_by_hand(
    run_id: str, tokens_per_s_per_gpu: float | None, mfu: float
) -> None:
    run = RUNS[run_id]
    if tokens_per_s_per_gpu is not None:
        assert run.tokens_per_s_per_gpu() == pytest.approx(tokens_per_s_per_gpu, rel=1e-6)
    # The sources round MFU to a few digits; 1.5 % relative covers "43%" for 43.5 %.
    assert run.mfu(run.convention) == pytest.approx(mfu, rel=0.015)


def test_each_source_second_figure_agrees_by_its_own_convention() -> None:
    """Where a source states two figures for a run (step time and MFU, TFLOP/s and MFU), both
    give the same tokens/s once each is read by the source's FLOP convention: the table's
    conventions are the sources' (rounding of the second figure aside)."""
    checked = 0
    for run in RUNS.values():
        check = run.check_tokens_per_s_per_gpu()
        if check is None:
            # NeMo's long-sequence table states TFLOP/s alone.
            assert "performance_long_sequence" in run.source, run.id
            continue
        checked += 1
        assert check == pytest.approx(run.tokens_per_s_per_gpu(), rel=0.015), run.id
    assert checked >= 50


def test_conventions_differ_by_what_they_count() -> None:
    """dgxc's Nemotron-4 READMEs count grouped-query K and V as multi-head: their MFU only
    agrees with their step time that way, 17 % apart from the full-GQA count for 340B."""
    run = RUNS["dgxc-nemotron340b-bf16-128"]
    assert run.mfu("full-mha") == pytest.approx(0.5538, rel=0.005)
    assert run.mfu("full") == pytest.approx(0.5538 * 0.854, rel=0.01)
    # Causal attention halves the 12·L·h·s term: at 131K tokens that is most of the FLOPs.
    long = RUNS["llama3-405b-128k-16384"]
    assert long.mfu("causal") < 0.75 * long.mfu("full")


def test_the_split_is_fixed_and_covers_every_source_on_both_sides() -> None:
    by_source: dict[str, list[str]] = defaultdict(list)
    for run in RUNS.values():
        by_source[run.source.split("/blob/")[0].split(" ")[0]].append(run.split)
    for source, splits in by_source.items():
        if len(splits) > 1:
            assert {"fit", "held-out"} <= set(splits), source
    held = [r for r in RUNS.values() if r.split == "held-out"]
    fit = [r for r in RUNS.values() if r.split == "fit"]
    assert len(held) >= 20 and len(fit) >= 20
    for side in (held, fit):
        assert {r.precision for r in side} == {"bf16", "fp8"}
        # Long context on both sides: the ring attention and attention terms are fitted on
        # long fit rows and judged on long held-out ones, not extrapolated from 8K.
        assert len([r for r in side if r.seq >= 131072 and r.cp >= 4]) >= 2


def test_context_parallelism_as_each_source_moved_k_and_v() -> None:
    # The Llama 3 paper, 3.3.2: "an all-gather based method where we first all-gather the key
    # (K) and value (V) tensors"; NeMo's tables do not say, and NeMo runs Megatron-Core's ring.
    assert RUNS["llama3-405b-128k-16384"].cp_comm == "allgather"
    assert RUNS["nemo-longseq-llama2-7b-1024k"].cp_comm is None


def test_models_count_like_their_sources() -> None:
    models = load_models()
    # Nemotron-4 15B report: "3.2 billion embedding parameters and 12.5 billion
    # non-embedding parameters".
    nemotron = models["nemotron4-15b"]
    assert nemotron.layers * nemotron.layer_params == pytest.approx(12.5e9, rel=0.01)
    assert nemotron.embedding_params == pytest.approx(1.6e9, rel=0.03)  # ×2 untied = 3.2B
    # Megatron-LM README: the weak-scaling models' sizes (its "1.7B" is 1.75B truncated).
    sizes = {"1.7b": 1.7, "7.1b": 7.1, "16b": 16, "32b": 32, "70b": 70, "119b": 119}
    sizes |= {"177b": 177, "314b": 314, "462b": 462}
    for name, billions in sizes.items():
        assert models[f"mlm-gpt-{name}"].params / 1e9 == pytest.approx(billions, rel=0.03), name


def _copy_with(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text
    target = tmp_path / source.name
    target.write_text(text.replace(old, new, 1))
    return target


def test_a_bad_row_is_a_parse_error_naming_its_line(tmp_path: Path) -> None:
    broken = _copy_with(
        tmp_path, RUNS_CSV, "dgxc-llama70b-bf16-64,llama3-70b,64,4,4,2,2", "x,llama3-70b,64,4,4,2,3"
    )
    with pytest.raises(ParseError, match=r"published_runs.csv:\d+: TP 4 × PP 4 × CP 2 × DP 3"):
        load_runs(broken, MODELS_CSV)
    unknown = _copy_with(tmp_path, RUNS_CSV, ",llama3-8b,8,", ",llama9-8b,8,")
    with pytest.raises(ParseError, match="llama9-8b"):
        load_runs(unknown, MODELS_CSV)
    metric = _copy_with(tmp_path, RUNS_CSV, ",step_time_s,12.91,", ",furlongs,12.91,")
    with pytest.raises(ParseError, match=r":\d+: metric 'furlongs'"):
        load_runs(metric, MODELS_CSV)
