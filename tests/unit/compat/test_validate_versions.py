"""`validate` judges the version probe it already collects with the health probes: the same
version.incompatible / version.outlier findings as `cluster-tool versions`, through the
collection (workflows/collect.py) on a saved capture of the lab's four GPU nodes."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, load_capture, save_capture
from cluster_tool.spec import load_spec
from cluster_tool.workflows.collect import ValidateResult, junit_xml, run_validate
from tests.conftest import REPO
from tests.unit.checks.test_remote import lab_capture
from tests.unit.compat.test_versions import HEALTHY

NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def with_versions(tmp_path: Path, versions: dict[str, str]) -> Path:
    """The passing lab capture of test_remote with the version probe's output per node."""
    results = load_capture(lab_capture(tmp_path / "base"))
    changed: dict[str, HostResult] = {}
    for name, result in results.items():
        outputs = dict(result.outputs)
        if name in versions:
            outputs["versions"] = ProbeOutput(0, versions[name])
        changed[name] = HostResult(name, outputs=outputs, probes=tuple(outputs))
    save_capture(tmp_path / "cap", changed)
    return tmp_path / "cap"


def validate(capture: Path) -> ValidateResult:
    return run_validate(load_spec(REPO / "examples" / "lab.yml"), replay=capture, dcgm=False)


def version_findings(result: ValidateResult) -> list[tuple[str, str | None, str | None, str]]:
    return [
        (f.check, f.node, f.component, f.severity)
        for f in result.report.findings
        if f.check.startswith("version.")
    ]


def test_a_fleet_that_runs_the_pins_passes_validate(tmp_path: Path) -> None:
    result = validate(with_versions(tmp_path, dict.fromkeys(NODES, HEALTHY)))
    assert version_findings(result) == []
    assert result.exit_code == 0


def test_validate_names_the_fabric_manager_behind_and_the_adapter_behind(tmp_path: Path) -> None:
    versions = dict.fromkeys(NODES, HEALTHY)
    versions["gpu001"] = HEALTHY.replace("fabricmanager 570.172.08", "fabricmanager 570.172.05")
    versions["gpu002"] = HEALTHY.replace(
        "hca mlx5_1 MT4129 28.46.1006", "hca mlx5_1 MT4129 28.46.3048"
    )
    result = validate(with_versions(tmp_path, versions))
    assert version_findings(result) == [
        ("version.incompatible", "gpu001", "fabricmanager", "error"),
        ("version.outlier", "gpu002", "hca_firmware mlx5_1", "warning"),
    ]
    incompatible = next(f for f in result.report.findings if f.check == "version.incompatible")
    assert "570.172.05" in incompatible.message and "570.172.08" in incompatible.message
    assert result.exit_code == 1
    # The JUnit file carries them too (a case per finding id on the node's suite).
    xml = junit_xml(result)
    assert "version.incompatible" in xml and "version.outlier" in xml


def test_unreadable_probe_output_skips_the_node_version_checks_with_why(tmp_path: Path) -> None:
    versions = dict.fromkeys(NODES, HEALTHY)
    versions["gpu003"] = "kernel 6.1.0-27-amd64\nNVRM version: 570.172.08\n"
    result = validate(with_versions(tmp_path, versions))
    assert version_findings(result) == []
    why = result.skipped["gpu003"]["version.incompatible"]
    assert "line 2" in why
    assert result.exit_code == 0
