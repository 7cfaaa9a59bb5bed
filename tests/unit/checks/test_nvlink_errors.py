"""gpu.nvlink-errors (issue 20): the real H100 capture passes; the same capture with one link's
counters raised fails with that GPU and link named."""

from __future__ import annotations

from cluster_tool.checks.nvlink import check_nvlink_errors
from cluster_tool.findings import Report
from cluster_tool.parsers.nvlink_errors import parse_nvlink_errors
from cluster_tool.spec.thresholds import HealthThresholds
from tests.unit.parsers.test_captures_as_collected import capture

H100 = "nvidia-smi_nvlink-e_h100_elided_links_prompt_line.txt"
DEFAULTS = HealthThresholds()


def _h100(**link1: int) -> str:
    """The real capture without the author's cut, link 1's counters set as given."""
    text = capture(H100).replace("\n         [...]\n", "\n")
    for name, value in link1.items():
        old = f"Link 1: {name} Errors: 0"
        assert old in text
        text = text.replace(old, f"Link 1: {name} Errors: {value}")
    return text


def test_the_real_h100_capture_has_no_finding() -> None:
    assert check_nvlink_errors("gpu001", parse_nvlink_errors(_h100()), DEFAULTS) == []


def test_a_link_that_recovered_fails_naming_gpu_and_link() -> None:
    (finding,) = check_nvlink_errors("gpu001", parse_nvlink_errors(_h100(Recovery=1)), DEFAULTS)
    assert (finding.check, finding.severity, finding.component) == (
        "gpu.nvlink-errors",
        "error",
        "GPU0 link 1",
    )
    assert finding.observed == "1 recovery"
    assert Report.from_findings([finding]).exit_code == 1


def test_crc_errors_warn_then_fail_past_the_error_limit() -> None:
    # 45068 CRC errors and 2 replays: what a failing V100 link counted after a stress run in a
    # public write-up (NVLink-Error-Testing-Notes, search-index text id 66821203712).
    (bad,) = check_nvlink_errors(
        "gpu001", parse_nvlink_errors(_h100(CRC=45068, Replay=2)), DEFAULTS
    )
    assert (bad.severity, bad.observed) == ("error", "45068 CRC, 2 replay")
    (few,) = check_nvlink_errors("gpu001", parse_nvlink_errors(_h100(Replay=2)), DEFAULTS)
    assert (few.severity, few.component, few.observed) == ("warning", "GPU0 link 1", "2 replay")
    relaxed = HealthThresholds(nvlink_crc_replay_warn=10)
    assert check_nvlink_errors("gpu001", parse_nvlink_errors(_h100(Replay=2)), relaxed) == []
