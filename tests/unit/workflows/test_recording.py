"""The gate as the workflows run it: every step's raw output kept for the run record, and busbw
by message size with the rung's floor for the report's plots."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from cluster_tool.gate.ladder import GateOptions, run_gate
from cluster_tool.gate.plan import NcclTestParams
from cluster_tool.gate.thresholds import GateProfile, Rung, Thresholds
from cluster_tool.slurm import AdminSlurm, SlurmCLI
from cluster_tool.spec import load_spec
from cluster_tool.verdicts import GateProof
from cluster_tool.workflows.common import RecordingRunner
from cluster_tool.workflows.live import Live
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import REPO
from tests.unit.gate.fakes import SINGLE, FakeClock, ReplaySlurm, pair_output, scaled_output
from tests.unit.gate.test_ladder import answers

THRESHOLDS = Thresholds(GateProfile(), min_fraction=0.9)
LAB = REPO / "examples" / "lab.yml"


def test_the_recording_runner_keeps_raw_outputs_and_busbw_with_the_floor(tmp_path: Path) -> None:
    def answer(name: str, nodes: tuple[str, ...], label: str) -> str | None:
        if len(nodes) == 1:
            return scaled_output(SINGLE, 1.0)
        return pair_output(0.5 if "gpu003" in nodes else 1.0, hosts=nodes[:2])

    clock = FakeClock()
    runner = RecordingRunner(
        slurm=SlurmCLI(run=ReplaySlurm(answer)),
        workdir=tmp_path / "work",
        params=NcclTestParams(),
        gpus_per_node=8,
        poll_s=1,
        clock=clock,
        sleep=clock.sleep,
        thresholds=THRESHOLDS,
        save_dir=tmp_path / "raw" / "gate",
    )
    nodes = ["gpu001", "gpu002", "gpu003", "gpu004"]
    result = run_gate(
        nodes, runner, THRESHOLDS, NcclTestParams(), options=GateOptions(rungs=("single", "pairs"))
    )
    rungs = {b["rung"] for b in runner.busbw}
    assert "pairs" in rungs and any(r.startswith("single") for r in rungs)
    pair_rows = [b for b in runner.busbw if b["rung"] == "pairs"]
    floor = THRESHOLDS.expect(Rung.PAIRS, "all_reduce").floor_gbs
    assert all(b["floor_gbs"] == floor for b in pair_rows)
    # The points are the capture's rows: sizes ascending to 8 GB, peak busbw near line rate.
    sizes = [p[0] for p in pair_rows[0]["points"]]
    assert sizes == sorted(sizes) and len(sizes) > 10
    slow = [b for b in pair_rows if "gpu003" in b["nodes"]]
    fast = [b for b in pair_rows if "gpu003" not in b["nodes"]]
    assert max(p[1] for p in slow[0]["points"]) < floor <= max(p[1] for p in fast[0]["points"])
    saved = sorted(p.name for p in (tmp_path / "raw" / "gate").iterdir())
    assert any(name.endswith(".slurm.out") for name in saved)
    assert len([n for n in saved if not n.endswith(".slurm.out")]) == len(runner.busbw)
    assert result.report.status == "fail"


def test_live_gate_hands_the_workflows_the_gates_proof_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The workflows' gate on the lab spec (HDR) with the real captures: every node passes alone
    # and in its pair. The spec asks for one pair screen, so the pairs rung is one round of two
    # disjoint pairs over the four nodes.
    cluster = load_spec(LAB)
    cluster.thresholds.nccl_gate.screens = 1
    clock = FakeClock()
    monkeypatch.setattr(
        "cluster_tool.workflows.live.RecordingRunner",
        functools.partial(RecordingRunner, clock=clock, sleep=clock.sleep),
    )
    live = Live(
        cluster=cluster,
        inventory=tmp_path,
        record=RunRecord.create(tmp_path / "runs", "validate-after", {}),
        slurm=AdminSlurm(run=ReplaySlurm(answers())),
        gate_workdir=tmp_path / "work",
        rungs=("single", "pairs"),
    )
    nodes = ["gpu001", "gpu002", "gpu003", "gpu004"]
    outcome = live.gate(nodes)
    assert outcome.findings == []
    assert isinstance(outcome.proof, GateProof)
    assert outcome.proof.single == nodes
    assert len(outcome.proof.jobs) == 2
    assert sorted(n for job in outcome.proof.jobs for n in job) == nodes
