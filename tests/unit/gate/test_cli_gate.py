"""`cluster-tool gate` and `gate simulate` through the CLI contract: JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.slurm import AdminSlurm
from tests.unit.gate.fakes import ReplaySlurm
from tests.unit.gate.test_ladder import answers

LAB_SPEC = Path(__file__).resolve().parents[3] / "examples" / "lab.yml"


def test_simulate_json_keeps_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gate", "simulate", "--nodes", "256", "--bad", "4", "--seed", "2", "--json"]
    assert main([*argv, "--fault-model", "ideal"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"rounds", "jobs", "gpu_hours", "bad_nodes", "found"} <= set(data)
    assert {"fault_model", "admitted_bad", "blamed_good", "recall"} <= set(data)
    assert data["fault_model"] == "ideal" and data["admitted_bad"] == data["blamed_good"] == []
    assert data["found"] == data["bad_nodes"] and len(data["bad_nodes"]) == 4
    # every rung counted: single, screen, split, full; each node runs single, screen and full
    assert data["rounds"] >= 4 and data["jobs"] >= 256 + 128 + 1 and data["gpu_hours"] > 0


def test_simulate_reports_bad_links_as_paths_not_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gate", "simulate", "--nodes", "64", "--bad", "1", "--bad-links", "1"]
    assert main([*argv, "--fault-model", "ideal"]) == 0
    out = capsys.readouterr().out
    assert "nccl.path" in out and "fail only together" in out
    assert "-leaf-r0 > spine[01-16] > " in out or "-leaf-r0 > gpu" in out


def test_simulate_more_bad_than_nodes_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "simulate", "--nodes", "4", "--bad", "5"]) == 2
    assert "more than --nodes" in capsys.readouterr().err


def test_gate_needs_a_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate"]) == 2
    assert "--spec" in capsys.readouterr().err


def test_drain_and_dry_run_are_exclusive() -> None:
    assert main(["gate", "--spec", str(LAB_SPEC), "--drain", "--dry-run"]) == 2


def _use_replay(monkeypatch: pytest.MonkeyPatch, replay: ReplaySlurm) -> None:
    monkeypatch.setattr("cluster_tool.slurm.connect", lambda *_: AdminSlurm(run=replay))


def test_live_gate_on_the_lab_spec_dry_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The lab spec is HDR (pairs floor 157 GB/s): the NDR capture passes, a fifth of it fails.
    replay = ReplaySlurm(answers(slow={"gpu003": 0.2}))
    _use_replay(monkeypatch, replay)
    argv = ["gate", "--spec", str(LAB_SPEC), "--rungs", "pairs", "--dry-run"]
    code = main([*argv, "--workdir", str(tmp_path), "--poll", "0", "--json"])  # no waiting
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["status"] == "fail"
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert [(f["check"], f["node"]) for f in errors] == [("nccl.pair", "gpu003")]
    assert set(errors[0]) == {
        "check",
        "severity",
        "node",
        "component",
        "expected",
        "observed",
        "message",
    }
    assert data["summary"]["drain"]["applied"] is False
    assert list(data["summary"]["drain"]["nodes"]) == ["gpu003"]
    assert replay.drained == {}
    # The job scripts are where the operator can read them.
    assert sorted(p.name for p in tmp_path.glob("*.sbatch"))[0].startswith("r1-pairs-")


def test_live_gate_unknown_node_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "--spec", str(LAB_SPEC), "--nodes", "gpu[001,009]"]) == 2
    assert "gpu009" in capsys.readouterr().err


def test_simulate_screens_trades_cost_for_catching_intermittent_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["gate", "simulate", "--nodes", "64", "--bad", "0", "--json", "--fault-model", "ideal"]
    main([*argv, "--screens", "1"])
    one = json.loads(capsys.readouterr().out)
    main(argv)
    default = json.loads(capsys.readouterr().out)
    # single + screens + full on a healthy fleet: 64 + 32 per screen + 1 jobs
    assert one["jobs"] == 64 + 32 + 1 and default["jobs"] == 64 + 12 * 32 + 1
    assert one["rounds"] == 3 and default["rounds"] == 14
