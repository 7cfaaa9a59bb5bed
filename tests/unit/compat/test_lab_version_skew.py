"""The lab's version-skew fault through the simulators and back: what the version probe would
read from a lab node (its sysfs tree, `nv-fabricmanager --version`) before and after the fault,
judged by the read-back. The lab test (tests/lab/test_versions.py) runs the same over SSH."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cluster_lab.faults import FaultError, heal_all, inject
from cluster_lab.sim import cli as sim
from cluster_lab.sim.hw import node_hardware, node_names
from cluster_lab.sim.sysfs import write_sysfs_tree
from cluster_tool.checks.versions import (
    check_fleet_outliers,
    check_node_versions,
    from_version_lines,
)
from cluster_tool.parsers.versions import parse_versions
from cluster_tool.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "tests" / "fixtures" / "sim" / "lab-model.json"
DRIVER = "570.172.08"  # the lab's driver packages (cluster_lab/sim/packages.py)


@pytest.fixture
def model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MODEL.read_text())
    for node in data["nodes"]:
        if node.get("gpus"):
            # What the installed driver packages tell the simulators on a lab node.
            node["driver_version"] = DRIVER
    return data


def probe_text(data: dict[str, Any], node: str, tmp: Path) -> str:
    """The version probe's lines for the parts the simulators answer: driver, fabric manager
    and every RDMA device's sysfs (type, firmware, PSID), as the probe's loops print them."""
    hw = node_hardware(data, node)
    hw.driver_version = data_node(data, node).get("driver_version", hw.driver_version)
    tree = write_sysfs_tree(hw, tmp / f"{node}-{len(list(tmp.iterdir()))}") / "infiniband"
    fm = sim.fabricmanager(["--version"], data, node).stdout
    lines = [f"module nvidia {hw.driver_version}", f"fabricmanager {fm.split(' : ')[1].strip()}"]
    for dev in sorted(tree.iterdir()):
        fields = [(dev / f).read_text().strip() for f in ("hca_type", "fw_ver", "board_id")]
        lines.append(f"hca {dev.name} {' '.join(fields)}")
    return "\n".join(lines) + "\n"


def data_node(data: dict[str, Any], node: str) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["name"] == node)


def findings(data: dict[str, Any], tmp: Path) -> list[tuple[str, str | None, str | None]]:
    cluster = load_spec(ROOT / "examples" / "lab.yml")
    gpu_nodes = [n for n in node_names(data) if data_node(data, n).get("gpus")]
    read = [from_version_lines(n, parse_versions(probe_text(data, n, tmp))) for n in gpu_nodes]
    found = check_node_versions(cluster, read) + check_fleet_outliers(read)
    return [(f.check, f.node, f.component) for f in found]


def test_a_healthy_lab_runs_what_its_doca_bundles_and_reports_nothing(
    model: dict[str, Any], tmp_path: Path
) -> None:
    assert findings(model, tmp_path) == []


def test_fabric_manager_one_patch_behind_is_incompatible(
    model: dict[str, Any], tmp_path: Path
) -> None:
    inject(model, "version-skew", "gpu002", "fabricmanager")
    assert "Fabric Manager version is : 570.172.07" in (
        sim.fabricmanager(["--version"], model, "gpu002").stdout
    )
    assert findings(model, tmp_path) == [("version.incompatible", "gpu002", "fabricmanager")]


def test_one_hca_on_older_firmware_is_an_outlier_and_heals(
    model: dict[str, Any], tmp_path: Path
) -> None:
    original = copy.deepcopy(model)
    inject(model, "version-skew", "gpu003", "hca-fw", "mlx5_4")
    assert findings(model, tmp_path) == [("version.outlier", "gpu003", "hca_firmware mlx5_4")]
    heal_all(model)
    assert model == original


def test_version_skew_refuses_what_it_cannot_do(model: dict[str, Any]) -> None:
    with pytest.raises(FaultError, match="COMPONENT must be fabricmanager or hca-fw"):
        inject(model, "version-skew", "gpu001", "vbios")
    with pytest.raises(FaultError, match="no compute HCA 'mlx5_99'"):
        inject(model, "version-skew", "gpu001", "hca-fw", "mlx5_99")
