"""gpu.power-limit, gpu.clocks and the application-clocks gpu.throttle (issue 20): the real 8x
H100 capture (700 W, application/max SM clock 1980 MHz) passes the H100 profile; the same
capture with one GPU's limit or clocks changed as `nvidia-smi -pl/-ac/-lgc` would leave them
fails naming that GPU; a node whose nvidia-smi did not run has these cases skipped in JUnit."""

from __future__ import annotations

import pytest

from cluster_tool.checks.gpu_clocks import check_gpu_clocks
from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.findings import Finding, Report
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from cluster_tool.probes import ProbeOutput
from cluster_tool.report.junit import validate_junit
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import builtin_profile
from cluster_tool.workflows.collect import skipped_checks
from tests.conftest import REPO, read_real_output

FULL = "nvidia-smi-q_h100x8_driver535.161.08_full.txt"
H100 = builtin_profile("hgx-h100-8x-ndr")
# The capture's GPU 00000000:5D:00.0 is GPU3 of the HGX profile's PCI order.
GPU3_HEADER = "GPU 00000000:5D:00.0"


def _with_gpu3(*edits: tuple[str, str]) -> str:
    """The real capture with lines of GPU3's section (and only its) replaced."""
    text = read_real_output(FULL)
    start = text.index(GPU3_HEADER)
    end = text.index("\nGPU ", start)
    section = text[start:end]
    for old, new in edits:
        assert section.count(old) == 1, old
        section = section.replace(old, new)
    return text[:start] + section + text[end:]


def _check(text: str, profile: object = H100) -> list[Finding]:
    return check_gpu_clocks("gpu001", profile, parse_nvidia_smi_q(text))  # type: ignore[arg-type]


def _line(key: str, value: str) -> str:
    # The capture's alignment: keys padded to column 42 under a 8-space indent.
    return f"        {key:<34}: {value}"


def test_the_real_h100_capture_passes_the_h100_profile() -> None:
    assert _check(read_real_output(FULL)) == []


def test_a_lowered_power_limit_fails_naming_the_gpu() -> None:
    text = _with_gpu3(
        (_line("Current Power Limit", "700.00 W"), _line("Current Power Limit", "500.00 W")),
        (_line("Requested Power Limit", "700.00 W"), _line("Requested Power Limit", "500.00 W")),
    )
    (finding,) = _check(text)
    assert (finding.check, finding.severity, finding.component) == (
        "gpu.power-limit",
        "error",
        "GPU3",
    )
    assert (finding.expected, finding.observed) == ("700 W", "500 W")
    assert Report.from_findings([finding]).exit_code == 1
    # A profile that leaves the limit unset does not judge it.
    assert _check(text, H100.model_copy(update={"gpu_power_limit_w": None})) == []


def test_a_board_that_cannot_reach_the_profile_limit_fails() -> None:
    text = _with_gpu3(
        (_line("Current Power Limit", "700.00 W"), _line("Current Power Limit", "500.00 W")),
        (_line("Max Power Limit", "700.00 W"), _line("Max Power Limit", "500.00 W")),
    )
    (finding,) = _check(text)
    assert (finding.check, finding.component, finding.observed) == (
        "gpu.power-limit",
        "GPU3",
        "max 500 W",
    )


def test_application_clocks_below_the_default_fail_as_gpu_clocks() -> None:
    # `nvidia-smi -ac 2619,1200`: Applications Clocks Graphics drops, the default stays, and
    # under load the setting is the clock event reason.
    text = _with_gpu3(
        (
            "    Applications Clocks\n" + _line("Graphics", "1980 MHz"),
            "    Applications Clocks\n" + _line("Graphics", "1200 MHz"),
        ),
        (
            _line("Applications Clocks Setting", "Not Active"),
            _line("Applications Clocks Setting", "Active"),
        ),
    )
    (finding,) = _check(text)  # one cause, one finding: no gpu.throttle beside it
    assert (finding.check, finding.severity, finding.component) == ("gpu.clocks", "error", "GPU3")
    assert (finding.expected, finding.observed) == ("application 1980 MHz", "application 1200 MHz")


def test_a_locked_sm_clock_under_load_fails_as_gpu_clocks() -> None:
    # `nvidia-smi -lgc 0,1200` leaves the application clocks alone: the clock under load and
    # the reason say it.
    text = _with_gpu3(
        (
            "    Clocks\n" + _line("Graphics", "86 MHz") + "\n" + _line("SM", "86 MHz"),
            "    Clocks\n" + _line("Graphics", "1200 MHz") + "\n" + _line("SM", "1200 MHz"),
        ),
        (
            _line("Applications Clocks Setting", "Not Active"),
            _line("Applications Clocks Setting", "Active"),
        ),
    )
    (finding,) = _check(text)
    assert (finding.check, finding.component) == ("gpu.clocks", "GPU3")
    assert finding.observed == "SM 1200 MHz (Applications Clocks Setting)"


def test_the_setting_reason_at_full_clock_is_a_warning() -> None:
    text = _with_gpu3(
        (
            "    Clocks\n" + _line("Graphics", "86 MHz") + "\n" + _line("SM", "86 MHz"),
            "    Clocks\n" + _line("Graphics", "1980 MHz") + "\n" + _line("SM", "1980 MHz"),
        ),
        (
            _line("Applications Clocks Setting", "Not Active"),
            _line("Applications Clocks Setting", "Active"),
        ),
    )
    (finding,) = _check(text)
    assert (finding.check, finding.severity, finding.component) == (
        "gpu.throttle",
        "warning",
        "GPU3",
    )
    assert Report.from_findings([finding]).exit_code == 0


def test_a_lower_maximum_sm_clock_than_the_profile_fails() -> None:
    text = _with_gpu3(
        (
            "    Max Clocks\n" + _line("Graphics", "1980 MHz") + "\n" + _line("SM", "1980 MHz"),
            "    Max Clocks\n" + _line("Graphics", "1755 MHz") + "\n" + _line("SM", "1755 MHz"),
        ),
    )
    (finding,) = _check(text)
    assert (finding.check, finding.component, finding.observed) == (
        "gpu.clocks",
        "GPU3",
        "max SM 1755 MHz",
    )
    # H200's built-in profile gives no maximum clock (no source does): not judged.
    assert _check(text, H100.model_copy(update={"gpu_max_sm_clock_mhz": None})) == []


def test_check_node_judges_clocks_and_junit_skips_them_when_nvidia_smi_failed() -> None:
    cluster = load_spec(REPO / "examples" / "h100-1su.yml")
    expect = expectations_for(cluster, "gpu001", gpudirect_mode="peermem")
    lowered = _with_gpu3(
        (_line("Current Power Limit", "700.00 W"), _line("Current Power Limit", "450.00 W")),
    )
    findings = check_node(expect, {"nvidia-smi-q": ProbeOutput(0, lowered)})
    assert [(f.check, f.component) for f in findings if f.check == "gpu.power-limit"] == [
        ("gpu.power-limit", "GPU3")
    ]

    failed = check_node(expect, {"nvidia-smi-q": ProbeOutput(127, "", "nvidia-smi: not found")})
    skipped = skipped_checks(failed, nodes=["gpu001"], unreachable={}, fabric_host=None, dcgm=False)
    report = Report.from_findings(failed, {"health": True})
    xml = validate_junit(report, nodes=["gpu001"], fabric_host=None, skipped=skipped)
    for check in ("gpu.power-limit", "gpu.clocks"):
        case = xml.split(f'name="{check}">', 1)[1].split("</testcase>", 1)[0]
        assert "<skipped" in case, check


@pytest.mark.parametrize("check", ["gpu.power-limit", "gpu.clocks"])
def test_the_new_ids_are_planned_junit_cases(check: str) -> None:
    report = Report.from_findings([], {"health": True})
    xml = validate_junit(report, nodes=["gpu001"], fabric_host=None, skipped={})
    assert f'<testcase classname="gpu001" name="{check}">' in xml
