"""`node-check`: the node checks run on the node itself, and, as Slurm's HealthCheckProgram,
drain the node on failure and resume it once healthy, but only if node-check drained it.

Drain reasons are `cluster-tool: <check> <component> <what>` (e.g. `cluster-tool: gpu.ecc
GPU3 volatile uncorrectable 2`), written and judged by `cluster_tool.drains`: node-check lifts
only its own; any other reason (an admin's, the gate's, a workflow's) is never resumed here.

A job like the others: it runs the probes (`remote`), has them judged (`checks`) and acts in
Slurm, so it sits in the workflow layer above all three; it imports no other workflow, so the
HealthCheckProgram still starts light.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from cluster_tool.checks.node import NodeExpectations, check_node
from cluster_tool.drains import Owner, health_reason, may_lift
from cluster_tool.findings import Finding
from cluster_tool.probes import Probe
from cluster_tool.probes.node import HEALTH_PROBES
from cluster_tool.remote.fanout import LocalTransport, Target, Transport, TransportError, collect
from cluster_tool.slurm import Slurm

__all__ = [
    "SlurmAction",
    "health_drain_reason",
    "probes_for_node_check",
    "run_node_check",
    "slurm_health_action",
]


def probes_for_node_check(*, dcgm: bool = False) -> tuple[Probe, ...]:
    """Health probes for a periodic check: DCGM's diag only on request (it loads the GPUs)."""
    return tuple(p for p in HEALTH_PROBES if dcgm or p.name != "dcgmi-diag")


def run_node_check(
    expect: NodeExpectations,
    *,
    transport: Transport | None = None,
    dcgm: bool = False,
    timeout: float = 600.0,
) -> list[Finding]:
    """Run the probes on this machine (or through `transport`) and check them."""
    transport = transport or LocalTransport()
    results = collect(
        [(Target(expect.node), probes_for_node_check(dcgm=dcgm))],
        transport,
        concurrency=1,
        timeout=timeout,
    )
    result = results[expect.node]
    if not result.reachable:
        raise TransportError(result.error or "probes failed")
    return check_node(expect, result.outputs)


@dataclass(frozen=True)
class SlurmAction:
    """What node-check did in Slurm: drained, resumed, updated the reason, or nothing."""

    action: str  # "drain", "resume", "none", "left" (drained by someone else)
    node: str
    reason: str | None = None
    previous_reason: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "action": self.action,
            "node": self.node,
            "reason": self.reason,
            "previous_reason": self.previous_reason,
        }


def health_drain_reason(node: str, findings: list[Finding]) -> str | None:
    """The drain reason when the node's verdict (cluster_tool.verdicts, on health, which is what
    node-check proves: its probes ran, or run_node_check raised) is not `pass`; else None."""
    from cluster_tool.verdicts import HEALTH, Proof, judge_nodes

    verdict = judge_nodes([node], findings, Proof(passed={node: {HEALTH}}), (HEALTH,))[node]
    # Not `pass` only on an error finding, so health_reason has one to name.
    return None if verdict.verdict == "pass" else health_reason(node, findings)


def slurm_health_action(node: str, findings: list[Finding], slurm: Slurm) -> SlurmAction:
    """Drain the node with a structured reason when a check failed; resume it when healthy
    and node-check's own reason is what holds it; leave anyone else's drain alone."""
    states = {s.name: s for s in slurm.node_states([node])}
    state = states.get(node)
    drained = state is not None and state.drained
    current = state.reason if state is not None else ""
    reason = health_drain_reason(node, findings)
    if reason is not None:
        if drained and not may_lift(current, Owner.HEALTH):
            return SlurmAction("left", node, reason, current)
        if drained and current == reason:
            return SlurmAction("none", node, reason, current)
        slurm.drain([node], reason)
        return SlurmAction("drain", node, reason, current or None)
    if drained and may_lift(current, Owner.HEALTH):
        slurm.resume([node])
        return SlurmAction("resume", node, None, current)
    if drained:
        return SlurmAction("left", node, None, current)
    return SlurmAction("none", node)


def local_node_name() -> str:
    """This machine's short host name, as Slurm names nodes."""
    return socket.gethostname().split(".", 1)[0]
