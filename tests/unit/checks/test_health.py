"""Node health checks on real-format input: the real H100 captures pass, each fault in the
project's failing-GPU, Xid, DCGM and ibstat fixtures gives its finding; limits are the spec's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cluster_tool.checks.affinity import check_affinity
from cluster_tool.checks.gdr import check_gdr
from cluster_tool.checks.health import check_dcgm, check_gpus, check_ibstat, check_xids
from cluster_tool.checks.nccl_env import check_nccl_conf
from cluster_tool.checks.node import NodeExpectations, check_node, expectations_for, read_node_file
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.parsers.ibstat import parse_ibstat
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from cluster_tool.parsers.nvidia_topo import parse_topo_matrix
from cluster_tool.probes import ProbeOutput
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import NodeProfile, builtin_profile
from cluster_tool.spec.thresholds import HealthThresholds
from tests.conftest import FIXTURES, REPO, read_real_output, smi_at

NVIDIA = FIXTURES / "parsers" / "nvidia"


def own(name: str) -> str:
    """One of the project's fixtures, without its `# source:` line."""
    return (NVIDIA / name).read_text().split("\n", 1)[1]


H100 = builtin_profile("hgx-h100-8x-ndr")
LIMITS = HealthThresholds()


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def ids(findings: list[Finding]) -> set[tuple[str, str | None, str]]:
    return {(f.check, f.component, f.severity) for f in findings}


def test_the_real_healthy_h100_node_has_no_error() -> None:
    smi = parse_nvidia_smi_q(read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt"))
    findings = check_gpus("gpu001", H100, LIMITS, smi)
    assert errors(findings) == []
    # That capture's GPUs report HW Slowdown + Power Brake while idle: worth a warning.
    assert {f.check for f in findings} == {"gpu.throttle"}
    assert all(f.severity == "warning" for f in findings)


def test_each_fault_of_the_failing_gpu_is_named() -> None:
    smi = parse_nvidia_smi_q(own("nvidia-smi-q_h100x2_driver535_failing_gpu.txt"))
    two = H100.model_copy(update={"gpu_count": 2, "gpu_pci": []})
    findings = check_gpus("gpu017", two, LIMITS, smi)
    bad = {f for f in findings if f.component == "GPU1"}
    assert {(f.check, f.severity) for f in bad} >= {
        ("gpu.ecc", "error"),
        ("gpu.remapped-rows", "error"),
        ("gpu.temperature", "error"),
        ("gpu.throttle", "error"),
        ("gpu.pcie", "error"),
        ("gpu.pcie", "warning"),
        ("gpu.persistence", "warning"),
        ("gpu.fabric", "error"),
    }
    ecc = next(f for f in bad if f.check == "gpu.ecc")
    assert ecc.message == "gpu017 GPU1: volatile uncorrectable 2"
    assert not errors([f for f in findings if f.component == "GPU0"])


def test_gpu_count_and_model_against_the_profile() -> None:
    smi = parse_nvidia_smi_q(own("nvidia-smi-q_h100x2_driver535_failing_gpu.txt"))
    h200 = builtin_profile("hgx-h200-8x-ndr")
    findings = check_gpus("gpu002", h200, LIMITS, smi)
    count = next(f for f in findings if f.check == "gpu.count")
    assert (count.expected, count.observed) == ("8", "2")
    assert "missing: GPU" in count.message
    assert {f.component for f in findings if f.check == "gpu.model"} == {"GPU0", "GPU1"}


def test_thresholds_come_from_the_spec() -> None:
    smi = parse_nvidia_smi_q(own("nvidia-smi-q_h100x2_driver535_failing_gpu.txt"))
    two = H100.model_copy(update={"gpu_count": 2, "gpu_pci": []})
    loose = HealthThresholds(gpu_temp_warn_c=85, gpu_temp_error_c=95, ecc_uncorrectable_max=5)
    findings = check_gpus("gpu017", two, loose, smi)
    temp = next(f for f in findings if f.check == "gpu.temperature")
    assert temp.severity == "warning" and temp.expected == "< 85 C"
    assert not [f for f in findings if f.check == "gpu.ecc"]
    cool = HealthThresholds(gpu_temp_warn_c=100, gpu_temp_error_c=110)
    assert not [f for f in check_gpus("gpu017", two, cool, smi) if f.check == "gpu.temperature"]


def test_xids_are_classified_and_the_fatal_ones_come_from_the_spec() -> None:
    events = parse_xids(own("dmesg_xid79_sxid20034_hgx.txt"))
    findings = check_xids("gpu005", H100, LIMITS, events)
    xid = next(f for f in findings if f.check == "gpu.xid")
    assert xid.severity == "error"
    assert "Xid 79" in xid.message and "fallen off the bus" in xid.message
    assert any(f.check == "gpu.sxid" for f in findings)
    lenient = HealthThresholds(fatal_xids=[48])
    assert next(
        f for f in check_xids("gpu005", H100, lenient, events) if f.check == "gpu.xid"
    ).severity == ("warning")


def test_xid_names_the_gpu_by_its_pci_address() -> None:
    line = "[ 1234.5] NVRM: Xid (PCI:0000:43:00): 48, pid=1234, name=python3, DBE (0x1)\n"
    f = check_xids("gpu003", H100, LIMITS, parse_xids(line))[0]
    assert (f.check, f.component, f.severity) == ("gpu.xid", "GPU1", "error")
    assert "double-bit ECC" in f.message


def test_dcgm_failures_name_the_gpu() -> None:
    diag = parse_dcgmi_diag(own("dcgmi_diag_dcgm3_r2_gpu0_thermal_fail.txt"))
    findings = check_dcgm("gpu007", diag)
    assert ("gpu.dcgm", "GPU0", "error") in ids(findings)
    passing = parse_dcgmi_diag(own("dcgmi_diag_dcgm4.0.0_r3_all_pass_docs.txt"))
    assert errors(check_dcgm("gpu007", passing)) == []
    real = parse_dcgmi_diag(
        read_real_output("dcgmi_diag_table_dcgm3.3.9_h200_level3style_ramble.txt")
    )
    assert isinstance(check_dcgm("gpu007", real), list)


def test_rail_hcas_from_real_ibstat_and_storage_nics_told_apart() -> None:
    # 8 IB rail ports at 400 plus Ethernet storage/management ports, some Down: healthy.
    cas = parse_ibstat(read_real_output("ibstat_h100_ib_active_some_eth_down.txt"))
    assert check_ibstat("gpu001", H100, cas) == []
    # The same box in RoCE mode: every rail is Ethernet, and two are down.
    roce = parse_ibstat(read_real_output("ibstat_h100_roce_ports_down_polling_disabled.txt"))
    findings = check_ibstat("gpu001", H100, roce)
    assert {f.component for f in findings if f.check == "ib.link-layer"} == {
        h.device for h in H100.hcas
    }
    assert {f.component for f in findings if f.check == "ib.state"} == {"mlx5_5", "mlx5_11"}


def test_missing_hca_and_low_rate() -> None:
    cas = parse_ibstat(read_real_output("ibstat_h100_8xcx7_ndr_ib_all_active.txt"))
    findings = check_ibstat("gpu001", H100, cas)  # this box names its rails differently
    assert {f.component for f in findings if f.check == "ib.count"} == {
        "mlx5_3",
        "mlx5_10",
        "mlx5_11",
    }
    xdr = H100.model_copy(update={"expected_rate_gbps": 800})
    assert {f.check for f in check_ibstat("gpu001", xdr, cas)} == {"ib.count", "ib.rate"}


def test_affinity_from_the_real_topology() -> None:
    topo = parse_topo_matrix(read_real_output("nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt"))
    pairs = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_11"]
    profile = H100.model_copy(
        update={
            "hcas": [
                H100.hcas[0].model_copy(update={"device": dev, "gpu": i, "rail": i})
                for i, dev in enumerate(pairs)
            ]
        }
    )
    assert check_affinity("gpu001", profile, topo) == []
    swapped = list(pairs)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    wrong = profile.model_copy(
        update={
            "hcas": [
                H100.hcas[0].model_copy(update={"device": dev, "gpu": i, "rail": i})
                for i, dev in enumerate(swapped)
            ]
        }
    )
    findings = check_affinity("gpu001", wrong, topo)
    assert {(f.check, f.component) for f in findings} == {
        ("ib.affinity", "mlx5_1"),
        ("ib.affinity", "mlx5_0"),
    }
    assert "GPU0's PCIe switch has mlx5_0" in next(
        f.message for f in findings if f.component == "mlx5_1"
    )


OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.08  Release Build\n"
CLOSED = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Release Build\n"


def test_gpudirect_needs_peermem_or_dmabuf() -> None:
    assert check_gdr("gpu001", {"nvidia"}, OPEN, "6.1.0-27-amd64", "dmabuf") == []
    assert check_gdr("gpu001", {"nvidia", "nvidia_peermem"}, CLOSED, "5.15.0", "peermem") == []
    dead = check_gdr("gpu001", {"nvidia"}, CLOSED, "5.15.0", "peermem")
    assert [f.check for f in dead] == ["gdr.inactive"]
    assert "proprietary" in dead[0].message
    assert [f.check for f in check_gdr("gpu001", {"nvidia"}, OPEN, "5.4.0", None)] == [
        "gdr.inactive"
    ]
    fallback = check_gdr("gpu001", {"nvidia"}, OPEN, "6.1.0", "peermem")
    assert [(f.check, f.severity) for f in fallback] == [("gdr.mode", "warning")]


def test_nccl_environment_against_the_render() -> None:
    rendered = (REPO / "inventory" / "example" / "nccl.conf").read_text()
    assert check_nccl_conf("gpu001", rendered, rendered) == []
    drifted = rendered.replace("mlx5_11", "mlx5_1") + "NCCL_DEBUG=INFO\n"
    findings = check_nccl_conf("gpu001", rendered, drifted)
    assert {(f.check, f.component, f.severity) for f in findings} == {
        ("nccl.env", "NCCL_IB_HCA", "error"),
        ("nccl.env", "NCCL_DEBUG", "warning"),
    }
    assert [f.observed for f in check_nccl_conf("gpu001", rendered, None)] == ["absent"]


def healthy_outputs() -> dict[str, ProbeOutput]:
    rendered = (REPO / "inventory" / "example" / "nccl.conf").read_text()
    return {
        # The node sits where the profile it is held to (the built-in H100) puts its GPUs.
        "nvidia-smi-q": ProbeOutput(
            0,
            smi_at(read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt"), H100.gpu_pci),
        ),
        "ibstat": ProbeOutput(0, read_real_output("ibstat_h100_ib_active_some_eth_down.txt")),
        "kernel-log": ProbeOutput(0, "[    0.000000] Linux version 6.1.0\n"),
        "modules": ProbeOutput(0, "nvidia\nnvidia_peermem\nnvidia_uvm\n"),
        "nvidia-version": ProbeOutput(0, CLOSED),
        "kernel": ProbeOutput(0, "5.15.0-105-generic\n"),
        "nccl-conf": ProbeOutput(0, rendered),
    }


def test_check_node_over_probe_outputs(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "h100-1su.yml")
    expect = expectations_for(cluster, "gpu001", gpudirect_mode="peermem")
    outputs = healthy_outputs()
    findings = check_node(expect, outputs)
    # No topo capture of this box: the affinity check says it could not run, nothing else fails.
    assert {(f.check, f.severity) for f in errors(findings)} == {("ib.affinity", "error")}
    outputs["nvidia-smi-q"] = ProbeOutput(127, "", "sh: 1: nvidia-smi: not found\n")
    outputs["ibstat"] = ProbeOutput(0, "CA 'mlx5_0'\n\tgarbage\n")
    findings = check_node(expect, outputs)
    by_check = {f.check: f for f in findings}
    assert by_check["gpu.driver"].message == "gpu001: nvidia-smi -q: command not found"
    assert by_check["ib.driver"].observed == "unreadable"


def test_the_node_file_round_trips(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    expect = expectations_for(cluster, "gpu002")
    assert expect.profile.expected_rate_gbps == 200
    path = tmp_path / "node.json"
    import json

    path.write_text(json.dumps(expect.to_node_file()))
    back = read_node_file(path)
    assert back == replace(expect, profile=back.profile)
    assert back.profile.model_dump(exclude={"extends"}) == expect.profile.model_dump(
        exclude={"extends"}
    )
    assert isinstance(back, NodeExpectations)
    with pytest.raises(UsageError, match="no node file"):
        read_node_file(tmp_path / "absent.json")
    with pytest.raises(UsageError, match="not a GPU node"):
        expectations_for(cluster, "head")
    assert isinstance(expect.profile, NodeProfile)


def test_peermem_without_the_driver_is_no_gpudirect() -> None:
    assert [f.check for f in check_gdr("gpu001", {"nvidia_peermem"}, None, "6.1.0", None)] == [
        "gdr.inactive"
    ]
