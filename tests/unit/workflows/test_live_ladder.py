"""Re-image's node ladder on the live edges: a Slurm that will not run the ladder's jobs fails
the re-imaged node instead of admitting it unproven."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.admission import Door
from cluster_tool.drains import REIMAGE_REASON, Owner
from cluster_tool.findings import Finding
from cluster_tool.slurm import SlurmError
from cluster_tool.spec import load_spec
from cluster_tool.workflows.bringup import GateOutcome, Validation
from cluster_tool.workflows.live import Live
from cluster_tool.workflows.runs import RunRecord
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm, gate_proof

REPO = Path(__file__).resolve().parents[3]


class LadderOnly(Live):
    """Live with health validation passing and the gate answering what the test says."""

    gate_answer: Any = None

    def validate(self, nodes: Sequence[str]) -> Validation:
        return Validation.of(nodes)

    def gate(self, nodes: Sequence[str], rungs: tuple[str, ...] | None = None) -> GateOutcome:
        if isinstance(self.gate_answer, Exception):
            raise self.gate_answer
        found = list(self.gate_answer)
        return GateOutcome(found, [], gate_proof(nodes, found, "pairs" in (rungs or ())))


def ladder(tmp_path: Path, answer: Any) -> tuple[list[Finding], SlurmCluster]:
    # gpu002 comes back from its re-image drained; the ladder resumes it in a reservation.
    slurm = SlurmCluster(
        ["gpu001", "gpu002", "gpu003", "gpu004"], drained={"gpu002": REIMAGE_REASON}
    )
    live = LadderOnly(
        cluster=load_spec(REPO / "examples" / "lab.yml"),
        inventory=tmp_path,
        record=RunRecord.create(tmp_path, "reimage", {}),
        slurm=admin_slurm(slurm),
    )
    live.gate_answer = answer
    door = Door(live.slurm, Owner.REIMAGE)
    return live.node_ladder("gpu002", "gpu003", door).findings, slurm


UNAVAILABLE = Finding(
    check="slurm.unavailable",
    severity="warning",
    node="gpu003",
    component="gate",
    message="gpu003: Slurm would not start the job (ReqNodeNotAvail)",
)


@pytest.mark.parametrize(
    ("answer", "check"),
    [(SlurmError("slurmctld not responding"), "slurm.error"), ([UNAVAILABLE], "slurm.unavailable")],
)
def test_a_slurm_that_runs_no_ladder_job_fails_the_reimaged_node(
    tmp_path: Path, answer: Any, check: str
) -> None:
    findings, slurm = ladder(tmp_path, answer)
    failing = [f for f in findings if f.fails]
    assert failing and {f.check for f in failing} == {check}
    assert {f.node for f in failing} == {"gpu002"}  # the partner is known good
    assert ["scontrol", "delete", "ReservationName=cluster-tool-reimage-gpu002"] in slurm.calls


def test_a_passing_ladder_fails_nothing(tmp_path: Path) -> None:
    findings, _ = ladder(tmp_path, [])
    assert not any(f.fails for f in findings)
