"""Phases as units (issue 30): one runner times each phase, records it, adds what it proved to
the run's proof and why a stage did not run; bring-up, validation after maintenance and the
re-image ladder are phases over one result type."""

from __future__ import annotations

import pytest

from cluster_tool.verdicts import FABRIC, HEALTH
from cluster_tool.workflows.bringup import BringupResult
from cluster_tool.workflows.common import PhaseResult, RunPhase, RunResult, run_phase, skip_phase
from cluster_tool.workflows.validate import AfterMaintenanceResult


def test_one_result_type_for_every_workflow() -> None:
    assert BringupResult is AfterMaintenanceResult is RunResult


def test_the_runner_records_the_phase_and_adds_what_it_proved() -> None:
    run = RunResult()
    out = run_phase(
        run,
        RunPhase(
            "validate",
            (HEALTH, FABRIC),
            lambda r: PhaseResult(
                "passed",
                "2 node(s)",
                proven={HEALTH: ["gpu001", "gpu002"]},
                not_run={FABRIC: "the fabric was not checked"},
            ),
        ),
    )
    assert out.status == "passed"
    assert [(p.name, p.status, p.detail) for p in run.phases] == [
        ("validate", "passed", "2 node(s)")
    ]
    assert run.proof.passed == {"gpu001": {HEALTH}, "gpu002": {HEALTH}}
    assert run.proof.not_run == {FABRIC: "the fabric was not checked"}


def test_a_phase_proves_only_the_stages_it_says_it_proves() -> None:
    run = RunResult()
    sneaky = RunPhase("counters", (), lambda r: PhaseResult("passed", proven={HEALTH: ["gpu001"]}))
    with pytest.raises(ValueError, match="proves"):
        run_phase(run, sneaky)
    assert run.proof.passed == {} and run.phases == []


def test_a_skipped_phase_says_why_each_stage_it_owes_did_not_run() -> None:
    run = RunResult()
    skip_phase(run, "gate", ("gate-single", "gate-multi"), "--no-gate")
    assert [(p.name, p.status, p.detail) for p in run.phases] == [("gate", "skipped", "--no-gate")]
    assert run.proof.not_run == {"gate-single": "--no-gate", "gate-multi": "--no-gate"}
