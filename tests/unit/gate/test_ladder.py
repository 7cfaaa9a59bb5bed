"""The live gate's logic end to end against a Slurm that replays captured outputs: what it
names, what it drains (and the reason Slurm then shows), hangs, GDR, the safety stop."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cluster_tool.gate.ladder import GateOptions, GateResult, run_gate
from cluster_tool.gate.plan import NcclTestParams
from cluster_tool.gate.runner import SlurmRunner
from cluster_tool.gate.simulate import node_names
from cluster_tool.gate.thresholds import GateProfile, Thresholds
from cluster_tool.slurm import SlurmCLI, SlurmError
from tests.unit.gate.fakes import (
    HANG,
    PAIR,
    SINGLE,
    FakeClock,
    ReplaySlurm,
    pair_output,
    scaled_output,
)

THRESHOLDS = Thresholds(GateProfile(), min_fraction=0.9)
PARAMS = NcclTestParams()


def answers(
    slow: dict[str, float] | None = None,
    hang: set[str] | None = None,
    no_gdr: set[str] | None = None,
    single_slow: dict[str, float] | None = None,
    rail_slow: dict[tuple[str, int], float] | None = None,
) -> Callable[[str, tuple[str, ...], str], str | None]:
    """Healthy nodes answer with the real captures; planted faults change the answer."""
    slow, hang, no_gdr = slow or {}, hang or set(), no_gdr or set()
    single_slow, rail_slow = single_slow or {}, rail_slow or {}

    def answer(name: str, nodes: tuple[str, ...], label: str) -> str | None:
        if len(nodes) == 1:
            return scaled_output(SINGLE, single_slow.get(nodes[0], 1.0))
        if set(nodes) & hang:
            return HANG + scaled_output(PAIR, 1.0, cut_after=12)
        if label.startswith("rail"):
            rail = int(label[4:])
            factor = min(rail_slow.get((n, rail), 1.0) for n in nodes)
            return scaled_output(PAIR, 0.1 * factor)  # one rail: ~47 GB/s
        factor = min(slow.get(n, 1.0) for n in nodes)
        text = pair_output(factor, hosts=nodes[:2])
        for n in set(nodes) & no_gdr:
            text = text.replace(f"{n}:", f"{n}:").replace(f"{n}:4", f"{n}:4")
            text = (
                "\n".join(
                    ln.replace("/GDRDMA", "") if ln.startswith(f"{n}:") else ln
                    for ln in text.splitlines()
                )
                + "\n"
            )
        return text

    return answer


def gate(
    tmp_path: Path,
    nodes: list[str],
    answer: Callable[[str, tuple[str, ...], str], str | None],
    replay: ReplaySlurm | None = None,
    **options: object,
) -> tuple[GateResult, ReplaySlurm, FakeClock]:
    replay = replay or ReplaySlurm(answer)
    clock = FakeClock()
    runner = SlurmRunner(
        slurm=SlurmCLI(run=replay),
        workdir=tmp_path / "run",
        params=PARAMS,
        gpus_per_node=8,
        watchdog_s=60,
        poll_s=10,
        clock=clock,
        sleep=clock.sleep,
    )
    # One screen unless a test asks for more: these tests are about what the ladder does with
    # a verdict (drains, reasons, hangs), which the number of screens does not change.
    options.setdefault("screens", 1)
    result = run_gate(nodes, runner, THRESHOLDS, PARAMS, options=GateOptions(**options))  # type: ignore[arg-type]
    return result, replay, clock


LAB = node_names(4)


def test_healthy_cluster_passes_every_rung(tmp_path: Path) -> None:
    result, replay, _ = gate(tmp_path, LAB, answers(), rails=True, drain=True)
    assert result.report.status == "pass", result.report.findings
    assert result.rungs["single"]["passed"] == 4
    assert result.rungs["pairs"]["rounds"] == 1 and result.rungs["pairs"]["bad"] == []
    assert result.rungs["rails"]["bad"] == []
    assert result.rungs["full"]["passed"] is True
    assert replay.drained == {}
    sbatch = [c for c in replay.calls if c[0] == "sbatch"]
    assert len(sbatch) == 4 + 2 + 2 + 1  # single, pairs, rails, full


def test_slow_node_is_named_drained_and_slurm_shows_the_reason(tmp_path: Path) -> None:
    result, replay, _ = gate(tmp_path, LAB, answers(slow={"gpu002": 0.45}), drain=True)
    assert result.report.status == "fail"
    errors = [f for f in result.report.findings if f.severity == "error"]
    assert [(f.check, f.node) for f in errors] == [("nccl.pair", "gpu002")]
    reason = "cluster-tool gate: nccl.pair 211 GB/s < 333 GB/s with gpu001 and gpu003"
    assert replay.drained == {"gpu002": reason}
    shown = {n.name: n for n in SlurmCLI(run=replay).node_states()}
    assert shown["gpu002"].drained and shown["gpu002"].reason == reason
    assert not shown["gpu001"].drained
    # The full rung ran without the drained node.
    assert result.rungs["full"]["nodes"] == 3


def test_dry_run_says_what_it_would_drain_and_drains_nothing(tmp_path: Path) -> None:
    result, replay, _ = gate(tmp_path, LAB, answers(slow={"gpu002": 0.45}), dry_run=True)
    assert replay.drained == {}
    assert result.drains.lines() == [
        "would drain gpu002: "
        "cluster-tool gate: nccl.pair 211 GB/s < 333 GB/s with gpu001 and gpu003"
    ]
    assert not any(c[:2] == ["scontrol", "update"] for c in replay.calls)


def test_hung_collective_ends_as_nccl_hang_within_the_watchdog(tmp_path: Path) -> None:
    result, replay, clock = gate(
        tmp_path, LAB, answers(hang={"gpu003"}), rungs=("pairs",), drain=True
    )
    hangs = [f for f in result.report.findings if f.check == "nccl.hang"]
    assert [f.node for f in hangs] == ["gpu003"]
    # Cancelled at the first poll after 60 s of silence (polls at most 10 s apart).
    silent = re.match(
        r"cluster-tool gate: nccl\.hang no output for (\d+) s", replay.drained["gpu003"]
    )
    assert silent is not None and 60 <= int(silent.group(1)) < 70, replay.drained["gpu003"]
    cancelled = [c[1] for c in replay.calls if c[0] == "scancel"]
    assert len(cancelled) == 2  # the screen pair and the split job with gpu003
    # Two rounds, each: pending, running, then 60 s of silence (+ one poll) before scancel.
    assert clock.now <= 2 * (60 + 3 * 10)


def test_a_hung_full_job_is_nccl_hang_naming_every_node_of_the_job(tmp_path: Path) -> None:
    result, replay, clock = gate(tmp_path, LAB, answers(hang={"gpu003"}), rungs=("full",))
    hangs = [f for f in result.report.findings if f.check == "nccl.hang"]
    assert [(f.node, f.component) for f in hangs] == [(None, "job gpu[001-004]")]
    assert "gpu[001-004]" in hangs[0].message and "every pair passed" not in hangs[0].message
    assert len([c for c in replay.calls if c[0] == "scancel"]) == 1
    # One job: pending, running, then 60 s of silence (+ one poll) before scancel.
    assert clock.now <= 60 + 3 * 10


def test_gdr_not_used_is_reported_for_the_host_without_it(tmp_path: Path) -> None:
    result, replay, _ = gate(
        tmp_path, LAB, answers(no_gdr={"gpu004"}), rungs=("pairs",), drain=True
    )
    gdr = [f for f in result.report.findings if f.check == "gdr.not-used"]
    assert [f.node for f in gdr] == ["gpu004"]
    assert result.report.status == "fail"
    assert replay.drained == {}  # a software fix, not a drain


def test_single_node_failure_names_the_node_without_pairing(tmp_path: Path) -> None:
    result, replay, _ = gate(tmp_path, LAB, answers(single_slow={"gpu001": 0.6}), drain=True)
    f = next(f for f in result.report.findings if f.severity == "error")
    assert (f.check, f.node, f.component) == ("nccl.single", "gpu001", "nvls-all_reduce")
    assert replay.drained == {"gpu001": "cluster-tool gate: nccl.single 288 GB/s < 432 GB/s"}
    assert result.rungs["pairs"]["rounds"] == 2  # 3 admitted nodes: one sat out round 1


def test_rails_rung_names_the_rail(tmp_path: Path) -> None:
    result, replay, _ = gate(
        tmp_path,
        LAB,
        answers(rail_slow={("gpu002", 3): 0.5}),
        rungs=("pairs",),
        rails=True,
        drain=True,
    )
    (f,) = [f for f in result.report.findings if f.severity == "error"]
    assert (f.check, f.node, f.component) == ("nccl.rail", "gpu002", "rail 3 (mlx5_3)")
    assert replay.drained["gpu002"].startswith(
        "cluster-tool gate: nccl.rail rail 3 (mlx5_3): 23 GB/s < 42 GB/s with "
    )


def test_degraded_hca_named_by_pairs_then_its_rail_by_the_rails_rung(tmp_path: Path) -> None:
    # One HCA down-trained: the whole ring runs at that rail's pace, so pairs fail too.
    faults = answers(slow={"gpu002": 0.3}, rail_slow={("gpu002", 3): 0.3})
    result, replay, _ = gate(tmp_path, LAB, faults, rungs=("pairs", "full"), rails=True, drain=True)
    errors = sorted(
        (f.check, f.node, f.component) for f in result.report.findings if f.severity == "error"
    )
    assert errors == [("nccl.pair", "gpu002", None), ("nccl.rail", "gpu002", "rail 3 (mlx5_3)")]
    assert replay.drained["gpu002"].startswith("cluster-tool gate: nccl.rail rail 3 (mlx5_3):")
    assert result.rungs["full"]["nodes"] == 3


def test_too_many_failures_drain_nothing_and_say_why(tmp_path: Path) -> None:
    nodes = node_names(8)
    slow = {"gpu001": 0.4, "gpu002": 0.4, "gpu003": 0.4}
    result, replay, _ = gate(
        tmp_path, nodes, answers(slow=slow), rungs=("pairs", "full"), drain=True
    )
    assert replay.drained == {}
    assert result.drains.stopped and "suspect the fabric or the software" in result.drains.stopped
    assert result.report.findings[0].check == "nccl.fleet"
    assert "full" not in result.rungs
    assert result.to_json()["summary"]["drain"]["stopped"] == result.drains.stopped


def test_half_the_nodes_failing_alone_is_a_fleet_stop_that_names_no_node(tmp_path: Path) -> None:
    """Two of four nodes below the floor on their own: past the 25 % safety stop, so nothing is
    drained and the stop is a finding of its own (node-less: a workflow admits no one on it)."""
    slow = {"gpu003": 0.5, "gpu004": 0.5}
    result, replay, _ = gate(tmp_path, LAB, answers(single_slow=slow), drain=True)
    assert replay.drained == {}
    errors = [(f.check, f.node) for f in result.report.findings if f.severity == "error"]
    assert ("nccl.fleet", None) in errors
    assert {n for c, n in errors if c == "nccl.single"} == {"gpu003", "gpu004"}
    assert result.report.exit_code == 1


def test_unknown_rung_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown rung"):
        gate(tmp_path, LAB, answers(), rungs=("pair",))


def test_drained_and_down_nodes_are_left_out_before_any_job(tmp_path: Path) -> None:
    replay = ReplaySlurm(answers(), drained={"gpu002": "reimage"}, down={"gpu004"})
    result, replay, _ = gate(tmp_path, LAB, answers(), replay=replay, drain=True)
    assert result.rungs["preflight"] == {"nodes": 4, "usable": 2}
    left_out = {
        f.node: f.observed for f in result.report.findings if f.check == "slurm.unavailable"
    }
    assert left_out == {
        "gpu002": "IDLE+DRAIN (reimage)",
        "gpu004": "DOWN+NOT_RESPONDING (Not responding)",
    }
    assert all(set(j.nodes) <= {"gpu001", "gpu003"} for j in replay.jobs.values())
    assert result.report.status == "pass"  # warnings only: the two usable nodes are fine


def test_a_slurmd_that_has_not_registered_yet_is_waited_for_not_left_out(tmp_path: Path) -> None:
    # Right after a bring-up's converge, slurmctld shows new nodes IDLE* until they register.
    replay = ReplaySlurm(answers(), registering={"gpu001": 3, "gpu003": 2})
    result, _, _ = gate(tmp_path, LAB, answers(), replay=replay)
    assert result.rungs["preflight"] == {"nodes": 4, "usable": 4}
    assert not [f for f in result.report.findings if f.check == "slurm.unavailable"]
    assert result.report.status == "pass"


def test_a_node_that_never_registers_is_left_out_after_the_settle_time(tmp_path: Path) -> None:
    replay = ReplaySlurm(answers(), registering={"gpu002": 10_000})
    result, replay, clock = gate(tmp_path, LAB, answers(), replay=replay, settle_s=60.0)
    assert result.rungs["preflight"] == {"nodes": 4, "usable": 3}
    assert [f.node for f in result.report.findings if f.check == "slurm.unavailable"] == ["gpu002"]
    assert clock() >= 60.0


def test_second_run_after_a_drain_skips_the_drained_node(tmp_path: Path) -> None:
    _, replay, _ = gate(tmp_path / "a", LAB, answers(slow={"gpu002": 0.45}), drain=True)
    assert list(replay.drained) == ["gpu002"]
    second, _, _ = gate(tmp_path / "b", LAB, answers(), replay=replay, rotation=1)
    assert second.rungs["preflight"]["usable"] == 3
    assert second.report.status == "pass"
    assert second.report.summary["gpu_hours"] > 0


def test_ib_errors_seen_on_the_healthy_peer_blame_only_the_bad_node(tmp_path: Path) -> None:
    def answer(name: str, nodes: tuple[str, ...], label: str) -> str | None:
        if "gpu002" not in nodes:
            return answers()(name, nodes, label)
        peer = next(n for n in nodes if n != "gpu002")
        return scaled_output(PAIR, 1.0, cut_after=8) + (
            f"{peer}:4001:4018 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
            "from peer 10.77.0.12<52345> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
            f"{peer}: Test NCCL failure common.cu:1005 'unhandled system error'\n"
        )

    result, replay, _ = gate(tmp_path, LAB, answer, rungs=("pairs",), drain=True)
    errors = [(f.check, f.node) for f in result.report.findings if f.severity == "error"]
    assert errors == [("nccl.ib", "gpu002")]
    seen = {f.node for f in result.report.findings if f.severity == "info"}
    assert seen == {"gpu001", "gpu003"}  # where the errors were printed: evidence only
    assert list(replay.drained) == ["gpu002"]
    assert replay.drained["gpu002"].startswith("cluster-tool gate: nccl.ib did not finish")


def test_job_that_never_leaves_the_queue_is_cancelled_and_not_blamed(tmp_path: Path) -> None:
    replay = ReplaySlurm(answers(), never_start={"gpu004"})
    replay_clock = FakeClock()
    runner = SlurmRunner(
        slurm=SlurmCLI(run=replay),
        workdir=tmp_path,
        params=PARAMS,
        gpus_per_node=8,
        watchdog_s=60,
        pending_s=120,
        poll_s=10,
        clock=replay_clock,
        sleep=replay_clock.sleep,
    )
    result = run_gate(
        LAB, runner, THRESHOLDS, PARAMS, options=GateOptions(rungs=("pairs",), drain=True)
    )
    pending = [f for f in result.report.findings if f.check == "slurm.pending"]
    assert pending and all(f.severity == "warning" for f in pending)
    assert "ReqNodeNotAvail" in pending[0].observed
    assert replay.drained == {}
    assert [c[1] for c in replay.calls if c[0] == "scancel"]  # the queued jobs were cancelled


def test_missing_peermem_is_pinned_on_its_node_even_when_only_rank_0_logs(
    tmp_path: Path,
) -> None:
    # Without GPUDirect RDMA every byte bounces through host memory (~0.6 of the rate),
    # and these logs carry only rank 0's prefix, which is never gpu004 here.
    def answer(name: str, nodes: tuple[str, ...], label: str) -> str | None:
        if len(nodes) == 1:
            return scaled_output(SINGLE, 1.0)
        broken = "gpu004" in nodes
        return pair_output(0.6 if broken else 1.0, gdr=not broken, hosts=nodes[:1])

    result, replay, _ = gate(tmp_path, LAB, answer, rungs=("pairs",), drain=True)
    errors = sorted((f.check, f.node) for f in result.report.findings if f.severity == "error")
    assert errors == [("gdr.not-used", "gpu004"), ("nccl.pair", "gpu004")]
    assert list(replay.drained) == ["gpu004"]


def test_failed_submission_cancels_the_jobs_already_queued(tmp_path: Path) -> None:
    replay = ReplaySlurm(answers(), refuse_after=2)
    with pytest.raises(SlurmError, match="submission failed"):
        gate(tmp_path, LAB, answers(), replay=replay)
    assert sorted(c[1] for c in replay.calls if c[0] == "scancel") == sorted(replay.jobs)


def test_a_step_that_never_wrote_is_not_read_from_an_earlier_runs_output(tmp_path: Path) -> None:
    """The work folder already holds a passing output under the very name gpu002's single job
    writes (an earlier run's, left on the shared filesystem). This run's step prints nothing:
    it is `nccl.launch`, never a pass read from the old file."""
    old = tmp_path / "run"
    old.mkdir()
    healthy = answers()
    for label in ("nvls-all_reduce", "ring-all_reduce"):
        (old / f"single-gpu002.{label}.out").write_text(
            healthy("single-gpu002", ("gpu002",), label) or ""
        )

    def answer(name: str, nodes: tuple[str, ...], label: str) -> str | None:
        return None if nodes == ("gpu002",) else healthy(name, nodes, label)

    result, _, _ = gate(tmp_path, LAB, answer, rungs=("single",))
    named = {(f.check, f.node) for f in result.report.findings if f.severity == "error"}
    assert named == {("nccl.launch", "gpu002")}
