"""The nccl-tests gate through real Slurm on the emulated cluster: its job scripts and outputs
in the lab's shared folder (same path on this machine and in every node), Slurm's commands run
on the head. A healthy lab passes single + pairs; a slow node is named alone, drained with the
reason, and back after heal + resume; a degraded HCA is named by the rails rung as its rail; a
hung collective ends as nccl.hang within the watchdog; a peermem node without nvidia_peermem
is gdr.not-used; a node that corrupts data is nccl.wrong, by its own run and by its pairs.
Each test heals what it injected.

The converged tests share the session's one bring-up (`converged` in conftest.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    fault = c.inject("slow-node", "gpu004", "0.5")
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
        c.heal(fault)
        out_resume = lab.ssh("head", "scontrol update nodename=gpu004 state=resume")
    assert out_resume.returncode == 0, out_resume.stderr
    assert c.sinfo()["gpu004"][0] == "idle"
    rc, data, err = gate(c, "healed", "--nodes", "gpu004,gpu003")
    assert rc == 0, (data.get("findings"), err[-3000:])


def all_reduce_only(c: Converged) -> Path:
    """The lab's spec with all_reduce as the only collective: the single rung then runs two
    steps per node instead of five (the faults below show in all_reduce alone)."""
    spec = c.gate_root / "lab-all-reduce-only.yml"
    if not spec.exists():
        data = yaml.safe_load(c.lab.spec.read_text())
        data.setdefault("nccl", {}).setdefault("tests", {})["collectives"] = ["all_reduce"]
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def gate_only(c: Converged, name: str, *args: str) -> tuple[int, dict[str, Any], str, float]:
    """`gate` with exactly these rungs/options (all_reduce only, short polls); also its wall
    time in seconds."""
    start = time.monotonic()
    rc, data, err = c.run_json(
        "gate", "--spec", str(all_reduce_only(c)), "--poll", "1", "--pending-timeout", "120",
        "--slurm-via", "head", "--ssh-config", str(c.lab.ssh_config),
        "--workdir", str(c.gate_root / f"gate-{name}"), *args,
    )  # fmt: skip
    return rc, data, err, time.monotonic() - start


def failures(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in data.get("findings", []) if f["severity"] in ("fail", "error")]


@pytest.mark.converged
def test_a_degraded_hca_is_named_by_the_rails_rung_as_that_rail_alone(converged: Converged) -> None:
    c = converged
    # mlx5_5 is rail 3 (GPU 3's HCA) in the lab's profile.
    fault = c.inject("link-degrade", "gpu003", "mlx5_5", "--width", "1X")
    try:
        rc, data, err, _ = gate_only(c, "rails", "--rungs", "single", "--rails", "--watchdog", "30")
        assert rc == 1, (data.get("findings"), err[-3000:])
        bad = failures(data)
        assert [(f["check"], f["node"], f["component"]) for f in bad] == [
            ("nccl.rail", "gpu003", "rail 3 (mlx5_5)")
        ], bad
        assert data["summary"]["rungs"]["rails"]["bad"] == ["gpu003"]
        assert data["summary"]["rungs"]["single"]["failed"] == []
    finally:
        c.heal(fault)


@pytest.mark.converged
def test_a_hung_collective_ends_as_nccl_hang_within_the_watchdog(converged: Converged) -> None:
    c = converged
    watchdog = 15
    fault = c.inject("link-down", "gpu002", "mlx5_0", "--hang")
    try:
        rc, data, err, wall = gate_only(
            c, "hang", "--rungs", "full", "--nodes", "gpu[001-002]", "--watchdog", str(watchdog)
        )
        assert rc == 1, (data.get("findings"), err[-3000:])
        hangs = [f for f in failures(data) if f["check"] == "nccl.hang"]
        assert [f["component"] for f in hangs] == ["job gpu[001-002]"], data["findings"]
        silent = float(hangs[0]["observed"].split("no output for ")[1].split(" s")[0])
        assert watchdog <= silent < watchdog + 5, hangs[0]["observed"]
        # One job: Slurm's start and the sim's header, then the watchdog's silence, scancel.
        assert watchdog <= wall <= watchdog + 30, wall
        # The cancelled job holds no node: both are back to idle (after Slurm's COMPLETING).
        deadline = time.monotonic() + 60
        states = c.sinfo()
        while time.monotonic() < deadline and {states[n][0] for n in ("gpu001", "gpu002")} != {
            "idle"
        }:
            time.sleep(1)
            states = c.sinfo()
        assert states["gpu001"][0] == "idle" and states["gpu002"][0] == "idle", states
    finally:
        c.heal(fault)


@pytest.mark.converged
def test_a_peermem_node_without_nvidia_peermem_is_gdr_not_used(converged: Converged) -> None:
    c = converged
    # Peermem mode: the node's driver offers no dma-buf, so GPUDirect RDMA rides on
    # nvidia_peermem alone (the model's `dmabuf` knob; healing it restores dmabuf mode).
    peermem_mode = c.inject("module-missing", "gpu004", "dmabuf")
    faults = [peermem_mode]
    try:
        faults.append(c.inject("module-missing", "gpu004", "nvidia_peermem"))
        rc, data, err, _ = gate_only(c, "gdr", "--rungs", "pairs", "--watchdog", "30")
        assert rc == 1, (data.get("findings"), err[-3000:])
        gdr = [f for f in data["findings"] if f["check"] == "gdr.not-used"]
        assert [(f["node"], f["severity"]) for f in gdr] == [("gpu004", "error")], data["findings"]
        assert "without GDRDMA" in gdr[0]["observed"]
        # Host-memory bounce buffers slow its pairs too: the same node, no other.
        assert {f["node"] for f in failures(data) if f.get("node")} == {"gpu004"}
    finally:
        c.heal(*reversed(faults))


@pytest.mark.converged
def test_a_corrupting_node_is_nccl_wrong_by_its_own_run_and_by_its_pairs(
    converged: Converged,
) -> None:
    c, lab = converged, converged.lab
    fault = c.inject("nccl-corrupt", "gpu002")
    try:
        rc, status, err = c.run_json("lab", "status")
        assert (rc, [(f["kind"], f["target"]) for f in status["faults"]]) == (
            0,
            [("nccl-corrupt", "gpu002")],
        ), err[-2000:]
        rc, data, err, _ = gate_only(
            c, "corrupt-single", "--rungs", "single", "--drain", "--watchdog", "60"
        )
        assert rc == 1, (data.get("findings"), err[-3000:])
        assert [(f["check"], f["node"]) for f in failures(data)] == [("nccl.wrong", "gpu002")]
        assert "#wrong values (data corruption)" in failures(data)[0]["observed"]
        state, reason = c.sinfo()["gpu002"]
        assert state.startswith("drain") and "nccl.wrong" in reason, (state, reason)
        assert reason == data["summary"]["drain"]["nodes"]["gpu002"]
        out = lab.ssh("head", "scontrol update nodename=gpu002 state=resume")
        assert out.returncode == 0, out.stderr
        # Pairs alone: gpu002's screen partner fails with it too, and only the re-pairing
        # with proven nodes says which of the two brings the wrong values.
        rc, data, err, _ = gate_only(c, "corrupt-pairs", "--rungs", "pairs", "--watchdog", "60")
        assert rc == 1, (data.get("findings"), err[-3000:])
        assert [(f["check"], f["node"]) for f in failures(data)] == [("nccl.wrong", "gpu002")]
        assert data["summary"]["rungs"]["pairs"]["bad"] == ["gpu002"]
    finally:
        c.heal(fault)
        lab.ssh("head", "scontrol update nodename=gpu002 state=resume")
    assert {c.sinfo()[n][0] for n in GPU_NODES} == {"idle"}


@pytest.mark.converged
def test_a_fleet_level_gate_failure_keeps_every_gated_node_drained_with_its_id(
    converged: Converged,
) -> None:
    """Half the nodes slow on their own: past the gate's 25 % safety stop, so it drains nothing
    itself and says `nccl.fleet` (suspect the fabric or the stack), a finding that names no node.
    validate-after --admit then admits none of the four: the slow two stay drained with their
    own id (`nccl.single`), the other two held, drained with `nccl.fleet`."""
    c, lab = converged, converged.lab
    slow = ("gpu003", "gpu004")
    faults = [c.inject("slow-node", node, "0.5") for node in slow]
    try:
        rc, summary, err = c.run_json(
            "validate-after", str(all_reduce_only(c)), "--nodes", "gpu[001-004]", "--admit",
            "--ssh-config", str(lab.ssh_config), "--slurm-via", "head",
            "--gate-workdir", str(c.gate_root / "validate-after-fleet"),
        )  # fmt: skip
        assert rc == 1, err[-3000:]
        record = Path(summary["run_dir"]) / "findings.json"
        findings = json.loads(record.read_text())["findings"]
        fleet = [f for f in findings if f["check"] == "nccl.fleet"]
        assert fleet and not fleet[0].get("node"), findings
        states = c.sinfo()
        for node in GPU_NODES:
            state, reason = states[node]
            assert state.startswith("drain"), (node, state, reason)
            wanted = "nccl.single" if node in slow else "nccl.fleet"
            assert reason.startswith(f"cluster-tool: {wanted}"), (node, reason)
            verdict = summary["nodes"][node]["verdict"]
            assert verdict == ("fail" if node in slow else "held"), (node, verdict)
        assert summary["verdict"] == "fail" and summary["exit_code"] == 1
        assert not any(n.get("admitted") for n in summary["nodes"].values())
    finally:
        c.heal(*faults)
        for node in GPU_NODES:
            lab.ssh("head", f"scontrol update nodename={node} state=resume")
    assert {c.sinfo()[n][0] for n in GPU_NODES} == {"idle"}
