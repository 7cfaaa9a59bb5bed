"""Bring-up: render → site.yml through ansible-runner → health + fabric validation → the gate →
admission. New nodes wait in Slurm drained ("cluster-tool: pending validation") and are resumed
only once they pass; a node that fails stays drained with the reason. A host that fails to
converge does not stop the others (the playbook tolerates failures, the recap names them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cluster_tool.admission import WORKFLOW_SUITES, Door, prove
from cluster_tool.ansible.runner import PlaybookEvent, PlaybookResult
from cluster_tool.bounds import expand_hostlist
from cluster_tool.drains import PENDING_REASON, Owner, workflow_reason
from cluster_tool.findings import Finding
from cluster_tool.registry import GATE_CHECKS
from cluster_tool.slurm import NodeState, SlurmAdmin, SlurmError
from cluster_tool.verdicts import (
    CONVERGE,
    FABRIC,
    GATE_MULTI,
    GATE_SINGLE,
    HEALTH,
    Scope,
    judge_nodes,
    may_admit,
    only_unproven,
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

# What bring-up must prove of a node before it enters service (and, check by check, the
# admission door's WORKFLOW_SUITES).
BRINGUP_PROOF = (CONVERGE, HEALTH, FABRIC, GATE_SINGLE, GATE_MULTI)

# Converge failures tolerated per play batch: all of them, so healthy hosts carry on; the
# recap says which failed and those are left out of admission.
TOLERATE_ALL = 100


class Converge(Protocol):
    def __call__(
        self,
        *,
        limit: str | None,
        tags: str | None,
        check: bool,
        diff: bool,
        on_event: Callable[[PlaybookEvent], None] | None,
    ) -> PlaybookResult: ...


@dataclass
class BringupDeps:
    """The edges bring-up drives; unit tests hand fakes, the CLI the real ones."""

    converge: Converge
    validate: Callable[[Sequence[str]], Validation]
    gate: Callable[[Sequence[str]], GateOutcome]
    slurm: SlurmAdmin
    # The port counters read again after the gate (and its burn-in soak), judged as deltas
    # against the validation's read: a cable whose errors climb under traffic.
    counters: Callable[[], Validation] | None = None


@dataclass(frozen=True)
class BringupOptions:
    limit: str | None = None
    phase: str | None = None
    check: bool = False
    diff: bool = False
    gate: bool = True
    # The operator's explicit word: admit a node whose only gap is the gate's proof.
    admit_unproven: bool = False


# Bring-up's result is the workflows' one result type.
BringupResult = RunResult


class PhaseProgress:
    """Hosts done/failed per play, from runner events; `emit` gets one line per change worth
    a glance (the CLI hands `output.progress`, silent off a TTY)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.play: str | None = None
        self.done: set[str] = set()
        self.failed: set[str] = set()
        self.tallies: list[tuple[str, int, int]] = []

    def __call__(self, event: PlaybookEvent) -> None:
        if event.event == "playbook_on_play_start":
            self._close()
            self.play = event.play
            self.emit(f"▶ {event.play}")
            return
        if event.host is None:
            if event.event == "playbook_on_stats":
                self._close()
            return
        if event.failed or event.unreachable:
            if event.host not in self.failed:
                why = "unreachable" if event.unreachable else f"{event.task}: {event.message or ''}"
                self.emit(f"  ✗ {event.host}: {why.strip()}"[:300])
            self.failed.add(event.host)
        elif event.event.startswith("runner_on_"):
            self.done.add(event.host)

    def _close(self) -> None:
        if self.play is None:
            return
        ok = len(self.done - self.failed)
        self.tallies.append((self.play, ok, len(self.failed)))
        self.emit(f"  {self.play}: {ok} host(s) done, {len(self.failed)} failed")
        self.play, self.done, self.failed = None, set(), set()


def converge_findings(result: PlaybookResult) -> list[Finding]:
    """One finding per host that failed or was unreachable, naming its first failing task."""
    first: dict[str, PlaybookEvent] = {}
    for e in result.failures():
        if e.host and e.host not in first:
            first[e.host] = e
    findings = []
    for host in sorted(set(result.failed_hosts) | set(result.unreachable_hosts)):
        event = first.get(host)
        unreachable = host in result.unreachable_hosts
        task = event.task if event else None
        text = (event.message or "").strip() if event else ""
        msg = text.splitlines()[0][:200] if text else ""
        findings.append(
            Finding(
                check="os.unreachable" if unreachable else "ansible.converge",
                node=host,
                component=task,
                expected="converged",
                observed="unreachable" if unreachable else msg or "failed",
                message=f"{host}: "
                + ("unreachable over SSH" if unreachable else f"task '{task}' failed: {msg}"),
            )
        )
    return findings


def _states(door: Door, nodes: Sequence[str]) -> dict[str, NodeState]:
    try:
        return door.look(nodes)
    except SlurmError:
        return {}


def run_bringup(
    gpu_nodes: Sequence[str],
    deps: BringupDeps,
    options: BringupOptions,
    *,
    on_event: Callable[[PlaybookEvent], None] | None = None,
    reservation: str = "cluster-tool-bringup",
) -> RunResult:
    """Converge, validate, gate and admit, each a phase over the run's one result (the runner
    times and records each and adds what it proved); partial failure leaves the healthy nodes
    admitted."""
    run = RunResult()
    door = Door(deps.slurm, Owner.WORKFLOW)
    scope = list(gpu_nodes)
    if options.limit:
        wanted = set(expand_hostlist(options.limit, "--limit"))
        scope = [n for n in gpu_nodes if n in wanted]

    # Which nodes are new is read before the converge: once their slurmd starts they look idle.
    before = {} if options.check or options.phase else _states(door, scope)
    # New: unknown to Slurm, down (a re-imaged node coming back) or held by cluster-tool. A node
    # an operator drained for their own reason is converged and checked but stays theirs.
    new = [
        n
        for n in scope
        if n not in before or (not before[n].usable and not door.held_by_others(before[n]))
    ]
    known_new = [n for n in new if n in before]
    if known_new:
        # Already in slurm.conf (a re-run, a re-imaged node): drained before slurmd can come up.
        _try_hold(door, known_new, PENDING_REASON)

    failed_hosts: set[str] = set()

    def converge(run: RunResult) -> PhaseResult:
        result = deps.converge(
            limit=options.limit,
            tags=options.phase,
            check=options.check,
            diff=options.diff,
            on_event=on_event,
        )
        run.converge = result
        bad = converge_findings(result)
        run.findings += bad
        failed_hosts.update(f.node for f in bad if f.node)
        if not (options.check or options.phase):
            # A node that failed to converge stays out of service with the reason, even when
            # its slurmd came up (the slurm phase runs before the phase that failed it).
            for node in (n for n in scope if n in failed_hosts):
                _try_hold(door, [node], workflow_reason([f for f in bad if f.node == node]))
        return PhaseResult(
            "failed" if failed_hosts or (result.rc != 0 and not result.hosts) else "passed",
            f"{len(result.hosts)} host(s), {result.changed_total} change(s), "
            f"{len(failed_hosts)} failed",
            proven={CONVERGE: [n for n in scope if n in result.hosts and n not in failed_hosts]},
        )

    run_phase(run, RunPhase("converge", (CONVERGE,), converge))
    reached = [n for n in scope if CONVERGE in run.proof.passed.get(n, set())]
    if options.check or options.phase or not reached:
        # A dry run or a single phase converges only, and validating a half-built node (or
        # none, when the preflight stopped the play) says nothing.
        why = (
            "--check"
            if options.check
            else f"--phase {options.phase}"
            if options.phase
            else "the converge reached no GPU node"
        )
        skip_phase(run, "validate", (HEALTH, FABRIC, GATE_SINGLE, GATE_MULTI), why)
        states = {} if options.check or options.phase else _states(door, scope)
        # --check and --phase set out to prove the converge only (and admit nothing); a
        # converge that reached no node leaves the full proof owed.
        owed = (CONVERGE,) if options.check or options.phase else BRINGUP_PROOF
        run.verdicts = judge_nodes(scope, run.findings, run.proof, owed)
        run.nodes = node_verdicts(run.verdicts, states)
        return run

    # Admission starts drained: nodes not yet in service wait for validation.
    candidates = [n for n in scope if n not in failed_hosts]
    pending = [n for n in new if n in candidates]
    if pending:
        door.hold(pending, PENDING_REASON)
    health_bad: set[str] = set()

    def validate(run: RunResult) -> PhaseResult:
        validation = deps.validate(candidates)
        run.take(validation)
        run.fabric_checked = validation.fabric_checked
        health_bad.update(f.node for f in validation.findings if f.fails and f.node)
        out = set(validation.unreachable)
        return PhaseResult(
            "failed" if health_bad or validation.unreachable else "passed",
            f"{len(candidates)} node(s) checked, {len(health_bad)} failed",
            proven={
                HEALTH: [n for n in candidates if n not in out],
                FABRIC: candidates if validation.fabric_checked else [],
            },
            not_run={} if validation.fabric_checked else {FABRIC: "the fabric was not checked"},
        )

    run_phase(run, RunPhase("validate", (HEALTH, FABRIC), validate))
    run.validated = candidates

    # Slurm starts no gate job on a node an operator holds drained: it is checked, not gated.
    held = {n for n in candidates if n in before and door.held_by_others(before[n])}
    gate_nodes = [n for n in candidates if n not in health_bad and n not in held]
    if options.gate and gate_nodes:
        # Only the tool's own holds are lifted: an operator's drain is theirs (the nodes they
        # hold are not gated at all). Held again until admission, below, resumes the proven.
        hold = Hold(
            reservation,
            lift=[n for n in gate_nodes if n in pending],
            hold_again=PENDING_REASON,
        )
        members = set(scope)
        outside = [n for n in gpu_nodes if n not in members]
        run_phase(run, gate_phase(door, deps.gate, gate_nodes, outside=outside, hold=hold))
        if deps.counters is not None and run.fabric_checked:
            run_phase(run, _counters_phase(deps.counters, scope))
        run.gated = gate_nodes
    else:
        why = "--no-gate" if not options.gate else "no node passed validation"
        skip_phase(run, "gate", (GATE_SINGLE, GATE_MULTI), why)
    gated = set(run.gated)
    run.plan([n for n in candidates if n in gated], GATE_CHECKS, unrun=None)
    run.plan(
        [n for n in candidates if n not in gated],
        GATE_CHECKS,
        unrun="the node was not gated in this run",
    )
    admitted: list[str] = []
    run_phase(
        run, _admit_phase(door, scope, candidates, new, failed_hosts, held, options, admitted)
    )
    run.nodes = node_verdicts(run.verdicts, _states(door, scope), admitted=admitted)
    return run


def _admit_phase(
    door: Door,
    scope: Sequence[str],
    candidates: Sequence[str],
    new: Sequence[str],
    failed_hosts: set[str],
    held: set[str],
    options: BringupOptions,
    admitted: list[str],
) -> RunPhase:
    """Admission: only on proof (cluster_tool.verdicts) and through the door; everything else
    stays drained with the finding that keeps it out."""

    def admit(run: RunResult) -> PhaseResult:
        verdicts, unproven = settle(scope, run.findings, run.proof, BRINGUP_PROOF)
        run.findings += unproven
        admit = [
            n for n in candidates if may_admit(verdicts[n], admit_unproven=options.admit_unproven)
        ]
        waived = [n for n in admit if verdicts[n].verdict != "pass"]
        admitting = set(admit)
        out = [n for n in scope if n not in admitting]
        index = Scope(scope)
        for node in out:
            if node in failed_hosts or node in held:
                continue  # drained already: by the converge's verdict, or by an operator
            if node not in new and only_unproven(verdicts[node]):
                continue  # in service before this run and nothing against it: not ours to pull
            door.hold([node], workflow_reason(keeping_out(node, run.findings, index)))
        # Through the door: only a complete proof from this run, and only the nodes held back
        # by cluster-tool (pending validation, an earlier run's verdict) come back; one already
        # in service, drained by an operator or drained again during the run is left as it is.
        proofs = prove(
            scope,
            verdicts,
            run.findings,
            planned=run.planned,
            skipped=run.skipped,
            suites=WORKFLOW_SUITES,
            waived=waived,
        )
        admit, refused = admit_proven(door, admit, proofs)
        if refused:
            run.findings += refused
            waived = [n for n in waived if n in admit]
            out = [n for n in scope if n not in admit]
            # A gap the door found in a proof leaves the node unknown, as a check that did not
            # run.
            verdicts = judge_nodes(scope, run.findings, run.proof, BRINGUP_PROOF)
        run.verdicts = verdicts
        run.admitted_unproven = waived
        admitted[:] = admit
        return PhaseResult(
            "failed" if out else "passed",
            f"{len(admit)} resumed, {len(out)} left drained"
            + (f", {len(waived)} admitted unproven" if waived else ""),
        )

    return RunPhase("admit", (), admit)


def _counters_phase(read: Callable[[], Validation], scope: Sequence[str]) -> RunPhase:
    """The port counters after the gate's traffic, as deltas over it: their findings on this
    run's nodes join the run (a link of a node outside the run is its own business and the
    next validation's)."""

    members = set(scope)

    def counters(run: RunResult) -> PhaseResult:
        after = read()
        mine = [f for f in after.findings if f.node is None or f.node in members]
        run.take(Validation(mine, after.unreachable, after.fabric_checked, after.planned))
        return PhaseResult(
            "failed" if any(f.fails for f in mine) else "passed",
            "port counters as deltas over the gate",
        )

    return RunPhase("counters", (), counters)


def _try_hold(door: Door, nodes: Sequence[str], reason: str) -> None:
    # No controller yet (first bring-up): the hold after the converge covers them.
    with contextlib.suppress(SlurmError):
        door.hold(nodes, reason)
