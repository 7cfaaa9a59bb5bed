"""`cluster-tool history NODE`: the node's trend from the store, read only; bad input is one line
and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.history import STORE_NAME, judge_and_record
from cluster_tool.spec.thresholds import HistoryThresholds
from tests.unit.history.runs import NODES, gate_rows, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three validations: gpu004 at full speed, full speed, then 0.93x."""
    root = tmp_path_factory.mktemp("history")
    runs = root / "runs"
    for i, pace in enumerate((1.0, 1.0, 0.93)):
        rows = gate_rows({n: (pace if n == "gpu004" else 1.0) for n in NODES}, root / f"w{i}")
        run_dir, summary = write_run(runs, f"2026120{i}T000000Z-00000{i}", rows)
        judge_and_record(run_dir, summary, HistoryThresholds())
    return runs


def test_the_trend_shows_each_series_oldest_to_newest(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "gpu004", "--runs-dir", str(runs), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["node"] == "gpu004" and data["runs"] == 3 and len(data["identities"]) == 1
    pairs = next(s for s in data["series"] if s["key"] == "pairs all_reduce")
    # 469.21 GB/s, the two-node capture's peak; then the same capture at 0.93x: 436.37.
    assert [p["value"] for p in pairs["points"]] == [469.21, 469.21, 436.37]
    assert pairs["unit"] == "GB/s" and pairs["worse"] == "lower"
    temps = next(s for s in data["series"] if s["metric"] == "gpu_temp_c" and s["key"] == "GPU0")
    assert [p["value"] for p in temps["points"]] == [29, 29, 29]

    assert main(["history", "gpu004", "--runs-dir", str(runs), "--metric", "busbw_gbs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu004: 3 run(s), hardware identity ")
    row = next(line for line in lines if "pairs all_reduce" in line)
    assert row.split()[:3] == ["busbw_gbs", "pairs", "all_reduce"]
    assert row.endswith("469.2 469.2 436.4")
    assert not any(line.startswith("gpu_temp_c") for line in lines)


def test_runs_limits_the_trend_to_the_last_ones(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "gpu001", "--runs-dir", str(runs), "--runs", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"] == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["gpu0$1"], "not a node name"),
        (["x" * 300], "not a node name"),
        (["gpu009"], "gpu009: no history in"),
        (["gpu001", "--metric", "speed"], "--metric 'speed': choose from"),
        (["gpu001", "--runs", "0"], "--runs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    runs: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert main(["history", *args, "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and "Traceback" not in err


def test_no_store_is_exit_2_and_the_command_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "gpu001", "--runs-dir", str(tmp_path)]) == 2
    assert "no history store there" in capsys.readouterr().err
    assert not (tmp_path / STORE_NAME).exists()


def test_a_file_that_is_not_a_store_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / STORE_NAME).write_text("garbage\n" * 200)
    assert main(["history", "gpu001", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a history store" in err and "\n" not in err
