"""`node-check`: the node checks run on the node itself, and, as Slurm's HealthCheckProgram,
drain the node on failure and resume it once healthy, but only if node-check drained it and
re-proved, this time, every check its drain names (through the admission door).

Drain reasons are `cluster-tool: <check> <component> <what>[ (+N more: <ids>)]` (e.g.
`cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2`), written and judged by
`cluster_tool.drains`: node-check lifts only its own, and only when each id it names is one a
fresh reading re-proves (`registry.relift`: an Xid that rotated out of the log is not proof, a
DCGM failure needs DCGM run again); any other reason (an admin's, the gate's, a workflow's) is
never resumed here.

A job like the others: it runs the probes (`remote`), has them judged (`checks`) and acts in
Slurm, so it sits in the workflow layer above all three; it imports no other workflow, so the
HealthCheckProgram still starts light.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from cluster_tool.admission import Door, prove
from cluster_tool.checks.node import NodeExpectations, check_node
from cluster_tool.drains import Owner, health_reason, may_lift
from cluster_tool.findings import Finding
from cluster_tool.probes.node import health_probes
from cluster_tool.registry import NODE_CHECKS, node_checks_not_run
from cluster_tool.remote.fanout import LocalTransport, Target, Transport, TransportError, collect
from cluster_tool.slurm import Slurm
from cluster_tool.verdicts import HEALTH, NodeVerdict, Proof, judge_nodes

__all__ = [
    "NodeCheckRun",
    "SlurmAction",
    "health_drain_reason",
    "run_node_check",
    "slurm_health_action",
]


@dataclass(frozen=True)
class NodeCheckRun:
    """One node-check: its findings, and the node checks that did not run (and why): what a
    lift of its own drain may count as re-proven."""

    node: str
    findings: list[Finding]
    not_run: dict[str, str]


def run_node_check(
    expect: NodeExpectations,
    *,
    transport: Transport | None = None,
    dcgm: bool = False,
    timeout: float = 600.0,
) -> NodeCheckRun:
    """Run the probes on this machine (or through `transport`) and check them."""
    transport = transport or LocalTransport()
    results = collect(
        [(Target(expect.node), health_probes(dcgm=dcgm))],
        transport,
        concurrency=1,
        timeout=timeout,
    )
    result = results[expect.node]
    if not result.reachable:
        raise TransportError(result.error or "probes failed")
    findings = check_node(expect, result.outputs)
    unrun = node_checks_not_run(expect.node, findings, set(result.outputs))
    return NodeCheckRun(expect.node, findings, unrun)


@dataclass(frozen=True)
class SlurmAction:
    """What node-check did in Slurm: drained, resumed, updated the reason, or nothing."""

    action: str  # "drain", "resume", "none", "left" (drained by someone else), "kept"
    node: str
    reason: str | None = None
    previous_reason: str | None = None
    why: str | None = None  # why a drain of its own was kept ("kept")

    def to_json(self) -> dict[str, str | None]:
        return {
            "action": self.action,
            "node": self.node,
            "reason": self.reason,
            "previous_reason": self.previous_reason,
            "why": self.why,
        }


def health_drain_reason(node: str, findings: list[Finding]) -> str | None:
    """The drain reason when the node's verdict (cluster_tool.verdicts, on health, which is what
    node-check proves: its probes ran, or run_node_check raised) is not `pass`; else None."""
    verdict = _verdict(node, findings)
    # Not `pass` only on an error finding, so health_reason has one to name.
    return None if verdict.verdict == "pass" else health_reason(node, findings)


def _verdict(node: str, findings: list[Finding]) -> NodeVerdict:
    return judge_nodes([node], findings, Proof(passed={node: {HEALTH}}), (HEALTH,))[node]


def slurm_health_action(
    node: str,
    findings: list[Finding],
    slurm: Slurm,
    *,
    not_run: Mapping[str, str] | None = None,
) -> SlurmAction:
    """Drain the node with a structured reason when a check failed; when healthy, resume it only
    if node-check's own drain holds it and this run re-proved every check that drain names
    (`registry.relift`: run now, clean, and re-provable by a fresh reading: not an Xid that may
    have rotated out of the log). `not_run` are the node checks that did not run this time
    (None: unknown, so nothing counts as re-proven). Anyone else's drain is left alone."""
    door = Door(slurm, Owner.HEALTH)
    state = door.look([node]).get(node)
    drained = state is not None and state.drained
    current = state.reason if state is not None else ""
    reason = health_drain_reason(node, findings)
    if reason is not None:
        if drained and not may_lift(current, Owner.HEALTH):
            return SlurmAction("left", node, reason, current)
        if drained and current == reason:
            return SlurmAction("none", node, reason, current)
        door.hold([node], reason)
        return SlurmAction("drain", node, reason, current or None)
    if not drained:
        return SlurmAction("none", node)
    if not may_lift(current, Owner.HEALTH):
        return SlurmAction("left", node, None, current)
    unrun = (
        dict(not_run) if not_run is not None else {c: "not known to have run" for c in NODE_CHECKS}
    )
    proof = prove(
        [node],
        {node: _verdict(node, findings)},
        findings,
        planned={node: NODE_CHECKS},
        skipped={node: unrun},
        suites=("node",),
    )[node]
    if door.admit([proof]):
        return SlurmAction("resume", node, None, current)
    refusal = door.refused().get(node)
    return SlurmAction("kept", node, None, current, refusal.why if refusal else None)


def local_node_name() -> str:
    """This machine's short host name, as Slurm names nodes."""
    return socket.gethostname().split(".", 1)[0]
