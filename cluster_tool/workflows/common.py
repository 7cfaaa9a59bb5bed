"""Pieces the three workflows share: the phase and outcome records, Slurm admin steps (drain and
wait, the gate phase in a reservation), waiting for SSH, and turning results into run-record data
(busbw rows per rung; the link matrix is the fabric model's, `cluster_tool.fabric.links`)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tool.admission import Act, Door, NodeProof
from cluster_tool.drains import workflow_reason
from cluster_tool.errors import ParseError
from cluster_tool.fileio import atomic_write, private_dir
from cluster_tool.findings import Finding
from cluster_tool.gate.plan import GateJob
from cluster_tool.gate.runner import JobRun, SlurmRunner
from cluster_tool.gate.thresholds import Thresholds
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.polling import poll_delays
from cluster_tool.registry import FABRIC_CHECKS, NODE_CHECKS, VERSION_CHECKS
from cluster_tool.remote.known_hosts import KnownHosts
from cluster_tool.slurm import NodeState, SlurmAdmin, SlurmError
from cluster_tool.verdicts import (
    GATE_MULTI,
    GATE_SINGLE,
    GateProof,
    NodeVerdict,
    Proof,
    RunVerdict,
    Scope,
    judge_run,
)


@dataclass
class Phase:
    name: str
    status: str  # passed, failed, skipped
    elapsed_s: float = 0.0
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "elapsed_s": self.elapsed_s,
            "detail": self.detail,
        }


@dataclass
class RunResult:
    """What a workflow run found and proved, phase after phase: the one result type of
    bring-up, validation after maintenance and the re-image ladder. `nodes` are summary.json's
    per-node entries, `verdicts` the verdicts they come from (cluster_tool.verdicts); `planned`
    and `skipped` the checks the run planned per suite and those that did not run, and why (the
    admission door's proof and the summary read them)."""

    phases: list[Phase] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    proof: Proof = field(default_factory=Proof)
    planned: dict[str, tuple[str, ...]] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[str, NodeVerdict] = field(default_factory=dict)
    busbw: list[dict[str, Any]] = field(default_factory=list)
    fabric_checked: bool = False
    converge: Any = None  # the converge's PlaybookResult, for a bring-up
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

    def take(self, validation: Validation) -> None:
        """A collection's findings, and the checks it planned and skipped, into the run."""
        self.findings += validation.findings
        for suite, checks in validation.planned.items():
            self.planned[suite] = tuple(dict.fromkeys((*self.planned.get(suite, ()), *checks)))
        for suite, why in validation.skipped.items():
            self.skipped.setdefault(suite, {}).update(why)

    def plan(self, nodes: Sequence[str], checks: Sequence[str], *, unrun: str | None) -> None:
        """Plan `checks` for each of `nodes`; `unrun` says why they did not run, when not."""
        for n in nodes:
            self.planned[n] = tuple(dict.fromkeys((*self.planned.get(n, ()), *checks)))
            if unrun is not None:
                self.skipped.setdefault(n, {}).update(dict.fromkeys(checks, unrun))


@dataclass(frozen=True)
class PhaseResult:
    """What one phase did: its status and detail for the record, the nodes each verdict stage
    it proves was proven for, and why a stage it owes did not run at all."""

    status: str  # passed, failed, skipped
    detail: str | None = None
    proven: Mapping[str, Sequence[str]] = field(default_factory=dict)
    not_run: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunPhase:
    """One phase of a workflow: its name, the verdict stages it may prove (`verdicts.HEALTH`,
    ...), and what it does to the run."""

    name: str
    proves: tuple[str, ...]
    run: Callable[[RunResult], PhaseResult]


def run_phase(result: RunResult, phase: RunPhase) -> PhaseResult:
    """The one runner of the workflows' phases: run it, time it, record it, add what it proved
    to the run's proof and why a stage did not run. A phase proves only the stages it says it
    proves: anything else is a bug, not proof."""
    started = time.monotonic()
    out = phase.run(result)
    stray = (set(out.proven) | set(out.not_run)) - set(phase.proves)
    if stray:
        raise ValueError(f"phase {phase.name} proves {sorted(phase.proves)}, not {sorted(stray)}")
    for stage, nodes in out.proven.items():
        result.proof.add(stage, nodes)
    for stage, why in out.not_run.items():
        result.proof.not_run[stage] = why
    result.phases.append(
        Phase(phase.name, out.status, round(time.monotonic() - started, 1), out.detail)
    )
    return out


def skip_phase(result: RunResult, name: str, proves: Sequence[str], why: str) -> None:
    """A phase that does not run: recorded as skipped, each stage it owes as not run, why."""
    run_phase(
        result,
        RunPhase(
            name,
            tuple(proves),
            lambda _: PhaseResult("skipped", why, not_run=dict.fromkeys(proves, why)),
        ),
    )


@dataclass
class Validation:
    """What the health + fabric validation gave: its findings, who did not answer, and which
    checks it planned per suite (a node, or `fabric`) and which of those did not run, and why:
    what the admission door counts as proof."""

    findings: list[Finding]
    unreachable: list[str] = field(default_factory=list)
    fabric_checked: bool = True
    planned: dict[str, tuple[str, ...]] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        nodes: Sequence[str],
        findings: Sequence[Finding] = (),
        *,
        health: bool = True,
        fabric: bool = True,
        unreachable: Sequence[str] = (),
        skipped: Mapping[str, Mapping[str, str]] | None = None,
        wired: bool | None = None,
    ) -> Validation:
        """A collection that ran the node checks on `nodes` (with `health`) and the fabric
        checks (with `fabric`), as the registry plans them; `wired` says whether the cabling
        was judged (the subnet manager's host answered), when it was asked for but may not
        have been."""
        planned: dict[str, tuple[str, ...]] = {}
        if health:
            # The version probe rides with the health probes (checks/versions.py judges it).
            planned.update({n: (*NODE_CHECKS, *VERSION_CHECKS) for n in nodes})
        if fabric:
            planned["fabric"] = FABRIC_CHECKS
        return cls(
            list(findings),
            list(unreachable),
            fabric if wired is None else fabric and wired,
            planned,
            {k: dict(v) for k, v in (skipped or {}).items()},
        )


@dataclass
class GateOutcome:
    """What the gate gave a workflow: its findings, busbw rows for the report, and what it
    proved (the gate's `GateResult.proof`, typed)."""

    findings: list[Finding]
    busbw: list[dict[str, Any]] = field(default_factory=list)
    proof: GateProof = field(default_factory=GateProof)


# Base states in which a drained node runs no job any more.
_QUIET = frozenset({"IDLE", "DOWN", "FUTURE", "UNKNOWN"})


@dataclass
class DrainOutcome:
    """Per node after a drain: None when it is quiet (no job left), else why it is not."""

    waited_s: float
    problems: dict[str, str] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)


def _quiet(state: NodeState | None) -> bool:
    return state is not None and state.drained and state.state in _QUIET


def drain_and_wait(
    door: Door,
    nodes: Sequence[str],
    reason: str,
    *,
    timeout_s: float,
    force: bool = False,
    poll_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainOutcome:
    """Hold `nodes` (through the door: a node another holds keeps its reason) and wait until
    their running jobs have ended. A job still running after `timeout_s` is cancelled only with
    `force`; otherwise that node is reported, not touched."""
    started = clock()
    slurm = door.admin
    door.hold(nodes, reason)
    outcome = DrainOutcome(0.0)
    waiting = list(nodes)
    forced = False
    delays = poll_delays(poll_s)
    while waiting:
        states = {s.name: s for s in slurm.node_states(waiting)}
        waiting = [n for n in waiting if not _quiet(states.get(n))]
        if not waiting:
            break
        if clock() - started >= timeout_s:
            if force and not forced:
                outcome.cancelled = sorted(waiting)
                slurm.cancel_jobs_on(waiting)
                forced = True
                started = clock()  # give the cancelled jobs one more timeout to end
                continue
            for n in waiting:
                st = states.get(n)
                seen = "+".join([st.state, *sorted(st.flags)]) if st else "unknown to Slurm"
                outcome.problems[n] = (
                    f"jobs still running after {timeout_s:.0f} s ({seen}); not killed"
                    if not forced
                    else f"jobs did not end after scancel ({seen})"
                )
            break
        sleep(next(delays))
    outcome.waited_s = round(clock() - started, 1)
    return outcome


def wait_for_ssh(
    address: str,
    timeout_s: float,
    *,
    port: int = 22,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """True once `address:port` answers with an SSH banner; False after `timeout_s`."""
    deadline = clock() + timeout_s
    delays = poll_delays(poll_s)
    while True:
        try:
            with socket.create_connection((address, port), timeout=5) as conn:
                conn.settimeout(5)
                if conn.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass  # still booting: refused, unreachable or no banner yet
        if clock() >= deadline:
            return False
        sleep(next(delays))


def ssh_true(
    node: str, ssh_config: Path | None, timeout: float = 30.0, options: Sequence[str] = ()
) -> bool:
    """One `ssh NODE true`: the banner is up and the lab's (or site's) key is accepted.
    `options` (OpenSSH `-o` pairs) come before the config file's, so they win."""
    argv = ["ssh", "-o", "BatchMode=yes", *options]
    if ssh_config is not None:
        argv += ["-F", str(ssh_config)]
    try:
        proc = subprocess.run(
            [*argv, node, "true"], capture_output=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def reimaged_node_answers(
    node: str,
    address: str,
    ssh_config: Path | None,
    known: KnownHosts,
    timeout: float = 30.0,
) -> bool:
    """A re-imaged node logs us in. It comes back from its PXE install with new host keys: its
    old ones are forgotten in the cluster's known_hosts and the new ones recorded at this first
    contact (the converge then checks them). Through the operator's own known_hosts, OpenSSH in
    batch mode refuses the new key (changed) or the unknown one, and the node would never come
    back."""
    known.forget([node, address])
    # A multiplexed session skips the key exchange, and with it the recording.
    options = [*known.ssh_options(), "-o", "ControlPath=none"]
    return ssh_true(node, ssh_config, timeout, options=options)


# --- run-record data -------------------------------------------------------------------------


@dataclass
class RecordingRunner(SlurmRunner):
    """The gate's Slurm runner that also keeps what each step printed (raw output for the run
    record) and its busbw by message size (for the report's plots)."""

    thresholds: Thresholds | None = None
    save_dir: Path | None = None
    busbw: list[dict[str, Any]] = field(default_factory=list)

    def run(self, jobs: Sequence[GateJob]) -> list[JobRun]:
        runs = super().run(jobs)
        for r in runs:
            self._keep(r)
        return runs

    def _keep(self, r: JobRun) -> None:
        if self.save_dir is not None:
            private_dir(self.save_dir)
            atomic_write(self.save_dir / f"{r.job.name}.slurm.out", r.slurm_text)
        for step in r.job.steps:
            text = r.texts.get(step.label)
            if text is None:
                continue
            if self.save_dir is not None:
                atomic_write(self.save_dir / f"{r.job.name}.{step.label}.out", text)
            try:
                parsed = parse_nccl_tests(text)
            except ParseError:
                continue  # the gate already reports unreadable output as a finding
            points = []
            for row in parsed.rows:
                sides = [s.busbw for s in (row.out_of_place, row.in_place) if s is not None]
                if sides:
                    points.append([row.size, max(sides)])
            floor = None
            if self.thresholds is not None:
                floor = self.thresholds.expect(
                    step.rung, step.collective, nodes=len(r.job.nodes)
                ).floor_gbs
            self.busbw.append(
                {
                    "rung": str(step.rung),
                    "label": f"{'+'.join(r.job.nodes)} {step.label}",
                    "nodes": list(r.job.nodes),
                    "rail": step.rail,
                    "floor_gbs": floor,
                    "points": points,
                }
            )


def node_verdicts(
    verdicts: Mapping[str, NodeVerdict],
    states: Mapping[str, NodeState] | None = None,
    admitted: Iterable[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """summary.json's per-node entries: the verdict (cluster_tool.verdicts decides it), why,
    what is unproven, whether this run admitted it, and Slurm's view at the end."""
    taken = set(admitted or ())
    out: dict[str, dict[str, Any]] = {}
    for node, v in verdicts.items():
        entry = v.to_json()
        if admitted is not None:
            entry["admitted"] = node in taken
        entry["slurm"] = _slurm_text((states or {}).get(node))
        out[node] = entry
    return out


def refusal_findings(refused: Mapping[str, Act]) -> list[Finding]:
    """For each node the admission door would not resume: `admission.unproven` (an error that
    says a check did not run: the node is `unknown`) when its proof had a gap, a check its
    admission needs that did not run or is missing; `admission.refused` (a warning) when
    someone's drain holds it, an operator's or one newer than the run's proof: theirs to lift."""
    return [
        Finding(
            check="admission.unproven" if act.gap else "admission.refused",
            severity="error" if act.gap else "warning",
            node=node,
            component="admission",
            expected="a complete proof from this run" if act.gap else "a drain this run may lift",
            observed=act.why,
            message=f"{node}: not resumed: {act.why}",
        )
        for node, act in sorted(refused.items())
    ]


def admit_proven(
    door: Door, admit: Sequence[str], proofs: Mapping[str, NodeProof]
) -> tuple[list[str], list[Finding]]:
    """Put the nodes of `admit` back in service through the door, each on its proof from this
    run; returns those it resumed (or found in service) and a finding for each it refused. A
    node refused for a gap in its proof stays held with that finding as its reason."""
    door.admit([proofs[n] for n in admit])
    refused = door.refused()
    found = refusal_findings({n: a for n, a in refused.items() if n in set(admit)})
    for f in found:
        if f.fails and f.node is not None:
            door.hold([f.node], workflow_reason([f], by=door.by))
    return [n for n in admit if n not in refused], found


def keeping_out(
    node: str, findings: Sequence[Finding], scope: Sequence[str] | Scope
) -> list[Finding]:
    """The error findings that keep `node` out of service: its own first, then those that cover
    it (a fleet stop, a full job, a path), so its drain reason names the right id. For many
    nodes, pass the scope indexed once (`verdicts.Scope`)."""
    index = scope if isinstance(scope, Scope) else Scope(scope)
    own = [f for f in findings if f.fails and f.node == node]
    return own + [f for f in findings if f.fails and f.node != node and index.covers(f, node)]


def _slurm_text(st: NodeState | None) -> str | None:
    if st is None:
        return None
    text = "+".join([st.state.lower(), *sorted(f.lower() for f in st.flags)])
    return f"{text} ({st.reason})" if st.reason else text


# A known-good partner lends a judged node the proven other end of its pair job, inside the
# gate's maintenance reservation: it must be in service and unused, so that no user's job
# shares it or is held off it. IDLE, and no flag but CLOUD (a cloud site's nodes): never
# MIXED or ALLOCATED (a user's job runs there), COMPLETING (an epilog still runs), PLANNED
# (the scheduler's next job is for it), RESERVED or MAINT (someone else's reservation holds
# it), drained, down or rebooting.
_PARTNER_FLAGS = frozenset({"CLOUD"})


def known_good_partners(slurm: SlurmAdmin, outside: Sequence[str]) -> list[str]:
    """The nodes of `outside` (GPU nodes this run does not judge) that may be a judged node's
    partner: IDLE in service with no job on them (`squeue -w` says none), in `outside`'s order.
    SlurmError when Slurm cannot say."""
    if not outside:
        return []
    idle = {
        s.name
        for s in slurm.node_states(list(outside))
        if s.state == "IDLE" and s.flags <= _PARTNER_FLAGS and s.usable
    }
    if not idle:
        return []
    busy = {n for n, jobs in slurm.jobs_on(sorted(idle)).items() if jobs}
    return [n for n in outside if n in idle and n not in busy]


def pick_partner(slurm: SlurmAdmin, outside: Sequence[str]) -> str | None:
    """A known-good node for a lone node's pair job (`known_good_partners`); None when there
    is none or Slurm cannot say."""
    try:
        partners = known_good_partners(slurm, outside)
    except SlurmError:
        return None
    return partners[0] if partners else None


def _holding_jobs(slurm: SlurmAdmin, nodes: Sequence[str]) -> dict[str, list[str]]:
    """The nodes of `nodes` a job runs (or completes) on now, with the job ids."""
    return {n: jobs for n, jobs in slurm.jobs_on(list(nodes)).items() if jobs and n in nodes}


def _busy(node: str, jobs: Sequence[str]) -> Finding:
    ids = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
    return Finding(
        check="slurm.unavailable",
        node=node,
        component="gate",
        expected="no job on the node while the gate reserves it",
        observed=f"job(s) {ids}",
        message=f"{node}: job(s) {ids} run there: the gate's maintenance reservation does not "
        "take a node a job holds, so it was not gated; not admitted without passing the gate",
    )


def pin_on(node: str, partner: str, findings: Sequence[Finding]) -> list[Finding]:
    """The partner is known good: what fails in a job with it is the judged node's."""
    return [
        f.model_copy(update={"node": node}) if f.fails and f.node in (None, partner) else f
        for f in findings
    ]


def guarded_gate(gate: Callable[[Sequence[str]], GateOutcome], nodes: Sequence[str]) -> GateOutcome:
    """Run the gate; a Slurm that cannot be reached becomes a finding, so the run still ends
    with its record written and the nodes' verdicts (they cannot pass without their gate)."""
    try:
        outcome = gate(nodes)
    except SlurmError as exc:
        return GateOutcome(
            [
                Finding(
                    check="slurm.error",
                    node=n,
                    component="gate",
                    expected="gate jobs run",
                    observed=str(exc),
                    message=f"{n}: the gate could not run: {exc}",
                )
                for n in nodes
            ]
        )
    # A node the gate had to leave out (Slurm would not run its jobs) has not passed it: in a
    # workflow that admits nodes, that is a failure of the node, not a note.
    gated = set(nodes)
    outcome.findings = [
        f.model_copy(
            update={
                "severity": "error",
                "message": f"{f.message}; not admitted without passing the gate",
            }
        )
        if f.check == "slurm.unavailable" and f.node in gated
        else f
        for f in outcome.findings
    ]
    return outcome


def gate_in_reservation(
    door: Door,
    gate: Callable[[Sequence[str]], GateOutcome],
    nodes: Sequence[str],
    *,
    reservation: str,
    lift: Sequence[str],
    hold_again: str,
    partner: str | None = None,
) -> GateOutcome:
    """The gate phase's Slurm steps, in the one order every workflow needs, through the door's
    gate window: reserve `nodes` so that only the gate's jobs reach them, open those of `lift`
    this run holds, run the guarded gate, hold `lift` again with `hold_again` and release. The
    hold and the release happen whatever the gate did, so an interrupted gate leaves no node in
    service unproven and no reservation behind. Whose drains open is the door's rule: its own,
    and with the operator's word (validate --admit, reimage --admit) the drains the nodes had
    when the run began.

    The reservation (`Flags=maint,ignore_jobs`) never takes a node a job holds: such a node is
    left out of it and of the gate, `slurm.unavailable` when it is one the run judges, and
    simply not a partner when it is the known-good `partner` (which a user's job took since it
    was picked): the judged node then has no multi-node proof from it."""
    busy = _holding_jobs(door.admin, nodes)
    free = [n for n in nodes if n not in busy]
    left_out = [_busy(n, jobs) for n, jobs in busy.items() if n != partner]
    if not free:
        return GateOutcome(left_out)
    opening = [n for n in lift if n in free]
    with door.gate_window(reservation, free, lift=opening, hold_again=hold_again):
        outcome = guarded_gate(gate, free)
    outcome.findings = [*outcome.findings, *left_out]
    return outcome


@dataclass(frozen=True)
class Hold:
    """How a gate phase holds its nodes (`gate_in_reservation`): the reservation's name, the
    nodes it opens and holds again (with `hold_again`)."""

    reservation: str
    lift: Sequence[str]
    hold_again: str


def gate_phase(
    door: Door,
    gate: Callable[[Sequence[str]], GateOutcome],
    nodes: Sequence[str],
    *,
    outside: Sequence[str],
    hold: Hold | None,
) -> RunPhase:
    """The gate phase of bring-up and validate after maintenance: a lone node gets a partner in
    service from `outside` (a multi-node path needs two), the gate runs (in a reservation with
    `hold`, else only guarded), what fails in a job with the partner is pinned on the node,
    and the single-node jobs that passed and the multi-node jobs (with their partners) join the
    run's proof."""

    def run(result: RunResult) -> PhaseResult:
        partner = pick_partner(door.admin, outside) if len(nodes) == 1 else None
        ran = [*nodes, partner] if partner else list(nodes)
        if hold is None:
            outcome = guarded_gate(gate, ran)
        else:
            outcome = gate_in_reservation(
                door,
                gate,
                ran,
                reservation=hold.reservation,
                lift=hold.lift,
                hold_again=hold.hold_again,
                partner=partner,
            )
        if partner is not None:
            result.proof.trusted.add(partner)
            outcome.findings = pin_on(nodes[0], partner, outcome.findings)
        for job in outcome.proof.jobs:
            result.proof.add_job(job)
        result.findings += outcome.findings
        result.busbw += outcome.busbw
        named = {f.node for f in outcome.findings if f.fails and f.node}
        return PhaseResult(
            "failed" if any(f.fails for f in outcome.findings) else "passed",
            f"{len(nodes)} node(s), {len(named)} named",
            proven={GATE_SINGLE: list(outcome.proof.single)},
        )

    return RunPhase("gate", (GATE_SINGLE, GATE_MULTI), run)
