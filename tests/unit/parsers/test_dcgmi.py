"""`dcgmi diag`: the real DCGM 3.3.9 table, DCGM 4.x layouts, and per-GPU failures."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from tests.unit.parsers._nvidia import fixture, real

REAL = "dcgmi_diag_table_dcgm3.3.9_h200_level3style_ramble.txt"


def test_real_dcgm339_metadata() -> None:
    diag = parse_dcgmi_diag(real(REAL))
    assert diag.layout == "3.x"
    assert diag.dcgm_version == "3.3.9"
    assert diag.driver_version == "570.133.20"
    assert diag.gpu_device_ids == ("2335",) * 8
    assert diag.complete is True


def test_real_dcgm339_verdict_per_test() -> None:
    diag = parse_dcgmi_diag(real(REAL))
    assert [(t.category, t.name, t.verdict, t.all_gpus) for t in diag.tests] == [
        ("Deployment", "Denylist", "Pass", False),
        ("Deployment", "NVML Library", "Pass", False),
        ("Deployment", "CUDA Main Library", "Pass", False),
        ("Deployment", "Permissions and OS Blocks", "Pass", False),
        ("Deployment", "Persistence Mode", "Pass", False),
        ("Deployment", "Environment Variables", "Pass", False),
        ("Deployment", "Page Retirement/Row Remap", "Pass", False),
        ("Deployment", "Graphics Processes", "Pass", False),
        ("Deployment", "Inforom", "Pass", False),
        ("Integration", "PCIe", "Pass", True),
        ("Hardware", "GPU Memory", "Pass", True),
        ("Hardware", "Diagnostic", "Pass", True),
        ("Stress", "Targeted Stress", "Pass", True),
        ("Stress", "Targeted Power", "Pass", True),
        ("Stress", "Memory Bandwidth", "Pass", True),
        ("Stress", "EUD Test", "Skip", True),
    ]
    assert diag.verdict == "Pass" and diag.failed_gpus == ()
    assert all(t.messages == () for t in diag.tests)


def test_dcgm3_gpu_groups_and_wrapped_messages() -> None:
    diag = parse_dcgmi_diag(fixture("dcgmi_diag_dcgm3_r2_gpu0_thermal_fail.txt"))
    # GPU 0 failed GPU Memory; GPU 3 failed the bare-verdict Page Retirement/Row Remap row,
    # which names its GPU only in the Error text (issue 17: it used to drain GPU 0 alone).
    assert diag.verdict == "Fail" and diag.failed_gpus == (0, 3)
    memory = diag.test("GPU Memory")
    assert memory.verdict == "Fail" and memory.all_gpus is False
    assert memory.gpus == {0: "Fail", **{g: "Pass" for g in range(1, 8)}}
    (warning,) = memory.messages
    assert warning.kind == "Warning" and warning.gpu == 0
    # Unwrapped across six 45-character rows, words joined where DCGM cut them.
    assert warning.text == (
        "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test "
        "for GPU 0 Verify that the cooling on this machine is functional, including external, "
        "thermal material interface, fans, and any other components."
    )
    remap = diag.test("Page Retirement/Row Remap")
    assert remap.verdict == "Fail"
    assert [(m.kind, m.gpu, m.text) for m in remap.messages] == [
        ("Error", 3, "GPU 3 has uncorrectable memory errors and row remappings are pending")
    ]
    assert remap.gpus == {3: "Fail"}
    # "Pass - All": every GPU of the run (8 device ids in the metadata) passed.
    pcie = diag.test("PCIe")
    assert pcie.all_gpus is True and pcie.gpus == {g: "Pass" for g in range(8)}


def test_dcgm4_docs_run_lists_every_gpu() -> None:
    diag = parse_dcgmi_diag(fixture("dcgmi_diag_dcgm4.0.0_r3_all_pass_docs.txt"))
    assert diag.layout == "4.x" and diag.dcgm_version == "4.0.0"
    assert diag.gpu_device_ids == ("25b6",) * 4
    assert [t.name for t in diag.tests] == [
        "software",
        "memory",
        "diagnostic",
        "pcie",
        "memory_bandwidth",
        "targeted_stress",
        "targeted_power",
    ]
    assert all(t.gpus == dict.fromkeys(range(4), "Pass") for t in diag.tests)
    assert diag.verdict == "Pass"


def test_dcgm4_failing_test_with_passing_gpus() -> None:
    diag = parse_dcgmi_diag(fixture("dcgmi_diag_dcgm4.4.1_b200_pcie_fail.txt"))
    assert diag.dcgm_version == "4.4.1" and len(diag.gpu_device_ids) == 8
    pcie = diag.test("pcie")
    assert pcie.category == "Integration" and pcie.verdict == "Fail"
    # DCGM failed the test on an internal error: no GPU is to blame.
    assert pcie.gpus == dict.fromkeys(range(8), "Pass")
    assert diag.verdict == "Fail" and diag.failed_gpus == ()
    (warning,) = pcie.messages
    assert warning.gpu is None
    assert warning.text.startswith("There was an internal error during the test: 'Output of")
    assert warning.text.endswith(
        "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
    )


def test_dcgm4_cut_off_capture_is_read_but_marked_incomplete() -> None:
    diag = parse_dcgmi_diag(fixture("dcgmi_diag_dcgm4.2.3_pcie_internal_error_truncated.txt"))
    assert diag.complete is False
    pcie = diag.test("pcie")
    assert pcie.verdict == "Fail" and len(pcie.messages) == 4
    assert pcie.messages[0].text == (
        "There was an internal error during the test: 'A child process (152) exited with "
        "non-zero status 1' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. "
        "Rerun diagnostics."
    )
    assert pcie.gpus == dict.fromkeys(range(4), "Pass")


def _table(*rows: str) -> str:
    border = "+---------------------------+------------------------------------------------+"
    head = "| Diagnostic                | Result                                         |"
    rule = "+===========================+================================================+"
    return "\n".join([border, head, rule, *rows, border]) + "\n"


DEPLOY = "|-----  Deployment  --------+------------------------------------------------|"


def test_level1_run_prints_deployment_only() -> None:
    diag = parse_dcgmi_diag(
        "Successfully ran diagnostic for group.\n"
        + _table(
            DEPLOY,
            "| Denylist                  | Pass                                           |",
            "| Persistence Mode          | Fail                                           |",
            "| Warning                   | Persistence mode for GPU 2 is disabled. Enabl  |",
            '|                           | e persistence mode by running "nvidia-smi -i   |',
            '|                           | <gpuId> -pm 1 " as root.                      |',
        )
    )
    assert [(t.name, t.verdict) for t in diag.tests] == [
        ("Denylist", "Pass"),
        ("Persistence Mode", "Fail"),
    ]
    assert diag.verdict == "Fail" and diag.dcgm_version is None
    (message,) = diag.test("Persistence Mode").messages
    assert message.gpu == 2
    assert message.text == (
        'Persistence mode for GPU 2 is disabled. Enable persistence mode by running "nvidia-smi '
        '-i <gpuId> -pm 1 " as root.'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (
            "Error: Unable to complete diagnostic for group 0. Return: (-3) Bad parameter.\n",
            "border",
        ),
        (
            _table(
                "| Denylist                  | Pass                                           |"
            ),
            "category",
        ),
        (
            _table(
                DEPLOY,
                "| Denylist                  | Maybe                                          |",
            ),
            "Pass/Fail",
        ),
        (
            _table(
                DEPLOY,
                "| Warning                   | GPU 0 is hot                                   |",
            ),
            "test row before",
        ),
        (
            _table(
                DEPLOY,
                "| Denylist                  | Pass                                           |",
                "| Denylist                  | Pass                                           |",
            ),
            "twice",
        ),
        (_table(DEPLOY, "| Denylist | Pass |", "", "| x | y |"), "blank line"),
        (_table(DEPLOY, "Denylist Pass"), "table row"),
    ],
)
def test_not_a_diag_table_raises_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_dcgmi_diag(text)
