"""One watch cycle against a fake Slurm and captured probe output: what it finds, what it
drains and requeues by policy, and that it does each once. The cluster is the lab spec (four
H100 nodes, eight compute HCAs each); the flapping link is the lab profile's mlx5_0
(0000:18:00.0, ibp24s0) in the line format mlx5_core prints (a real journal capture,
tests/fixtures/parsers/real/journalctl_mlx5_link_up_repeated_eth1_prompt_line.txt)."""

from __future__ import annotations

import pytest

from cluster_tool.drains import Owner, is_ours, owner
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import CycleResult, drain_cap, run_cycle
from cluster_tool.watch.state import WatchState
from tests.conftest import REPO
from tests.unit.watch.fakes import (
    BOOT_LOG,
    CapturedSources,
    NodeReading,
    WatchSlurm,
    admin,
    flapping,
)

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def policy(name: str = "requeue", **more: object) -> Watch:
    # Requeue at once (no checkpoint grace) unless a test says otherwise: these tests are about
    # what is drained and requeued; test_checkpoint_signal.py is about the signal before it.
    return Watch.model_validate({"policy": name, "checkpoint_grace_s": 0, **more})


def slurm_with_jobs(**drained: str) -> WatchSlurm:
    fake = WatchSlurm(NODES, drained=dict(drained))
    fake.running = {
        "101": ("gpu[001-004]", "", "ckpt watch-requeue"),  # opted in by its comment
        "102": ("gpu[002-003]", "", "no marker here"),
        "103": ("gpu004", "h100,watch-requeue", ""),  # opted in by a feature; not on gpu002
    }
    return fake


def cycles(
    lab: Cluster, fake: WatchSlurm, logs: list[dict[str, str]], watch: Watch
) -> tuple[WatchState, list[CycleResult]]:
    """One cycle per entry of `logs` (node -> kernel log; others keep the boot log)."""
    state, out = WatchState(), []
    for i, log in enumerate(logs):
        sources = CapturedSources({n: NodeReading(kernel_log=log.get(n, BOOT_LOG)) for n in NODES})
        out.append(run_cycle(lab, state, sources, admin(fake), watch, 1000.0 + 60 * i))
    return state, out


def test_a_flapping_link_drains_its_node_with_the_id_and_requeues_the_opted_in_job(
    lab: Cluster,
) -> None:
    fake = slurm_with_jobs()
    flap = {"gpu002": BOOT_LOG + flapping(3)}
    _, (first, second) = cycles(lab, fake, [{}, flap], policy("requeue"))
    # The first read of each log is its baseline: nothing judged, nothing done.
    assert first.actions == [] and [f for f in first.findings if f.fails] == []
    assert len(fake.drains()) == 1
    reason = fake.drained["gpu002"]
    assert reason.startswith("cluster-tool watch: link.flap mlx5_0: gpu002 mlx5_0")
    assert is_ours(reason) and owner(reason) is Owner.WATCH
    assert list(fake.drained) == ["gpu002"]
    # 101 runs on gpu002 and opted in; 102 runs there without the marker; 103 is elsewhere.
    assert fake.requeued == ["101"]
    assert [(a.kind, a.node, a.job_id) for a in second.actions] == [
        ("drain", "gpu002", None),
        ("requeue", "gpu002", "101"),
    ]
    assert second.drained == ["gpu002"]
    assert second.exit_code == 1


def test_observe_finds_the_flap_and_drains_nothing(lab: Cluster) -> None:
    fake = slurm_with_jobs()
    _, (_, second) = cycles(lab, fake, [{}, {"gpu002": BOOT_LOG + flapping(3)}], policy("observe"))
    assert [(f.check, f.node, f.component) for f in second.findings if f.fails] == [
        ("link.flap", "gpu002", "mlx5_0")
    ]
    assert fake.drains() == [] and fake.requeued == [] and second.actions == []


def test_drain_policy_drains_and_requeues_nothing(lab: Cluster) -> None:
    fake = slurm_with_jobs()
    cycles(lab, fake, [{}, {"gpu003": BOOT_LOG + flapping(2, hca=2)}], policy("drain"))
    assert list(fake.drained) == ["gpu003"]
    assert fake.drained["gpu003"].startswith("cluster-tool watch: link.flap mlx5_4:")
    assert fake.requeued == []


def test_one_down_in_the_log_is_not_a_flap(lab: Cluster) -> None:
    fake = slurm_with_jobs()
    _, (_, second) = cycles(lab, fake, [{}, {"gpu002": BOOT_LOG + flapping(1)}], policy())
    assert fake.drains() == [] and [f for f in second.findings if f.fails] == []


def test_more_failing_nodes_than_the_share_raise_fleet_and_drain_none(lab: Cluster) -> None:
    assert drain_cap(policy(), 4) == 1  # 5 % of 4 nodes, at least one
    fake = slurm_with_jobs()
    both = {"gpu002": BOOT_LOG + flapping(3), "gpu003": BOOT_LOG + flapping(3)}
    _, (_, second) = cycles(lab, fake, [{}, both], policy("requeue"))
    fleet = [f for f in second.findings if f.check == "watch.fleet"]
    assert len(fleet) == 1 and fleet[0].severity == "error" and fleet[0].node is None
    assert "gpu002, gpu003" in (fleet[0].observed or "")
    assert fake.drains() == [] and fake.requeued == []


def test_once_the_share_is_drained_by_watch_nothing_more_is_drained(lab: Cluster) -> None:
    fake = slurm_with_jobs()
    logs = [{}, {"gpu002": BOOT_LOG + flapping(3)}]
    logs.append({"gpu002": BOOT_LOG + flapping(3), "gpu004": BOOT_LOG + flapping(3)})
    _, results = cycles(lab, fake, logs, policy("drain"))
    assert list(fake.drained) == ["gpu002"]
    assert len(fake.drains()) == 1
    assert [f.check for f in results[2].findings if f.check == "watch.fleet"] == ["watch.fleet"]


def test_an_operators_drain_is_left_alone_and_not_counted_as_ours(lab: Cluster) -> None:
    fake = slurm_with_jobs(gpu002="RMA ticket 4411")
    flap = {"gpu002": BOOT_LOG + flapping(3), "gpu003": BOOT_LOG + flapping(3)}
    cycles(lab, fake, [{}, flap], policy("drain"))
    # gpu002 keeps the operator's reason; gpu003 is the one node watch may drain.
    assert fake.drained["gpu002"] == "RMA ticket 4411"
    assert owner(fake.drained["gpu003"]) is Owner.WATCH
    assert len(fake.drains()) == 1


def test_each_action_happens_once_across_cycles(lab: Cluster) -> None:
    fake = slurm_with_jobs()
    flap = BOOT_LOG + flapping(3)
    # The log keeps flapping in later cycles (new lines each time); job 101 keeps running.
    logs = [{}, {"gpu002": flap}, {"gpu002": flap + flapping(3, start=2000.0)}, {"gpu002": flap}]
    _, results = cycles(lab, fake, logs, policy("requeue"))
    assert len(fake.drains()) == 1 and fake.requeued == ["101"]
    assert results[2].actions == [] and results[3].actions == []
    assert results[3].drained == ["gpu002"]
    # The flap seen again in cycle 3 is the same open finding, first seen in cycle 2.
    key = "link.flap|gpu002|mlx5_0"
    assert results[2].first_seen[key] == 1060.0
    assert [f.check for f in results[2].new] == []


def test_an_unreachable_node_is_a_warning_and_never_drained(lab: Cluster) -> None:
    fake = slurm_with_jobs()
    state = WatchState()
    readings = {n: NodeReading() for n in NODES}
    readings["gpu004"].reachable = False
    result = run_cycle(lab, state, CapturedSources(readings), admin(fake), policy(), 1000.0)
    unread = [(f.check, f.severity, f.node) for f in result.findings if f.node == "gpu004"]
    assert unread == [("watch.unread", "warning", "gpu004")]
    assert fake.drains() == []


def _requeue_then(lab: Cluster, fake: WatchSlurm, watch: Watch) -> tuple[WatchState, int]:
    """Cycles 1-2 of the flap test: gpu002 drained, job 101 requeued (COMPLETING in squeue)."""
    state, results = cycles(lab, fake, [{}, {"gpu002": BOOT_LOG + flapping(3)}], watch)
    assert fake.requeued == ["101"] and fake.queued == {"101": ("COMPLETING", "None")}
    return state, len(results)


def _next(
    lab: Cluster, fake: WatchSlurm, state: WatchState, at: float, watch: Watch
) -> CycleResult:
    sources = CapturedSources({n: NodeReading(kernel_log=BOOT_LOG + flapping(3)) for n in NODES})
    return run_cycle(lab, state, sources, admin(fake), watch, at)


def test_a_requeued_job_is_released_from_slurms_begin_time_hold_once_its_old_run_is_gone(
    lab: Cluster,
) -> None:
    # Slurm holds a requeued batch job until cred_expire + 1 s after its previous run was
    # cleaned up (121 s by default); the watcher ends that hold a cycle later, and only once
    # squeue shows the job PENDING for BeginTime: while it is COMPLETING, nothing.
    fake = slurm_with_jobs()
    state, _ = _requeue_then(lab, fake, policy("requeue"))
    assert fake.started == []
    third = _next(lab, fake, state, 1120.0, policy("requeue"))
    assert fake.started == [] and third.actions == []
    fake.queued["101"] = ("PENDING", "BeginTime")
    fourth = _next(lab, fake, state, 1180.0, policy("requeue"))
    assert fake.started == ["101"]
    assert ["scontrol", "update", "JobId=101", "StartTime=now"] in fake.calls
    assert [(a.kind, a.job_id, a.check) for a in fourth.actions] == [
        ("release", "101", "link.flap")
    ]
    assert _next(lab, fake, state, 1240.0, policy("requeue")).actions == []
    assert fake.started == ["101"]


def test_a_requeued_job_held_for_another_reason_or_with_release_off_is_left_alone(
    lab: Cluster,
) -> None:
    fake = slurm_with_jobs()
    state, _ = _requeue_then(lab, fake, policy("requeue"))
    fake.queued["101"] = ("PENDING", "JobHeldUser")  # the user held it: not the watcher's hold
    _next(lab, fake, state, 1120.0, policy("requeue"))
    fake.queued["101"] = ("PENDING", "BeginTime")
    _next(lab, fake, state, 1180.0, policy("requeue"))
    assert fake.started == []

    fake = slurm_with_jobs()
    off = policy("requeue", release_requeued=False)
    state, _ = _requeue_then(lab, fake, off)
    fake.queued["101"] = ("PENDING", "BeginTime")
    _next(lab, fake, state, 1120.0, off)
    assert fake.started == [] and fake.requeued == ["101"]
