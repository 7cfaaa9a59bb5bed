"""The nccl-tests gate through real Slurm on the emulated cluster: its job scripts and outputs
in the lab's shared folder (same path on this machine and in every node), Slurm's commands run
on the head. A healthy lab passes single + pairs; a slow node is named alone, drained with the
reason, and back after heal + resume.

The converged tests share the session's one bring-up (`converged` in conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.lab.conftest import Converged, LabHandle

GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def gate(c: Converged, name: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    return c.run_json(
        "gate", "--spec", str(c.lab.spec), "--rungs", "single,pairs",
        "--watchdog", "60", "--poll", "2", "--pending-timeout", "300",
        "--slurm-via", "head", "--ssh-config", str(c.lab.ssh_config),
        "--workdir", str(c.gate_root / f"gate-{name}"), *extra,
    )  # fmt: skip


def test_the_shared_folder_is_the_same_path_on_this_machine_and_in_every_node(
    lab: LabHandle,
) -> None:
    shared = Path(lab.config.shared_dir)  # type: ignore[attr-defined]
    for node in ("head", *GPU_NODES):
        out = lab.ssh(node, f"hostname > {shared}/seen-by-$(hostname)")
        assert out.returncode == 0, out.stderr
        assert (shared / f"seen-by-{node}").read_text().strip() == node


@pytest.mark.converged
def test_single_and_pairs_pass_on_the_healthy_lab(converged: Converged) -> None:
    rc, data, err = gate(converged, "healthy")
    assert rc == 0, (data.get("findings"), err[-3000:])
    assert data["status"] == "pass"
    assert set(data["summary"]["rungs"]) >= {"single", "pairs"}
    assert not [f for f in data["findings"] if f["severity"] in ("fail", "error")]


@pytest.mark.converged
def test_a_slow_node_is_named_alone_drained_with_the_reason_and_back_after_heal_and_resume(
    converged: Converged,
) -> None:
    c, lab = converged, converged.lab
    rc, fault, err = c.run_json("lab", "inject", "slow-node", "gpu004", "0.5")
    assert rc == 0, err
    try:
        rc, data, err = gate(c, "slow-node", "--drain")
        assert rc == 1, (data.get("findings"), err[-3000:])
        bad = [f for f in data["findings"] if f["severity"] in ("fail", "error")]
        assert {f["node"] for f in bad if f.get("node")} == {"gpu004"}, bad
        assert list(data["summary"]["drain"]["nodes"]) == ["gpu004"]
        state, reason = c.sinfo()["gpu004"]
        assert state.startswith("drain"), (state, reason)
        assert reason == data["summary"]["drain"]["nodes"]["gpu004"]
        assert all(c.sinfo()[n][0] == "idle" for n in ("gpu001", "gpu002", "gpu003"))
    finally:
        heal = c.run("lab", "heal", str(fault.get("id", "--all")))
        assert heal.returncode == 0, heal.stderr
        out_resume = lab.ssh("head", "scontrol update nodename=gpu004 state=resume")
    assert out_resume.returncode == 0, out_resume.stderr
    assert c.sinfo()["gpu004"][0] == "idle"
    rc, data, err = gate(c, "healed", "--nodes", "gpu004,gpu003")
    assert rc == 0, (data.get("findings"), err[-3000:])
