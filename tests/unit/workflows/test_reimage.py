"""Rolling re-image state machine, driven with fakes that behave as Slurm and the Redfish emulator
do: batches, drains that wait for jobs, BMC refusals, nodes that never return, kill -9 + resume."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from cluster_tool.admission import Door
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.workflows.reimage import (
    LadderResult,
    ReimageDeps,
    ReimageOptions,
    plan_batches,
    run_reimage,
)
from cluster_tool.workflows.runs import RunRecord
from tests.unit.workflows.fakes import (
    Clock,
    EmulatedBmcs,
    SlurmCluster,
    admin_slurm,
    complete_proof,
)

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs, no cleanup."""


def _deps(
    cluster: SlurmCluster,
    bmcs: EmulatedBmcs,
    *,
    no_ssh: set[str] | None = None,
    converge_fail: dict[str, str] | None = None,
    ladder_errors: dict[str, str] | None = None,
    log: list[str] | None = None,
) -> ReimageDeps:
    clock = Clock()
    events = log if log is not None else []

    def wait_ssh(node: str, timeout: float) -> bool:
        events.append(f"ssh {node}")
        # A node answers SSH only once it has booted after its power-on.
        return node not in (no_ssh or set()) and node in bmcs.booted

    def converge(nodes: Sequence[str]) -> dict[str, str | None]:
        events.append(f"converge {','.join(nodes)}")
        return {n: (converge_fail or {}).get(n) for n in nodes}

    def ladder(node: str, partner: str | None, door: Door) -> LadderResult:
        events.append(f"ladder {node} with {partner}")
        why = (ladder_errors or {}).get(node)
        if why:
            return LadderResult(
                [Finding(check="nccl.single", node=node, message=f"{node} alone: {why}")]
            )
        return LadderResult([], complete_proof(node))

    return ReimageDeps(
        slurm=admin_slurm(cluster),
        bmc=bmcs,
        wait_ssh=wait_ssh,
        converge=converge,
        ladder=ladder,
        clock=clock,
        sleep=clock.sleep,
    )


def _record(tmp_path: Path) -> RunRecord:
    return RunRecord.create(tmp_path / "runs", "reimage", {"nodes": "test"})


OPTS = ReimageOptions(batch=1, per_su=1, max_fail=0, poll_s=1, drain_timeout_s=60)


def test_batches_never_take_more_than_per_su_of_one_su_and_spread_over_sus() -> None:
    nodes = [("a1", 1), ("a2", 1), ("a3", 1), ("b1", 2), ("b2", 2)]
    batches = plan_batches(nodes, batch=4, per_su=1)
    assert batches == [["a1", "b1"], ["a2", "b2"], ["a3"]]
    assert plan_batches(nodes, batch=2, per_su=2) == [["a1", "b1"], ["a2", "b2"], ["a3"]]
    assert plan_batches(nodes, batch=3, per_su=2) == [["a1", "b1", "a2"], ["a3", "b2"]]


def test_the_controller_and_subnet_manager_are_refused() -> None:
    with pytest.raises(UsageError, match="head"):
        plan_batches([("head", 1), ("gpu001", 1)], batch=1, per_su=1, protected=["head"])


def test_two_nodes_one_at_a_time_while_a_job_runs_on_a_third(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES, jobs={"7001": ("gpu003", 10_000)})
    bmcs = EmulatedBmcs(NODES)
    log: list[str] = []
    result = run_reimage(
        _record(tmp_path),
        [["gpu001"], ["gpu002"]],
        _deps(cluster, bmcs, log=log),
        OPTS,
        partners=["gpu004"],
    )
    assert result.exit_code == 0
    assert {n: o.status for n, o in result.nodes.items()} == {
        "gpu001": "passed",
        "gpu002": "passed",
    }
    assert bmcs.reimaged == ["gpu001", "gpu002"]
    # One at a time: gpu002 is only touched after gpu001 is back in service.
    assert log.index("ladder gpu001 with gpu004") < log.index("ssh gpu002")
    # The second node's pair partner is the node re-imaged and passed before it.
    assert "ladder gpu002 with gpu001" in log
    assert "7001" in cluster.jobs, "the job on gpu003 must survive"
    assert not any(c[0] == "scancel" for c in cluster.calls)
    assert cluster.drained == {}


def test_a_drain_waits_for_the_job_on_the_target_node(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES, jobs={"7002": ("gpu001", 5)})
    bmcs = EmulatedBmcs(NODES)
    record = _record(tmp_path)
    result = run_reimage(record, [["gpu001"]], _deps(cluster, bmcs), OPTS, partners=["gpu004"])
    assert result.nodes["gpu001"].status == "passed"
    drain = next(e for e in record.journal() if e.step == "drain" and e.status == "done")
    assert drain.detail is not None and drain.detail != "waited 0.0 s"
    assert not any(c[0] == "scancel" for c in cluster.calls)


def test_a_job_that_outlives_the_drain_timeout_is_never_killed_without_force(
    tmp_path: Path,
) -> None:
    cluster = SlurmCluster(NODES, jobs={"7003": ("gpu001", 10_000)})
    bmcs = EmulatedBmcs(NODES)
    result = run_reimage(_record(tmp_path), [["gpu001"]], _deps(cluster, bmcs), OPTS)
    assert result.nodes["gpu001"].status == "skipped"
    assert "7003" in cluster.jobs and bmcs.reimaged == []
    assert "gpu001" not in cluster.drained, "the node goes back to its job"
    assert result.exit_code == 1


def test_force_cancels_the_jobs_after_the_timeout(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES, jobs={"7004": ("gpu001", 10_000)})
    bmcs = EmulatedBmcs(NODES)
    opts = ReimageOptions(batch=1, per_su=1, poll_s=1, drain_timeout_s=30, force=True)
    result = run_reimage(_record(tmp_path), [["gpu001"]], _deps(cluster, bmcs), opts)
    assert ["scancel", "-w", "gpu001"] in cluster.calls
    assert result.nodes["gpu001"].status == "passed"


def test_a_bmc_that_refuses_pxe_leaves_the_node_drained_and_stops_the_run(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    bmcs = EmulatedBmcs(NODES, refuse_pxe={"gpu001"})
    result = run_reimage(_record(tmp_path), [["gpu001"], ["gpu002"]], _deps(cluster, bmcs), OPTS)
    assert result.nodes["gpu001"].status == "failed"
    assert "refused a one-time PXE boot" in cluster.drained["gpu001"]
    assert result.stopped is not None and "--max-fail 0" in result.stopped
    assert result.nodes["gpu002"].status == "pending"
    assert "gpu002" not in cluster.drained and bmcs.reimaged == []
    assert any(f.check == "bmc.refused" and f.node == "gpu001" for f in result.findings)


def test_a_node_that_never_comes_back_counts_toward_max_fail(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    bmcs = EmulatedBmcs(NODES)
    opts = ReimageOptions(batch=1, per_su=1, max_fail=1, poll_s=1)
    result = run_reimage(
        _record(tmp_path),
        [["gpu001"], ["gpu002"], ["gpu003"]],
        _deps(cluster, bmcs, no_ssh={"gpu001", "gpu002"}),
        opts,
    )
    assert [result.nodes[n].status for n in ("gpu001", "gpu002", "gpu003")] == [
        "failed",
        "failed",
        "pending",
    ]
    assert "never came back" in cluster.drained["gpu001"]
    assert result.stopped is not None


def test_a_node_failing_its_ladder_stays_drained_with_the_finding(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    bmcs = EmulatedBmcs(NODES)
    opts = ReimageOptions(batch=1, per_su=1, max_fail=5, poll_s=1)
    result = run_reimage(
        _record(tmp_path),
        [["gpu001"], ["gpu002"]],
        _deps(cluster, bmcs, ladder_errors={"gpu001": "120 GB/s < 400 GB/s"}),
        opts,
    )
    assert result.nodes["gpu001"].status == "failed"
    assert "nccl.single" in cluster.drained["gpu001"]
    assert result.nodes["gpu002"].status == "passed"


def test_resume_after_kill_mid_batch_never_reimages_a_node_twice(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    bmcs = EmulatedBmcs(NODES)
    record = _record(tmp_path)
    first = _deps(cluster, bmcs)

    def killed_converge(nodes: Sequence[str]) -> dict[str, str | None]:
        raise Killed()

    first.converge = killed_converge
    with pytest.raises(Killed):
        run_reimage(record, [["gpu001"], ["gpu002"]], first, OPTS)
    assert bmcs.reimaged == ["gpu001"]

    log: list[str] = []
    again = RunRecord.open(record.path)
    result = run_reimage(again, [["gpu001"], ["gpu002"]], _deps(cluster, bmcs, log=log), OPTS)
    assert result.exit_code == 0
    assert bmcs.reimaged == ["gpu001", "gpu002"], "gpu001 must not be PXE-booted again"
    assert "ssh gpu001" not in log, "a finished step is not repeated"
    assert log[0] == "converge gpu001"


def test_resume_after_kill_between_power_on_and_its_journal_line(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    bmcs = EmulatedBmcs(NODES, lag=1)
    record = _record(tmp_path)
    deps = _deps(cluster, bmcs)
    real_on = bmcs.power_on

    def on_then_killed(node: str) -> None:
        real_on(node)
        raise Killed()

    bmcs.power_on = on_then_killed  # type: ignore[method-assign]
    with pytest.raises(Killed):
        run_reimage(record, [["gpu001"]], deps, OPTS)
    bmcs.power_on = real_on  # type: ignore[method-assign]
    result = run_reimage(RunRecord.open(record.path), [["gpu001"]], _deps(cluster, bmcs), OPTS)
    assert result.nodes["gpu001"].status == "passed"
    assert bmcs.reimaged == ["gpu001"]
    assert bmcs.booted == ["gpu001"], "the power-on is read back, not issued twice"


def test_a_torn_last_journal_line_is_ignored(tmp_path: Path) -> None:
    record = _record(tmp_path)
    record.log("drain", "done", node="gpu001", batch=1)
    with (record.path / "journal.jsonl").open("a") as fh:
        fh.write('{"step": "pxe-over')
    assert [e.step for e in record.journal()] == ["drain"]
