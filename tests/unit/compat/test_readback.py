"""Read back what a node runs from its own tools' output (real captures) and hold it against the
spec's pins (`version.drift`) and the matrix (`version.incompatible`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.checks.versions import (
    check_fleet_outliers,
    check_node_versions,
    read_node_versions,
)
from cluster_tool.parsers.base import ParseError
from cluster_tool.spec import Cluster, load_spec_text
from tests.conftest import with_sections

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT.parent / "shared" / "fixtures" / "real-outputs"
LAB = (ROOT / "examples" / "lab.yml").read_text(encoding="utf-8")


def capture(name: str) -> str:
    """A real capture without its first line (the public source)."""
    return (REAL / name).read_text(encoding="utf-8").split("\n", 1)[1]


# 8x H100, driver 535.161.08 (gpud testdata); 8x ConnectX-7 (MT4129) on firmware 28.41.1000
# and a BlueField-3 (MT41692) on 32.38.3056 (gpud testdata).
SMI = capture("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
IBSTAT = capture("ibstat_h100_8xcx7_ndr_ib_all_active.txt")
NODE = read_node_versions("gpu001", nvidia_smi_q=SMI, ibstat=IBSTAT)
CX7 = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]


def spec(software: str) -> Cluster:
    return load_spec_text(with_sections(LAB, "software:\n" + software), "c.yml")


# DOCA 2.7 has no firmware rule in the matrix: the 28.41 adapters keep every rule under it.
MATCHING = (
    '  nvidia_driver_branch: "535"\n  nvidia_driver_version: 535.161.08\n  cuda_version: "12.2"\n'
    '  doca_ofed_version: "2.7.0"\n'
)


def test_versions_read_from_real_captures() -> None:
    assert NODE.nvidia_driver == "535.161.08"
    assert [(h.name, h.model, h.firmware) for h in NODE.hcas] == [
        *[(name, "ConnectX-7", "28.41.1000") for name in CX7],
        ("mlx5_bond_0", "BlueField-3", "32.38.3056"),
    ]


def test_a_node_that_runs_what_the_spec_pins_has_no_finding() -> None:
    assert check_node_versions(spec(MATCHING), [NODE]) == []


def test_drift_from_the_pinned_driver_and_the_rules_it_breaks() -> None:
    # The lab spec pins the default driver 570.172.08 (branch 570); CUDA 12.4 needs >= 550.54.14.
    findings = check_node_versions(
        spec('  cuda_version: "12.4"\n  doca_ofed_version: "2.7.0"\n'), [NODE]
    )
    drift = [f for f in findings if f.check == "version.drift"]
    assert [(f.node, f.component, f.expected, f.observed) for f in drift] == [
        ("gpu001", "nvidia_driver", "570.172.08", "535.161.08")
    ]
    incompatible = {
        f.message.split("[")[1].split(":")[0] for f in findings if f.check == "version.incompatible"
    }
    assert incompatible == {"cuda-12-4-min-driver", "driver-branch"}
    for finding in findings:
        assert (finding.node, finding.component, finding.severity) == (
            "gpu001",
            "nvidia_driver",
            "error",
        )


def test_firmware_off_the_line_doca_ships_is_named_per_adapter() -> None:
    # DOCA 2.9.2 bundles ConnectX-7 firmware 28.43.2566; these adapters run 28.41.1000.
    findings = check_node_versions(spec(MATCHING.replace('"2.7.0"', '"2.9.2"')), [NODE])
    assert [(f.check, f.component, f.observed) for f in findings] == [
        ("version.incompatible", f"hca_firmware {name}", "28.41.1000") for name in CX7
    ]
    assert "doca-2-9-connectx-7-firmware" in findings[0].message
    # The default DOCA 2.9.1 has no firmware rule yet.
    assert check_node_versions(spec(MATCHING), [NODE]) == []


def test_text_that_is_not_the_tools_output_is_refused() -> None:
    with pytest.raises(ParseError):
        read_node_versions("gpu001", ibstat="CA 'mlx5_0'\n\tCA type MT4129 with no colon\n")


# --- the fleet: what the spec does not pin, held against the other nodes -----------------------


def with_one_adapter_on(firmware: str, adapter: str = "mlx5_4") -> str:
    """The real ibstat with one ConnectX-7's firmware changed (as a half-finished update
    leaves it)."""
    head, tail = IBSTAT.split(f"CA '{adapter}'", 1)
    return head + f"CA '{adapter}'" + tail.replace("28.41.1000", firmware, 1)


def with_one_gpu_on(vbios: str, gpu: int = 3) -> str:
    parts = SMI.split("96.00.74.00.0D")
    assert len(parts) == 9
    return "96.00.74.00.0D".join(parts[: gpu + 1]) + vbios + "96.00.74.00.0D".join(parts[gpu + 1 :])


def test_a_healthy_fleet_has_no_outlier() -> None:
    fleet = [read_node_versions(f"gpu00{i}", nvidia_smi_q=SMI, ibstat=IBSTAT) for i in (1, 2, 3)]
    assert check_fleet_outliers(fleet) == []


def test_the_one_adapter_and_the_one_gpu_off_the_fleet_are_named() -> None:
    fleet = [
        read_node_versions("gpu001", nvidia_smi_q=SMI, ibstat=IBSTAT),
        read_node_versions(
            "gpu002",
            nvidia_smi_q=with_one_gpu_on("96.00.61.00.01"),
            ibstat=with_one_adapter_on("28.39.1002"),
        ),
        read_node_versions("gpu003", nvidia_smi_q=SMI, ibstat=IBSTAT),
    ]
    findings = check_fleet_outliers(fleet)
    assert [
        (f.check, f.severity, f.node, f.component, f.expected, f.observed) for f in findings
    ] == [
        ("version.outlier", "warning", "gpu002", "hca_firmware mlx5_4", "28.41.1000", "28.39.1002"),
        ("version.outlier", "warning", "gpu002", "vbios GPU 3", "96.00.74.00.0D", "96.00.61.00.01"),
    ]
    assert "23 of 24 run 28.41.1000" in findings[0].message
    assert "23 of 24 run 96.00.74.00.0D" in findings[1].message


def test_a_fleet_split_in_two_names_the_split_not_a_node() -> None:
    fleet = [
        read_node_versions("gpu001", ibstat=IBSTAT.replace("28.41.1000", "28.39.1002")),
        read_node_versions("gpu002", ibstat=IBSTAT),
    ]
    (finding,) = check_fleet_outliers(fleet)
    assert (finding.node, finding.component) == (None, "hca_firmware ConnectX-7")
    assert "28.41.1000 on 8" in finding.message and "28.39.1002 on 8" in finding.message
