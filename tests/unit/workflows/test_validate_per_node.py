"""Validate's controller work per node does not grow with the fleet (issue 35, item 2): the
cabling plan is built once per run, not once per node, and each node's `nvidia-smi -q` is parsed
once for both its health checks and its versions (the VBIOS), with the same findings as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import cluster_tool.checks.versions as versions_module
import cluster_tool.fabric.plan as plan_module
import cluster_tool.probes.node as probes_module
from cluster_tool.checks.node import expectations_for
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.spec import load_spec
from cluster_tool.workflows.collect import run_validate
from tests.conftest import REPO, read_real_output

SPEC = REPO / "examples" / "h100-1su.yml"
SMI = read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
# The real capture's driver and its GPUs' VBIOS, read by hand from its text.
DRIVER, VBIOS = "535.161.08", "96.00.74.00.0D"
# One node flashed with another VBIOS (a made-up later one): the fleet's outlier.
OTHER_VBIOS = "96.00.89.00.01"


def _capture(folder: Path, nodes: list[str]) -> None:
    outputs = {
        "kernel-log": ProbeOutput(0, ""),
        "kernel-release": ProbeOutput(0, "5.15.0-105-generic\n"),
        "versions": ProbeOutput(0, f"kernel 5.15.0-105-generic\nmodule nvidia {DRIVER}\n"),
    }
    results = {}
    for n in nodes:
        smi = SMI.replace(VBIOS, OTHER_VBIOS) if n == nodes[-1] else SMI
        results[n] = HostResult(n, {**outputs, "nvidia-smi-q": ProbeOutput(0, smi)})
    save_capture(folder, results)


def test_validate_builds_the_plan_once_and_reads_nvidia_smi_once_per_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = load_spec(SPEC)
    nodes = [n.name for n in cluster.gpu_nodes()]
    _capture(tmp_path / "cap", nodes)
    calls = {"plan": 0, "smi": 0}
    real_plan = plan_module.cabling_plan
    real_smi = probes_module.parse_nvidia_smi_q

    def counted_plan(*args: object, **kwargs: object) -> object:
        calls["plan"] += 1
        return real_plan(*args, **kwargs)  # type: ignore[arg-type]

    def counted_smi(text: str) -> object:
        calls["smi"] += 1
        return real_smi(text)

    monkeypatch.setattr(plan_module, "cabling_plan", counted_plan)
    monkeypatch.setattr(probes_module, "parse_nvidia_smi_q", counted_smi)
    monkeypatch.setattr(versions_module, "parse_nvidia_smi_q", counted_smi)
    result = run_validate(cluster, fabric=False, dcgm=False, replay=tmp_path / "cap")
    assert result.unreachable == []
    assert calls == {"plan": 1, "smi": len(nodes)}
    # What the versions read from the one parse: the driver against the spec's pin, by name.
    drift = [f for f in result.report.findings if f.check == "version.drift"]
    assert {f.node for f in drift} == set(nodes)
    assert all(DRIVER in (f.observed or "") for f in drift)
    # The VBIOS, from the same parse: the one node on another stands out, once per GPU.
    outliers = [f for f in result.report.findings if f.check == "version.outlier"]
    vbios = [(f.node, f.observed) for f in outliers if "vbios" in (f.component or "")]
    assert vbios == [(nodes[-1], OTHER_VBIOS)] * 8


def test_fleet_expectations_are_each_nodes_own() -> None:
    from cluster_tool.checks.node import FleetExpectations

    cluster = load_spec(SPEC)
    fleet = FleetExpectations(cluster)
    for node in ("gpu001", "gpu017", "gpu031"):
        mine = fleet(node)
        assert mine == expectations_for(cluster, node)
        # Its own eight cables, rail r on port of its place in the SU, from the plan.
        assert len(mine.cables) == 8
        assert {leaf for _, leaf, _ in mine.cables} == {f"su1-leaf-r{r}" for r in range(8)}
        assert {port for _, _, port in mine.cables} == {int(node[3:])}
