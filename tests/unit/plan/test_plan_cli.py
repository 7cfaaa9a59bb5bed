"""`cluster-tool plan`: the table and launch flags a person reads, the JSON a script reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
H100_1SU = str(EXAMPLES / "h100-1su.yml")


def test_plan_llama3_70b_on_the_1su_example_prints_table_and_launch_args(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--spec", H100_1SU, "--model", "llama3-70b"]) == 0
    out = capsys.readouterr().out
    assert "TP×CP×PP×DP" in out and "MFU" in out
    assert "--tensor-model-parallel-size" in out
    assert "--pipeline-model-parallel-size" in out
    assert "torchrun --nnodes=" in out
    assert "hostfile (node rank order):" in out


def test_plan_json_lists_layouts_best_first(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--spec", H100_1SU, "--model", "llama3-70b", "--top", "4", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    layouts = doc["layouts"]
    assert 1 <= len(layouts) <= 4
    for lay in layouts:
        for key in ("tp", "pp", "dp", "cp", "mfu", "step_time_s", "memory_per_gpu_gib"):
            assert key in lay
        assert lay["tp"] * lay["cp"] * lay["pp"] * lay["dp"] == lay["gpus"]
        assert lay["tp"] <= 8
        assert lay["memory_per_gpu_gib"] <= lay["memory"]["usable_gib"]
        assert len(lay["placement"]["hostfile"]) == lay["gpus"] // 8
    steps = [lay["step_time_s"] for lay in layouts]
    assert steps == sorted(steps)
    best = layouts[0]
    args = doc["launch"]["megatron_args"]
    assert f"--tensor-model-parallel-size {best['tp']}" in args
    assert f"--pipeline-model-parallel-size {best['pp']}" in args
    assert f"--nnodes={best['gpus'] // 8}" in doc["launch"]["torchrun_args"]


def test_drained_nodes_are_never_in_the_hostfile(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["plan", "--spec", H100_1SU, "--model", "llama3-8b", "--drained", "gpu[001-003]", "--json"]
    )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cluster"]["drained"] == "gpu[001-003]"
    for lay in doc["layouts"]:
        assert not {"gpu001", "gpu002", "gpu003"} & set(lay["placement"]["hostfile"])


def test_gate_results_replace_the_profile_busbw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps({"summary": {"rungs": {"full": {"nodes": 31, "busbw_gbs": 90}}}}))
    base = ["plan", "--spec", H100_1SU, "--model", "llama3-70b", "--json"]
    assert main(base) == 0
    before = json.loads(capsys.readouterr().out)
    assert main([*base, "--gate-results", str(gate)]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["cluster"]["fabric_busbw_gbs"] == 90
    assert after["cluster"]["busbw_source"] == str(gate)
    # A quarter of the fabric bandwidth makes the best step slower.
    assert after["layouts"][0]["step_time_s"] > before["layouts"][0]["step_time_s"]


def test_custom_shape_and_what_if_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "plan",
            "--nodes",
            "8",
            "--gpu",
            "h200",
            "--layers",
            "40",
            "--hidden",
            "5120",
            "--heads",
            "40",
            "--kv-heads",
            "8",
            "--ffn",
            "13824",
            "--seq",
            "4096",
            "--json",
        ]
    )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"]["name"] == "custom" and doc["cluster"]["hbm_gib"] == 141
    assert doc["layouts"]


def test_params_override_changes_the_model_size(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--nodes", "16", "--model", "llama3-70b", "--json"]
    assert main([*args, "--params", "80"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"]["params"] == 80e9
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["model"]["model_flops_per_token"] < doc["model"]["model_flops_per_token"]


def test_nothing_fits_exits_1_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--nodes", "1", "--model", "llama3-405b", "--zero", "0"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "no layout fits in memory" in err and "GiB" in err


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--spec", H100_1SU, "--model", "gpt-9"],
        ["plan", "--spec", H100_1SU, "--model", "llama3-8b", "--zero", "4"],
        ["plan", "--spec", H100_1SU, "--model", "llama3-8b", "--drained", "nosuch01"],
        ["plan", "--model", "llama3-8b"],
        ["plan", "--spec", H100_1SU, "--layers", "4"],
    ],
)
def test_bad_input_is_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_hostfile_option_writes_the_best_layouts_rank_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hostfile"
    args = ["plan", "--spec", H100_1SU, "--model", "llama3-70b", "--json"]
    assert main([*args, "--hostfile", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert path.read_text().splitlines() == doc["layouts"][0]["placement"]["hostfile"]
    assert not (tmp_path / "hostfile.tmp").exists()


def test_a_run_that_wants_sharp_exports_collnet_in_its_launch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 29: nccl.conf leaves CollNet off for every job; the launch of a run that wants SHARP
    # turns it on (the spec's fabric.sharp by default, --sharp/--no-sharp to choose).
    h200 = str(Path(H100_1SU).parent / "h200-4su.yml")
    assert main(["plan", "--spec", h200, "--model", "llama3-70b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["launch"]["env"] == ["NCCL_COLLNET_ENABLE=1"]
    assert main(["plan", "--spec", h200, "--model", "llama3-70b", "--no-sharp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["launch"]["env"] == []
    assert main(["plan", "--spec", H100_1SU, "--model", "llama3-70b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["launch"]["env"] == []
    assert main(["plan", "--spec", H100_1SU, "--model", "llama3-70b", "--sharp"]) == 0
    assert "NCCL_COLLNET_ENABLE=1 torchrun " in capsys.readouterr().out


@pytest.mark.parametrize("what_if", [["--gpu", "h200"], ["--nodes", "4"], ["--nodes-per-su", "16"]])
def test_what_if_options_beside_a_spec_are_refused_not_ignored(
    what_if: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 33: `plan --spec ... --gpu h200` and `--nodes 4` were silently ignored.
    spec = str(Path(__file__).resolve().parents[3] / "examples" / "h100-1su.yml")
    assert main(["plan", "--spec", spec, "--model", "llama3-8b", *what_if]) == 2
    err = capsys.readouterr().err
    assert f"{what_if[0]}: a what-if cluster's, not with --spec" in err
