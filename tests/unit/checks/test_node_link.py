"""check_node over the link-quality probes (`mlxlink`, `nvidia-smi nvlink -e`, `lspci`): real
captures in, findings out; a tool that is missing is a finding, a storage NIC is not judged."""

from __future__ import annotations

import dataclasses

from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.findings import Finding
from cluster_tool.probes import ProbeOutput
from cluster_tool.spec import load_spec
from cluster_tool.spec.thresholds import HealthThresholds
from tests.conftest import FIXTURES, REPO
from tests.unit.checks.test_health import healthy_outputs

CLUSTER = load_spec(REPO / "examples" / "h100-1su.yml")
REAL = FIXTURES / "parsers" / "real"


def _capture(name: str) -> str:
    """A real capture without its source line."""
    return (REAL / name).read_text(encoding="utf-8").split("\n", 1)[1]


def _check(thresholds: HealthThresholds | None = None, **probes: ProbeOutput) -> list[Finding]:
    outputs = healthy_outputs()
    outputs.update({name.replace("_", "-"): output for name, output in probes.items()})
    expect = expectations_for(CLUSTER, "gpu001", gpudirect_mode="peermem")
    if thresholds is not None:
        expect = dataclasses.replace(expect, thresholds=thresholds)
    return check_node(expect, outputs)


def _new(findings: list[Finding]) -> list[tuple[str, str, str | None]]:
    ids = ("link.", "gpu.nvlink-errors", "ib.pcie")
    return [(f.check, f.severity, f.component) for f in findings if f.check.startswith(ids)]


def _bf3_with_raw_ber(device: str) -> str:
    # The BlueField-3 capture's first port, renamed to `device`, its raw BER raised to 2E-9
    # (hand-edited: the real port counted no error).
    text = _capture("mlxlink_m_c_bf3_100g_dac_two_ports_prompt_lines.txt")
    first = text.split("ubuntu@bluefield-1", 2)[1]
    first = first.replace("-d /dev/mst/mt41692_pciconf0 -p 1", f"-d {device}")
    return first.replace("Raw Physical BER                   : 15E-255", "Raw Physical BER : 2E-9")


def test_a_compute_hcas_raw_ber_warns_only_under_a_spec_limit_and_names_the_cable() -> None:
    # Issue 29: raw BER is a trend by default; a site that sets a limit for the port's speed
    # (this 100G Ethernet port is `other`) gets the warning.
    assert _new(_check(mlxlink=ProbeOutput(0, _bf3_with_raw_ber("mlx5_0")))) == []
    limit = HealthThresholds.model_validate({"ib_link_quality": {"other": {"raw_ber_warn": 1e-9}}})
    findings = _check(limit, mlxlink=ProbeOutput(0, _bf3_with_raw_ber("mlx5_0")))
    assert _new(findings) == [("link.ber", "warning", "mlx5_0")]
    (ber,) = [f for f in findings if f.check == "link.ber"]
    assert ber.observed == "raw BER 2e-09"
    assert "FS Q28-PC03 S/N S2202655321-1" in ber.message


def test_a_storage_nic_is_not_judged() -> None:
    # mlx5_1 is one of the profile's storage/management NICs, never on a rail.
    limit = HealthThresholds.model_validate({"ib_link_quality": {"other": {"raw_ber_warn": 1e-9}}})
    assert _new(_check(limit, mlxlink=ProbeOutput(0, _bf3_with_raw_ber("mlx5_1")))) == []


def test_mlxlink_missing_is_an_error_that_says_so() -> None:
    findings = _check(
        mlxlink=ProbeOutput(127, "mlxlink -d mlx5_0 -m -c\n", "sh: mlxlink: not found")
    )
    assert _new(findings) == [("link.fec", "error", "mlxlink")]
    (missing,) = [f for f in findings if f.check == "link.fec"]
    assert missing.message == "gpu001: mlxlink: command not found"


def test_real_nvlink_counters_of_a_healthy_gb300_give_nothing() -> None:
    text = _capture("nvidia-smi_nvlink-e_gb300_no_uuid_command_line.txt").split("\n", 1)[1]
    assert _new(_check(nvlink_errors=ProbeOutput(0, text))) == []
    raised = text.replace("CRC Errors: 0", "CRC Errors: 45068")
    assert _new(_check(nvlink_errors=ProbeOutput(0, raised))) == [
        ("gpu.nvlink-errors", "error", "GPU0 link 0")
    ]


def test_without_a_driver_nvidia_smi_is_blamed_once() -> None:
    """nvidia-smi nvlink -e fails for the same reason as nvidia-smi -q: gpu.driver says it."""
    gone = ProbeOutput(127, "", "sh: 1: nvidia-smi: not found\n")
    findings = _check(nvidia_smi_q=gone, nvlink_errors=gone)
    assert [f.check for f in findings if f.component in ("nvidia-smi-q", "nvlink-errors")] == [
        "gpu.driver"
    ]


def test_lspci_missing_is_an_ib_pcie_error() -> None:
    findings = _check(lspci=ProbeOutput(127, "", "sh: 1: lspci: not found\n"))
    assert _new(findings) == [("ib.pcie", "error", "lspci")]
