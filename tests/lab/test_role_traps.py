"""The roles' known traps on real hardware (issue 18), reproduced by the lab the way they would
fail and proven fixed on the session's one bring-up from bare nodes (`converged`).

Persistence mode: the lab's nvidia-persistenced package ships Ubuntu's unit, which starts the
daemon with --no-persistence-mode; only the nvidia_driver role's drop-in turns it on.

DOCA's driver: the lab's doca-ofed package leaves the inbox mlx5_core loaded until openibd
restarts or the node reboots (as DOCA-Host does); only the doca_ofed role's restart handler loads
DOCA's, and its check stops the bring-up if the loaded one is not DOCA's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")
# The mlx5_core/ib_core of DOCA-Host 2.9.1 (doca_ofed_version's default), which carries
# MLNX_OFED 24.10-1.1.4 (DOCA-Host 2.9.1 release notes).
DOCA_MLX5 = "24.10-1.1.4"


def test_persistence_mode_is_on_on_every_gpu_after_the_bringup(converged: Converged) -> None:
    lab = converged.lab
    for node in GPU_NODES:
        unit = lab.ssh(node, "cat /lib/systemd/system/nvidia-persistenced.service").stdout
        assert "--no-persistence-mode" in unit, "the lab ships the unit as Ubuntu does"
        query = lab.ssh(node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
        assert query.returncode == 0, query.stderr
        assert set(query.stdout.split()) == {"Enabled"}, (node, query.stdout)
        full = lab.ssh(node, "nvidia-smi -q").stdout
        modes = re.findall(r"^\s*Persistence Mode\s*:\s*(\S+)", full, re.MULTILINE)
        assert modes == ["Enabled"] * 8, (node, modes)
    findings = json.loads((Path(converged.bringup["run_dir"]) / "findings.json").read_text())
    assert not [f for f in findings["findings"] if f["check"] == "gpu.persistence"]


def test_docas_driver_is_the_loaded_one_on_every_gpu_node_after_the_bringup(
    converged: Converged,
) -> None:
    lab = converged.lab
    for node in GPU_NODES:
        loaded = lab.ssh(node, "cat /sys/module/mlx5_core/version /sys/module/ib_core/version")
        assert loaded.returncode == 0, (node, loaded.stderr)
        assert loaded.stdout.split() == [DOCA_MLX5, DOCA_MLX5], node
        on_disk = lab.ssh(node, "modinfo -F version mlx5_core")
        assert on_disk.stdout.strip() == DOCA_MLX5, (node, on_disk.stderr)
