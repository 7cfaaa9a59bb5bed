"""ib.pcie and gpu.pcie from lspci (issue 20): the real ConnectX-7 capture passes against a
profile that places its HCAs there; one link changed to a real downgraded LnkSta fails."""

from __future__ import annotations

from cluster_tool.checks.pcie import check_pcie_links
from cluster_tool.parsers.lspci import parse_lspci
from cluster_tool.spec.models import Hca, builtin_profile
from cluster_tool.spec.thresholds import HealthThresholds
from tests.unit.parsers.test_captures_as_collected import capture

CX7 = "lspci-vvv_cx7x4_gen5_x16_libkmod_warnings_command_line.txt"
GOOD_STA = "\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)"
# The capture's own box lists its GPUs as this line (lspci, same notes).
GPU_HEADER = "26:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)"
DEFAULTS = HealthThresholds()
# The Lenovo SD665-N's first two ConnectX-7 as a profile would place them.
PROFILE = builtin_profile("hgx-h100-8x-ndr").model_copy(
    update={
        "hcas": [
            Hca(device="mlx5_0", pci="0000:03:00.0", gpu=0, rail=0),
            Hca(device="mlx5_1", pci="0000:23:00.0", gpu=1, rail=1),
        ],
        "gpu_pci": [],
    }
)


def _second_link(sta: str, header: str | None = None) -> str:
    """The capture with the second function's LnkSta (and header) replaced."""
    head, sep, tail = capture(CX7).partition("23:00.0 Ethernet controller")
    assert sep and GOOD_STA in tail
    tail = tail.replace(GOOD_STA, sta, 1)
    if header is not None:
        return head + header + "\n" + tail.split("\n", 1)[1]
    return head + sep + tail


def test_the_real_capture_has_no_finding() -> None:
    assert check_pcie_links("gpu001", PROFILE, parse_lspci(capture(CX7)), DEFAULTS) == []


def test_an_hca_that_trained_narrower_fails_naming_the_hca() -> None:
    text = _second_link("\t\tLnkSta:\tSpeed 32GT/s (ok), Width x8 (downgraded)")
    (finding,) = check_pcie_links("gpu001", PROFILE, parse_lspci(text), DEFAULTS)
    assert (finding.check, finding.severity, finding.component) == ("ib.pcie", "error", "mlx5_1")
    assert (finding.expected, finding.observed) == ("gen 5 x16", "gen 5 x8")
    assert "0000:23:00.0" in finding.message


def test_an_hca_that_trained_slower_fails_too() -> None:
    # HCAs do not train down when idle, unlike GPUs.
    text = _second_link("\t\tLnkSta:\tSpeed 8GT/s (downgraded), Width x16 (ok)")
    (finding,) = check_pcie_links("gpu001", PROFILE, parse_lspci(text), DEFAULTS)
    assert (finding.check, finding.severity, finding.observed) == ("ib.pcie", "error", "gen 3 x16")


def test_a_part_is_held_to_what_it_can_do() -> None:
    # A gen 4 adapter (LnkCap 16GT/s) at gen 4 in a gen 5 profile is not a fault.
    text = capture(CX7).replace("Speed 32GT/s, Width x16", "Speed 16GT/s, Width x16", 1)
    text = text.replace(GOOD_STA, "\t\tLnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)", 1)
    assert check_pcie_links("gpu001", PROFILE, parse_lspci(text), DEFAULTS) == []


def test_an_idle_gpu_at_gen1_warns_and_a_narrow_one_fails() -> None:
    # Our variant: the second function made the box's first GPU; 2.5GT/s (downgraded) is what
    # idle GPUs show in many public captures.
    idle = _second_link("\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)", GPU_HEADER)
    (finding,) = check_pcie_links("gpu001", PROFILE, parse_lspci(idle), DEFAULTS)
    assert (finding.check, finding.severity) == ("gpu.pcie", "warning")
    assert finding.component == "GPU 0000:26:00.0" and finding.observed == "gen 1 x16"
    narrow = _second_link("\t\tLnkSta:\tSpeed 32GT/s (ok), Width x4 (downgraded)", GPU_HEADER)
    (finding,) = check_pcie_links("gpu001", PROFILE, parse_lspci(narrow), DEFAULTS)
    assert (finding.check, finding.severity, finding.observed) == ("gpu.pcie", "error", "gen 5 x4")
