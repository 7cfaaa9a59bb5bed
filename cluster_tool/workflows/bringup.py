"""Bring-up: render → site.yml through ansible-runner → health + fabric validation → the gate →
admission. New nodes wait in Slurm drained ("cluster-tool: pending validation") and are resumed
only once they pass; a node that fails stays drained with the reason. A host that fails to
converge does not stop the others (the playbook tolerates failures, the recap names them).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cluster_tool.ansible.runner import PlaybookEvent, PlaybookResult
from cluster_tool.bounds import expand_hostlist
from cluster_tool.drains import PENDING_REASON, Owner, may_lift, workflow_reason
from cluster_tool.findings import Finding
from cluster_tool.slurm import NodeState, SlurmAdmin, SlurmError
from cluster_tool.verdicts import (
    CONVERGE,
    FABRIC,
    GATE_MULTI,
    GATE_SINGLE,
    HEALTH,
    NodeVerdict,
    Proof,
    RunVerdict,
    judge_nodes,
    judge_run,
    may_admit,
    only_unproven,
    settle,
)
from cluster_tool.workflows.common import (
    GateOutcome,
    Hold,
    Phase,
    Validation,
    gate_phase,
    keeping_out,
    node_verdicts,
    resume_held,
)

# What bring-up must prove of a node before it enters service.
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


@dataclass
class BringupResult:
    phases: list[Phase]
    findings: list[Finding]
    nodes: dict[str, dict[str, Any]]
    busbw: list[dict[str, Any]] = field(default_factory=list)
    fabric_checked: bool = False
    converge: PlaybookResult | None = None
    verdicts: dict[str, NodeVerdict] = field(default_factory=dict)
    admitted_unproven: list[str] = field(default_factory=list)
    validated: list[str] = field(default_factory=list)
    gated: list[str] = field(default_factory=list)

    @property
    def run(self) -> RunVerdict:
        return judge_run(
            self.phases, self.findings, self.verdicts, admitted_unproven=self.admitted_unproven
        )

    @property
    def exit_code(self) -> int:
        return self.run.exit_code


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


def _states(slurm: SlurmAdmin, nodes: Sequence[str]) -> dict[str, NodeState]:
    try:
        return {s.name: s for s in slurm.node_states(nodes)}
    except SlurmError:
        return {}


def run_bringup(
    gpu_nodes: Sequence[str],
    deps: BringupDeps,
    options: BringupOptions,
    *,
    on_event: Callable[[PlaybookEvent], None] | None = None,
    reservation: str = "cluster-tool-bringup",
) -> BringupResult:
    """Converge, validate, gate and admit; partial failure leaves the healthy nodes admitted."""
    phases: list[Phase] = []
    findings: list[Finding] = []
    scope = list(gpu_nodes)
    if options.limit:
        wanted = set(expand_hostlist(options.limit, "--limit"))
        scope = [n for n in gpu_nodes if n in wanted]

    # Which nodes are new is read before the converge: once their slurmd starts they look idle.
    before = {} if options.check or options.phase else _states(deps.slurm, scope)
    # New: unknown to Slurm, down (a re-imaged node coming back) or held by cluster-tool. A node
    # an operator drained for their own reason is converged and checked but stays theirs.
    new = [
        n for n in scope if n not in before or (not before[n].usable and not _operators(before[n]))
    ]
    known_new = [n for n in new if n in before]
    if known_new:
        # Already in slurm.conf (a re-run, a re-imaged node): drained before slurmd can come up.
        _try_drain(deps.slurm, known_new, PENDING_REASON)

    started = time.monotonic()
    result = deps.converge(
        limit=options.limit,
        tags=options.phase,
        check=options.check,
        diff=options.diff,
        on_event=on_event,
    )
    converge_bad = converge_findings(result)
    findings += converge_bad
    failed_hosts = {f.node for f in converge_bad}
    phases.append(
        Phase(
            "converge",
            "failed" if failed_hosts or (result.rc != 0 and not result.hosts) else "passed",
            round(time.monotonic() - started, 1),
            f"{len(result.hosts)} host(s), {result.changed_total} change(s), "
            f"{len(failed_hosts)} failed",
        )
    )
    if not (options.check or options.phase):
        # A node that failed to converge stays out of service with the reason, even when its
        # slurmd came up (the slurm phase runs before the phase that failed it).
        for node in (n for n in scope if n in failed_hosts):
            _try_drain(
                deps.slurm, [node], workflow_reason([f for f in converge_bad if f.node == node])
            )
    reached = [n for n in scope if n in result.hosts and n not in failed_hosts]
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
        phases.append(Phase("validate", "skipped", detail=why))
        states = {} if options.check or options.phase else _states(deps.slurm, scope)
        proof = Proof(not_run={HEALTH: why, FABRIC: why, GATE_SINGLE: why, GATE_MULTI: why})
        proof.add(CONVERGE, [n for n in scope if n in result.hosts and n not in failed_hosts])
        # --check and --phase set out to prove the converge only (and admit nothing); a
        # converge that reached no node leaves the full proof owed.
        owed = (CONVERGE,) if options.check or options.phase else BRINGUP_PROOF
        judged = judge_nodes(scope, findings, proof, owed)
        return BringupResult(
            phases,
            findings,
            node_verdicts(judged, states),
            converge=result,
            verdicts=judged,
        )

    # Admission starts drained: nodes not yet in service wait for validation.
    candidates = [n for n in scope if n not in failed_hosts]
    pending = [n for n in new if n in candidates]
    if pending:
        deps.slurm.drain(pending, PENDING_REASON)

    started = time.monotonic()
    validation = deps.validate(candidates)
    findings += validation.findings
    health_bad = {f.node for f in validation.findings if f.fails and f.node}
    phases.append(
        Phase(
            "validate",
            "failed" if health_bad or validation.unreachable else "passed",
            round(time.monotonic() - started, 1),
            f"{len(candidates)} node(s) checked, {len(health_bad)} failed",
        )
    )

    proof = Proof()
    proof.add(CONVERGE, reached)
    proof.add(HEALTH, [n for n in candidates if n not in set(validation.unreachable)])
    if validation.fabric_checked:
        proof.add(FABRIC, candidates)
    else:
        proof.not_run[FABRIC] = "the fabric was not checked"

    busbw: list[dict[str, Any]] = []
    # Slurm starts no gate job on a node an operator holds drained: it is checked, not gated.
    held = {n for n in candidates if n in before and _operators(before[n])}
    gate_nodes = [n for n in candidates if n not in health_bad and n not in held]
    if options.gate and gate_nodes:
        # Only the tool's own holds are lifted: an operator's drain is theirs (the nodes they
        # hold are not gated at all). Held again until admission, below, resumes the proven.
        hold = Hold(
            reservation,
            lift=[n for n in gate_nodes if n in pending],
            operator_says=False,
            hold_again=PENDING_REASON,
        )
        outside = [n for n in gpu_nodes if n not in set(scope)]
        outcome, phase = gate_phase(
            deps.slurm, deps.gate, gate_nodes, proof, outside=outside, hold=hold
        )
        findings += outcome.findings
        busbw = outcome.busbw
        phases.append(phase)
        if deps.counters is not None and validation.fabric_checked:
            phases.append(_counters_phase(deps.counters, scope, findings))
    else:
        why = "--no-gate" if not options.gate else "no node passed validation"
        proof.not_run[GATE_SINGLE] = proof.not_run[GATE_MULTI] = why
        phases.append(Phase("gate", "skipped", detail=why))

    # Admission: only on proof (cluster_tool.verdicts); everything else stays drained with the
    # finding that keeps it out.
    started = time.monotonic()
    verdicts, unproven = settle(scope, findings, proof, BRINGUP_PROOF)
    findings += unproven
    admit = [n for n in candidates if may_admit(verdicts[n], admit_unproven=options.admit_unproven)]
    waived = [n for n in admit if verdicts[n].verdict != "pass"]
    out = [n for n in scope if n not in admit]
    for node in out:
        if node in failed_hosts or node in held:
            continue  # drained already: by the converge's verdict, or by an operator
        if node not in new and only_unproven(verdicts[node]):
            continue  # in service before this run and nothing against it: not ours to pull
        deps.slurm.drain([node], workflow_reason(keeping_out(node, findings, scope)))
    # Only nodes held back by cluster-tool (pending validation, an earlier run's verdict)
    # come back; one already in service or drained by an operator is left as it is.
    resume_held(deps.slurm, admit, operator_says=False)
    phases.append(
        Phase(
            "admit",
            "failed" if out else "passed",
            round(time.monotonic() - started, 1),
            f"{len(admit)} resumed, {len(out)} left drained"
            + (f", {len(waived)} admitted unproven" if waived else ""),
        )
    )
    states = _states(deps.slurm, scope)
    return BringupResult(
        phases,
        findings,
        node_verdicts(verdicts, states, admitted=admit),
        busbw,
        validation.fabric_checked,
        converge=result,
        verdicts=verdicts,
        admitted_unproven=waived,
        validated=candidates,
        gated=gate_nodes if options.gate else [],
    )


def _counters_phase(
    read: Callable[[], Validation], scope: Sequence[str], findings: list[Finding]
) -> Phase:
    """The port counters after the gate's traffic, as deltas over it: their findings on this
    run's nodes join `findings` (a link of a node outside the run is its own business and the
    next validation's)."""
    started = time.monotonic()
    after = read()
    mine = [f for f in after.findings if f.node is None or f.node in set(scope)]
    findings += mine
    return Phase(
        "counters",
        "failed" if any(f.fails for f in mine) else "passed",
        round(time.monotonic() - started, 1),
        "port counters as deltas over the gate",
    )


def _try_drain(slurm: SlurmAdmin, nodes: Sequence[str], reason: str) -> None:
    # No controller yet (first bring-up): the drain after the converge covers them.
    with contextlib.suppress(SlurmError):
        slurm.drain(nodes, reason)


def _operators(state: NodeState) -> bool:
    """Drained by someone other than cluster-tool (maintenance, an RMA): not ours to lift."""
    return state.drained and not may_lift(state.reason, Owner.WORKFLOW)
