"""Re-image's node ladder on the live edges: a Slurm that will not run the ladder's jobs fails
the re-imaged node instead of admitting it unproven."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.findings import Finding
from cluster_tool.slurm import SlurmError
from cluster_tool.spec import load_spec
from cluster_tool.workflows.bringup import GateOutcome, Validation
from cluster_tool.workflows.live import Live
from cluster_tool.workflows.runs import RunRecord

REPO = Path(__file__).resolve().parents[3]


class FakeSlurm:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def reserve(self, name: str, nodes: Sequence[str]) -> None:
        self.calls.append(("reserve", list(nodes)))

    def resume(self, nodes: Sequence[str]) -> None:
        self.calls.append(("resume", list(nodes)))

    def release(self, name: str) -> None:
        self.calls.append(("release", name))


class LadderOnly(Live):
    """Live with health validation passing and the gate answering what the test says."""

    gate_answer: Any = None

    def validate(self, nodes: Sequence[str]) -> Validation:
        return Validation([], [], True)

    def gate(self, nodes: Sequence[str], rungs: tuple[str, ...] | None = None) -> GateOutcome:
        if isinstance(self.gate_answer, Exception):
            raise self.gate_answer
        return GateOutcome(list(self.gate_answer))


def ladder(tmp_path: Path, answer: Any) -> tuple[list[Finding], FakeSlurm]:
    slurm = FakeSlurm()
    live = LadderOnly(
        cluster=load_spec(REPO / "examples" / "lab.yml"),
        inventory=tmp_path,
        record=RunRecord.create(tmp_path, "reimage", {}),
        slurm=slurm,
    )
    live.gate_answer = answer
    return live.node_ladder("gpu002", "gpu003"), slurm


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
    assert ("release", "cluster-tool-reimage-gpu002") in slurm.calls


def test_a_passing_ladder_fails_nothing(tmp_path: Path) -> None:
    findings, _ = ladder(tmp_path, [])
    assert not any(f.fails for f in findings)
