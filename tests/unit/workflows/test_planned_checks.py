"""Every check a run plans appears in its summary and JUnit as passed, failed or not run (issue
30, item 6): the node checks the health probes judge (NVLink error counters, the HCAs' PCIe
links, mlxlink's link quality), the version read-back, and the counters read again after the
traffic; a version probe that timed out is a check that did not run, and a node whose versions
were not read is not admitted.

Against 6a54dd4 every test here fails: those ids were never planned, a timed-out version probe
gave no finding and no skip, and bring-up admitted the node.
"""

from __future__ import annotations

from pathlib import Path

from cluster_tool.findings import Report
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.report.junit import validate_junit
from cluster_tool.spec import load_spec
from cluster_tool.verdicts import NodeVerdict, RunVerdict
from cluster_tool.workflows.bringup import BringupOptions, run_bringup
from cluster_tool.workflows.collect import run_validate
from cluster_tool.workflows.common import Phase, Validation
from cluster_tool.workflows.live import run_summary
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster
from tests.unit.workflows.test_bringup import NODES, _deps

LAB = REPO / "examples" / "lab.yml"
JUDGED_BY_HEALTH = ("gpu.nvlink-errors", "ib.pcie", "link.fec", "version.drift")


def test_a_validate_runs_junit_lists_every_check_its_probes_judge() -> None:
    report = Report.from_findings([], {"health": True})
    xml = validate_junit(report, nodes=["gpu001"], fabric_host=None, skipped={})
    for check in (*JUDGED_BY_HEALTH, "version.incompatible"):
        assert f'classname="gpu001" name="{check}"' in xml, check


def test_a_version_probe_that_timed_out_is_a_check_that_did_not_run(tmp_path: Path) -> None:
    cluster = load_spec(LAB)
    outputs = {"versions": ProbeOutput(124, "", "timeout: the monitored command dumped core")}
    save_capture(tmp_path / "cap", {"gpu001": HostResult("gpu001", outputs, probes=("versions",))})
    result = run_validate(
        cluster, health=True, fabric=False, nodes=["gpu001"], replay=tmp_path / "cap"
    )
    why = result.skipped["gpu001"].get("version.drift", "")
    assert "version probe did not answer" in why and "124" in why
    assert "version.incompatible" in result.skipped["gpu001"]


def test_the_summary_plans_the_counter_checks_when_the_counters_were_read(
    tmp_path: Path,
) -> None:
    record = RunRecord.create(tmp_path, "bringup", {})
    summary = run_summary(
        command="bringup",
        record=record,
        inputs={},
        phases=[Phase("gate", "passed"), Phase("counters", "passed")],
        findings=[],
        verdicts={"gpu001": NodeVerdict("pass").to_json()},
        run=RunVerdict("pass", 0, "PASS"),
        cluster=None,
        health_nodes=["gpu001"],
        fabric_checked=True,
    )
    data = summary.to_json()
    assert {"link.flap", "link.errors"} <= set(data["checks"]["fabric"])
    assert set(JUDGED_BY_HEALTH) <= set(data["checks"]["gpu001"])


def test_bringup_does_not_admit_a_node_whose_versions_were_not_read() -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, _ = _deps(slurm)
    unread = {c: "the version probe did not answer (exit 124)" for c in ("version.drift",)}
    deps.validate = lambda nodes: Validation.of(
        nodes, skipped={"gpu002": unread} if "gpu002" in nodes else None
    )
    result = run_bringup(NODES, deps, BringupOptions())
    assert "gpu002" in slurm.drained
    gap = [f for f in result.findings if f.check == "admission.unproven"]
    assert [f.node for f in gap] == ["gpu002"] and gap[0].severity == "error"
    assert "version.drift did not run" in (gap[0].observed or "")
    assert slurm.drained["gpu002"].startswith("cluster-tool: admission.unproven:")
    assert result.nodes["gpu002"]["verdict"] == "unknown"
    assert result.exit_code == 1
    assert all(n not in slurm.drained for n in NODES if n != "gpu002")
