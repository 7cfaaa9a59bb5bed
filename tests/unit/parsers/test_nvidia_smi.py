"""`nvidia-smi -q` read from real H100/V100 captures and a failing-GPU variant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.parsers import ParseError
from cluster_tool.parsers.nvidia_smi import parse_gpu_section, parse_nvidia_smi_q
from tests.conftest import REAL_OUTPUTS
from tests.unit.parsers._nvidia import fixture, real

FULL = "nvidia-smi-q_h100x8_driver535.161.08_full.txt"
BUS_IDS = [
    "00000000:19:00.0",
    "00000000:3B:00.0",
    "00000000:4C:00.0",
    "00000000:5D:00.0",
    "00000000:9B:00.0",
    "00000000:BB:00.0",
    "00000000:CB:00.0",
    "00000000:DB:00.0",
]


def test_real_h100x8_header_and_identity() -> None:
    report = parse_nvidia_smi_q(real(FULL))
    assert report.driver_version == "535.161.08"
    assert report.cuda_version == "12.2"
    assert report.timestamp == "Wed Jul 31 11:22:39 2024"
    assert report.attached_gpus == 8
    assert len(report.gpus) == 8
    assert [g.pci_bus_id for g in report.gpus] == BUS_IDS
    assert report.gpus[0].pci == "0000:19:00.0"
    assert report.gpus[7].pci == "0000:db:00.0"
    assert {g.product_name for g in report.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [g.minor_number for g in report.gpus] == list(range(8))
    first = report.gpus[0]
    assert first.serial == "1650124031592"
    assert first.uuid == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert first.module_id == 2
    assert first.product_architecture == "Hopper"
    assert report.gpus[7].uuid == "GPU-b0fe4996-1f7c-91f6-0ccd-08ae3b7e23c5"
    assert all(g.persistence_mode is True for g in report.gpus)
    assert all(g.mig_mode_current is False for g in report.gpus)


def test_real_h100x8_ecc_all_zero_and_remapped_rows_clean() -> None:
    for gpu in parse_nvidia_smi_q(real(FULL)).gpus:
        assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
        for counts in (gpu.ecc_volatile, gpu.ecc_aggregate):
            assert counts is not None
            assert (counts.correctable, counts.uncorrectable) == (0, 0)
            assert counts.sram_uncorrectable_parity == 0
            assert counts.sram_uncorrectable_secded == 0
            assert (counts.dram_correctable, counts.dram_uncorrectable) == (0, 0)
        assert gpu.ecc_aggregate is not None
        assert gpu.ecc_aggregate.sram_threshold_exceeded is False
        assert gpu.sram_uncorrectable_sources == {
            "SRAM L2": 0,
            "SRAM SM": 0,
            "SRAM Microcontroller": 0,
            "SRAM PCIE": 0,
            "SRAM Other": 0,
        }
        # Hopper retires no pages: the counters print N/A.
        assert gpu.retired_pages is not None
        assert gpu.retired_pages.single_bit_ecc is None
        assert gpu.retired_pages.pending is None
        rows = gpu.remapped_rows
        assert rows is not None
        assert (rows.correctable, rows.uncorrectable, rows.pending, rows.failure) == (
            0,
            0,
            False,
            False,
        )
        assert (rows.bank_max, rows.bank_partial, rows.bank_none) == (2560, 0, 0)


def test_real_h100x8_clocks_pcie_temperature_fabric() -> None:
    gpus = parse_nvidia_smi_q(real(FULL)).gpus
    for gpu in gpus:
        reasons = gpu.clock_event_reasons
        assert reasons is not None and reasons.section == "Clocks Event Reasons"
        # Every GPU of this capture is held by the power brake (HW Slowdown).
        assert reasons.active == ("HW Slowdown", "HW Power Brake Slowdown")
        assert reasons.hw_thermal_slowdown is False and reasons.sw_thermal_slowdown is False
        assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (5, 5)
        assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
        assert gpu.fabric is not None
        assert (gpu.fabric.state, gpu.fabric.status) == ("Completed", "Success")
        assert gpu.memory_total_mib == 81559
        assert gpu.power_limit_w == 700.0
        assert gpu.processes == ()
    assert [g.pcie_replays for g in gpus] == [67, 63, 52, 43, 49, 53, 82, 67]
    temps = gpus[0].temperatures
    assert temps is not None
    assert (temps.gpu_current_c, temps.memory_current_c, temps.gpu_tlimit_c) == (29, 39, 56)
    assert (temps.shutdown_tlimit_c, temps.slowdown_tlimit_c) == (-8, -2)
    assert temps.shutdown_c is None
    assert [g.temperatures.gpu_current_c for g in gpus if g.temperatures] == [
        29,
        29,
        30,
        30,
        31,
        32,
        32,
        31,
    ]
    assert gpus[0].power_draw_w == pytest.approx(67.74)


def test_real_ecc_excerpt_parses_as_one_gpu_section() -> None:
    gpu = parse_gpu_section(real("nvidia-smi-q_h100_ecc_retired_remapped_section.txt"))
    assert gpu.pci_bus_id is None
    assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
    assert gpu.ecc_volatile is not None and gpu.ecc_volatile.uncorrectable == 0
    assert gpu.ecc_aggregate is not None and gpu.ecc_aggregate.correctable == 0
    assert gpu.remapped_rows is not None
    assert gpu.remapped_rows.bank_max == 2560 and gpu.remapped_rows.pending is False
    assert gpu.retired_pages is not None and gpu.retired_pages.double_bit_ecc is None


def test_failing_gpu_variant_reads_every_fault() -> None:
    report = parse_nvidia_smi_q(fixture("nvidia-smi-q_h100x2_driver535_failing_gpu.txt"))
    assert report.attached_gpus == 2 and len(report.gpus) == 2
    good, bad = report.gpus
    assert good.persistence_mode is True and bad.persistence_mode is False
    assert bad.pci_bus_id == "00000000:3B:00.0"
    assert (bad.pcie_gen_current, bad.pcie_gen_max) == (3, 5)
    assert (bad.pcie_width_current, bad.pcie_width_max) == (8, 16)
    volatile, aggregate = bad.ecc_volatile, bad.ecc_aggregate
    assert volatile is not None and aggregate is not None
    assert (volatile.correctable, volatile.uncorrectable) == (4, 2)
    assert (volatile.dram_correctable, volatile.dram_uncorrectable) == (4, 2)
    # SRAM uncorrectable = parity + SEC-DED on R535 Hopper output.
    assert (aggregate.sram_uncorrectable_parity, aggregate.sram_uncorrectable_secded) == (1, 2)
    assert aggregate.sram_uncorrectable == 3
    assert (aggregate.correctable, aggregate.uncorrectable) == (13, 8)
    assert bad.sram_uncorrectable_sources["SRAM L2"] == 3
    rows = bad.remapped_rows
    assert rows is not None
    assert (rows.correctable, rows.uncorrectable, rows.pending, rows.failure) == (1, 3, True, False)
    assert (rows.bank_max, rows.bank_partial) == (2556, 4)
    reasons = bad.clock_event_reasons
    assert reasons is not None
    assert reasons.hw_thermal_slowdown is True and reasons.sw_thermal_slowdown is True
    assert set(reasons.active) == {
        "HW Slowdown",
        "HW Thermal Slowdown",
        "HW Power Brake Slowdown",
        "SW Thermal Slowdown",
    }
    assert bad.temperatures is not None and bad.temperatures.gpu_current_c == 88
    assert bad.fabric is not None
    assert (bad.fabric.state, bad.fabric.status) == ("In Progress", None)
    assert [(p.pid, p.type, p.name, p.used_memory_mib) for p in bad.processes] == [
        (48213, "C", "/usr/bin/python3", 70312),
        (48377, "C", "all_reduce_perf", 1024),
    ]
    assert good.ecc_volatile is not None and good.ecc_volatile.uncorrectable == 0


def test_real_h100x8_power_limits_and_clocks() -> None:
    # Read by hand from the capture's GPU sections (e.g. lines 171-202 for GPU 0): every GPU
    # enforces 700.00 W of 200-700 W, idles at an SM clock of 86 MHz and has application,
    # default application and maximum SM clocks of 1980 MHz.
    for gpu in parse_nvidia_smi_q(real(FULL)).gpus:
        assert gpu.enforced_power_limit_w == 700.0
        assert (gpu.default_power_limit_w, gpu.max_power_limit_w) == (700.0, 700.0)
        clocks = gpu.clocks
        assert clocks is not None
        assert (clocks.sm_mhz, clocks.graphics_mhz) == (86, 86)
        assert clocks.applications_graphics_mhz == 1980
        assert clocks.default_applications_graphics_mhz == 1980
        assert (clocks.max_sm_mhz, clocks.max_graphics_mhz) == (1980, 1980)


def test_v100_legacy_power_limit_is_the_enforced_one() -> None:
    # The legacy layout prints `Power Limit`, `Enforced Power Limit` and a V100's application
    # clock below its maximum (1290 of 1530 MHz), as the capture shows.
    gpu = parse_nvidia_smi_q(fixture("nvidia-smi-q_v100_driver418.67_legacy_layout.txt")).gpus[0]
    assert (gpu.enforced_power_limit_w, gpu.max_power_limit_w) == (300.0, 300.0)
    assert gpu.clocks is not None
    assert gpu.clocks.applications_graphics_mhz == 1290
    assert gpu.clocks.default_applications_graphics_mhz == 1290
    assert (gpu.clocks.sm_mhz, gpu.clocks.max_sm_mhz) == (135, 1530)


def test_v100_legacy_layout() -> None:
    report = parse_nvidia_smi_q(fixture("nvidia-smi-q_v100_driver418.67_legacy_layout.txt"))
    assert (report.driver_version, report.cuda_version) == ("418.67", "10.1")
    # The page pasted one of the four GPUs.
    assert report.attached_gpus == 4 and len(report.gpus) == 1
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "00000004:04:00.0" and gpu.pci == "0004:04:00.0"
    assert gpu.product_name == "Tesla V100-SXM2-32GB"
    assert gpu.serial == "0561519020531"  # leading zero kept
    assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
    assert gpu.ecc_volatile is not None
    assert (gpu.ecc_volatile.single_bit_total, gpu.ecc_volatile.double_bit_total) == (0, 0)
    assert (gpu.ecc_volatile.correctable, gpu.ecc_volatile.uncorrectable) == (0, 0)
    assert gpu.ecc_volatile.dram_uncorrectable == 0  # Double Bit / Device Memory
    assert gpu.retired_pages is not None
    assert (gpu.retired_pages.single_bit_ecc, gpu.retired_pages.double_bit_ecc) == (0, 0)
    assert gpu.retired_pages.pending is False
    assert gpu.remapped_rows is None and gpu.fabric is None
    reasons = gpu.clock_event_reasons
    assert reasons is not None and reasons.section == "Clocks Throttle Reasons"
    assert reasons.active == ("Idle",) and reasons.idle is True
    assert (gpu.pcie_gen_current, gpu.pcie_width_current, gpu.pcie_width_max) == (3, 2, 16)
    temps = gpu.temperatures
    assert temps is not None
    assert (temps.shutdown_c, temps.slowdown_c, temps.max_operating_c) == (90, 87, 83)
    assert temps.shutdown_tlimit_c is None
    assert (gpu.power_draw_w, gpu.power_limit_w) == (pytest.approx(39.78), 300.0)


def test_remapped_rows_na_and_fabric_clique_fields() -> None:
    gpu = parse_gpu_section(
        "    Remapped Rows                         : N/A\n"
        "    Fabric\n"
        "        State                             : Completed\n"
        "        Status                            : Success\n"
        "        CliqueId                          : 4026\n"
        "        ClusterUUID                       : 9c4d0a6e-3f55-4f3c-b0a8-1f1f6f0c8a21\n"
    )
    assert gpu.remapped_rows is None
    assert gpu.fabric is not None and gpu.fabric.clique_id == 4026
    assert gpu.fabric.cluster_uuid == "9c4d0a6e-3f55-4f3c-b0a8-1f1f6f0c8a21"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "banner"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            "banner",
        ),
        ("==============NVSMI LOG==============\n\nHello world\n    x : 1\n", "GPU <PCI bus id>"),
        (
            "==============NVSMI LOG==============\nGPU 00000000:19:00.0\n"
            "    Minor Number : zero\n",
            "expected an integer",
        ),
        (
            "==============NVSMI LOG==============\nGPU 00000000:19:00.0\n"
            "    Persistence Mode : Maybe\n",
            "Enabled/Disabled",
        ),
        (
            "==============NVSMI LOG==============\nGPU 00000000:19:00.0\n"
            "    Temperature\n        GPU Current Temp : 29 C\n      Memory Current Temp : 3 C\n",
            "indentation",
        ),
        (
            "==============NVSMI LOG==============\nGPU 00000000:19:00.0\n"
            "    Minor Number : 0\n    Minor Number : 1\n",
            "printed twice",
        ),
        (
            "==============NVSMI LOG==============\nGPU 00000000:19:00.0\n"
            "    PCI\n        Bus Id : 00000000:3B:00.0\n",
            "expected Bus Id",
        ),
        (
            "==============NVSMI LOG==============\nAttached GPUs : 1\nGPU 00000000:19:00.0\n"
            "    Minor Number : 0\nGPU 00000000:3B:00.0\n    Minor Number : 1\n",
            "Attached GPUs",
        ),
    ],
)
def test_not_the_format_raises_parse_error_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvidia_smi_q(text)


def test_parse_error_carries_the_line_number() -> None:
    text = "==============NVSMI LOG==============\nGPU 00000000:19:00.0\n    Minor Number : x\n"
    with pytest.raises(ParseError) as err:
        parse_nvidia_smi_q(text)
    assert err.value.line_no == 3 and err.value.line == "    Minor Number : x"


def test_no_devices_is_zero_gpus() -> None:
    assert parse_nvidia_smi_q("No devices were found\n").gpus == ()


def test_gpu_section_refuses_text_that_is_not_one() -> None:
    with pytest.raises(ParseError, match="GPU fields"):
        parse_gpu_section("hello\nworld\n")


def test_cli_parse_file_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.txt"
    path.write_text(fixture("nvidia-smi-q_h100x2_driver535_failing_gpu.txt"))
    assert main(["parse", "nvidia-smi-q", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"][1]["remapped_rows"]["pending"] is True
    assert data["gpus"][1]["ecc_volatile"]["uncorrectable"] == 2


def test_cli_parse_sets_aside_a_line_before_the_banner_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The shared capture still has its '# source:' line, which is not nvidia-smi output: it
    # is named on stderr and the GPUs after it are read (issue 17, class 4).
    assert main(["parse", "nvidia-smi-q", str(REAL_OUTPUTS / FULL), "--json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["gpus"]) == 8
    assert ":1: note: 1 line(s) before the nvidia-smi-q output not read" in captured.err


def test_cli_parse_bad_input_is_exit_2_naming_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Output of another tool has no NVSMI banner anywhere: exit 2, one line naming line 1.
    other = tmp_path / "ibstat.txt"
    other.write_text("CA 'mlx5_0'\n\tCA type: MT4129\n")
    assert main(["parse", "nvidia-smi-q", str(other), "--json"]) == 2
    err = capsys.readouterr().err
    assert ":1: expected the '==============NVSMI LOG==============' banner" in err


def test_cli_parse_json_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(real(FULL)))
    assert main(["parse", "nvidia-smi-q", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["driver_version"] == "535.161.08"
    assert len(data["gpus"]) == 8
    assert data["gpus"][0]["remapped_rows"]["uncorrectable"] == 0
    assert data["gpus"][0]["clock_event_reasons"]["hw_power_brake_slowdown"] is True


def test_unknown_non_flag_entry_under_clock_reasons_is_not_a_reason() -> None:
    gpu = parse_gpu_section(
        "    Clocks Event Reasons\n"
        "        Idle                              : Not Active\n"
        "        SW Power Cap                      : Active\n"
        "        Reason Counter                    : 1234 us\n"
    )
    assert gpu.clock_event_reasons is not None
    assert gpu.clock_event_reasons.active == ("SW Power Cap",)
    with pytest.raises(ParseError, match="Active/Not Active"):
        parse_gpu_section("    Clocks Event Reasons\n        Idle : 1234 us\n")


def test_every_nvidia_kind_is_registered_for_the_cli() -> None:
    from cluster_tool.parsers import KINDS

    assert {
        "nvidia-smi-q",
        "nvidia-smi-query",
        "nvidia-smi-topo",
        "nvidia-smi-nvlink",
        "dcgmi-diag",
        "xid",
    } <= set(KINDS)
