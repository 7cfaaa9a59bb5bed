"""Issue 32: a drain reason is whatever an operator or a tool wrote (cluster-tool's own reasons
carry finding text from node output), so `scontrol show node -o` is split on the keys Slurm
prints, in its order: `Reason=` runs to the next key that can follow it, and a reason reading
`NodeName=gpu009 State=IDLE` neither renames the node nor lifts its drain in what the watcher
sees."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cluster_tool.slurm import SlurmCLI, parse_scontrol_fields, parse_scontrol_nodes

CAPTURED = Path(__file__).parent / "captured"
GPU002 = (CAPTURED / "scontrol_show_node.txt").read_text().splitlines()[1]
STAMP = " [root@2024-11-29T12:32:05]"


def _with_reason(reason: str) -> str:
    head, _, _ = GPU002.partition(" Reason=")
    return f"{head} Reason={reason}{STAMP}"


FORGED = "RMA 4411 NodeName=gpu009 State=IDLE Weight=1"


def test_a_reason_holding_node_name_and_state_keeps_the_node_and_its_drain() -> None:
    (node,) = parse_scontrol_nodes(_with_reason(FORGED) + "\n")
    assert (node.name, node.state, node.drained) == ("gpu002", "IDLE", True)
    assert node.reason == FORGED


def test_the_watchers_view_through_slurm_keeps_the_drain() -> None:
    def replay(argv: Sequence[str]) -> str:
        assert list(argv[:4]) == ["scontrol", "show", "node", "-o"]
        return _with_reason(FORGED) + "\n"

    states = SlurmCLI(run=replay).node_states(["gpu002"])
    assert [(s.name, s.drained, s.usable) for s in states] == [("gpu002", True, False)]


def test_a_key_slurm_prints_after_the_reason_ends_it() -> None:
    line = _with_reason("bad PSU") + " Comment=rack 7 Extra=lot=4 ReservationName=maint"
    fields = parse_scontrol_fields(line)
    assert fields["Reason"] == "bad PSU" + STAMP
    assert (fields["Comment"], fields["Extra"], fields["ReservationName"]) == (
        "rack 7",
        "lot=4",
        "maint",
    )


def test_a_reason_of_several_lines_stays_one_reason() -> None:
    # One-liner output puts a reason's later lines after a blank and seven spaces
    # (slurm_sprint_node_table, src/api/node_info.c).
    line = _with_reason("first line") + "        State=IDLE second line"
    (node,) = parse_scontrol_nodes(line)
    assert node.drained and node.reason.startswith("first line")
    assert node.reason.endswith("State=IDLE second line")


def test_the_os_string_keeps_its_spaces_and_hashes() -> None:
    fields = parse_scontrol_fields(GPU002)
    assert (
        fields["OS"]
        == "Linux 6.8.0-45-generic #45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024"
    )
    assert fields["CfgTRES"] == "cpu=224,mem=2000000M,billing=224,gres/gpu=8"
    assert fields["AllocTRES"] == ""
