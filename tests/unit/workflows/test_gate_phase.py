"""The gate phase's Slurm steps (workflows.common.gate_in_reservation), as validate --admit and
the re-image ladder take them: whatever happens to the gate, the judged nodes end drained
until admission and no reservation is left behind."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from cluster_tool.admission import Door
from cluster_tool.drains import PENDING_REASON, REIMAGE_REASON, Owner
from cluster_tool.spec import load_spec
from cluster_tool.workflows.bringup import BringupOptions, GateOutcome, Validation, run_bringup
from cluster_tool.workflows.runs import RunRecord
from cluster_tool.workflows.validate import AfterMaintenanceDeps, run_after_maintenance
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm
from tests.unit.workflows.test_bringup import Gate, _deps
from tests.unit.workflows.test_live_ladder import LadderOnly

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


def test_an_interrupted_gate_after_maintenance_leaves_the_nodes_drained() -> None:
    # Drained by the operator for the maintenance; --admit lets the gate in.
    slurm = SlurmCluster(NODES, drained={n: "cable swap su1-leaf-r0" for n in NODES[:3]})
    in_service_during: list[set[str]] = []

    def gate(nodes: Sequence[str]) -> GateOutcome:
        in_service_during.append(set(nodes) - set(slurm.drained))
        raise KeyboardInterrupt  # the operator's Ctrl-C, minutes into the gate

    deps = AfterMaintenanceDeps(
        fabric=lambda: Validation.of([], health=False),
        health=lambda nodes: Validation.of(nodes),
        gate=gate,
        slurm=admin_slurm(slurm),
    )
    with pytest.raises(KeyboardInterrupt):
        run_after_maintenance(NODES[:3], deps, admit=True)
    assert in_service_during == [set(NODES[:3])], "the gate ran on the resumed nodes"
    assert {n: slurm.drained.get(n) for n in NODES[:3]} == dict.fromkeys(NODES[:3], PENDING_REASON)
    assert slurm.reservations == {}


class InterruptedGate(Gate):
    def __call__(self, nodes: Sequence[str]) -> GateOutcome:
        super().__call__(nodes)  # the jobs start on the resumed nodes...
        raise KeyboardInterrupt  # ...and the operator presses Ctrl-C


def test_an_interrupted_bringup_gate_leaves_the_new_nodes_drained_pending() -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, gate = _deps(slurm, gate=InterruptedGate(slurm))
    with pytest.raises(KeyboardInterrupt):
        run_bringup(NODES, deps, BringupOptions())
    assert gate.ran_on == NODES
    assert slurm.drained == dict.fromkeys(NODES, PENDING_REASON)
    assert slurm.reservations == {}


def test_a_reimaged_node_someone_resumed_meanwhile_is_still_gated_and_held(
    tmp_path: Path,
) -> None:
    # gpu002 is back from its re-image and an operator resumed it by hand before the ladder:
    # the ladder gates it all the same (Slurm refuses to resume a node in service).
    slurm = SlurmCluster(NODES)
    live = LadderOnly(
        cluster=load_spec(REPO / "examples" / "lab.yml"),
        inventory=tmp_path,
        record=RunRecord.create(tmp_path, "reimage", {}),
        slurm=admin_slurm(slurm),
    )
    live.gate_answer = []
    findings = live.node_ladder("gpu002", "gpu003", Door(live.slurm, Owner.REIMAGE)).findings
    assert not any(f.fails for f in findings)
    assert slurm.drained == {"gpu002": REIMAGE_REASON}, "admission alone puts it back"
    assert slurm.reservations == {}
