"""`cluster-tool plan --layout`: one given layout's estimate, the same the search gives for it,
and why it would not fit, with the margin."""

from __future__ import annotations

import json

import pytest

from cluster_tool.cli import main

BASE = ["plan", "--nodes", "16", "--model", "llama3-70b", "--global-batch", "256"]


def _json(capsys: pytest.CaptureFixture[str], args: list[str], rc: int = 0) -> dict:
    assert main([*args, "--json"]) == rc
    return json.loads(capsys.readouterr().out)


def test_layout_reproduces_the_search_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    search = _json(capsys, [*BASE, "--top", "3"])
    assert search["mode"] == "search" and len(search["layouts"]) == 3
    for found in search["layouts"]:
        spec = ",".join(str(found[k]) for k in ("tp", "pp", "cp", "dp", "vp", "micro_batch"))
        given = _json(capsys, [*BASE, "--layout", spec])
        assert given["mode"] == "layout" and given["fits"]
        lay = given["layout"]
        for key in ("mfu", "step_time_s", "memory_per_gpu_gib", "stage_layers", "bubble"):
            assert lay[key] == found[key], (spec, key)
        assert lay["memory"] == found["memory"] and lay["time_s"] == found["time_s"]
        assert lay["placement"]["hostfile"] == found["placement"]["hostfile"]
        assert f"--tensor-model-parallel-size {found['tp']}" in given["launch"]["megatron_args"]


def test_layout_that_does_not_fit_says_by_how_much_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 70B on one node, no pipeline: 70.6B weights over TP 8 alone need more than 80 GB.
    args = ["plan", "--nodes", "1", "--model", "llama3-70b", "--global-batch", "16"]
    doc = _json(capsys, [*args, "--layout", "8,1,1,1"], rc=1)
    assert doc["fits"] is False and doc["layout"]["fits"] is False
    mem = doc["layout"]["memory"]
    assert mem["margin_gib"] < 0
    assert f"{-mem['margin_gib']} GiB over" in doc["why_not"]
    assert "launch" not in doc
    assert main([*args, "--layout", "8,1,1,1"]) == 1
    captured = capsys.readouterr()
    assert "does NOT fit" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "does not fit in memory" in err[0] and "GiB over" in err[0]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("8,2,1", "TP,PP,CP,DP"),
        ("8,2,1,4,1,1,1,1", "TP,PP,CP,DP"),
        ("3,2,1,4", "does not divide 64 attention heads"),
        ("16,1,1,8", "NVLink domain"),
        ("8,2,1,32", "512 GPUs, 128 are usable"),
        ("8,2,1,2,1,3", "not a multiple of DP 2"),
        ("8,1,1,1,2", "virtual stages need PP > 1"),
        ("0,1,1,1", "TP must be a whole number"),
    ],
)
def test_impossible_layouts_are_usage_errors(
    layout: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, "--layout", layout]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_layout_and_a_different_micro_batch_conflict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--layout", "8,2,1,8,1,2", "--micro-batch", "1"]) == 2
    assert "differ" in capsys.readouterr().err


def test_flops_convention_changes_mfu_not_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*BASE, "--seq", "32768", "--global-batch", "64", "--layout", "8,2,2,4"]
    full = _json(capsys, args)["layout"]
    causal = _json(capsys, [*args, "--flops-convention", "causal"])["layout"]
    assert causal["step_time_s"] == full["step_time_s"]
    assert causal["mfu"] < full["mfu"]
    assert main([*args, "--flops-convention", "halfish"]) == 2


def test_custom_plain_mlp_and_moe_models(capsys: pytest.CaptureFixture[str]) -> None:
    # Nemotron-4 15B described by its shape: squared-ReLU (plain) MLP of 4h; its report
    # states 12.5B non-embedding and 3.2B embedding parameters.
    nemotron = [
        "plan", "--nodes", "8", "--layers", "32", "--hidden", "6144", "--heads", "48",
        "--kv-heads", "8", "--vocab", "256000", "--seq", "4096", "--mlp", "plain",
    ]  # fmt: skip
    doc = _json(capsys, nemotron)
    assert doc["model"]["mlp"] == "plain" and doc["model"]["ffn"] == 4 * 6144
    assert doc["model"]["params"] == pytest.approx(15.7e9, rel=0.01)
    moe = [*nemotron, "--experts", "8", "--top-k", "2", "--moe-ffn", "8192"]
    doc = _json(capsys, moe)
    assert doc["model"]["experts"] == 8 and doc["model"]["top_k"] == 2
    assert "--num-experts 8" in doc["launch"]["megatron_args"]
    assert main([*nemotron, "--top-k", "2"]) == 2
    assert main(["plan", "--nodes", "8", "--model", "llama3-8b", "--mlp", "plain"]) == 2


def test_cp_comm_allgather_is_estimated_and_launched_as_megatron_is_told(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--cp-comm allgather` (Megatron's --cp-comm-type allgather, the Llama 3 paper's CP): the
    CP transfer is all exposed, the layout slower than with the ring, and the launch line says
    so; anything else is refused with one line and exit 2."""
    args = ["plan", "--nodes", "256", "--model", "llama3-70b", "--seq", "65536"]
    args += ["--global-batch", "64", "--layout", "8,4,4,16"]
    ring = _json(capsys, args)["layout"]
    gathered_doc = _json(capsys, [*args, "--cp-comm", "allgather"])
    gathered = gathered_doc["layout"]
    cp = next(o for o in gathered["overlap"] if o["kind"] == "cp")
    assert cp["exposed_s"] == cp["total_s"] > 0 and "allgather" in cp["reason"]
    assert gathered["step_time_s"] > ring["step_time_s"]
    assert "--cp-comm-type allgather" in gathered_doc["launch"]["megatron_args"]
    assert main([*args, "--cp-comm", "ring"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one of p2p, allgather" in err[0]
