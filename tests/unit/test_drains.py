"""Whose drain may be lifted: one rule (cluster_tool.drains), the same for every caller.

The reasons below the builders were copied from `sinfo -R` of lab runs of earlier releases:
a drain written by an older cluster-tool must still be recognised after an upgrade."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from cluster_tool.admission import Door
from cluster_tool.drains import (
    PENDING_REASON,
    REASON_MAX,
    REIMAGE_REASON,
    Owner,
    gate_reason,
    health_reason,
    is_ours,
    may_lift,
    owner,
    step_reason,
    watch_check,
    watch_reason,
    workflow_reason,
)
from cluster_tool.findings import Finding
from cluster_tool.slurm import AdminSlurm, NodeState
from cluster_tool.workflows.node_check import slurm_health_action
from tests.unit.workflows.fakes import SlurmCluster, complete_proof

IDS = st.sampled_from(
    ["gpu.ecc", "gpu.xid", "ib.state", "nccl.pair", "nccl.fleet", "gate.unproven",
     "fabric.swapped", "os.unreachable", "slurm.unavailable", "reimage.boot"]
)  # fmt: skip
# Text from nodes and the fabric: any characters, control and escape characters included.
TEXT = st.text(max_size=400)


def finding(check: str, message: str, node: str = "gpu003") -> Finding:
    return Finding(check=check, severity="error", node=node, component="GPU3", message=message)


def tool_reasons() -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda c, m: workflow_reason([finding(c, m)]), IDS, TEXT),
        st.builds(lambda c, m: workflow_reason([finding(c, m)], by=Owner.REIMAGE), IDS, TEXT),
        st.builds(lambda c, m: health_reason("gpu003", [finding(c, m)]) or "", IDS, TEXT),
        st.builds(lambda c, w, p: gate_reason(c, w, p), IDS, TEXT, st.lists(st.just("gpu004"))),
        st.builds(step_reason, st.sampled_from(["power", "boot", "converge"]), TEXT),
        st.builds(watch_reason, IDS, st.one_of(st.none(), TEXT), TEXT),
        st.just(PENDING_REASON),
        st.just(REIMAGE_REASON),
    )


@given(tool_reasons())
def test_every_reason_the_tool_writes_is_its_own_one_line_and_short(reason: str) -> None:
    assert is_ours(reason), reason
    assert len(reason) <= REASON_MAX
    assert not any(ch in reason for ch in "\n\r\t\x1b\x00\x7f")


# What operators and other tools write.
OPERATOR = [
    "RMA",
    "bad PSU, ticket 4411",
    "cluster-tool",
    "cluster-tool:",
    "cluster-toolkit: upgrade",
    "Cluster-tool: gpu.ecc GPU3",
    "maintenance by the cluster-tool team",
    "cluster-tool: please leave drained (ops)",
    "NHC: check_hw_ib: No IB port mlx5_0:1 is ACTIVE",
    "Kill task failed",
    "cluster-tool watch",
    "cluster-tool watch: leave it (ops)",
]


@given(st.text(alphabet=string.printable, max_size=80).filter(lambda t: "cluster-tool" not in t))
def test_no_reason_without_the_tools_prefix_is_ours(reason: str) -> None:
    assert not is_ours(reason)
    assert not may_lift(reason, Owner.WORKFLOW) and not may_lift(reason, Owner.HEALTH)


def test_operators_reasons_are_not_ours_and_earlier_releases_reasons_are() -> None:
    assert [r for r in OPERATOR if is_ours(r)] == []
    earlier = {
        "cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2": Owner.HEALTH,
        "cluster-tool: pending validation": Owner.WORKFLOW,
        "cluster-tool: nccl.fleet: 2 of 4 nodes failed": Owner.WORKFLOW,
        "cluster-tool gate: nccl.pair 212 GB/s < 333 GB/s with gpu004 and gpu019": Owner.GATE,
        "cluster-tool reimage: in progress": Owner.REIMAGE,
        "cluster-tool reimage: boot: no SSH after 600 s": Owner.REIMAGE,
    }
    assert {r: owner(r) for r in earlier} == earlier


def test_node_check_lifts_only_its_own_a_workflow_any_of_ours_the_operator_anything() -> None:
    health = health_reason("gpu003", [finding("gpu.ecc", "gpu003 GPU3: volatile 2")]) or ""
    others = [
        PENDING_REASON,
        REIMAGE_REASON,
        gate_reason("nccl.pair", "90 GB/s < 333 GB/s", ["gpu004"]),
        workflow_reason([finding("gpu.ecc", "volatile 2")]),
    ]
    assert may_lift(health, Owner.HEALTH)
    assert [r for r in others if may_lift(r, Owner.HEALTH)] == []
    assert all(may_lift(r, Owner.WORKFLOW) for r in [health, *others])
    assert [r for r in OPERATOR if may_lift(r, Owner.WORKFLOW)] == []
    assert all(may_lift(r, Owner.WORKFLOW, operator_says=True) for r in OPERATOR)


class OneNode:
    """node-check's Slurm: one node, drained with `reason`."""

    def __init__(self, reason: str) -> None:
        self.state = NodeState("gpu003", "IDLE", reason, frozenset({"DRAIN"}))
        self.resumed = False

    def node_states(self, nodes: object) -> list[NodeState]:
        return [self.state]

    def resume(self, nodes: object) -> None:
        self.resumed = True

    def drain(self, nodes: object, reason: str) -> None:
        raise AssertionError("a healthy node is not drained")


def test_every_caller_decides_by_the_same_rule() -> None:
    """node-check (HealthCheckProgram), bring-up's admission (the door without the operator's
    word) and validate-after --admit (with it), each against the same drains."""
    health = health_reason("gpu003", [finding("gpu.ecc", "gpu003 GPU3: volatile 2")]) or ""
    reasons = [health, PENDING_REASON, gate_reason("nccl.pair", "90 GB/s", ["gpu004"]), *OPERATOR]
    for reason in reasons:
        slurm = OneNode(reason)
        action = slurm_health_action("gpu003", [], slurm, not_run={})  # type: ignore[arg-type]
        assert (action.action == "resume") == may_lift(reason, Owner.HEALTH), reason
        for operator_says in (False, True):
            fake = SlurmCluster(["gpu003"], drained={"gpu003": reason})
            door = Door(AdminSlurm(fake), Owner.WORKFLOW, operator_says=operator_says)
            door.look(["gpu003"])  # the run's first look: what the operator's word covers
            resumed = door.admit([complete_proof("gpu003")])
            lifted = may_lift(reason, Owner.WORKFLOW, operator_says=operator_says)
            assert (resumed == ["gpu003"]) == lifted, (reason, operator_says)
            assert ("gpu003" in fake.drained) != lifted


@given(IDS, st.one_of(st.none(), TEXT), TEXT)
def test_a_watch_drain_names_its_finding_and_only_a_workflow_lifts_it(
    check: str, component: str | None, message: str
) -> None:
    """The watcher's drain carries the finding id first (re-image and validate-after read it);
    node-check, which re-proves only its own checks, leaves it alone."""
    reason = watch_reason(check, component, message)
    assert owner(reason) is Owner.WATCH
    assert watch_check(reason) == check
    assert not may_lift(reason, Owner.HEALTH)
    assert may_lift(reason, Owner.WORKFLOW)


def test_watch_check_reads_only_the_watchers_drains() -> None:
    assert watch_check("cluster-tool watch: link.flap mlx5_0: gpu003 mlx5_0 down 3 times") == (
        "link.flap"
    )
    others = [*OPERATOR, PENDING_REASON, workflow_reason([finding("gpu.ecc", "volatile 2")])]
    assert [r for r in others if watch_check(r) is not None] == []
