"""Launch arguments for the chosen layout: Megatron-LM flags, torchrun, hostfiles."""

from __future__ import annotations

import re

from cluster_tool.plan import (
    PRESETS,
    Assumptions,
    ClusterShape,
    Layout,
    Training,
    estimate,
    hostfile_text,
    megatron_args,
    pipeline_layout,
    place,
    slurm_hostfile_text,
    torchrun_args,
)


def _expand(layout: str) -> list[str]:
    """Megatron's layout grammar, expanded: `(X|)*n` repeats a group, `t*k` k layers."""
    while "(" in layout:
        layout = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"t\*(\d+)", lambda m: "t" * int(m.group(1)), layout)
    return layout.split("|")


def test_uneven_pipeline_layout_string() -> None:
    # Llama 3 405B on 16 stages: 7 / 8×14 / 7 layers, embedding first, loss last.
    assert pipeline_layout((7, *[8] * 14, 7), 1) == "Et*7|(t*8|)*14t*7L"
    # Interleaved: chunk c of rank r is virtual stage c·PP + r.
    assert pipeline_layout((3, 4), 2) == "Et*2|t*2|t|t*2L"


def test_megatron_args_for_llama3_405b() -> None:
    cluster = ClusterShape.synthetic(nodes=2048)
    training = Training(global_batch=2048, micro_batch=1, zero="1", recompute="selective")
    model = PRESETS["llama3-405b"]
    est = estimate(model, cluster, training, Layout(tp=8, pp=16, dp=128, vp=4))
    args = megatron_args(model, training, est, Assumptions())
    for flag in (
        "--tensor-model-parallel-size 8",
        "--pipeline-model-parallel-size 16",
        "--context-parallel-size 1",
        "--micro-batch-size 1",
        "--global-batch-size 2048",
        "--num-layers 126",
        "--num-query-groups 8",
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--swiglu",
    ):
        assert flag in args
    # 126 layers + the embedding and the loss = 128 slots = 16 ranks × 4 virtual stages × 2:
    # Megatron-Core's account-for-embedding/loss split (NVIDIA's Llama 3.1 405B recipes), the
    # first and last ranks one layer short, as the Llama 3 paper's 405B run (3.3.2).
    assert est.split.kind == "account"
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args
    assert "--num-layers-per-virtual-pipeline-stage 2" in args
    assert est.stage_layers == (7, *[8] * 14, 7)
    assert not any(a.startswith("--pipeline-model-parallel-layout") for a in args)


def test_a_split_no_flag_pair_can_say_is_given_as_a_layout_string() -> None:
    # 80 layers on 3 ranks × 2 virtual stages: not even (80 = 3 × 26 + 2), not the account
    # split (82 slots), and the first/last form is slower than 27/27/26: the counts go in
    # Megatron-Core's layout string.
    cluster = ClusterShape.synthetic(nodes=6)
    model = PRESETS["llama3-70b"]
    training = Training(global_batch=48, micro_batch=1)
    est = estimate(model, cluster, training, Layout(tp=8, pp=3, dp=2, vp=2))
    args = megatron_args(model, training, est, Assumptions())
    flags = [a for a in args if a.startswith("--pipeline-model-parallel-layout")]
    assert est.split.kind == "layout" and est.stage_layers == (27, 27, 26)
    chunks = _expand(flags[0].split("'")[1])
    assert len(chunks) == 3 * 2
    assert sum(c.count("t") for c in chunks) == 80
    assert chunks[0].startswith("E") and chunks[-1].endswith("L")
    per_rank = [sum(chunks[c * 3 + r].count("t") for c in range(2)) for r in range(3)]
    assert per_rank == list(est.stage_layers)


def test_megatron_args_even_interleaved_and_full_recompute() -> None:
    cluster = ClusterShape.synthetic(nodes=16)
    model = PRESETS["gpt3-175b"]
    training = Training(global_batch=64, micro_batch=1, zero="3", recompute="full")
    est = estimate(model, cluster, training, Layout(tp=8, pp=4, dp=4, vp=4))
    assert est.stage_layers == (24, 24, 24, 24)
    args = megatron_args(model, training, est, Assumptions())
    assert "--num-layers-per-virtual-pipeline-stage 6" in args
    assert "--recompute-granularity full" in args
    assert "--use-torch-fsdp2" in args
    assert not any(a.startswith("--pipeline-model-parallel-layout") for a in args)


def test_torchrun_and_hostfiles_follow_the_placement() -> None:
    cluster = ClusterShape.synthetic(nodes=4, nodes_per_su=2)
    placement = place(Layout(tp=8, pp=2, dp=2), cluster)
    args = torchrun_args(placement)
    assert "--nnodes=4" in args and "--nproc-per-node=8" in args
    assert f"--master-addr={placement.hostfile[0]}" in args
    lines = hostfile_text(placement).splitlines()
    assert [line.split()[0] for line in lines] == list(placement.hostfile)
    slurm = slurm_hostfile_text(placement).splitlines()
    assert len(slurm) == 32 and slurm[:8] == [placement.hostfile[0]] * 8
