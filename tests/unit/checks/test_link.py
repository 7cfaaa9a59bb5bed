"""link.* from mlxlink (issue 20): real captures pass; the same captures with one counter or
reading changed fail with the id, the port and the cable an operator replaces."""

from __future__ import annotations

import pytest

from cluster_tool.checks.link import check_mlxlink
from cluster_tool.findings import Report
from cluster_tool.parsers.mlxlink import parse_mlxlink
from cluster_tool.spec.models import HealthThresholds
from tests.unit.parsers.test_captures_as_collected import capture

BF3 = "mlxlink_m_c_bf3_100g_dac_two_ports_prompt_lines.txt"
CX7_NDR = "mlxlink_show_module_cx7_ndr_osfp_dac_prompt_line.txt"
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


def test_raw_ber_above_the_spec_is_a_warning_the_spec_can_raise() -> None:
    # 2E-9: the raw BER sichek's test data records for a healthy 400G link (scitix/sichek).
    text = _changed(
        BF3,
        "Raw Physical BER                   : 15E-255",
        "Raw Physical BER                   : 2E-9",
    )
    ports = parse_mlxlink(text)
    (finding,) = check_mlxlink("gpu001", ports, DEFAULTS)
    assert (finding.check, finding.severity) == ("link.ber", "warning")
    assert (finding.expected, finding.observed) == ("raw BER <= 1e-12", "raw BER 2e-09")
    assert Report.from_findings([finding]).exit_code == 0  # FEC still corrects it
    assert check_mlxlink("gpu001", ports, HealthThresholds(ib_raw_ber_warn=1e-8)) == []


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
