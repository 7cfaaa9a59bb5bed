"""The nccl-tests gate through real Slurm on the emulated cluster: its job scripts and outputs
in the lab's shared folder (same path on this machine and in every node), Slurm's commands run
on the head. A healthy lab passes single + pairs; a slow node is named alone, drained with the
reason, and back after heal + resume.

The tests share one converge (module fixture) and run in file order."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.lab.conftest import LabHandle

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]
GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def _env(lab: LabHandle, runs: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CLUSTER_TOOL_RUNS_DIR": str(runs),
            "CLUSTER_TOOL_LAB_DIR": str(lab.config.lab_dir),  # type: ignore[attr-defined]
            "LAB_BMC_USERNAME": "lab",
            "LAB_BMC_PASSWORD": "lab-bmc-gate-test",
            "CLUSTER_TOOL_SLURMDBD_PASSWORD": "lab-dbd-gate-test",
        }
    )
    return env


def _run(lab: LabHandle, runs: Path, *args: str, timeout: float = 1800) -> tuple[int, str, str]:
    proc = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=_env(lab, runs),
    )
    return proc.returncode, proc.stdout, proc.stderr


def sinfo(lab: LabHandle) -> dict[str, tuple[str, str]]:
    out = lab.ssh("head", "sinfo -h -N -o '%N|%T|%E'")
    assert out.returncode == 0, out.stderr
    states: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        name, state, reason = [*line.split("|", 2), "", ""][:3]
        # `idle*` is idle and not responding yet; the state is the word.
        states.setdefault(name, (state.rstrip("*~#!%$@^-"), reason))
    return states


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate-runs")


@pytest.fixture(scope="module")
def converged(lab: LabHandle, runs: Path) -> Iterator[LabHandle]:
    """Slurm converged by the roles (a no-change rerun when another test module did it)."""
    rc, _out, err = _run(
        lab, runs, "bringup", str(lab.spec), "--inventory", str(lab.inventory),
        "--ssh-config", str(lab.ssh_config), "--slurm-via", "head", "--no-gate", "--json",
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    yield lab


def gate(lab: LabHandle, runs: Path, name: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    shared = Path(lab.config.shared_dir)  # type: ignore[attr-defined]
    rc, out, err = _run(
        lab, runs, "gate", "--spec", str(lab.spec), "--rungs", "single,pairs",
        "--watchdog", "60", "--poll", "2", "--pending-timeout", "300",
        "--slurm-via", "head", "--ssh-config", str(lab.ssh_config),
        "--workdir", str(shared / f"gate-{name}"), *extra, "--json",
    )  # fmt: skip
    try:
        data = json.loads(out) if out.strip() else {}
    except ValueError:
        data = {}
    return rc, data, err


def test_the_shared_folder_is_the_same_path_on_this_machine_and_in_every_node(
    lab: LabHandle,
) -> None:
    shared = Path(lab.config.shared_dir)  # type: ignore[attr-defined]
    for node in ("head", *GPU_NODES):
        out = lab.ssh(node, f"hostname > {shared}/seen-by-$(hostname)")
        assert out.returncode == 0, out.stderr
        assert (shared / f"seen-by-{node}").read_text().strip() == node


# Needs Slurm converged by site.yml (minutes): `make lab-converged`, not `make test`.
@pytest.mark.converged
def test_single_and_pairs_pass_on_the_healthy_lab(converged: LabHandle, runs: Path) -> None:
    rc, data, err = gate(converged, runs, "healthy")
    assert rc == 0, (data.get("findings"), err[-3000:])
    assert data["status"] == "pass"
    assert set(data["summary"]["rungs"]) >= {"single", "pairs"}
    assert not [f for f in data["findings"] if f["severity"] in ("fail", "error")]


# Needs Slurm converged by site.yml (minutes): `make lab-converged`, not `make test`.
@pytest.mark.converged
def test_a_slow_node_is_named_alone_drained_with_the_reason_and_back_after_heal_and_resume(
    converged: LabHandle, runs: Path
) -> None:
    lab = converged
    rc, out, err = _run(lab, runs, "lab", "inject", "slow-node", "gpu004", "0.5", "--json")
    assert rc == 0, err
    fault = json.loads(out) if out.strip() else {}
    try:
        rc, data, err = gate(lab, runs, "slow-node", "--drain")
        assert rc == 1, (data.get("findings"), err[-3000:])
        bad = [f for f in data["findings"] if f["severity"] in ("fail", "error")]
        assert {f["node"] for f in bad if f.get("node")} == {"gpu004"}, bad
        assert list(data["summary"]["drain"]["nodes"]) == ["gpu004"]
        state, reason = sinfo(lab)["gpu004"]
        assert state.startswith("drain"), (state, reason)
        assert reason == data["summary"]["drain"]["nodes"]["gpu004"]
        assert all(sinfo(lab)[n][0] == "idle" for n in ("gpu001", "gpu002", "gpu003"))
    finally:
        rc, _out, err = _run(lab, runs, "lab", "heal", str(fault.get("id", "--all")))
        assert rc == 0, err
        out_resume = lab.ssh("head", "scontrol update nodename=gpu004 state=resume")
    assert out_resume.returncode == 0, out_resume.stderr
    assert sinfo(lab)["gpu004"][0] == "idle"
    rc, data, err = gate(lab, runs, "healed", "--nodes", "gpu004,gpu003")
    assert rc == 0, (data.get("findings"), err[-3000:])
