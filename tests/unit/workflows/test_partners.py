"""Known-good partners and the gate's reservation (issue 30, item 9b). A lone node's pair job
borrows a partner in service, inside the gate's maintenance reservation (`Flags=maint,
ignore_jobs`, which Slurm creates over running jobs): the partner was picked among ALLOCATED
and MIXED nodes too, so the reservation landed on a node a user's job held. Now a partner is an
IDLE node in service with no job on it, for bring-up, validate-after and the re-image ladder
alike, and the reservation never takes a node a job holds: a judged node that still runs one is
left out of it and of the gate (`slurm.unavailable`), a partner a job took since it was picked
is no partner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.admission import Door
from cluster_tool.drains import REIMAGE_REASON, Owner
from cluster_tool.spec import load_spec
from cluster_tool.workflows.bringup import BringupOptions, run_bringup
from cluster_tool.workflows.jobs import _partners
from cluster_tool.workflows.runs import RunRecord
from cluster_tool.workflows.validate import AfterMaintenanceDeps, run_after_maintenance
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm
from tests.unit.workflows.test_bringup import NODES, Gate, Validation, _deps
from tests.unit.workflows.test_live_ladder import LadderOnly

LONG = 10_000  # polls before a user's job ends: it runs through the whole test
FIXED = "cluster-tool: fabric.swapped: healed since"


@dataclass
class FlaggedSlurm(SlurmCluster):
    """The fake with extra state flags per node, as `scontrol show node` prints them."""

    flags: dict[str, str] = field(default_factory=dict)

    def _line(self, node: str) -> str:
        line = super()._line(node)
        extra = self.flags.get(node)
        return line.replace(" Partitions=", f"+{extra} Partitions=", 1) if extra else line


def reserved(slurm: SlurmCluster) -> list[str]:
    """The Nodes= of every reservation the run created."""
    return [
        next(a.split("=", 1)[1] for a in c if a.startswith("Nodes="))
        for c in slurm.calls
        if c[:3] == ["scontrol", "create", "reservation"]
    ]


def test_a_lone_nodes_partner_is_an_idle_node_not_one_a_users_job_holds() -> None:
    slurm = SlurmCluster(NODES, drained={"gpu002": FIXED}, jobs={"4711": ("gpu001", LONG)})
    deps, gate = _deps(slurm)
    result = run_bringup(NODES, deps, BringupOptions(limit="gpu002"))
    assert gate.ran_on == ["gpu002", "gpu003"], "gpu001 runs job 4711: gpu003 is idle"
    assert reserved(slurm) == ["gpu[002-003]"]
    assert result.nodes["gpu002"]["verdict"] == "pass"


def test_with_every_other_node_busy_there_is_no_partner_and_no_users_node_reserved() -> None:
    jobs = {"4711": ("gpu001", LONG), "4712": ("gpu003", LONG), "4713": ("gpu004", LONG)}
    slurm = SlurmCluster(NODES, drained={"gpu002": FIXED}, jobs=jobs)
    deps, gate = _deps(slurm)
    result = run_bringup(NODES, deps, BringupOptions(limit="gpu002"))
    assert gate.ran_on == ["gpu002"]
    assert reserved(slurm) == ["gpu002"]
    assert result.nodes["gpu002"]["verdict"] == "unknown"  # no multi-node proof: gate.unproven
    assert "gpu002" in slurm.drained


def test_an_idle_node_in_a_reservation_planned_or_completing_is_no_partner() -> None:
    from cluster_tool.workflows.common import known_good_partners

    slurm = FlaggedSlurm(
        NODES,
        flags={"gpu001": "RESERVED", "gpu003": "PLANNED", "gpu004": "COMPLETING"},
    )
    assert known_good_partners(admin_slurm(slurm), ["gpu001", "gpu003", "gpu004"]) == []
    slurm.flags = {"gpu001": "RESERVED", "gpu003": "CLOUD"}
    assert known_good_partners(admin_slurm(slurm), ["gpu001", "gpu003", "gpu004"]) == [
        "gpu003",
        "gpu004",
    ]


def test_the_reimage_ladders_partners_are_idle_nodes_too(tmp_path: Path) -> None:
    slurm = SlurmCluster(NODES, jobs={"4711": ("gpu003", LONG)})
    record = RunRecord.create(tmp_path, "reimage", {})
    partners = _partners(admin_slurm(slurm), ["gpu001", "gpu003", "gpu004"], record, print)
    assert partners == ["gpu001", "gpu004"]


def test_validate_after_never_reserves_a_judged_node_a_job_still_holds() -> None:
    # gpu003 was drained for the maintenance while a user's job still runs there (DRAINING).
    maintenance = dict.fromkeys(NODES[:3], "cable swap su1-leaf-r0")
    slurm = SlurmCluster(NODES, drained=maintenance, jobs={"4711": ("gpu003", LONG)})
    gate = Gate(slurm)
    deps = AfterMaintenanceDeps(
        fabric=lambda: Validation.of([], health=False),
        health=lambda nodes: Validation.of(nodes),
        gate=gate,
        slurm=admin_slurm(slurm),
    )
    result = run_after_maintenance(NODES[:3], deps, admit=True)
    assert reserved(slurm) == ["gpu[001-002]"]
    assert gate.ran_on == ["gpu001", "gpu002"]
    busy = [f for f in result.findings if f.node == "gpu003" and f.fails]
    assert [(f.check, f.observed) for f in busy] == [("slurm.unavailable", "job(s) 4711")]
    assert result.nodes["gpu003"]["verdict"] != "pass" and "gpu003" in slurm.drained
    assert slurm.reservations == {}


def test_a_ladder_partner_a_users_job_took_since_it_was_picked_is_left_out(
    tmp_path: Path,
) -> None:
    # gpu003 was idle when the re-image began; a user's job runs there by the ladder's turn.
    slurm = SlurmCluster(NODES, drained={"gpu002": REIMAGE_REASON}, jobs={"4711": ("gpu003", LONG)})
    ran: list[Sequence[str]] = []

    class Watching(LadderOnly):
        def gate(self, nodes: Sequence[str], rungs: tuple[str, ...] | None = None):  # type: ignore[no-untyped-def]
            ran.append(list(nodes))
            return super().gate(nodes, rungs)

    live = Watching(
        cluster=load_spec(REPO / "examples" / "lab.yml"),
        inventory=tmp_path,
        record=RunRecord.create(tmp_path, "reimage", {}),
        slurm=admin_slurm(slurm),
    )
    live.gate_answer = []
    findings = live.node_ladder("gpu002", "gpu003", Door(live.slurm, Owner.REIMAGE)).findings
    assert ran == [["gpu002"]] and reserved(slurm) == ["gpu002"]
    # Nothing is said against the partner; the re-imaged node has no multi-node proof.
    assert [(f.check, f.node) for f in findings if f.fails] == [("gate.unproven", "gpu002")]
