"""mlxlink on real captures (issue 20): every figure asserted was read by hand from the
capture in tests/fixtures/parsers/real, not from the parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.parsers import ParseError, read
from cluster_tool.parsers.mlxlink import parse_mlxlink
from tests.unit.parsers.test_captures_as_collected import capture, pdsh

BF3_TWO_PORTS = "mlxlink_m_c_bf3_100g_dac_two_ports_prompt_lines.txt"
CX7_NDR = "mlxlink_show_module_cx7_ndr_osfp_dac_prompt_line.txt"


def test_two_runs_after_their_prompts_are_two_ports_named_by_their_device() -> None:
    # `sudo mlxlink -d /dev/mst/mt41692_pciconf0 -p 1 -m -c`, then the same on ...pciconf0.1.
    first, second = parse_mlxlink(capture(BF3_TWO_PORTS))
    assert (first.device, first.port) == ("/dev/mst/mt41692_pciconf0", 1)
    assert (second.device, second.port) == ("/dev/mst/mt41692_pciconf0.1", 1)
    for port in (first, second):
        assert (port.state, port.physical_state) == ("Active", "LinkUp")
        assert (port.speed, port.width) == ("100G", "4x")
        assert not port.is_infiniband and port.generation is None
        assert port.fec == "Standard RS-FEC - RS(528,514)"
        assert (port.status_opcode, port.recommendation) == (0, "No issue was observed")
        assert (port.firmware, port.mft_version) == ("32.43.2402", "mft 4.30.1-8")
        # Physical Counters and BER Info (-c): no error, BER printed as 15E-255.
        assert port.effective_errors == 0 and port.effective_ber == pytest.approx(15e-255)
        assert port.raw_ber == pytest.approx(15e-255)
        assert port.raw_errors_per_lane == (0, 0, 0, 0)
        assert (port.link_down, port.link_error_recovery) == (0, 0)
        # This release prints no RS-FEC block counters.
        assert port.fec_corrected_blocks is None and port.fec_uncorrectable_blocks is None
    assert first.time_since_clear_min == 25074.8
    assert second.time_since_clear_min == 25075.2
    # Module Info (-m): the FS DAC's two ends, told apart by their serials; a passive cable
    # reports no temperature or voltage (N/A).
    for port, serial in ((first, "S2202655321-1"), (second, "S2202655321-2")):
        module = port.module
        assert module is not None
        assert (module.identifier, module.cable_type) == ("QSFP28", "Passive copper cable")
        assert (module.vendor, module.part_number, module.serial) == ("FS", "Q28-PC03", serial)
        assert module.revision == "A" and module.length_m == 3.0
        assert module.temperature_c is None and module.voltage_mv is None
        assert module.firmware is None  # FW Version: N/A


def test_connectx7_at_ndr_with_values_ending_in_a_space() -> None:
    # `mlxlink -d /dev/mst/mt4129_pciconf0 --show_mo`: no -c, so no counters at all.
    (port,) = parse_mlxlink(capture(CX7_NDR))
    assert port.device == "/dev/mst/mt4129_pciconf0" and port.port is None
    assert (port.state, port.speed, port.width) == ("Active", "IB-NDR", "4x")
    assert port.is_infiniband and port.generation == "NDR"
    assert port.fec == "Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)"
    assert (port.firmware, port.mft_version) == ("28.46.3048", "4.35.0-159")
    assert port.raw_ber is None and port.effective_errors is None and port.link_down is None
    module = port.module
    assert module is not None
    assert (module.identifier, module.vendor) == ("OSFP", "FS")
    assert (module.part_number, module.serial, module.revision) == (
        "OSFPFL-400G-PC01",
        "C2604279049-2",
        "00",
    )
    # `0 [0..0]`: the passive cable's monitor reads nothing, its alarm range too.
    assert module.temperature_c == 0.0 and module.temperature_range_c == (0.0, 0.0)
    assert module.voltage_mv == 0.0 and module.length_m == 1.0
    # Every field stays readable as printed, here the lanes without signal.
    assert port.fields["Module Info"]["Rx LOS [per lane]"] == "1,0,1,1"


@pytest.mark.parametrize("name, ports", [(BF3_TWO_PORTS, 2), (CX7_NDR, 1)])
def test_every_line_of_the_real_captures_is_read(name: str, ports: int) -> None:
    reading = read("mlxlink", capture(name))
    (host,) = reading.hosts
    assert len(host.records) == ports
    assert host.errors == () and host.lines_unread == 0


def test_a_pdsh_sweep_names_each_host_and_its_port() -> None:
    text = capture(CX7_NDR)
    reading = read("mlxlink", pdsh({"gpu001": text, "gpu002": text}))
    assert [h.host for h in reading.hosts] == ["gpu001", "gpu002"]
    assert [h.records[0].module.serial for h in reading.hosts] == ["C2604279049-2"] * 2


def test_runs_pasted_one_after_another_without_a_command_line_are_two_ports() -> None:
    body = capture(BF3_TWO_PORTS).split("\n", 2)[2]  # from the first 'Operational Info'
    ports = parse_mlxlink(body)
    assert [p.module.serial for p in ports if p.module] == ["S2202655321-1", "S2202655321-2"]
    assert [p.device for p in ports] == [None, "/dev/mst/mt41692_pciconf0.1"]


def test_rs_fec_block_counters_are_read_where_the_release_prints_them() -> None:
    # Our variant: the real capture with the RS-FEC rows newer releases add under -c.
    text = capture(BF3_TWO_PORTS).replace(
        "Raw Physical BER                   : 15E-255\n\nubuntu",
        "Raw Physical BER                   : 15E-255\n"
        "RS-FEC Corrected Blocks            : 1234\n"
        "RS-FEC Uncorrectable Blocks        : 2\n\nubuntu",
    )
    first, second = parse_mlxlink(text)
    assert (first.fec_corrected_blocks, first.fec_uncorrectable_blocks) == (1234, 2)
    assert second.fec_uncorrectable_blocks is None


def test_an_mlxlink_error_is_a_parse_error_naming_its_line() -> None:
    text = "$ mlxlink -d mlx5_9 -m -c\n-E- Failed to open device: mlx5_9\n"
    with pytest.raises(ParseError, match="mlxlink failed: Failed to open device") as caught:
        parse_mlxlink(text)
    assert caught.value.line_no == 2


def test_a_ber_that_is_not_a_number_names_its_line() -> None:
    text = capture(BF3_TWO_PORTS).replace(
        "Raw Physical BER                   : 15E-255",
        "Raw Physical BER                   : lots",
        1,
    )
    with pytest.raises(ParseError, match="Raw Physical BER is not a BER") as caught:
        parse_mlxlink(text)
    assert caught.value.line_no == 94


def test_cli_parse_mlxlink_prints_each_port_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    from cluster_tool.cli import main
    from tests.unit.parsers.test_captures_as_collected import CAPTURES

    assert main(["parse", "mlxlink", str(CAPTURES / BF3_TWO_PORTS), "--json"]) == 0
    ports = json.loads(capsys.readouterr().out)
    assert [p["module"]["serial"] for p in ports] == ["S2202655321-1", "S2202655321-2"]
    assert [p["raw_ber"] for p in ports] == [15e-255, 15e-255]


def test_cli_parse_mlxlink_on_other_text_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster_tool.cli import main

    path = tmp_path / "not-mlxlink.txt"
    path.write_text("CA 'mlx5_0'\n\tCA type: MT4129\n")
    assert main(["parse", "mlxlink", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "mlxlink" in err


CX7_PAM4_JSON = "mlxlink_json_m_c_cx7_400g_pam4_dr4_fec_histogram.txt"


def test_json_output_of_a_connectx7_at_400g_pam4_with_its_fec_histogram() -> None:
    # `mlxlink --json` (issue 29): the same sections as the text output, per-lane values as
    # lists; every figure below read by hand from the capture.
    (port,) = parse_mlxlink(capture(CX7_PAM4_JSON))
    assert (port.state, port.physical_state) == ("Active", "ETH_AN_FSM_ENABLE")
    assert (port.speed, port.width, port.fec) == ("400G", "4x", "Standard_RS-FEC - (544,514)")
    assert not port.is_infiniband
    assert (port.firmware, port.mft_version) == ("28.47.1088", "4.34.1-10")
    assert port.time_since_clear_min == 4876.6
    assert port.effective_errors == 0 and port.effective_ber == pytest.approx(15e-255)
    assert port.raw_ber == pytest.approx(5e-10)
    assert port.raw_ber_per_lane == pytest.approx((1e-10, 1e-9, 5e-10, 5e-10))
    assert port.raw_errors_per_lane == (5550000, 28835305, 14640119, 16746846)
    assert (port.link_down, port.link_error_recovery) == (0, 0)
    assert port.fec_histogram is not None and len(port.fec_histogram) == 16
    assert port.fec_histogram[:9] == (22858119037881, 65755507, 7970, 177, 64, 2, 1, 1, 3)
    assert set(port.fec_histogram[9:]) == {0}
    module = port.module
    assert module is not None
    assert (module.identifier, module.vendor, module.part_number) == (
        "OSFP",
        "SAKURA",
        "OSFP-400G-DR4",
    )
    assert module.temperature_c == 62 and module.temperature_range_c == (-10, 80)
    assert module.voltage_mv == 3228.9 and module.firmware == "40.242.17"


def test_json_status_error_and_broken_json_are_located_parse_errors() -> None:
    failed = '{\n  "result": {},\n  "status": {"code": 1, "message": "No such device"}\n}\n'
    with pytest.raises(ParseError, match="mlxlink failed: No such device") as err:
        parse_mlxlink(failed)
    assert err.value.line_no == 1
    with pytest.raises(ParseError, match="not mlxlink --json output") as err:
        parse_mlxlink('mlxlink -d mlx5_0 --json\n{"result": {"output": \n')
    assert err.value.line_no == 2
    bad_bin = capture(CX7_PAM4_JSON).replace('"22858119037881"', '"many"', 1)
    with pytest.raises(ParseError, match="Bin 0: expected"):
        parse_mlxlink(bad_bin)


def test_json_runs_after_their_command_lines_take_the_device() -> None:
    doc = capture(CX7_PAM4_JSON)
    text = f"$ mlxlink -d mlx5_0 -m -c --json\n{doc}$ mlxlink -d mlx5_1 -m -c --json\n{doc}"
    assert [p.device for p in parse_mlxlink(text)] == ["mlx5_0", "mlx5_1"]


@pytest.mark.parametrize("count", ["\u00b2", "9" * 5000])
def test_a_histogram_count_that_is_not_ascii_digits_is_a_parse_error(count: str) -> None:
    # '²'.isdigit() is true and int() refuses it; 5,000 digits pass Python's int() limit: each
    # was a ValueError (an internal error), not a ParseError naming the bin.
    text = capture(CX7_PAM4_JSON).replace('"65755507"', f'"{count}"', 1)
    with pytest.raises(ParseError, match="Bin 1"):
        parse_mlxlink(text)
