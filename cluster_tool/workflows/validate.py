"""Validate after maintenance: after cables or switches were touched, the full fabric check, then
health and the gate on the nodes cabled to the named switch (from the cabling plan) or on the
given nodes; with `admit`, resume what passes and leave what fails drained with the reason."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cluster_tool.admission import WORKFLOW_SUITES, Door, prove
from cluster_tool.drains import PENDING_REASON, Owner, workflow_reason
from cluster_tool.errors import UsageError
from cluster_tool.fabric.plan import nodes_on_switch as fabric_nodes_on_switch
from cluster_tool.fabric.plan import plan_for
from cluster_tool.nodes import select_gpu_nodes
from cluster_tool.registry import GATE_CHECKS
from cluster_tool.slurm import SlurmAdmin, SlurmError
from cluster_tool.spec.models import Cluster
from cluster_tool.verdicts import (
    FABRIC,
    GATE_MULTI,
    GATE_SINGLE,
    HEALTH,
    Scope,
    judge_nodes,
    may_admit,
    settle,
)
from cluster_tool.workflows.common import (
    GateOutcome,
    Hold,
    PhaseResult,
    RunPhase,
    RunResult,
    Validation,
    admit_proven,
    gate_phase,
    keeping_out,
    node_verdicts,
    run_phase,
    skip_phase,
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


# Validation after maintenance gives the workflows' one result type; `validated` are the nodes
# it checked, `nodes` their summary entries, `verdicts` the verdicts those come from.
AfterMaintenanceResult = RunResult


def run_after_maintenance(
    nodes: Sequence[str],
    deps: AfterMaintenanceDeps,
    *,
    admit: bool = False,
    gate: bool = True,
    admit_unproven: bool = False,
    others: Sequence[str] = (),
    reservation: str = "cluster-tool-validate",
) -> RunResult:
    """Fabric (all of it), then health and the gate on `nodes`, each a phase over the run's one
    result; admit what is proven if asked. `others` are the cluster's other GPU nodes: a lone
    node's pair partner comes from them. With `admit`, the operator's word lifts the drains the
    nodes had when the run began, never one set during it (the admission door's rule)."""
    run = RunResult(validated=list(nodes))
    door = Door(deps.slurm, Owner.WORKFLOW, operator_says=admit)
    if admit:
        door.look(list(nodes))  # what the operator's word covers: the drains of now

    def fabric(run: RunResult) -> PhaseResult:
        read = deps.fabric()
        run.take(read)
        run.fabric_checked = read.fabric_checked
        return PhaseResult(
            "failed" if any(f.fails for f in read.findings) else "passed",
            f"{sum(1 for f in read.findings if f.fails)} error(s)",
            proven={FABRIC: list(nodes) if read.fabric_checked else []},
            not_run={} if read.fabric_checked else {FABRIC: "the fabric was not checked"},
        )

    def health(run: RunResult) -> PhaseResult:
        read = deps.health(nodes)
        run.take(read)
        return PhaseResult(
            "failed" if any(f.fails for f in read.findings) else "passed",
            f"{len(nodes)} node(s)",
            proven={HEALTH: [n for n in nodes if n not in set(read.unreachable)]},
        )

    run_phase(run, RunPhase("fabric", (FABRIC,), fabric))
    run_phase(run, RunPhase("health", (HEALTH,), health))
    members = set(nodes)
    bad = {f.node for f in run.findings if f.fails and f.node in members}
    gate_nodes = [n for n in nodes if n not in bad]
    if gate and gate_nodes:
        # With --admit the nodes may still be drained from the maintenance, by anyone: --admit
        # is the operator's word to lift it for the gate. Out of service again until the
        # verdict: admission below resumes the proven.
        hold = Hold(reservation, gate_nodes, hold_again=PENDING_REASON) if admit else None
        run_phase(run, gate_phase(door, deps.gate, gate_nodes, outside=others, hold=hold))
        if deps.counters is not None:
            run_phase(run, _counters(deps.counters))
        run.gated = gate_nodes
    else:
        skip_phase(
            run, "gate", (GATE_SINGLE, GATE_MULTI), "--no-gate" if not gate else "no node left"
        )
    gated = set(run.gated)
    run.plan([n for n in nodes if n in gated], GATE_CHECKS, unrun=None)
    run.plan(
        [n for n in nodes if n not in gated],
        GATE_CHECKS,
        unrun="the node was not gated in this run",
    )
    run.verdicts, unproven = settle(nodes, run.findings, run.proof)
    run.findings += unproven
    admitted: list[str] | None = None
    if admit:
        admitted = []
        run_phase(run, _admit(door, nodes, admit_unproven, admitted))
    try:
        states = {s.name: s for s in deps.slurm.node_states(list(nodes))}
    except SlurmError:  # the verdicts stand without Slurm's view; the findings say why
        states = None
    run.nodes = node_verdicts(run.verdicts, states, admitted=admitted)
    return run


def _counters(read: Callable[[], Validation]) -> RunPhase:
    """The port counters read again after the gate, judged as deltas against the fabric read."""

    def counters(run: RunResult) -> PhaseResult:
        after = read()
        run.take(Validation(after.findings, after.unreachable, after.fabric_checked, after.planned))
        return PhaseResult(
            "failed" if any(f.fails for f in after.findings) else "passed",
            "port counters as deltas over the gate",
        )

    return RunPhase("counters", (), counters)


def _admit(door: Door, nodes: Sequence[str], admit_unproven: bool, admitted: list[str]) -> RunPhase:
    """--admit: what is proven comes back through the door, whoever had drained it when the run
    began (the operator's word); a drain set during the run is its owner's to lift; what is not
    proven stays drained with the finding that keeps it out."""

    def admit(run: RunResult) -> PhaseResult:
        judged = run.verdicts
        chosen = [n for n in nodes if may_admit(judged[n], admit_unproven=admit_unproven)]
        waived = [n for n in chosen if judged[n].verdict != "pass"]
        index = Scope(nodes)
        for node in (n for n in nodes if n not in chosen):
            door.hold([node], workflow_reason(keeping_out(node, run.findings, index)))
        proofs = prove(
            nodes,
            judged,
            run.findings,
            planned=run.planned,
            skipped=run.skipped,
            suites=WORKFLOW_SUITES,
            waived=waived,
        )
        chosen, refused = admit_proven(door, chosen, proofs)
        if refused:
            run.findings += refused
            waived = [n for n in waived if n in chosen]
            run.verdicts = judge_nodes(nodes, run.findings, run.proof)
        run.admitted_unproven = waived
        admitted[:] = chosen
        kept = [n for n in nodes if n not in chosen]
        return PhaseResult("failed" if kept else "passed", f"{len(chosen)} resumed")

    return RunPhase("admit", (), admit)
