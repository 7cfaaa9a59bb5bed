"""Bring-up and validate-after-maintenance with fake edges: admission drained until pass, partial
failure, the drain reason naming the finding, progress per phase from runner events, and run
records with no secret in them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cluster_tool.ansible.runner import HostStats, PlaybookEvent, PlaybookResult
from cluster_tool.drains import PENDING_REASON
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.spec import load_spec
from cluster_tool.workflows.bringup import (
    BringupDeps,
    BringupOptions,
    GateOutcome,
    PhaseProgress,
    Validation,
    run_bringup,
)
from cluster_tool.workflows.live import run_summary
from cluster_tool.workflows.runs import RunRecord, known_secrets
from cluster_tool.workflows.validate import (
    AfterMaintenanceDeps,
    nodes_on_switch,
    run_after_maintenance,
    select_after_maintenance,
)
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm, gate_proof

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
SWAP = Finding(
    check="fabric.swapped",
    node="gpu002",
    component="mlx5_0,mlx5_1",
    expected="mlx5_0 on su1-leaf-r0 port 2",
    observed="mlx5_0 on su1-leaf-r1 port 2",
    message="gpu002: mlx5_0 and mlx5_1 are swapped (rail 0 <-> rail 1)",
)


def _events(failed: dict[str, str]) -> list[PlaybookEvent]:
    events = [PlaybookEvent("playbook_on_play_start", 1, play="Phase os")]
    counter = 2
    for host in ["head", *NODES]:
        if host in failed:
            events.append(
                PlaybookEvent(
                    "runner_on_failed", counter, host=host, play="Phase os",
                    task="install | Install packages", message=failed[host],
                )
            )  # fmt: skip
        else:
            events.append(PlaybookEvent("runner_on_ok", counter, host=host, play="Phase os"))
        counter += 1
    events.append(PlaybookEvent("playbook_on_stats", counter))
    return events


def _converge(
    failed: dict[str, str] | None = None, calls: list[dict[str, object]] | None = None
) -> Callable[..., PlaybookResult]:
    bad = failed or {}

    def converge(
        *,
        limit: str | None,
        tags: str | None,
        check: bool,
        diff: bool,
        on_event: Callable[[PlaybookEvent], None] | None,
    ) -> PlaybookResult:
        if calls is not None:
            calls.append({"limit": limit, "tags": tags, "check": check})
        events = _events(bad)
        for e in events:
            if on_event is not None:
                on_event(e)
        hosts = {h: HostStats(ok=5, failed=1 if h in bad else 0) for h in ["head", *NODES]}
        return PlaybookResult(
            "site.yml", "failed" if bad else "successful", 2 if bad else 0, hosts, events
        )

    return converge


class Gate:
    def __init__(self, slurm: SlurmCluster, bad: dict[str, str] | None = None) -> None:
        self.slurm = slurm
        self.bad = bad or {}
        self.ran_on: list[str] = []
        self.reserved_during: dict[str, str] = {}

    def __call__(self, nodes: Sequence[str]) -> GateOutcome:
        self.ran_on = list(nodes)
        self.reserved_during = dict(self.slurm.reservations)
        # Gate jobs may only run where Slurm would start them: not drained.
        assert not set(nodes) & set(self.slurm.drained), "gate on drained nodes"
        findings = [
            Finding(check="nccl.single", node=n, message=f"{n} alone: {why}")
            for n, why in self.bad.items()
            if n in nodes
        ]
        busbw = [
            {
                "rung": "single-nvls",
                "label": n,
                "floor_gbs": 300.0,
                "points": [[1024, 10.0], [1 << 30, 400.0]],
            }
            for n in nodes
        ]
        return GateOutcome(findings, busbw, gate_proof(nodes, findings))


def _deps(
    slurm: SlurmCluster,
    *,
    converge_failed: dict[str, str] | None = None,
    validation: list[Finding] | None = None,
    gate: Gate | None = None,
    calls: list[dict[str, object]] | None = None,
) -> tuple[BringupDeps, Gate]:
    g = gate or Gate(slurm)
    converge = _converge(converge_failed, calls)

    def converge_and_start_slurmd(**kwargs: object) -> PlaybookResult:
        # Bare nodes are unknown (DOWN) to Slurm until the slurm role starts their slurmd.
        result = converge(**kwargs)
        if not kwargs.get("check"):
            slurm.down -= set(NODES) - set(converge_failed or {})
        return result

    seen: list[list[str]] = []

    def validate(nodes: Sequence[str]) -> Validation:
        seen.append(list(nodes))
        return Validation.of(nodes, [f for f in (validation or []) if f.node in nodes])

    return BringupDeps(
        converge=converge_and_start_slurmd,
        validate=validate,
        gate=g,
        slurm=admin_slurm(slurm),
    ), g


def test_a_clean_bringup_admits_every_node_after_the_gate() -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, gate = _deps(slurm)
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 0
    assert slurm.drained == {}
    assert gate.ran_on == NODES
    assert gate.reserved_during == {"cluster-tool-bringup": "gpu[001-004]"}
    assert slurm.reservations == {}, "the maintenance reservation is released"
    # New nodes waited drained with the pending reason before the gate let them in.
    drains = [c for c in slurm.calls if c[:2] == ["scontrol", "update"] and "state=drain" in c]
    assert drains and drains[0][-1] == f"reason={PENDING_REASON}"
    assert [p.name for p in result.phases] == ["converge", "validate", "gate", "admit"]
    assert {v["verdict"] for v in result.nodes.values()} == {"pass"}


def test_a_second_bringup_on_nodes_in_service_resumes_nothing_and_passes() -> None:
    slurm = SlurmCluster(NODES)
    deps, gate = _deps(slurm)
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 0, [f.message for f in result.findings]
    assert gate.ran_on == NODES
    resumes = [c for c in slurm.calls if "state=resume" in c]
    assert resumes == [], "Slurm refuses to resume a node in service"


def test_an_operators_drain_is_not_lifted_by_bringup_but_an_earlier_verdict_is() -> None:
    slurm = SlurmCluster(
        NODES,
        drained={"gpu003": "RMA ticket 4411", "gpu004": "cluster-tool: fabric.swapped: ..."},
    )
    deps, gate = _deps(slurm)
    run_bringup(NODES, deps, BringupOptions(limit="gpu[002-004]"))
    assert "gpu004" not in slurm.drained, "proven again (with gpu002): our verdict is lifted"
    assert slurm.drained == {"gpu003": "RMA ticket 4411"}
    assert gate.ran_on == ["gpu002", "gpu004"], "Slurm would start no gate job on a drained node"


def test_a_node_the_gate_had_to_leave_out_is_not_admitted() -> None:
    class LeavesOut(Gate):
        def __call__(self, nodes: Sequence[str]) -> GateOutcome:
            outcome = super().__call__([n for n in nodes if n != "gpu002"])
            outcome.findings.append(
                Finding(
                    check="slurm.unavailable",
                    severity="warning",
                    node="gpu002",
                    message="gpu002 left out of the gate: IDLE+NOT_RESPONDING",
                )
            )
            return outcome

    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, _ = _deps(slurm, gate=LeavesOut(slurm))
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 1
    assert list(slurm.drained) == ["gpu002"]
    assert slurm.drained["gpu002"].startswith("cluster-tool: slurm.unavailable")
    assert result.nodes["gpu002"]["verdict"] == "unknown"


def test_a_cable_swap_leaves_that_node_drained_with_the_swap_named_and_exit_1() -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, gate = _deps(slurm, validation=[SWAP])
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 1
    assert set(slurm.drained) == {"gpu002"}
    assert "fabric.swapped" in slurm.drained["gpu002"]
    assert "swapped" in slurm.drained["gpu002"]
    assert gate.ran_on == ["gpu001", "gpu003", "gpu004"]
    assert result.nodes["gpu002"]["verdict"] == "fail"
    assert result.nodes["gpu001"]["verdict"] == "pass"


def test_a_host_that_fails_to_converge_does_not_stop_the_others() -> None:
    slurm = SlurmCluster(NODES)
    deps, gate = _deps(slurm, converge_failed={"gpu003": "No package matching 'nvidia-driver-550'"})
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 1
    assert gate.ran_on == ["gpu001", "gpu002", "gpu004"]
    assert set(slurm.drained) == {"gpu003"}
    assert "Install packages" in slurm.drained["gpu003"]
    assert result.nodes["gpu001"]["verdict"] == "pass"


def test_a_host_that_cannot_be_reached_exits_3_as_the_contract_says() -> None:
    slurm = SlurmCluster(NODES)
    lost = Finding(check="os.unreachable", node="gpu003", message="gpu003: no route to host")
    deps, _ = _deps(slurm, validation=[lost])
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 3
    assert result.nodes["gpu003"]["verdict"] == "unknown"
    assert result.nodes["gpu001"]["verdict"] == "pass"


def test_when_no_node_converged_the_failed_nodes_are_still_drained_with_the_task() -> None:
    # Seen in the lab: the slurm phase started slurmd (nodes idle), a later phase failed them.
    failed = {n: "E: Failed to fetch nccl-tests_2.13.11-1_amd64.deb" for n in NODES}
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, gate = _deps(slurm, converge_failed=failed)
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 1 and gate.ran_on == []
    assert set(slurm.drained) == set(NODES)
    assert all("Install packages" in r and "Failed to fetch" in r for r in slurm.drained.values())
    assert "+drain" in result.nodes["gpu001"]["slurm"]


def test_a_gate_failure_names_the_node_and_leaves_it_drained() -> None:
    slurm = SlurmCluster(NODES)
    gate = Gate(slurm, {"gpu004": "120 GB/s < 360 GB/s"})
    deps, _ = _deps(slurm, gate=gate)
    result = run_bringup(NODES, deps, BringupOptions())
    assert set(slurm.drained) == {"gpu004"} and "nccl.single" in slurm.drained["gpu004"]
    assert result.exit_code == 1


def test_check_mode_and_a_single_phase_only_converge() -> None:
    slurm = SlurmCluster(NODES)
    calls: list[dict[str, object]] = []
    deps, gate = _deps(slurm, calls=calls)
    result = run_bringup(
        NODES, deps, BringupOptions(check=True, phase="slurm", limit="gpu[001-002]")
    )
    assert calls == [{"limit": "gpu[001-002]", "tags": "slurm", "check": True}]
    assert gate.ran_on == [] and slurm.calls == []
    assert list(result.nodes) == ["gpu001", "gpu002"]


def test_progress_counts_hosts_done_and_failed_per_phase() -> None:
    lines: list[str] = []
    progress = PhaseProgress(lines.append)
    for e in _events({"gpu002": "boom"}):
        progress(e)
    assert progress.tallies == [("Phase os", 4, 1)]
    assert any("✗ gpu002: install | Install packages: boom" in ln for ln in lines)


def test_retry_failed_reruns_only_what_failed_last_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster_tool.workflows.runs import last_failed

    spec = REPO / "examples" / "lab.yml"
    runs = tmp_path / "runs"
    record = RunRecord.create(runs, "bringup", {"spec": str(spec.resolve())})
    record.finish({"nodes": {"gpu001": {"verdict": "pass"}, "gpu003": {"verdict": "fail"}}}, [SWAP])
    # gpu003 failed; gpu002 is named by an error finding (the swap) though its verdict was lost.
    assert last_failed(runs, spec) == ["gpu003", "gpu002"]
    with pytest.raises(UsageError, match="no earlier bringup"):
        last_failed(runs, REPO / "examples" / "h100-1su.yml")


def test_no_secret_lands_in_a_run_record(tmp_path: Path) -> None:
    munge = tmp_path / "munge.key"
    munge_key = "Qm9ndXNNdW5nZUtleUZvclRlc3RzMDEyMzQ1Njc4OWFiY2RlZg"
    munge.write_text(munge_key + "\n")
    env = {
        "CLUSTER_TOOL_SLURMDBD_PASSWORD": "dbd-Pa55word-planted",
        "LAB_BMC_PASSWORD": "bmc-Pa55word-planted",
        "HOME": "/root",
    }
    secrets = known_secrets(env, munge)
    planted = [munge_key, env["CLUSTER_TOOL_SLURMDBD_PASSWORD"], env["LAB_BMC_PASSWORD"]]
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": "lab.yml"}, secrets)
    # Every way a secret could get in: a raw capture, an ansible-runner artifact written behind
    # the record's back, a journal line, and a finding message.
    record.write_text("raw/validate/gpu001/dmesg.out", f"munge: key {munge_key}\n")
    events = record.path / "ansible" / "artifacts" / "x" / "job_events"
    events.mkdir(parents=True)
    (events / "1-abc.json").write_text(
        json.dumps({"stdout": f"dbd {env['CLUSTER_TOOL_SLURMDBD_PASSWORD']}"})
    )
    record.log(
        "power-on", "failed", node="gpu001", detail=f"401 for admin:{env['LAB_BMC_PASSWORD']}"
    )
    leak = Finding(check="os.env", node="gpu001", message=f"env shows {env['LAB_BMC_PASSWORD']}")
    slurm = SlurmCluster(NODES)
    deps, _ = _deps(slurm, validation=[leak])
    result = run_bringup(NODES, deps, BringupOptions())
    summary = run_summary(
        command="bringup", record=record, inputs={}, phases=result.phases,
        findings=result.findings, verdicts=result.nodes, run=result.run, cluster=None,
        health_nodes=NODES, fabric_checked=True, busbw=result.busbw,
    )  # fmt: skip
    record.finish(summary, result.findings)
    for path in record.path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in planted:
                assert secret.encode() not in data, f"{secret[:6]}… found in {path}"
    assert "[redacted]" in (record.path / "findings.json").read_text()
    assert os.environ.get("LAB_BMC_PASSWORD") != env["LAB_BMC_PASSWORD"]


def test_the_nodes_of_a_leaf_come_from_the_cabling_plan() -> None:
    cluster = load_spec(REPO / "examples" / "h200-4su.yml")
    leaf_nodes = nodes_on_switch(cluster, "su2-leaf-r3")
    su2 = [n.name for n in cluster.gpu_nodes() if n.su == 2]
    assert leaf_nodes == su2
    with pytest.raises(UsageError, match="no such leaf or spine"):
        nodes_on_switch(cluster, "su9-leaf-r0")
    with pytest.raises(UsageError, match="exactly one"):
        select_after_maintenance(cluster, None, None)


def test_after_maintenance_checks_the_whole_fabric_then_only_the_leaf_nodes_and_admits() -> None:
    slurm = SlurmCluster(NODES, drained={n: "maintenance" for n in ("gpu001", "gpu002", "gpu003")})
    gate = Gate(slurm, {"gpu002": "90 GB/s < 150 GB/s"})
    health_on: list[list[str]] = []
    fabric_calls: list[int] = []

    def fabric() -> Validation:
        fabric_calls.append(1)
        return Validation.of([], health=False)

    def health(nodes: Sequence[str]) -> Validation:
        health_on.append(list(nodes))
        return Validation.of(nodes)

    deps = AfterMaintenanceDeps(fabric=fabric, health=health, gate=gate, slurm=admin_slurm(slurm))
    result = run_after_maintenance(["gpu001", "gpu002", "gpu003"], deps, admit=True)
    assert fabric_calls == [1] and health_on == [["gpu001", "gpu002", "gpu003"]]
    assert gate.ran_on == ["gpu001", "gpu002", "gpu003"]
    assert set(slurm.drained) == {"gpu002"} and "nccl.single" in slurm.drained["gpu002"]
    assert result.exit_code == 1
    # gpu001 and gpu003 proved themselves together (single, and the pair between them).
    assert result.nodes["gpu001"]["verdict"] == "pass"
    assert result.nodes["gpu003"]["verdict"] == "pass"


def test_a_slurm_that_cannot_be_reached_fails_the_gate_as_findings_not_a_crash() -> None:
    from cluster_tool.slurm import SlurmError

    slurm = SlurmCluster(NODES)

    def gate(nodes: Sequence[str]) -> GateOutcome:
        raise SlurmError("sbatch: not found (is this a Slurm login node?)")

    deps = AfterMaintenanceDeps(
        fabric=lambda: Validation.of([], health=False),
        health=lambda nodes: Validation.of(nodes),
        gate=gate,
        slurm=admin_slurm(slurm),
    )
    result = run_after_maintenance(["gpu001"], deps)
    assert result.exit_code == 1
    assert [f.check for f in result.findings] == ["slurm.error"]
    # The gate could not run: nothing was judged, so nothing is proven (not a fault found).
    assert result.nodes["gpu001"]["verdict"] == "unknown"


def test_a_cable_whose_errors_climb_during_the_gate_keeps_its_node_out() -> None:
    """The counters read again after the gate (and its soak) are judged as deltas: gpu002's
    cable took symbol errors under the gate's traffic, so gpu002 is not admitted though its
    gate jobs passed, and gpu003 and gpu004 are."""
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, gate = _deps(slurm)
    reads: list[list[str]] = []

    def counters() -> Validation:
        reads.append(list(gate.ran_on))  # read after the gate ran
        return Validation(
            [
                Finding(
                    check="link.errors",
                    node="gpu002",
                    component="mlx5_1",
                    expected="SymbolErrorCounter +0 over the gate",
                    observed="+412",
                    message="gpu002 mlx5_1: SymbolErrorCounter +412 over the gate",
                )
            ]
        )

    deps.counters = counters
    result = run_bringup(NODES, deps, BringupOptions())
    assert reads == [NODES]
    assert [p.name for p in result.phases] == ["converge", "validate", "gate", "counters", "admit"]
    assert result.phases[3].status == "failed"
    assert result.nodes["gpu002"]["verdict"] == "fail"
    assert "link.errors" in slurm.drained["gpu002"]
    # gpu001's one multi-node job in this fake gate was with gpu002: it is not proven either.
    assert set(slurm.drained) == {"gpu001", "gpu002"}
    assert "gate.unproven" in slurm.drained["gpu001"]
    assert result.exit_code == 1


def test_without_the_gate_there_is_no_traffic_to_judge_counters_over() -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, _ = _deps(slurm)
    deps.counters = lambda: pytest.fail("counters read again without a gate")  # type: ignore[assignment,return-value]
    result = run_bringup(NODES, deps, BringupOptions(gate=False, admit_unproven=True))
    assert "counters" not in [p.name for p in result.phases]
