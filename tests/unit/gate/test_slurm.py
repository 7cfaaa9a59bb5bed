"""Slurm's output parsed from captured text, and the argv the gate sends."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.slurm import (
    SlurmCLI,
    parse_sacct,
    parse_sbatch_parsable,
    parse_scontrol_nodes,
    parse_sinfo_nodes,
    parse_squeue,
)

CAPTURED = Path(__file__).parent / "captured"


def test_sbatch_parsable_with_and_without_cluster() -> None:
    assert parse_sbatch_parsable("4101\n") == "4101"
    assert parse_sbatch_parsable("4102;lab\n") == "4102"
    with pytest.raises(ParseError, match="expected a job id"):
        parse_sbatch_parsable("sbatch: error: Batch job submission failed\n")


def test_sacct_states_reduce_cancelled_by() -> None:
    states = parse_sacct((CAPTURED / "sacct.txt").read_text())
    assert {k: v.state for k, v in states.items()} == {
        "4101": "COMPLETED",
        "4102": "FAILED",
        "4103": "CANCELLED",
        "4104": "TIMEOUT",
        "4105": "NODE_FAIL",
        "4106": "RUNNING",
    }
    assert states["4102"].exit_code == "1:0" and states["4102"].finished
    assert not states["4106"].finished


def test_squeue_states_and_reasons() -> None:
    states = parse_squeue((CAPTURED / "squeue.txt").read_text())
    assert states["4108"].state == "PENDING"
    assert states["4108"].reason == "ReqNodeNotAvail, UnavailableNodes:gpu004"
    assert not states["4109"].finished  # COMPLETING is not over yet


def test_scontrol_show_node_keeps_spaces_in_reason_and_os() -> None:
    nodes = {
        n.name: n for n in parse_scontrol_nodes((CAPTURED / "scontrol_show_node.txt").read_text())
    }
    assert not nodes["gpu001"].drained and nodes["gpu001"].state == "IDLE"
    g2 = nodes["gpu002"]
    assert g2.drained and g2.state == "IDLE"
    assert g2.reason == "cluster-tool gate: nccl.pair 212 GB/s < 333 GB/s with gpu004 and gpu019"
    assert nodes["gpu003"].state == "MIXED" and nodes["gpu003"].drained
    assert nodes["gpu004"].state == "DOWN" and "NOT_RESPONDING" in nodes["gpu004"].flags


def test_scontrol_line_without_state_is_a_parse_error_naming_the_line() -> None:
    with pytest.raises(ParseError, match=":2: expected NodeName"):
        parse_scontrol_nodes("NodeName=a State=IDLE\nNode a is not known\n")


def test_sinfo_long_states() -> None:
    nodes = {n.name: n for n in parse_sinfo_nodes((CAPTURED / "sinfo_nodes.txt").read_text())}
    assert len(nodes) == 5  # gpu002 listed twice (two partitions)
    assert nodes["gpu002"].drained and nodes["gpu002"].reason.startswith("cluster-tool gate:")
    assert nodes["gpu003"].drained and nodes["gpu004"].state == "DOWN"
    assert nodes["gpu001"].reason == "" and not nodes["gpu005"].drained


class _Recorder:
    def __init__(self, answers: dict[str, str]) -> None:
        self.calls: list[list[str]] = []
        self.answers = answers

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        return self.answers.get(argv[0], "")


def test_drain_sends_one_hostlist_and_the_reason_as_one_argument() -> None:
    rec = _Recorder({})
    reason = "cluster-tool gate: nccl.pair 212 GB/s < 333 GB/s with gpu004 and gpu019"
    SlurmCLI(run=rec).drain(["gpu003", "gpu002"], reason)
    assert rec.calls == [
        ["scontrol", "update", "nodename=gpu[002-003]", "state=drain", f"reason={reason}"]
    ]


def test_job_states_fall_back_to_sacct_for_jobs_that_left_the_queue() -> None:
    rec = _Recorder({"squeue": "4106|RUNNING|None\n", "sacct": "4101|COMPLETED|0:0\n"})
    states = SlurmCLI(run=rec).job_states(["4101", "4106"])
    assert states["4101"].state == "COMPLETED" and states["4106"].state == "RUNNING"
    assert rec.calls[1][:2] == ["sacct", "-n"] and "4101" in rec.calls[1]


def test_sinfo_nodes_reads_the_fleet_in_one_call() -> None:
    rec = _Recorder({"sinfo": (CAPTURED / "sinfo_nodes.txt").read_text()})
    nodes = {n.name: n for n in SlurmCLI(run=rec).sinfo_nodes("gpu")}
    assert rec.calls == [["sinfo", "-h", "-N", "-o", "%N|%T|%E", "-p", "gpu"]]
    assert nodes["gpu002"].drained and not nodes["gpu001"].drained
    assert nodes["gpu001"].usable and not nodes["gpu004"].usable


# --- how Slurm could not be reached: exit 3 when it did not answer, 2 when pointed wrongly ---


def _client(tmp_path: Path, name: str, script: str) -> None:
    tool = tmp_path / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)


def test_a_controller_that_does_not_answer_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_tool.slurm import SlurmUnreachable, connect

    # What scontrol prints when slurmctld is down (Slurm's slurm_errno.c,
    # SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR).
    said = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    _client(tmp_path, "scontrol", f"echo '{said}' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SlurmUnreachable) as caught:
        connect().node_states()
    assert caught.value.exit_code == 3
    assert str(caught.value) == f"scontrol show: {said}"


def test_a_slurm_host_whose_ssh_hangs_is_unreachable_and_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_tool.slurm import SSH_CONNECT_TIMEOUT_S, SlurmUnreachable, ssh_command_runner

    # An ssh that never returns, as toward a host that drops packets: the runner's own bound.
    _client(tmp_path, "ssh", f'echo "$@" > {tmp_path}/argv; exec sleep 30')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    run = ssh_command_runner("mgmt01", timeout=0.5)
    with pytest.raises(SlurmUnreachable) as caught:
        run(["scontrol", "update", "nodename=gpu001", "state=drain", "reason=a: b: c"])
    # The command and the host once, then why: not a piece of the drain reason.
    assert str(caught.value) == "scontrol update (on mgmt01): no answer in 0.5 s"
    assert f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}" in (tmp_path / "argv").read_text()


def test_no_slurm_client_here_is_bad_input_naming_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_tool.slurm import SlurmMissing, connect

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmMissing) as caught:
        connect().node_states()
    assert caught.value.exit_code == 2
    assert "--slurm-via" in str(caught.value)
