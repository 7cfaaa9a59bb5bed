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
        ("8,2,1,4,1,1,1", "TP,PP,CP,DP"),
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
