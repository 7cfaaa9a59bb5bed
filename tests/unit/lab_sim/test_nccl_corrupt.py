"""`lab inject nccl-corrupt NODE`: the node's ranks hand collectives wrong values. The simulated
nccl-tests count them as the real ones do (`#wrong` per row, `# Out of bounds values : N
FAILED`, exit 1), the project's parser reads them, and the gate's own evaluation and pair
localisation, fed the simulator's output, name that node and no other as `nccl.wrong`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster_lab.faults import heal, inject
from cluster_lab.sim.nccl_tests import expand_hostlist, run
from cluster_tool.gate.evaluate import evaluate_job
from cluster_tool.gate.localize import Localizer
from cluster_tool.gate.plan import GateJob, NcclTestParams, multi_node_job, single_job
from cluster_tool.gate.thresholds import GateProfile, Rung, Thresholds
from cluster_tool.gate.verdict import localisation_findings
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from tests.conftest import FIXTURES

# A model exactly as the lab builds it from examples/lab.yml (4X HDR rails).
MODEL = FIXTURES / "sim" / "lab-model.json"
GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")
PARAMS = NcclTestParams()  # the gate's sweep: 8 B to 16 GiB, -c 1
LAB_THRESHOLDS = Thresholds(GateProfile(rail_gbs=25.0))  # 4X HDR rails, as the lab's profile


@pytest.fixture
def model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MODEL.read_text())
    return data


def srun(nodes: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Rank 0 of `srun --mpi=pmix` with 8 tasks on each of `nodes`."""
    n = len(expand_hostlist(nodes))
    return {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_STEP_NUM_TASKS": str(8 * n),
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": f"8(x{n})" if n > 1 else "8",
        "SLURM_MPI_TYPE": "pmix",
        **(env or {}),
    }


def run_job(model: dict[str, Any], job: GateJob) -> dict[str, str | None]:
    """Every step of a gate job as the lab's nccl-tests print it (rank 0 writes the file)."""
    texts: dict[str, str | None] = {}
    for step in job.steps:
        env = srun(",".join(job.nodes), dict(job.env) | dict(step.env))
        argv = PARAMS.argv(step.collective)[1:]
        texts[step.label] = run(step.collective, argv, env, model, job.nodes[0], 4000).stdout
    return texts


def test_a_corrupt_nodes_own_run_counts_wrong_values_and_fails(model: dict[str, Any]) -> None:
    fault = inject(model, "nccl-corrupt", "gpu002")
    out = run("all_reduce", PARAMS.argv("all_reduce")[1:], srun("gpu002"), model, "gpu002", 7)
    assert out.exit_code == 1  # nccl-tests exits EXIT_FAILURE when its check fails
    parsed = parse_nccl_tests(out.stdout)
    assert parsed.complete and len(parsed.rows) == 32
    # Every size, out-of-place and in-place, counts wrong elements of the node's 8 ranks.
    assert all(
        side is not None and side.wrong is not None and side.wrong >= 8
        for row in parsed.rows
        for side in (row.out_of_place, row.in_place)
    )
    assert parsed.wrong_total > 0
    assert parsed.out_of_bounds == 32 * 2 * 8
    assert "# Out of bounds values : 512 FAILED" in out.stdout.splitlines()
    # Speed is not what is wrong: the busbw is the healthy node's.
    assert max(r.out_of_place.busbw for r in parsed.rows if r.out_of_place) > 450
    # Another node is untouched, and heal gives the node back its clean runs.
    healthy = run("all_reduce", ["-b", "1M", "-e", "8M"], srun("gpu001"), model, "gpu001", 8)
    assert healthy.exit_code == 0 and "# Out of bounds values : 0 OK" in healthy.stdout
    heal(model, fault["id"])
    out = run("all_reduce", ["-b", "1M", "-e", "8M"], srun("gpu002"), model, "gpu002", 9)
    assert out.exit_code == 0 and parse_nccl_tests(out.stdout).wrong_total == 0


def test_without_the_data_check_nothing_is_counted(model: dict[str, Any]) -> None:
    inject(model, "nccl-corrupt", "gpu003")
    out = run("all_reduce", ["-b", "1M", "-e", "4M", "-c", "0"], srun("gpu003"), model, "gpu003", 1)
    parsed = parse_nccl_tests(out.stdout)
    assert out.exit_code == 0 and parsed.out_of_bounds == 0
    assert {row.out_of_place.wrong for row in parsed.rows if row.out_of_place} == {None}


def test_the_gates_single_rung_names_the_corrupt_node_as_nccl_wrong(
    model: dict[str, Any],
) -> None:
    inject(model, "nccl-corrupt", "gpu004")
    failed = {}
    for node in GPU_NODES:
        job = single_job(node, PARAMS)
        outcome = evaluate_job(job, run_job(model, job), "", LAB_THRESHOLDS)
        if not outcome.passed:
            assert outcome.first_failure is not None
            failed[node] = (outcome.first_failure.check, outcome.first_failure.detail)
    assert list(failed) == ["gpu004"]
    check, detail = failed["gpu004"]
    assert check == "nccl.wrong" and "#wrong values (data corruption)" in detail


def test_pair_localisation_pins_the_corruption_on_the_node_that_brings_it(
    model: dict[str, Any],
) -> None:
    inject(model, "nccl-corrupt", "gpu002")
    loc = Localizer(GPU_NODES, max_fail_share=0.5)
    while pairs := loc.next_round():
        results = []
        for pair in pairs:
            job = multi_node_job("-".join(pair), Rung.PAIRS, pair, PARAMS)
            outcome = evaluate_job(job, run_job(model, job), "", LAB_THRESHOLDS)
            results.append(outcome.as_pair_result(LAB_THRESHOLDS.profile))
        loc.record(results)
    verdict = loc.verdict()
    findings, guilty = localisation_findings(verdict, LAB_THRESHOLDS.expect(Rung.PAIRS))
    assert [(f.check, f.node) for f in findings if f.severity == "error"] == [
        ("nccl.wrong", "gpu002")
    ]
    assert [g.node for g in guilty] == ["gpu002"]
    # Its partner in the screen passed with another node: it is not blamed.
    assert verdict.good >= {"gpu001", "gpu003", "gpu004"}
