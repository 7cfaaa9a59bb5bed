"""The node checks against the lab's simulators: every probe's output rendered from the lab's
hardware model (the same code the simulator packages run in a node; `ibstat` is the real one
over the model's sysfs tree), a healthy node gives no error, and each node fault the lab can
inject is found with its id, node and component and is gone once healed."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster_lab.faults import heal, inject
from cluster_lab.sim import cli as sim
from cluster_lab.sim.hw import node_hardware
from cluster_lab.sim.kernel_state import kernel_files
from cluster_lab.sim.sysfs import write_sysfs_tree
from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.findings import Finding
from cluster_tool.probes import ProbeOutput
from cluster_tool.spec import load_spec
from cluster_tool.spec.thresholds import HealthThresholds
from tests.conftest import FIXTURES, REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ibstat"),
    reason="the real ibstat over the model's sysfs tree needs root and infiniband-diags",
)

LAB = load_spec(REPO / "examples" / "lab.yml")


@pytest.fixture(autouse=True)
def persistenced_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """A converged node: nvidia-persistenced runs in persistence mode (the nvidia_driver role's
    drop-in); the simulators read that from the node's run folder, which this machine lacks."""
    monkeypatch.setattr(sim, "persistence_on", lambda *_: True)


def model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    return data


def real_ibstat(tree: Path) -> ProbeOutput:
    script = f"mount -t overlay overlay -o ro,lowerdir={tree}:/sys/class /sys/class && exec ibstat"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30
    )
    return ProbeOutput(done.returncode, done.stdout, done.stderr)


def probe_outputs(data: dict[str, Any], node: str, tmp: Path) -> dict[str, ProbeOutput]:
    """What HEALTH_PROBES would collect from `node` of a lab running this model."""

    def run(result: sim.Result) -> ProbeOutput:
        return ProbeOutput(result.exit_code, result.stdout, result.stderr)

    hw = node_hardware(data, node)
    loaded = [
        m for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem") if m in hw.modules
    ]
    files = kernel_files(hw, loaded)
    version = files.get("proc-driver/nvidia/version")
    tree = tmp / f"sysfs-{node}-{len(list(tmp.iterdir()))}"
    return {
        "hostname": ProbeOutput(0, f"{node}\n"),
        "nvidia-smi-q": run(sim.nvidia_smi(["-q"], data, node)),
        "nvidia-smi-topo": run(sim.nvidia_smi(["topo", "-m"], data, node)),
        "ibstat": real_ibstat(write_sysfs_tree(hw, tree)),
        "kernel-log": run(sim.dmesg([], data, node)),
        "modules": ProbeOutput(0, "".join(f"{m}\n" for m in loaded)),
        "nvidia-version": ProbeOutput(0, version)
        if version
        else ProbeOutput(1, "", "No such file"),
        "kernel": ProbeOutput(0, "6.1.0-27-amd64\n"),
        "nccl-conf": ProbeOutput(0, _nccl_conf()),
        "dcgmi-diag": run(sim.dcgmi(["diag", "-r", "1"], data, node)),
        "nvlink-errors": run(sim.nvidia_smi(["nvlink", "-e"], data, node)),
        "mlxlink": _mlxlink_loop(data, node, [h.device for h in hw.hcas if h.present]),
        "lspci": ProbeOutput(
            0,
            sim.lspci(["-vv", "-d", "10de:"], data, node).stdout
            + sim.lspci(["-vv", "-d", "15b3:"], data, node).stdout,
        ),
        # Each RDMA device by PCI address: check_node matches the profile's HCAs by it.
        "ibdev2netdev": run(sim.ibdev2netdev(["-v"], data, node)),
    }


def _mlxlink_loop(data: dict[str, Any], node: str, devices: list[str]) -> ProbeOutput:
    """The mlxlink probe's loop: each device's command line, then what mlxlink printed."""
    out, err, rc = [], [], 0
    for device in devices:
        result = sim.mlxlink(["-d", device, "-m", "-c"], data, node)
        out.append(f"mlxlink -d {device} -m -c\n{result.stdout}")
        err.append(result.stderr)
        rc = result.exit_code or rc
    return ProbeOutput(rc, "".join(out), "".join(err))


def _nccl_conf() -> str:
    from cluster_tool.render.engine import render_files

    return render_files(LAB)["nccl.conf"]


def errors(findings: list[Finding]) -> set[tuple[str, str | None, str | None]]:
    return {(f.check, f.node, f.component) for f in findings if f.fails}


def check(
    data: dict[str, Any], node: str, tmp: Path, thresholds: HealthThresholds | None = None
) -> list[Finding]:
    expect = expectations_for(LAB, node)
    if thresholds is not None:
        expect = dataclasses.replace(expect, thresholds=thresholds)
    return check_node(expect, probe_outputs(data, node, tmp))


def test_every_lab_node_is_healthy(tmp_path: Path) -> None:
    data = model()
    for node in ("gpu001", "gpu002", "gpu003", "gpu004"):
        findings = check(data, node, tmp_path)
        assert errors(findings) == set(), [f.message for f in findings if f.fails]


@pytest.mark.parametrize(
    ("fault", "options", "expected"),
    [
        (("gpu-ecc", "gpu002", "3"), {}, {("gpu.ecc", "gpu002", "GPU3")}),
        (("gpu-xid", "gpu003", "5", "79"), {}, {("gpu.xid", "gpu003", "GPU5")}),
        (("gpu-hot", "gpu001", "2", "95"), {}, {("gpu.temperature", "gpu001", "GPU2")}),
        (("gpu-missing", "gpu004", "6"), {}, {("gpu.count", "gpu004", None)}),
        (("link-down", "gpu002", "mlx5_4"), {}, {("ib.state", "gpu002", "mlx5_4")}),
        (("link-degrade", "gpu001", "mlx5_9", "1X"), {}, {("ib.rate", "gpu001", "mlx5_9")}),
        (("module-missing", "gpu003", "nvidia"), {}, {("gpu.driver", "gpu003", "nvidia-smi-q")}),
        # Past what RS-FEC corrects (about 1e-4), errors reach the link layer.
        (("link-ber", "gpu004", "mlx5_5", "1e-3"), {}, {("link.fec", "gpu004", "mlx5_5")}),
        (("nvlink-errors", "gpu001", "4"), {}, {("gpu.nvlink-errors", "gpu001", "GPU4 link 0")}),
        (("pcie-width", "gpu003", "mlx5_10", "8"), {}, {("ib.pcie", "gpu003", "mlx5_10")}),
        (("pcie-width", "gpu002", "1", "4"), {}, {("gpu.pcie", "gpu002", "GPU1")}),
        (("gpu-clock", "gpu004", "3", "1200"), {}, {("gpu.clocks", "gpu004", "GPU3")}),
    ],
)
def test_each_node_fault_is_found_and_heals(
    tmp_path: Path,
    fault: tuple[str, ...],
    options: dict[str, Any],
    expected: set[tuple[str, str | None, str | None]],
) -> None:
    data = model()
    healthy = copy.deepcopy(data)
    node = fault[1]
    record = inject(data, fault[0], *fault[1:], **options)
    found = errors(check(data, node, tmp_path))
    assert expected <= found, found
    # The fault's other symptoms are the same node's, never another node's.
    assert {n for _, n, _ in found} == {node}
    if fault[0] in ("gpu-missing", "module-missing", "pcie-width", "gpu-clock"):  # said once
        assert found == expected
    heal(data, record["id"])
    assert data["nodes"] == healthy["nodes"]
    assert errors(check(data, node, tmp_path)) == set()


def test_a_renamed_hca_is_a_mismatch_and_judged_under_its_own_name(tmp_path: Path) -> None:
    # gpu001's rail-5 HCA at 0000:c0:00.0 named mlx5_12 instead of the profile's mlx5_9 (as
    # udev or an OEM's firmware order names it), and its link down: one profile.mismatch for
    # the name, ib.state for the link under the node's name, never ib.count.
    data = model()
    (node,) = [n for n in data["nodes"] if n["name"] == "gpu001"]
    (hca,) = [h for h in node["hcas"] if h["device"] == "mlx5_9"]
    hca["device"] = "mlx5_12"
    hca["port"]["state"], hca["port"]["phys_state"] = "Down", "Disabled"
    findings = [f for f in check(data, "gpu001", tmp_path) if f.fails]
    assert {(f.check, f.component) for f in findings} == {
        ("profile.mismatch", "mlx5_9"),
        ("ib.state", "mlx5_12"),
    }, [f.message for f in findings]
    (mismatch,) = [f for f in findings if f.check == "profile.mismatch"]
    assert (mismatch.expected, mismatch.observed) == (
        "mlx5_9 at 0000:c0:00.0",
        "mlx5_12 at 0000:c0:00.0",
    )


def test_a_renamed_hcas_link_quality_is_judged_under_its_own_name(tmp_path: Path) -> None:
    # The renamed rail-5 HCA (mlx5_12 where the profile says mlx5_9) on a cable past RS-FEC's
    # limit: mlxlink reads it under the node's name, so link.fec names mlx5_12 (it was left
    # unjudged, the profile's name being nowhere in mlxlink's output).
    data = model()
    (node,) = [n for n in data["nodes"] if n["name"] == "gpu001"]
    (hca,) = [h for h in node["hcas"] if h["device"] == "mlx5_9"]
    hca["device"] = "mlx5_12"
    inject(data, "link-ber", "gpu001", "mlx5_12", "1e-3")
    findings = {(f.check, f.component) for f in check(data, "gpu001", tmp_path) if f.fails}
    assert ("link.fec", "mlx5_12") in findings, findings


def test_an_ecc_fault_shows_every_symptom(tmp_path: Path) -> None:
    data = model()
    inject(data, "gpu-ecc", "gpu002", "3")
    found = errors(check(data, "gpu002", tmp_path))
    assert {
        ("gpu.ecc", "gpu002", "GPU3"),
        ("gpu.remapped-rows", "gpu002", "GPU3"),
        ("gpu.xid", "gpu002", "GPU3"),
    } <= found


def test_a_node_without_persistenced_in_persistence_mode_is_not_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ubuntu's packaged unit runs the daemon with --no-persistence-mode: the checks must see it
    (DCGM's diag fails Persistence Mode on every GPU), as on a node the role has not fixed."""
    monkeypatch.setattr(sim, "persistence_on", lambda *_: False)
    findings = check(model(), "gpu001", tmp_path)
    assert ("gpu.dcgm", "gpu001") in {(c, n) for c, n, _ in errors(findings)}
    assert any("Persistence Mode" in f.message for f in findings if f.fails)


def test_a_marginal_cable_is_a_trend_unless_the_spec_sets_a_raw_ber_limit(tmp_path: Path) -> None:
    """A raw BER that RS-FEC still corrects is no finding by default (issue 29: a healthy PAM4
    link's raw BER is far above 1e-12); under a site's own limit for the port's speed it is a
    warning naming the cable; the node passes either way."""
    data = model()
    record = inject(data, "link-ber", "gpu002", "mlx5_3", "1e-9")
    assert not [f for f in check(data, "gpu002", tmp_path) if f.check.startswith("link.")]
    # The lab's links run HDR.
    limit = HealthThresholds.model_validate({"ib_link_quality": {"hdr": {"raw_ber_warn": 1e-10}}})
    findings = check(data, "gpu002", tmp_path, limit)
    assert errors(findings) == set()
    warnings = [f for f in findings if f.severity == "warning"]
    assert [(f.check, f.component) for f in warnings] == [("link.ber", "mlx5_3")]
    assert warnings[0].observed == "raw BER 1e-09"
    assert "MCP1650-H001E30" in warnings[0].message
    heal(data, record["id"])
    assert not [f for f in check(data, "gpu002", tmp_path) if f.check.startswith("link.")]


def test_the_new_probes_of_a_healthy_node_give_no_warning(tmp_path: Path) -> None:
    findings = check(model(), "gpu003", tmp_path)
    new = ("link.", "gpu.nvlink-errors", "ib.pcie", "gpu.pcie")
    assert [f.message for f in findings if f.check.startswith(new)] == []
