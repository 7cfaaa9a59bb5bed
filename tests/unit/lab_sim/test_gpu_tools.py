"""The simulated nvidia-smi, dcgmi and kernel log: same layout as the real captures, read by the
project's own parsers, and every GPU fault visible where an operator would look."""

from __future__ import annotations

import re

import pytest

from cluster_lab.sim.hw import NodeHardware, default_hardware
from cluster_lab.sim.render_dcgmi import diag_failed, render_diag, render_kernel_log
from cluster_lab.sim.render_smi import (
    QueryError,
    render_nvlink_status,
    render_query,
    render_query_csv,
    render_summary,
    render_topo,
)
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.nvidia_query import parse_query_csv
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from cluster_tool.parsers.nvidia_topo import parse_topo_matrix
from cluster_tool.parsers.nvlink import parse_nvlink_status
from tests.conftest import read_real_output


@pytest.fixture
def hw() -> NodeHardware:
    return default_hardware("gpu001")


def _skeleton(text: str) -> list[str]:
    """Each line without its value: indentation, key and the colon column stay."""
    lines = [re.sub(r"(?<=: ).*$", "", line) for line in text.split("\n")]
    return [re.sub(r"^GPU [0-9A-F]{8}:[0-9A-F]{2}:00\.0$", "GPU <bus id>", line) for line in lines]


def test_nvidia_smi_q_has_the_real_layout_line_for_line(hw: NodeHardware) -> None:
    real = read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
    assert _skeleton(render_query(hw)) == _skeleton(real)


def test_nvidia_smi_q_reads_back_through_the_parser(hw: NodeHardware) -> None:
    report = parse_nvidia_smi_q(render_query(hw))
    assert report.attached_gpus == 8
    assert [g.uuid for g in report.gpus] == [g.uuid for g in hw.gpus]
    assert [g.pci for g in report.gpus] == [g.bus_id[4:].lower() for g in hw.gpus]
    first = report.gpus[0]
    assert first.product_name == "NVIDIA H100 80GB HBM3"
    assert first.persistence_mode is True
    assert first.ecc_mode_current is True
    assert first.ecc_volatile is not None and first.ecc_volatile.uncorrectable == 0
    assert (first.pcie_gen_current, first.pcie_width_current) == (5, 16)
    assert first.fabric is not None and first.fabric.state == "Completed"


def test_ecc_fault_shows_a_volatile_uncorrectable_error(hw: NodeHardware) -> None:
    hw.gpus[3].ecc_volatile.dram_uncorrectable = 2
    report = parse_nvidia_smi_q(render_query(hw))
    counts = [g.ecc_volatile.uncorrectable for g in report.gpus if g.ecc_volatile]
    assert counts == [0, 0, 0, 2, 0, 0, 0, 0]
    assert report.gpus[3].reset_required is True


def test_missing_gpu_leaves_seven_and_renumbers(hw: NodeHardware) -> None:
    hw.gpus[2].present = False
    report = parse_nvidia_smi_q(render_query(hw))
    assert report.attached_gpus == 7 and len(report.gpus) == 7
    assert hw.gpus[2].uuid not in {g.uuid for g in report.gpus}
    csv = parse_query_csv(render_query_csv(hw, ["index", "uuid"]))
    assert [row["index"] for row in csv.rows] == list(range(7))
    assert len(parse_topo_matrix(render_topo(hw)).links) == 7 + len(hw.hcas) + len(hw.other_nics)
    assert len(parse_nvlink_status(render_nvlink_status(hw))) == 7


def test_hot_gpu_shows_thermal_slowdown(hw: NodeHardware) -> None:
    hw.gpus[6].temperature_c = 95
    gpu = parse_nvidia_smi_q(render_query(hw)).gpus[6]
    assert gpu.temperatures is not None and gpu.temperatures.gpu_current_c == 95
    assert gpu.clock_event_reasons is not None
    assert gpu.clock_event_reasons.hw_thermal_slowdown is True
    fields = ["index", "temperature.gpu", "clocks_event_reasons.hw_thermal_slowdown"]
    rows = parse_query_csv(render_query_csv(hw, fields)).rows
    assert rows[6]["temperature.gpu"] == 95


@pytest.mark.parametrize(("header", "units"), [(True, True), (False, True), (False, False)])
def test_query_csv_variants_parse(hw: NodeHardware, header: bool, units: bool) -> None:
    fields = [
        "index",
        "name",
        "uuid",
        "pci.bus_id",
        "temperature.gpu",
        "ecc.errors.uncorrected.volatile.total",
        "memory.total",
        "persistence_mode",
    ]
    hw.gpus[1].ecc_volatile.sram_uncorrectable_secded = 1
    text = render_query_csv(hw, fields, header=header, units=units)
    result = parse_query_csv(text, None if header else fields)
    assert len(result.rows) == 8
    row = result.rows[1]
    assert row["uuid"] == hw.gpus[1].uuid
    assert row["pci.bus_id"] == hw.gpus[1].bus_id
    assert row["ecc.errors.uncorrected.volatile.total"] == 1
    assert row["memory.total"] == 81559
    if header:
        assert text.splitlines()[0].split(", ")[6] == "memory.total [MiB]"


def test_query_csv_unknown_field_is_refused_like_nvidia_smi(hw: NodeHardware) -> None:
    with pytest.raises(QueryError) as err:
        render_query_csv(hw, ["index", "device_minor"])
    assert str(err.value) == 'Field "device_minor" is not a valid field to query.\n\n'
    assert err.value.exit_code == 2


def test_topo_matrix_has_the_real_layout(hw: NodeHardware) -> None:
    real = read_real_output("nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt")
    ours = render_topo(hw)
    # Same columns and legend; the real box booted numa=off, ours has two NUMA nodes.
    assert ours.splitlines()[0] == real.splitlines()[0]
    assert ours[ours.index("\nLegend:") :] == real[real.index("\nLegend:") :]
    matrix = parse_topo_matrix(ours)
    assert all(matrix.links["GPU0"][f"GPU{i}"] == "NV18" for i in range(1, 8))
    # Each compute HCA is PIX from the GPU behind the same PCIe switch.
    for hca in hw.hcas:
        nic = next(k for k, v in matrix.nic_legend.items() if v == hca.device)
        assert matrix.links[f"GPU{hca.gpu_minor}"][nic] == "PIX"
    assert matrix.links["GPU0"]["NIC1"] == "NODE"  # a storage NIC on the same socket


def test_nvlink_status_shows_inactive_links(hw: NodeHardware) -> None:
    gpus = parse_nvlink_status(render_nvlink_status(hw))
    assert [g.active_links for g in gpus] == [18] * 8
    assert gpus[0].links[17].speed_gbps == pytest.approx(26.562)
    hw.gpus[4].nvlinks_down = [0, 9]
    gpus = parse_nvlink_status(render_nvlink_status(hw))
    assert (gpus[4].active_links, gpus[4].inactive_links) == (16, 2)
    assert not gpus[4].links[9].active
    assert parse_topo_matrix(render_topo(hw)).links["GPU4"]["GPU0"] == "NV16"


def test_dcgmi_diag_level3_matches_the_real_table(hw: NodeHardware) -> None:
    real = read_real_output("dcgmi_diag_table_dcgm3.3.9_h200_level3style_ramble.txt")
    h200 = default_hardware("gpu001", gpu_model="H200")
    h200.driver_version = "570.133.20"
    h200.dcgm_version = "3.3.9"  # the capture's DCGM
    assert render_diag(h200, 3) == real


@pytest.mark.parametrize("level", [1, 2, 3])
def test_dcgmi_diag_healthy_passes_at_every_level(hw: NodeHardware, level: int) -> None:
    diag = parse_dcgmi_diag(render_diag(hw, level))
    assert diag.verdict == "Pass" and diag.failed_gpus == ()
    assert not diag_failed(hw, level)
    names = {t.name for t in diag.tests}
    assert ("GPU Memory" in names) == (level >= 2)
    assert ("Targeted Stress" in names) == (level >= 3)


def test_dcgmi_diag_fails_the_gpu_with_ecc_errors(hw: NodeHardware) -> None:
    hw.gpus[5].ecc_volatile.dram_uncorrectable = 1
    # Level 1 runs only the deployment checks: a global Fail whose warning names the GPU.
    quick = parse_dcgmi_diag(render_diag(hw, 1))
    assert quick.verdict == "Fail" and diag_failed(hw, 1)
    remap = next(t for t in quick.tests if t.name == "Page Retirement/Row Remap")
    assert remap.verdict == "Fail" and [m.gpu for m in remap.messages] == [5]
    # Level 3 runs the per-GPU tests, which list the failing GPU.
    full = parse_dcgmi_diag(render_diag(hw, 3))
    assert full.verdict == "Fail" and full.failed_gpus == (5,) and diag_failed(hw, 3)


def test_xid_lands_in_the_kernel_log_in_every_view(hw: NodeHardware) -> None:
    assert parse_xids(render_kernel_log(hw)) == []
    hw.gpus[5].xids.append((1843.308145, 79))
    hw.gpus[0].xids.append((2001.5, 48))
    for style in ("dmesg", "ctime", "journal"):
        text = render_kernel_log(hw, style)
        events = parse_xids(text)
        assert [(e.code, e.pci) for e in events] == [
            (79, hw.gpus[5].bus_id[4:].lower()),
            (48, hw.gpus[0].bus_id[4:].lower()),
        ], style
    line = render_kernel_log(hw).splitlines()[-2]
    assert line == (
        f"[ 1843.308145] NVRM: Xid (PCI:{hw.gpus[5].short_bus_id}): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )


def test_hardware_round_trips_through_the_model_dict(hw: NodeHardware) -> None:
    hw.gpus[1].xids.append((10.0, 63))
    hw.hcas[2].state = "Down"
    assert NodeHardware.from_dict(hw.to_dict()) == hw


def test_bare_nvidia_smi_draws_the_driver_550_table(hw: NodeHardware) -> None:
    hw.driver_version, hw.cuda_version = "550.127.08", "12.4"
    hw.gpus[1].ecc_volatile.dram_uncorrectable = 3
    hw.gpus[7].present = False
    lines = render_summary(hw).splitlines()
    # Every line of the table is as wide as driver 550 draws it.
    assert {len(line) for line in lines[1:]} == {91}
    assert lines[2] == (
        "| NVIDIA-SMI 550.127.08             Driver Version: 550.127.08     "
        "CUDA Version: 12.4     |"
    )
    rows = [line for line in lines if re.match(r"\|\s+\d+  NVIDIA", line)]
    assert len(rows) == 7
    assert rows[0].startswith(
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:1B:00.0 Off |"
    )
    assert rows[1].endswith("|                    3 |")  # volatile uncorrectable ECC
    usage = lines[lines.index(rows[0]) + 1]
    assert usage.split("|")[2] == "       0MiB /  81559MiB "
