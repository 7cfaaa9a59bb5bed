"""The roles' known traps on real hardware (issue 18), reproduced by the lab the way they would
fail and proven fixed on the session's one bring-up from bare nodes (`converged`).

Persistence mode: the lab's nvidia-persistenced package ships Ubuntu's unit, which starts the
daemon with --no-persistence-mode; only the nvidia_driver role's drop-in turns it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def test_persistence_mode_is_on_on_every_gpu_after_the_bringup(converged: Converged) -> None:
    lab = converged.lab
    for node in GPU_NODES:
        unit = lab.ssh(node, "cat /lib/systemd/system/nvidia-persistenced.service").stdout
        assert "--no-persistence-mode" in unit, "the lab ships the unit as Ubuntu does"
        query = lab.ssh(node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
        assert query.returncode == 0, query.stderr
        assert set(query.stdout.split()) == {"Enabled"}, (node, query.stdout)
    findings = json.loads((Path(converged.bringup["run_dir"]) / "findings.json").read_text())
    assert not [f for f in findings["findings"] if f["check"] == "gpu.persistence"]
