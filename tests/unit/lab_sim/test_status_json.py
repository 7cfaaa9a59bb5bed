"""`cluster-tool lab status --json` lists each active fault in the operator's words (id, kind,
target, the arguments typed after `lab inject KIND`, when it was injected), while the record on
disk keeps the model paths and old values `lab heal` needs. Built from a recorded fault list:
no lab runs."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cluster_lab import model as hw
from cluster_lab.config import LabConfig
from cluster_lab.faults import heal_all, inject
from cluster_lab.state import LabState, save_state
from cluster_tool.cli import main
from tests.conftest import FIXTURES


@pytest.fixture
def lab_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lab directory with a state record and a model holding three recorded faults."""
    lab_dir = tmp_path / "lab"
    monkeypatch.setenv("CLUSTER_TOOL_LAB_DIR", str(lab_dir))
    config = LabConfig.from_env()
    data = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    inject(data, "gpu-hot", "gpu001", "2", "95")
    inject(data, "link-degrade", "gpu002", "mlx5_0", width="1X")
    inject(data, "link-down", "gpu003", "mlx5_3", hang=True)
    hw.save(config.model_dir, hw.HardwareModel.model_validate(data))
    save_state(
        config.state_file,
        LabState(prefix="ut", bridge="ut-br0", subnet="10.99.0.0/24", lab_dir=str(lab_dir)),
    )
    return lab_dir


def _status_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["lab", "status", "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_status_json_shows_faults_as_the_operator_typed_them(
    lab_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Whole seconds, UTC: the injection happened in the fixture, just before this.
    now = time.time()
    faults = _status_json(capsys)["faults"]
    stamps = {f.pop("injected_at") for f in faults}
    assert len(stamps) == 1
    injected = datetime.strptime(stamps.pop(), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert now - 60 < injected.timestamp() <= now

    assert faults == [
        {
            "id": "gpu-hot-1",
            "kind": "gpu-hot",
            "target": "gpu001 2 95",
            "arguments": ["gpu001", "2", "95"],
        },
        {
            "id": "link-degrade-1",
            "kind": "link-degrade",
            "target": "gpu002 mlx5_0",
            "arguments": ["gpu002", "mlx5_0", "--width", "1X"],
        },
        {
            "id": "link-down-1",
            "kind": "link-down",
            "target": "gpu003 mlx5_3",
            "arguments": ["gpu003", "mlx5_3", "--hang"],
        },
    ]


def test_the_record_on_disk_still_holds_what_heal_needs(
    lab_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _status_json(capsys)
    config = LabConfig.from_env()
    data = hw.load(config.model_dir).model_dump(mode="json")

    assert [sorted(f) for f in data["faults"]] == [
        ["args", "id", "injected_at", "kind", "params", "target", "undo"]
    ] * 3
    # The undo list is what puts the model back: healing from it restores every node.
    before = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    heal_all(data)
    # The fixture is a model saved before nodes carried their CPUs and memory (hostview.py):
    # it loads with them unset.
    for node in data["nodes"]:
        assert node.pop("cpu") is None and node.pop("mem_total_kib") is None
    assert data["nodes"] == before["nodes"]


def test_a_fault_recorded_before_args_and_time_were_kept_shows_its_target(
    lab_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = LabConfig.from_env()
    data = hw.load(config.model_dir).model_dump(mode="json")
    old = data["faults"][0]
    del old["args"], old["injected_at"]
    hw.save(config.model_dir, hw.HardwareModel.model_validate(data))

    shown = _status_json(capsys)["faults"][0]

    assert shown == {
        "id": "gpu-hot-1",
        "kind": "gpu-hot",
        "target": "gpu001 2 95",
        "arguments": ["gpu001", "2", "95"],
    }


def test_status_text_lists_the_faults(lab_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "status"]) == 0
    out = capsys.readouterr().out

    assert "fault link-degrade-1: link-degrade gpu002 mlx5_0" in out
