"""`node-check`: the node checks run on the node itself, and, as Slurm's HealthCheckProgram,
drain the node on failure and resume it once healthy, but only if node-check drained it.

Drain reasons are `cluster-tool: <check> <component> <what>` (e.g. `cluster-tool: gpu.ecc
GPU3 volatile uncorrectable 2`). A reason of that shape is node-check's own; any other reason
(an admin's, the gate's `cluster-tool gate: ...`, bring-up's `cluster-tool: pending
validation`) is never resumed here.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from cluster_tool.checks.node import NodeExpectations, check_node
from cluster_tool.findings import Finding
from cluster_tool.remote.fanout import LocalTransport, Target, Transport, TransportError, collect
from cluster_tool.remote.probes import HEALTH_PROBES, Probe
from cluster_tool.slurm import Slurm

__all__ = [
    "REASON_PREFIX",
    "SlurmAction",
    "drain_reason",
    "health_drain_reason",
    "is_own_reason",
    "probes_for_node_check",
    "run_node_check",
    "slurm_health_action",
]

REASON_PREFIX = "cluster-tool: "
# node-check's own reasons: the id, then a space or nothing. The workflows write `ID:` after
# the same prefix (a gate or validate-after drain), which node-check re-proves nothing of.
_OWN = re.compile(r"^cluster-tool: (?:gpu|ib|gdr|nccl|os|slurm)\.[a-z0-9-]+(?: |$)")
_MAX_REASON = 200


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


def drain_reason(node: str, findings: list[Finding]) -> str | None:
    """`cluster-tool: gpu.ecc GPU3 volatile uncorrectable 2 (+2 more)`, or None when healthy."""
    errors = [f for f in findings if f.fails]
    if not errors:
        return None
    first = errors[0]
    text = first.message
    for prefix in (f"{node} {first.component}: ", f"{node}: ", f"{node} "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    parts = [first.check, first.component or "", text]
    reason = REASON_PREFIX + " ".join(p for p in parts if p)
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    # Slurm keeps the reason on one line; keep it short enough for sinfo to show.
    reason = " ".join(reason.split())
    if len(reason) + len(more) > _MAX_REASON:
        reason = reason[: _MAX_REASON - len(more) - 3] + "..."
    return reason + more


def is_own_reason(reason: str) -> bool:
    """True for a drain reason node-check wrote (and so may lift)."""
    return bool(_OWN.match(reason))


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
    # Not `pass` only on an error finding, so drain_reason has one to name.
    return None if verdict.verdict == "pass" else drain_reason(node, findings)


def slurm_health_action(node: str, findings: list[Finding], slurm: Slurm) -> SlurmAction:
    """Drain the node with a structured reason when a check failed; resume it when healthy
    and node-check's own reason is what holds it; leave anyone else's drain alone."""
    states = {s.name: s for s in slurm.node_states([node])}
    state = states.get(node)
    drained = state is not None and state.drained
    current = state.reason if state is not None else ""
    reason = health_drain_reason(node, findings)
    if reason is not None:
        if drained and not is_own_reason(current):
            return SlurmAction("left", node, reason, current)
        if drained and current == reason:
            return SlurmAction("none", node, reason, current)
        slurm.drain([node], reason)
        return SlurmAction("drain", node, reason, current or None)
    if drained and is_own_reason(current):
        slurm.resume([node])
        return SlurmAction("resume", node, None, current)
    if drained:
        return SlurmAction("left", node, None, current)
    return SlurmAction("none", node)


def local_node_name() -> str:
    """This machine's short host name, as Slurm names nodes."""
    return socket.gethostname().split(".", 1)[0]
