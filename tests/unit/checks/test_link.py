"""link.* from mlxlink (issue 20): real captures pass; the same captures with one counter or
reading changed fail with the id, the port and the cable an operator replaces."""

from __future__ import annotations

import pytest

from cluster_tool.checks.link import check_mlxlink
from cluster_tool.findings import Report
from cluster_tool.parsers import read
from cluster_tool.parsers.mlxlink import parse_mlxlink
from cluster_tool.spec.thresholds import HealthThresholds
from tests.unit.parsers.test_captures_as_collected import capture

BF3 = "mlxlink_m_c_bf3_100g_dac_two_ports_prompt_lines.txt"
CX7_NDR = "mlxlink_show_module_cx7_ndr_osfp_dac_prompt_line.txt"
CX7_PAM4_JSON = "mlxlink_json_m_c_cx7_400g_pam4_dr4_fec_histogram.txt"
SICHEK_400G = "mlxlink_c_counters_400g_healthy_ansi_colours.txt"
DEFAULTS = HealthThresholds()


def _changed(name: str, old: str, new: str) -> str:
    """The capture with its first `old` line (port 1) changed to `new`."""
    text = capture(name)
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("name", [BF3, CX7_NDR])
def test_real_captures_raise_nothing(name: str) -> None:
    # BER 15E-255 and no errors on the BlueField; the NDR port printed no counters (no -c) and
    # its passive cable reads 0 C: neither is a finding.
    assert check_mlxlink("gpu001", parse_mlxlink(capture(name)), DEFAULTS) == []


def test_errors_past_fec_fail_the_port_and_name_its_cable() -> None:
    text = _changed(
        BF3,
        "Effective Physical Errors          : 0",
        "Effective Physical Errors          : 42",
    )
    findings = check_mlxlink("gpu001", parse_mlxlink(text), DEFAULTS)
    assert [(f.check, f.severity, f.component) for f in findings] == [
        ("link.fec", "error", "/dev/mst/mt41692_pciconf0")
    ]
    (finding,) = findings
    assert finding.observed == "42 effective physical errors"
    assert "S/N S2202655321-1" in finding.message and "25074.8 min" in finding.message
    assert Report.from_findings(findings).exit_code == 1


def test_effective_ber_above_the_limit_fails_even_without_an_error_count() -> None:
    text = _changed(
        BF3,
        "Effective Physical BER             : 15E-255",
        "Effective Physical BER             : 3E-11",
    )
    (finding,) = check_mlxlink("gpu001", parse_mlxlink(text), DEFAULTS)
    assert (finding.check, finding.observed) == ("link.fec", "effective BER 3e-11")


def test_uncorrectable_fec_blocks_fail_the_port() -> None:
    text = _changed(
        BF3,
        "Raw Physical BER                   : 15E-255\n",
        "Raw Physical BER                   : 15E-255\nRS-FEC Uncorrectable Blocks        : 1\n",
    )
    (finding,) = check_mlxlink("gpu001", parse_mlxlink(text), DEFAULTS)
    assert (finding.check, finding.observed) == ("link.fec", "1 uncorrectable FEC blocks")


def test_healthy_pam4_links_real_captures_give_no_ber_warning() -> None:
    # Issue 29: raw BER 5E-10 on a ConnectX-7 port at 4 x 100G PAM4 (the NDR signalling) and
    # 2E-9 on a healthy 400G link, with nothing left after FEC on either: both used to be
    # link.ber warnings against a flat 1e-12.
    cx7 = parse_mlxlink(capture(CX7_PAM4_JSON))
    assert cx7[0].raw_ber == pytest.approx(5e-10)
    assert check_mlxlink("gpu001", cx7, DEFAULTS) == []
    (counters,) = read("mlxlink", capture(SICHEK_400G)).hosts[0].records
    assert counters.raw_ber == pytest.approx(2e-9)
    assert check_mlxlink("gpu001", [counters], DEFAULTS) == []


def test_fec_uncorrectable_blocks_on_an_ndr_port_fail_it_against_the_ndr_limits() -> None:
    text = capture(CX7_PAM4_JSON).replace('"Speed": "400G"', '"Speed": "IB-NDR"', 1)
    text = text.replace(
        '"Raw Physical BER": "5E-10",',
        '"RS-FEC Uncorrectable Blocks": "3",\n        "Raw Physical BER": "5E-10",',
        1,
    )
    (finding,) = check_mlxlink("gpu001", parse_mlxlink(text), DEFAULTS)
    assert (finding.check, finding.severity) == ("link.fec", "error")
    assert finding.observed == "3 uncorrectable FEC blocks"
    assert finding.expected == "<= 0 errors past FEC, effective BER <= 1e-12 (NDR)"
    assert "IB-NDR" in finding.message and "4876.6 min" in finding.message
    assert "SAKURA OSFP-400G-DR4" in finding.message


def test_symbol_errors_left_after_fec_fail_the_port() -> None:
    # Newer mlxlink releases print Symbol Errors / Symbol BER for HDR and NDR: what ibdiagnet
    # calls the errors the application sees after correction.
    text = _changed(
        BF3,
        "Effective Physical Errors          : 0",
        "Symbol Errors                      : 12\nSymbol BER                         : 4E-13\n"
        "Effective Physical Errors          : 0",
    )
    (finding,) = check_mlxlink("gpu001", parse_mlxlink(text), DEFAULTS)
    assert (finding.check, finding.observed) == ("link.fec", "12 symbol errors")


def test_raw_ber_warns_only_where_the_spec_sets_a_limit_for_the_port_speed() -> None:
    # The BlueField-3 port runs 100G Ethernet: the `other` limits hold it, not NDR's.
    text = _changed(
        BF3,
        "Raw Physical BER                   : 15E-255",
        "Raw Physical BER                   : 2E-9",
    )
    ports = parse_mlxlink(text)
    assert check_mlxlink("gpu001", ports, DEFAULTS) == []
    ndr_only = HealthThresholds.model_validate(
        {"ib_link_quality": {"ndr": {"raw_ber_warn": 1e-10}}}
    )
    assert check_mlxlink("gpu001", ports, ndr_only) == []
    other = HealthThresholds.model_validate({"ib_link_quality": {"other": {"raw_ber_warn": 1e-9}}})
    (finding,) = check_mlxlink("gpu001", ports, other)
    assert (finding.check, finding.severity) == ("link.ber", "warning")
    assert (finding.expected, finding.observed) == ("raw BER <= 1e-09 (other)", "raw BER 2e-09")
    assert Report.from_findings([finding]).exit_code == 0  # FEC still corrects it


def test_a_spec_limit_for_one_speed_leaves_the_others_at_their_defaults() -> None:
    limits = HealthThresholds.model_validate(
        {"ib_link_quality": {"ndr": {"effective_ber_max": 1e-14}}}
    ).ib_link_quality
    assert limits.for_generation("NDR")[1].effective_ber_max == 1e-14
    assert limits.for_generation("HDR")[1].effective_ber_max == 1e-12
    assert limits.for_generation(None)[0] == "other"


def test_a_hot_cable_module_is_a_warning_with_its_alarm_range() -> None:
    text = _changed(
        CX7_NDR,
        "Temperature [C]                    : 0 [0..0]",
        "Temperature [C]                    : 74 [-5..75]",
    )
    (finding,) = check_mlxlink("gpu001", parse_mlxlink(text), DEFAULTS)
    assert (finding.check, finding.severity, finding.component) == (
        "link.module-temp",
        "warning",
        "/dev/mst/mt4129_pciconf0",
    )
    assert finding.observed == "74 C" and "-5..75 C" in finding.message
    assert "FS OSFPFL-400G-PC01 S/N C2604279049-2" in finding.message
    assert (
        check_mlxlink("gpu001", parse_mlxlink(text), HealthThresholds(ib_module_temp_warn_c=80))
        == []
    )
