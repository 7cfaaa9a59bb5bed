"""Validate after maintenance: after cables or switches were touched, the full fabric check, then
health and the gate on the nodes cabled to the named switch (from the cabling plan) or on the
given nodes; with `admit`, resume what passes and leave what fails drained with the reason."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster_tool.admission import WORKFLOW_SUITES, Door, prove
from cluster_tool.drains import PENDING_REASON, Owner, workflow_reason
from cluster_tool.errors import UsageError
from cluster_tool.fabric.plan import nodes_on_switch as fabric_nodes_on_switch
from cluster_tool.fabric.plan import plan_for
from cluster_tool.findings import Finding
from cluster_tool.nodes import select_gpu_nodes
from cluster_tool.registry import GATE_CHECKS
from cluster_tool.slurm import SlurmAdmin, SlurmError
from cluster_tool.spec.models import Cluster
from cluster_tool.verdicts import (
    FABRIC,
    GATE_MULTI,
    GATE_SINGLE,
    HEALTH,
    NodeVerdict,
    Proof,
    RunVerdict,
    Scope,
    judge_nodes,
    judge_run,
    may_admit,
    settle,
)
from cluster_tool.workflows.common import (
    GateOutcome,
    Hold,
    Phase,
    Validation,
    admit_proven,
    gate_phase,
    keeping_out,
    node_verdicts,
)


def nodes_on_switch(cluster: Cluster, switch: str) -> list[str]:
    """GPU nodes with an HCA cabled to `switch` (a leaf's own nodes; for a spine, the nodes of
    every leaf it links to), from the fabric check's plan; UsageError for an unknown switch."""
    plan = plan_for(cluster)
    found = fabric_nodes_on_switch(plan, switch)
    if found:
        return found
    known = sorted({r.leaf for r in plan.rows} | {link.spine for link in plan.links})
    shown = ", ".join(known[:6]) + (" …" if len(known) > 6 else "")
    raise UsageError(f"--switch {switch}: no such leaf or spine in the cabling plan ({shown})")


def select_after_maintenance(
    cluster: Cluster, switch: str | None, hostlist: str | None
) -> list[str]:
    """The nodes to re-check: those of a switch, or a hostlist of GPU nodes; exactly one."""
    if (switch is None) == (hostlist is None):
        raise UsageError("give exactly one of --switch NAME or --nodes HOSTLIST")
    if switch is not None:
        return nodes_on_switch(cluster, switch)
    return select_gpu_nodes(cluster, hostlist)


@dataclass
class AfterMaintenanceDeps:
    fabric: Callable[[], Validation]  # the whole fabric, every cable
    health: Callable[[Sequence[str]], Validation]
    gate: Callable[[Sequence[str]], GateOutcome]
    slurm: SlurmAdmin
    # The port counters read again after the gate, judged as deltas against the fabric read.
    counters: Callable[[], Validation] | None = None


@dataclass
class AfterMaintenanceResult:
    nodes: list[str]
    phases: list[Phase]
    findings: list[Finding]
    verdicts: dict[str, dict[str, Any]]
    busbw: list[dict[str, Any]] = field(default_factory=list)
    fabric_checked: bool = True
    judged: dict[str, NodeVerdict] = field(default_factory=dict)
    admitted_unproven: list[str] = field(default_factory=list)
    gated: list[str] = field(default_factory=list)

    @property
    def run(self) -> RunVerdict:
        return judge_run(
            self.phases, self.findings, self.judged, admitted_unproven=self.admitted_unproven
        )

    @property
    def exit_code(self) -> int:
        return self.run.exit_code


def run_after_maintenance(
    nodes: Sequence[str],
    deps: AfterMaintenanceDeps,
    *,
    admit: bool = False,
    gate: bool = True,
    admit_unproven: bool = False,
    others: Sequence[str] = (),
    reservation: str = "cluster-tool-validate",
) -> AfterMaintenanceResult:
    """Fabric (all of it), then health and the gate on `nodes`; admit what is proven if asked.
    `others` are the cluster's other GPU nodes: a lone node's pair partner comes from them.
    With `admit`, the operator's word lifts the drains the nodes had when the run began, never
    one set during it (the admission door's rule)."""
    phases: list[Phase] = []
    door = Door(deps.slurm, Owner.WORKFLOW, operator_says=admit)
    if admit:
        door.look(list(nodes))  # what the operator's word covers: the drains of now
    started = time.monotonic()
    fabric = deps.fabric()
    findings = list(fabric.findings)
    phases.append(
        Phase(
            "fabric",
            "failed" if any(f.fails for f in fabric.findings) else "passed",
            round(time.monotonic() - started, 1),
            f"{sum(1 for f in fabric.findings if f.fails)} error(s)",
        )
    )
    started = time.monotonic()
    health = deps.health(nodes)
    findings += health.findings
    planned = {**fabric.planned, **health.planned}
    skipped = {**fabric.skipped, **health.skipped}
    members = set(nodes)
    bad = {f.node for f in findings if f.fails and f.node in members}
    phases.append(
        Phase(
            "health",
            "failed" if any(f.fails for f in health.findings) else "passed",
            round(time.monotonic() - started, 1),
            f"{len(nodes)} node(s)",
        )
    )
    proof = Proof()
    unreachable = set(health.unreachable)
    proof.add(HEALTH, [n for n in nodes if n not in unreachable])
    if fabric.fabric_checked:
        proof.add(FABRIC, nodes)
    else:
        proof.not_run[FABRIC] = "the fabric was not checked"
    busbw: list[dict[str, Any]] = []
    gate_nodes = [n for n in nodes if n not in bad]
    if gate and gate_nodes:
        # With --admit the nodes may still be drained from the maintenance, by anyone: --admit
        # is the operator's word to lift it for the gate. Out of service again until the
        # verdict: admission below resumes the proven.
        hold = Hold(reservation, gate_nodes, hold_again=PENDING_REASON) if admit else None
        outcome, phase = gate_phase(door, deps.gate, gate_nodes, proof, outside=others, hold=hold)
        findings += outcome.findings
        busbw = outcome.busbw
        phases.append(phase)
        if deps.counters is not None:
            started = time.monotonic()
            after = deps.counters()
            findings += after.findings
            phases.append(
                Phase(
                    "counters",
                    "failed" if any(f.fails for f in after.findings) else "passed",
                    round(time.monotonic() - started, 1),
                    "port counters as deltas over the gate",
                )
            )
    else:
        why = "--no-gate" if not gate else "no node left"
        proof.not_run[GATE_SINGLE] = proof.not_run[GATE_MULTI] = why
        phases.append(Phase("gate", "skipped", detail=why))
    gated = set(gate_nodes) if gate else set()
    for n in nodes:
        planned[n] = (*planned.get(n, ()), *GATE_CHECKS)
        if n not in gated:
            skipped.setdefault(n, {}).update(
                dict.fromkeys(GATE_CHECKS, "the node was not gated in this run")
            )
    judged, unproven = settle(nodes, findings, proof)
    findings += unproven
    admitted: list[str] | None = None
    waived: list[str] = []
    if admit:
        admitted = [n for n in nodes if may_admit(judged[n], admit_unproven=admit_unproven)]
        waived = [n for n in admitted if judged[n].verdict != "pass"]
        resumed = set(admitted)
        kept = [n for n in nodes if n not in resumed]
        index = Scope(nodes)
        for node in kept:
            door.hold([node], workflow_reason(keeping_out(node, findings, index)))
        # --admit is the operator's word: what is proven comes back, whoever had drained it
        # when the run began; a drain set during the run is its owner's to lift.
        proofs = prove(
            nodes,
            judged,
            findings,
            planned=planned,
            skipped=skipped,
            suites=WORKFLOW_SUITES,
            waived=waived,
        )
        admitted, refused = admit_proven(door, admitted, proofs)
        if refused:
            findings += refused
            waived = [n for n in waived if n in admitted]
            kept = [n for n in nodes if n not in admitted]
            judged = judge_nodes(nodes, findings, proof)
        phases.append(
            Phase("admit", "failed" if kept else "passed", 0.0, f"{len(admitted)} resumed")
        )
    states = None
    try:
        states = {s.name: s for s in deps.slurm.node_states(list(nodes))}
    except SlurmError:  # the verdicts stand without Slurm's view; the findings say why
        states = None
    return AfterMaintenanceResult(
        list(nodes),
        phases,
        findings,
        node_verdicts(judged, states, admitted=admitted),
        busbw,
        fabric.fabric_checked,
        judged,
        waived,
        gate_nodes if gate else [],
    )
