"""The real edges behind the workflows: ansible-runner for converging, the checks engineer's
read-only fan-out (`workflows.collect.run_validate`) for health and fabric, the gate through Slurm,
and the summary every run record holds. Tests drive the workflows with fakes instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cluster_tool.admission import WORKFLOW_SUITES, Door, prove
from cluster_tool.ansible.runner import (
    REPO_ROOT,
    PlaybookEvent,
    PlaybookResult,
    forget_facts,
    run_playbook,
)
from cluster_tool.bounds import expand_hostlist
from cluster_tool.checks.counters import CounterSnapshot
from cluster_tool.drains import REIMAGE_REASON
from cluster_tool.fabric.links import link_matrix
from cluster_tool.fabric.plan import plan_for
from cluster_tool.fileio import fresh_dir
from cluster_tool.findings import Finding
from cluster_tool.gate.from_spec import gate_inputs
from cluster_tool.gate.ladder import run_gate
from cluster_tool.registry import (
    CHECKS,
    COUNTER_CHECKS,
    FABRIC_CHECKS,
    GATE_CHECKS,
    NODE_CHECKS,
    NOT_RUN,
    VERSION_CHECKS,
)
from cluster_tool.remote.fanout import OpenSshTransport, Transport, save_capture
from cluster_tool.remote.known_hosts import KnownHosts
from cluster_tool.slurm import SlurmAdmin
from cluster_tool.spec.models import Cluster
from cluster_tool.verdicts import (
    FABRIC,
    GATE_MULTI,
    GATE_SINGLE,
    HEALTH,
    Proof,
    RunVerdict,
    may_admit,
    settle,
)
from cluster_tool.workflows.bringup import TOLERATE_ALL
from cluster_tool.workflows.collect import run_validate
from cluster_tool.workflows.common import (
    GateOutcome,
    Phase,
    PhaseResult,
    RecordingRunner,
    RunPhase,
    RunResult,
    Validation,
    gate_in_reservation,
    pin_on,
    run_phase,
    skip_phase,
)
from cluster_tool.workflows.reimage import LadderResult
from cluster_tool.workflows.runs import RunRecord, RunSummary

SITE_YML = REPO_ROOT / "playbooks" / "site.yml"
# A workflow's gate and burn-in jobs still queued after this long are cancelled
# (`slurm.pending`); the `gate` command takes its own from --pending-timeout.
PENDING_S = 900.0


def ansible_limit(hostlist: str | Sequence[str] | None) -> str | None:
    """Ansible does not read ClusterShell ranges (`gpu[001-004]`): expand to a comma list."""
    if hostlist is None:
        return None
    names = expand_hostlist(hostlist, "--limit") if isinstance(hostlist, str) else list(hostlist)
    return ",".join(names) or None


@dataclass
class Live:
    """Everything the live edges need, built once per command."""

    cluster: Cluster
    inventory: Path
    record: RunRecord
    slurm: SlurmAdmin
    ssh_config: Path | None = None
    transport: Transport | None = None
    gate_workdir: Path | None = None
    dcgm: bool = True
    rungs: tuple[str, ...] = ("single", "pairs", "full")
    extravars: dict[str, Any] | None = None
    gate_on: bool = True
    admit_unproven: bool = False
    replay: Path | None = None
    save: Path | None = None
    concurrency: int = 32
    busbw: list[dict[str, Any]] = field(default_factory=list)
    proof: Proof = field(default_factory=Proof)
    # Checks that did not run, per JUnit suite, and why (from every collection of this run).
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    # Port counters: with `judge_deltas` the run's first fabric read is its snapshot
    # (counters-before.json in the record) and every later read is judged against it; until
    # then the LinkDowned of `rebooted` nodes' cables is not held against them.
    judge_deltas: bool = False
    rebooted: tuple[str, ...] = ()
    counters_before: CounterSnapshot | None = None
    _captures: int = 0

    def _transport(self) -> Transport:
        # The keys the converge recorded at first contact, not the operator's known_hosts.
        return self.transport or OpenSshTransport(self.ssh_config, known_hosts=self.known_hosts())

    def converge(
        self,
        *,
        limit: str | Sequence[str] | None,
        tags: str | None = None,
        check: bool = False,
        diff: bool = False,
        on_event: Callable[[PlaybookEvent], None] | None = None,
    ) -> PlaybookResult:
        extravars = {
            "cluster_max_fail_percentage": TOLERATE_ALL,
            "cluster_check_only": check,
            **(self.extravars or {}),
        }
        # The munge key and the slurmdbd password go only to hosts whose key is the recorded
        # one: a new host's key is recorded now, a changed one stops the run before Ansible.
        known = self.known_hosts()
        limited = ansible_limit(limit)
        wanted = set(limited.split(",")) if limited else None
        known.check(
            {
                h.name: str(h.address or h.name)
                for h in self.cluster.hosts()
                if wanted is None or h.name in wanted
            },
            self.ssh_config,
        )
        return run_playbook(
            SITE_YML,
            self.inventory,
            limit=limited,
            tags=tags,
            extravars=extravars,
            envvars={"ANSIBLE_SSH_EXTRA_ARGS": " ".join(known.ssh_options())},
            check=check,
            diff=diff,
            event_handler=on_event,
            private_data_dir=self.record.path / "ansible",
        )

    def known_hosts(self) -> KnownHosts:
        return KnownHosts.for_cluster(self.cluster.name)

    def converge_nodes(self, nodes: Sequence[str]) -> dict[str, str | None]:
        """Re-image's converge: per node None, or the first failing task."""
        from cluster_tool.workflows.bringup import converge_findings

        # Re-imaged: what was cached about them (their OS) may no longer be true, and they come
        # back from the PXE boot with new host keys. Only their keys are forgotten: any other
        # host whose key changed still stops the converge.
        forget_facts(self.inventory, nodes)
        by_name = {h.name: h for h in self.cluster.hosts()}
        self.known_hosts().forget(
            [
                *nodes,
                *(str(by_name[n].address) for n in nodes if n in by_name and by_name[n].address),
            ]
        )
        result = self.converge(limit=list(nodes))
        bad = {f.node: f.message for f in converge_findings(result)}
        return {
            n: bad.get(n) if n in result.hosts else bad.get(n, "not in the play recap")
            for n in nodes
        }

    def _validate(
        self, label: str, *, health: bool, fabric: bool, nodes: Sequence[str] | None
    ) -> Validation:
        # Each collection keeps its own capture folder: a later one must not hide an earlier one.
        self._captures += 1
        result = run_validate(
            self.cluster,
            health=health,
            fabric=fabric,
            nodes=nodes,
            transport=None if self.replay else self._transport(),
            concurrency=self.concurrency,
            save=None if self.replay else self.record.raw_dir() / f"{self._captures:02d}-{label}",
            replay=self.replay,
            dcgm=self.dcgm,
            counters_before=self.counters_before,
            rebooted=self.rebooted,
        )
        if fabric and self.judge_deltas and self.counters_before is None and result.counters:
            self.counters_before = result.counters
            self.record.write_json("counters-before.json", result.counters.to_json())
        if self.save is not None:
            # The operator's --save: the raw outputs in the capture layout `--from` replays.
            save_capture(self.save, result.results)
        self.skipped.update(result.skipped)
        # The wiring was judged only when the subnet manager's host answered and ibnetdiscover
        # was read: asking for the fabric is not checking it (the report's link grid and the
        # fabric stage of the proof follow this, not the request).
        wired = fabric and not set(result.skipped.get("fabric", {})) & set(WIRING_CHECKS)
        return Validation.of(
            result.nodes if health else [],
            result.report.findings,
            health=health,
            fabric=fabric,
            unreachable=result.unreachable,
            skipped=result.skipped,
            wired=wired,
        )

    def validate(self, nodes: Sequence[str]) -> Validation:
        return self._validate("validate", health=True, fabric=True, nodes=nodes)

    def fabric(self) -> Validation:
        return self._validate("fabric", health=False, fabric=True, nodes=None)

    def counters(self) -> Validation:
        """The port counters read again after the run's traffic, judged against its snapshot:
        only the counter findings (the wiring was judged by the first read)."""
        found = self._validate("counters", health=False, fabric=True, nodes=None)
        # What the counters phase judges, and the ids that say it could not read them.
        keep = [f for f in found.findings if f.check.startswith("link.") or f.check in NOT_RUN]
        return Validation(
            keep, found.unreachable, found.fabric_checked, {"fabric": COUNTER_CHECKS}, found.skipped
        )

    def health(self, nodes: Sequence[str]) -> Validation:
        return self._validate("health", health=True, fabric=False, nodes=nodes)

    def gate(self, nodes: Sequence[str], rungs: tuple[str, ...] | None = None) -> GateOutcome:
        inputs = gate_inputs(self.cluster)
        workdir = (self.gate_workdir or self.record.path / "gate-work").resolve()
        runner = RecordingRunner(
            slurm=self.slurm,
            workdir=fresh_dir(workdir, "gate-"),
            params=inputs.params,
            gpus_per_node=inputs.thresholds.profile.gpus_per_node,
            watchdog_s=inputs.watchdog_s,
            pending_s=PENDING_S,
            poll_s=5.0,
            thresholds=inputs.thresholds,
            save_dir=self.record.raw_dir() / "gate",
        )
        options = replace(inputs.options, rungs=rungs or self.rungs)
        result = run_gate(
            list(nodes), runner, inputs.thresholds, inputs.params, inputs.topology, options
        )
        return GateOutcome(list(result.report.findings), runner.busbw, result.proof)

    def node_ladder(self, node: str, partner: str | None, door: Door) -> LadderResult:
        """Re-image's ladder, as phases over one result: health and the node's cables, then
        single and a pair with a known-good node, inside a maintenance reservation opened
        through the run's door. The node is held again before the reservation ends, whatever the
        gate said: admission alone puts it back in service, on the proof this returns. A node
        the ladder could not prove (no partner, no gate) gets `gate.unproven`, an error unless
        the operator passed --admit-unproven (then a warning, shown in the record)."""
        # Re-imaged: the node's power cycle took its links down; not held against it.
        self.rebooted = tuple(dict.fromkeys((*self.rebooted, node)))
        run = RunResult(proof=self.proof)  # the re-image's proof, across its nodes

        def validate(run: RunResult) -> PhaseResult:
            found = self.validate([node])
            run.take(found)
            return PhaseResult(
                "failed" if any(f.fails for f in found.findings) else "passed",
                f"{node}: health and its cables",
                proven={
                    HEALTH: [] if found.unreachable else [node],
                    FABRIC: [node] if found.fabric_checked else [],
                },
            )

        def gate(run: RunResult) -> PhaseResult:
            nodes = [node] if partner is None else [node, partner]
            rungs = ("single", "pairs") if partner else ("single",)
            # As in bring-up: a Slurm that would not run the ladder's jobs fails the node
            # (slurm.error / slurm.unavailable as errors); it is not admitted unproven. The
            # door opens the node only from the re-image's own hold (or, with --admit, the
            # drain it had when the run began), and holds it again whatever the gate did.
            outcome = gate_in_reservation(
                door,
                lambda ns: self.gate(ns, rungs),
                nodes,
                reservation=f"cluster-tool-reimage-{node}",
                lift=[node],
                hold_again=REIMAGE_REASON,
                partner=partner,
            )
            for job in outcome.proof.jobs:
                run.proof.add_job(job)
            # The partner is known good: a failing pair names the re-imaged node.
            pinned = pin_on(node, partner, outcome.findings) if partner else outcome.findings
            run.findings += pinned
            self.busbw += outcome.busbw
            return PhaseResult(
                "failed" if any(f.fails for f in pinned) else "passed",
                f"{node}: " + ("single and a pair with " + partner if partner else "single"),
                proven={GATE_SINGLE: list(outcome.proof.single)},
            )

        run_phase(run, RunPhase("validate", (HEALTH, FABRIC), validate))
        if partner is not None:
            self.proof.trusted.add(partner)
        if any(f.fails for f in run.findings):
            return LadderResult(run.findings)
        if self.gate_on:
            run_phase(run, RunPhase("gate", (GATE_SINGLE, GATE_MULTI), gate))
            run.plan([node], GATE_CHECKS, unrun=None)
        else:
            skip_phase(run, "gate", (GATE_SINGLE, GATE_MULTI), "--no-gate")
            run.plan([node], GATE_CHECKS, unrun="--no-gate")
        verdicts, unproven = settle([node], run.findings, self.proof)
        waived = bool(unproven) and may_admit(verdicts[node], admit_unproven=self.admit_unproven)
        if waived:
            # The operator's --admit-unproven: said in the record, not holding the node out.
            unproven = [
                f.model_copy(
                    update={
                        "severity": "warning",
                        "message": f"{f.message}; admitted all the same (--admit-unproven)",
                    }
                )
                for f in unproven
            ]
        run.findings += unproven
        proof = prove(
            [node],
            verdicts,
            run.findings,
            planned=run.planned,
            skipped=run.skipped,
            suites=WORKFLOW_SUITES,
            waived=[node] if waived else (),
        )[node]
        return LadderResult(run.findings, proof)


# The fabric checks that judge the cabling itself, from ibnetdiscover.
WIRING_CHECKS = tuple(
    c for c in FABRIC_CHECKS if CHECKS[c].probe == "ibnetdiscover" and not CHECKS[c].not_run
)


def _name_of(phase: Any) -> str:
    return str(phase.get("name") if isinstance(phase, dict) else phase.name)


def _status_of(phase: Any) -> str:
    return str(phase.get("status") if isinstance(phase, dict) else phase.status)


def run_summary(
    *,
    command: str,
    record: RunRecord,
    inputs: dict[str, Any],
    phases: Sequence[Phase],
    findings: Sequence[Finding],
    verdicts: dict[str, dict[str, Any]],
    run: RunVerdict,
    cluster: Cluster | None,
    health_nodes: Sequence[str],
    fabric_checked: bool,
    busbw: Sequence[dict[str, Any]] = (),
    gate_nodes: Sequence[str] = (),
    skipped: dict[str, dict[str, str]] | None = None,
    extra_checks: dict[str, list[str]] | None = None,
    admitted_unproven: Sequence[str] = (),
    stopped: str | None = None,
) -> RunSummary:
    """The run's summary.json: the checks planned per suite and those that did not run, and why
    (for JUnit), the link matrix (for the report), the verdicts and the run's verdict `run`."""
    checks: dict[str, list[str]] = {}
    not_run: dict[str, dict[str, str]] = {k: dict(v) for k, v in (skipped or {}).items()}
    for node in verdicts:
        # The version probe rides with the health probes: its checks are planned with them.
        checks[node] = [*NODE_CHECKS, *VERSION_CHECKS]
        if node not in health_nodes:
            not_run.setdefault(node, {}).update(
                dict.fromkeys(checks[node], "health was not checked in this run")
            )
    gated = set(gate_nodes)
    for node in verdicts:
        checks.setdefault(node, []).extend(GATE_CHECKS)
        if node not in gated:
            not_run.setdefault(node, {}).update(
                {c: "the node was not gated in this run" for c in GATE_CHECKS}
            )
    checks["fabric"] = list(FABRIC_CHECKS)
    if not fabric_checked:
        not_run["fabric"] = {c: "the fabric was not checked in this run" for c in FABRIC_CHECKS}
    if any(_name_of(p) == "counters" for p in phases):
        # The port counters read again after the traffic, judged as deltas (link.flap, ...).
        checks["fabric"] += COUNTER_CHECKS
        if not any(_name_of(p) == "counters" and _status_of(p) != "skipped" for p in phases):
            not_run.setdefault("fabric", {}).update(
                dict.fromkeys(COUNTER_CHECKS, "the counters were not read again")
            )
    for suite, ids in (extra_checks or {}).items():
        checks.setdefault(suite, [])
        checks[suite] = list(dict.fromkeys([*ids, *checks[suite]]))
    links: list[dict[str, Any]] = []
    if cluster is not None and verdicts:
        links = link_matrix(plan_for(cluster), verdicts.keys(), findings, fabric_checked)
    return RunSummary(
        command=command,
        run_id=record.run_id,
        started=record.inputs().get("started"),
        inputs=inputs,
        phases=[p.to_json() for p in phases],
        nodes=verdicts,
        checks=checks,
        skipped=not_run,
        links=links,
        busbw=list(busbw),
        verdict=run.verdict,
        headline=run.headline,
        exit_code=run.exit_code,
        admitted_unproven=list(admitted_unproven),
        stopped=stopped,
    )
