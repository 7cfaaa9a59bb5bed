"""The admission rules as invariants (issue 30): a stateful property test drives bring-up,
re-image (with kills and `--resume`), validate-after (with and without `--admit`, with the
burn-in's soak), node-check and the watcher against one fake Slurm and fake probes, while faults
come and go at random points: bad GPUs, Xids, a DCGM failure, a bad HCA the gate finds, soak
steps that fail, unreachable nodes, a version probe that times out, the subnet manager's host
down, and operators who drain and resume nodes by hand. After every step it asserts:

1. no node was put back in service without a complete proof from that run: the fake world
   knows what each run could see, so a resume outside a gate window is checked against the
   world's own truth (a node with a fault the run could see, or one whose checks did not all run,
   is never resumed; node-check resumes only its own drain, and only for faults that are healed
   and that it re-read itself: never an Xid, never DCGM without running DCGM);
2. no drain written by anyone else was lifted (an operator's only with `--admit`, and only the
   drain the node had when that run began) or written over (the tool's transient holds aside);
3. a node opened to the gate's jobs is held again before its reservation ends;
4. every check a run plans shows in its summary as passed, failed or not run, and a check whose
   probe did not answer is never shown as passed;
5. the exit code, the summary's verdict and the report's headline agree.

The oracle here is the test's own model of the world (which faults exist, which runs could see
them, who wrote each drain), not the door's code: `drains.may_lift` and the registry's lift
rules are never consulted by the checks below.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ClusterShell.NodeSet import NodeSet
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cluster_tool.admission import Door
from cluster_tool.ansible.runner import PlaybookResult
from cluster_tool.findings import Finding
from cluster_tool.registry import (
    FABRIC_CHECKS,
    GATE_CHECKS,
    NEEDS,
    NODE_CHECKS,
    VERSION_CHECKS,
)
from cluster_tool.report import render_html
from cluster_tool.spec import load_spec
from cluster_tool.watch.cycle import run_cycle
from cluster_tool.watch.state import WatchState
from cluster_tool.workflows.bringup import BringupDeps, BringupOptions, run_bringup
from cluster_tool.workflows.burnin import BurnInLive
from cluster_tool.workflows.common import GateOutcome, Validation, gate_in_reservation
from cluster_tool.workflows.live import Live, run_summary
from cluster_tool.workflows.node_check import slurm_health_action
from cluster_tool.workflows.reimage import LadderResult, ReimageDeps, ReimageOptions, run_reimage
from cluster_tool.workflows.runs import RunRecord
from cluster_tool.workflows.validate import AfterMaintenanceDeps, run_after_maintenance
from tests.conftest import REPO
from tests.unit.watch.fakes import BOOT_LOG, CapturedSources, NodeReading, WatchSlurm
from tests.unit.workflows.fakes import Clock, EmulatedBmcs, gate_proof
from tests.unit.workflows.test_bringup import _converge
from tests.unit.workflows.test_burnin import SoakingSlurm

LAB = load_spec(REPO / "examples" / "lab.yml")
NODES = [n.name for n in LAB.gpu_nodes()]
SM = LAB.fabric.subnet_manager
PENDING = "cluster-tool: pending validation"
REIMAGE = "cluster-tool reimage: in progress"

# What each fault is, in the world's own terms: who can see it, and whether a clean reading
# later proves it gone (a state) or not (an event that leaves a log line that may rotate away).
NODE_FAULTS = (
    "ecc",
    "xid",
    "dcgm",
    "dcgm-timeout",
    "driver",
    "pair",
    "soak",
    "unreachable",
    "versions",
)
STATE = {"ecc", "dcgm", "dcgm-timeout", "driver"}
HEALTH_SEES = {"ecc", "xid", "dcgm", "dcgm-timeout", "driver", "unreachable", "versions"}
DCGM_SEES = {"dcgm", "dcgm-timeout"}
# The id each fault's finding carries, where it has one.
FAULT_CHECK = {
    "ecc": "gpu.ecc",
    "xid": "gpu.xid",
    "dcgm": "gpu.dcgm",
    "dcgm-timeout": "gpu.dcgm-incomplete",
    "driver": "gpu.driver",
}
XID_LINE = (
    "[ 1502.118311] NVRM: Xid (PCI:0000:1b:00): 79, pid=2211, name=python, "
    "GPU has fallen off the bus.\n"
)
# Who writes a drain: the families the rules speak of (bring-up and validate-after are the
# workflows; each writes the other's kind of reason).
FAMILY = {
    "bringup": "workflow",
    "validate": "workflow",
    "reimage": "reimage",
    "node-check": "node-check",
    "watch": "watch",
    "operator": "operator",
}
TRANSIENT = {PENDING, REIMAGE}


class Killed(BaseException):
    """kill -9: nothing after it runs."""


@dataclass
class AuditSlurm(SoakingSlurm, WatchSlurm):
    """The workflows' fake Slurm (soak jobs and running jobs included) that checks every drain
    and resume against the world's truth as it happens."""

    actor: str = "operator"
    writer: dict[str, str] = field(default_factory=dict)
    proven: set[str] = field(default_factory=set)  # whom this run may put into service
    consent: dict[str, str] = field(default_factory=dict)  # --admit: drains at the start
    lift_ok: set[str] = field(default_factory=set)  # node-check: its own, re-proven
    opened: dict[str, set[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("nodename="):
            fields = dict(a.split("=", 1) for a in argv[2:])
            for node in NodeSet(fields["nodename"]):
                if fields["state"] == "drain":
                    self._drain(node, fields["reason"])
                else:
                    self._resume(node)
        if argv[:2] == ["scontrol", "delete"]:
            name = argv[2].split("=", 1)[1]
            for node in self.opened.pop(name, set()):
                if node not in self.drained:
                    self.violations.append(
                        f"{self.actor}: {node} left in service when the gate window {name} closed"
                    )
        out = super().__call__(argv)
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("nodename="):
            fields = dict(a.split("=", 1) for a in argv[2:])
            for node in NodeSet(fields["nodename"]):
                if fields["state"] == "drain":
                    self.writer[node] = FAMILY[self.actor]
                else:
                    self.writer.pop(node, None)
        return out

    def _drain(self, node: str, reason: str) -> None:
        before = self.drained.get(node)
        who = self.writer.get(node)
        me = FAMILY[self.actor]
        if before is None or before == reason or who == me:
            return
        if before in TRANSIENT and me in ("workflow", "reimage"):
            return
        self.violations.append(f"{self.actor} wrote over {who}'s drain on {node}: {before!r}")

    def _resume(self, node: str) -> None:
        before = self.drained.get(node)
        who = self.writer.get(node)
        me = FAMILY[self.actor]
        window = [r for r, names in self.reservations.items() if node in NodeSet(names)]
        if window:
            self.opened.setdefault(window[0], set()).add(node)
        elif me in ("workflow", "reimage") and node not in self.proven:
            self.violations.append(f"{self.actor} resumed {node} without a proof from this run")
        elif me == "node-check" and node not in self.lift_ok:
            self.violations.append(f"node-check resumed {node} without re-proving its drain")
        elif me == "watch":
            self.violations.append(f"the watcher resumed {node}")
        if before is None or me == "operator":
            return
        if who == "operator" and self.consent.get(node) != before:
            self.violations.append(f"{self.actor} lifted the operator's drain on {node}")
        elif me == "node-check" and who != "node-check":
            self.violations.append(f"node-check lifted {who}'s drain on {node}: {before!r}")


@dataclass
class World:
    """The truth the fakes answer from."""

    faults: dict[str, set[str]] = field(default_factory=lambda: {n: set() for n in NODES})
    sm_down: bool = False
    xid_log: dict[str, str] = field(default_factory=lambda: dict.fromkeys(NODES, BOOT_LOG))
    # What the collections of the current run skipped, per suite (the run record keeps it).
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)

    def visible(self, node: str, *, dcgm: bool) -> set[str]:
        seen = self.faults[node] & HEALTH_SEES
        return seen if dcgm else seen - DCGM_SEES

    def validation(
        self, nodes: Sequence[str], *, health: bool, fabric: bool, dcgm: bool
    ) -> Validation:
        """What a collection reads: the findings and the checks that did not run, by the
        registry's plan (the same rules `collect.run_validate` applies to real outputs)."""
        findings: list[Finding] = []
        skipped: dict[str, dict[str, str]] = {}
        unreachable: list[str] = []
        for node in nodes if health else ():
            seen = self.visible(node, dcgm=dcgm)
            if "unreachable" in seen:
                unreachable.append(node)
                findings.append(_finding("os.unreachable", node, "unreachable over SSH"))
                why = "unreachable: ssh: connect timed out"
                skipped[node] = {
                    c: why for c in (*NODE_CHECKS, *VERSION_CHECKS) if c != "os.unreachable"
                }
                continue
            for kind in sorted(seen & set(FAULT_CHECK)):
                findings.append(_finding(FAULT_CHECK[kind], node, f"{kind} on GPU3", "GPU3"))
            if "driver" in seen:
                # nvidia-smi cannot reach the driver: every check that reads it did not run.
                why = "gpu.driver: nvidia-smi failed (exit 9)"
                skipped.setdefault(node, {}).update(dict.fromkeys(NEEDS["gpu.driver"], why))
            if "dcgm-timeout" in seen:
                skipped.setdefault(node, {})["gpu.dcgm"] = "gpu.dcgm-incomplete: exit 124"
            if "versions" in seen:
                skipped.setdefault(node, {}).update(
                    dict.fromkeys(VERSION_CHECKS, "the version probe did not answer (exit 124)")
                )
            if not dcgm:
                skipped.setdefault(node, {})["gpu.dcgm"] = "--no-dcgm"
        if fabric and self.sm_down:
            unreachable.append(SM)
            findings.append(_finding("os.unreachable", SM, "unreachable over SSH"))
            skipped["fabric"] = dict.fromkeys(FABRIC_CHECKS, f"{SM} unreachable")
        for suite, why in skipped.items():
            self.skipped.setdefault(suite, {}).update(why)
        return Validation.of(
            list(nodes) if health else [],
            findings,
            health=health,
            fabric=fabric,
            unreachable=unreachable,
            skipped=skipped,
            wired=not self.sm_down,
        )

    def gate(self, slurm: AuditSlurm) -> Callable[[Sequence[str]], GateOutcome]:
        def run(nodes: Sequence[str]) -> GateOutcome:
            # Gate jobs only start where Slurm would start them: a drained node, or one whose
            # slurmd does not answer, is left out as the gate's preflight leaves it
            # (slurm.unavailable), and proves nothing.
            held = [
                n
                for n in nodes
                if n in slurm.drained or n in slurm.down or "unreachable" in self.faults[n]
            ]
            found = [
                Finding(
                    check="slurm.unavailable",
                    severity="warning",
                    node=n,
                    component="gate",
                    observed="drained",
                    message=f"{n}: Slurm will not run jobs there (drained)",
                )
                for n in held
            ]
            ran = [n for n in nodes if n not in held]
            found += [
                _finding("nccl.pair", n, "fails with two partners: 212 GB/s < 333 GB/s")
                for n in ran
                if "pair" in self.faults[n]
            ]
            return GateOutcome(found, [], gate_proof(ran, found))

        return run

    def provable(self, nodes: Sequence[str], *, dcgm: bool, gate: bool, soak: bool) -> set[str]:
        """Whom a run that checks `nodes` could prove: no fault it can see, every check it needs
        able to run (reachable, versions read, the fabric checked, the gate run), and another
        node it could pass a multi-node job with (one whose jobs pass: a node whose versions
        were not read still carries the job)."""
        if self.sm_down or not gate:
            return set()

        def faults_seen(node: str) -> set[str]:
            seen = self.visible(node, dcgm=dcgm) | (self.faults[node] & {"pair"})
            return seen | (self.faults[node] & {"soak"}) if soak else seen

        carriers = [n for n in nodes if not faults_seen(n) - {"versions"}]
        if len(carriers) < 2:
            return set()
        return {n for n in carriers if not faults_seen(n)}


def _finding(check: str, node: str, what: str, component: str | None = None) -> Finding:
    return Finding(
        check=check,
        node=node,
        component=component,
        expected="healthy",
        observed=what,
        message=f"{node}: {what}",
    )


class AdmissionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ct-invariant-"))
        self.world = World()
        self.slurm = AuditSlurm(list(NODES), down=set(NODES))
        self.nc_drained_for: dict[str, set[str]] = {}
        self.watch_state = WatchState()
        self.jobs_started = 0
        self.now = 1000.0
        self.killed: RunRecord | None = None
        self.killed_node: str | None = None
        self.killed_consent: dict[str, str] = {}
        self.killed_proven: set[str] = set()
        self.runs = 0

    # --- the world ------------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), kind=st.sampled_from(NODE_FAULTS))
    def inject(self, node: str, kind: str) -> None:
        self.world.faults[node].add(kind)
        if kind == "xid":
            self.world.xid_log[node] += XID_LINE
        if kind == "soak":
            self.slurm.failing_nodes.add(node)

    @rule(node=st.sampled_from(NODES))
    def heal(self, node: str) -> None:
        self.world.faults[node].clear()
        self.slurm.failing_nodes.discard(node)

    @rule(down=st.booleans())
    def subnet_manager(self, down: bool) -> None:
        self.world.sm_down = down

    @rule(node=st.sampled_from(NODES), reason=st.sampled_from(["RMA: bad PSU", "cable swap"]))
    def operator_drains(self, node: str, reason: str) -> None:
        # By hand, with scontrol: the fake's own scontrol accepts only the tool's reasons.
        self.slurm.drained[node] = reason
        self.slurm.writer[node] = "operator"

    @rule(node=st.sampled_from(NODES))
    def operator_resumes(self, node: str) -> None:
        self.slurm.drained.pop(node, None)
        self.slurm.writer.pop(node, None)

    # --- the workflows ----------------------------------------------------------------------

    @rule(dcgm=st.booleans())
    def bringup(self, dcgm: bool) -> None:
        failed = {n: "unreachable" for n in NODES if "unreachable" in self.world.faults[n]}
        converge = _converge(failed)

        def converge_and_start(**kw: Any) -> PlaybookResult:
            result = converge(**kw)
            self.slurm.down -= set(NODES) - set(failed)
            return result

        deps = BringupDeps(
            converge=converge_and_start,
            validate=lambda ns: self.world.validation(ns, health=True, fabric=True, dcgm=dcgm),
            gate=self.world.gate(self.slurm),
            slurm=self._admin(),
        )
        reachable = [n for n in NODES if n not in failed]
        self._prepare("bringup", reachable, dcgm=dcgm, gate=True)
        result = self._as("bringup", lambda: run_bringup(NODES, deps, BringupOptions()))
        self._summarised(
            "bringup",
            result.phases,
            result.findings,
            result.nodes,
            result.run,
            result.fabric_checked,
            result.validated,
        )

    @rule(admit=st.booleans(), dcgm=st.booleans(), burn_in=st.booleans())
    def validate_after(self, admit: bool, dcgm: bool, burn_in: bool) -> None:
        world = self.world
        nodes = list(NODES)
        if burn_in:
            live = self._burn_in_live()
            gate: Callable[[Sequence[str]], GateOutcome] = live.gate
        else:
            gate = world.gate(self.slurm)
        deps = AfterMaintenanceDeps(
            fabric=lambda: world.validation([], health=False, fabric=True, dcgm=dcgm),
            health=lambda ns: world.validation(ns, health=True, fabric=False, dcgm=dcgm),
            gate=gate,
            slurm=self._admin(),
        )
        self._prepare("validate", nodes, dcgm=dcgm, gate=True, soak=burn_in, admit=admit)
        result = self._as(
            "validate", lambda: run_after_maintenance(nodes, deps, admit=admit, gate=True)
        )
        self._summarised(
            "validate-after",
            result.phases,
            result.findings,
            result.nodes,
            result.run,
            result.fabric_checked,
            nodes,
        )

    @rule(node=st.sampled_from(NODES), admit=st.booleans(), kill_at=st.sampled_from(
        [None, "drain", "power-on", "converge", "ladder", "admit"]
    ))  # fmt: skip
    def reimage(self, node: str, admit: bool, kill_at: str | None) -> None:
        if self.killed is not None:
            return  # one re-image at a time, as a site runs them: --resume first
        self.runs += 1
        record = RunRecord.create(self.tmp / f"runs{self.runs}", "reimage", {"nodes": node})
        if kill_at is not None:
            log = record.log

            def dying(step: str, status: str, **kw: Any) -> None:
                if step == kill_at and status == "start":
                    raise Killed()
                log(step, status, **kw)

            record.log = dying  # type: ignore[method-assign]
        consent = {node: self.slurm.drained[node]} if admit and node in self.slurm.drained else {}
        self._reimage(record, node, admit, consent)

    @precondition(lambda self: self.killed is not None)
    @rule()
    def reimage_resume(self) -> None:
        record, node = self.killed, self.killed_node
        assert record is not None and node is not None
        self.killed = None
        consent = self.killed_consent
        # A proof the killed run journaled stands while the node's drain is the one it was
        # proven under: what that run could prove then counts, as well as what can be now.
        then = (
            self.killed_proven
            if ("proof", "done") in {(e.step, e.status) for e in record.journal() if e.node == node}
            else set()
        )
        self._reimage(RunRecord.open(record.path), node, bool(consent), consent, then)

    @rule(node=st.sampled_from(NODES), dcgm=st.booleans())
    def node_check(self, node: str, dcgm: bool) -> None:
        seen = self.world.visible(node, dcgm=dcgm)
        if "unreachable" in seen or node in self.slurm.down:
            return  # node-check runs on the node: nothing runs there
        findings = [
            _finding(FAULT_CHECK[kind], node, kind, "GPU3")
            for kind in sorted(seen & set(FAULT_CHECK))
        ]
        not_run = {} if dcgm else dict.fromkeys(("gpu.dcgm", "gpu.dcgm-incomplete"), "no --dcgm")
        if "driver" in seen:
            not_run.update(dict.fromkeys(NEEDS["gpu.driver"], "gpu.driver failed"))
        ran = {"ecc", "xid", "driver"} | (DCGM_SEES if dcgm else set())
        was = self.nc_drained_for.get(node, set())
        self.slurm.lift_ok = lift_ok = (
            {node}
            if self.slurm.writer.get(node) == "node-check"
            and not findings
            and was <= STATE
            and was <= ran
            else set()
        )
        action = self._as(
            "node-check",
            lambda: slurm_health_action(node, findings, self._admin(), not_run=not_run),
        )
        if action.action == "drain":
            self.nc_drained_for[node] = {f.observed or "" for f in findings}
        # Liveness beside the safety rules: a drain node-check may lift, it does lift.
        if node in lift_ok and action.action != "resume":
            self.slurm.violations.append(f"node-check kept its re-proven drain: {action}")

    @rule(node=st.sampled_from(NODES), kind=st.sampled_from(sorted(STATE)), dcgm=st.booleans())
    def health_check_cycle(self, node: str, kind: str, dcgm: bool) -> None:
        """A fault the periodic check sees comes and goes: node-check drains for it, the fault
        is repaired, the next periodic check runs (with or without DCGM)."""
        self.inject(node, kind)
        self.node_check(node, True)
        self.heal(node)
        self.node_check(node, dcgm)

    @rule()
    def watch(self) -> None:
        readings = {
            n: NodeReading(
                kernel_log=self.world.xid_log[n],
                reachable="unreachable" not in self.world.faults[n],
            )
            for n in NODES
        }
        self.now += 60.0
        # Under requeue with a checkpoint grace: an opted-in job over every node is signalled
        # when the watcher drains one of them, and requeued a cycle or two later; whatever it
        # does, the watcher's drains still go through the door.
        if not self.slurm.running:
            self.jobs_started += 1
            self.slurm.running[str(9000 + self.jobs_started)] = (
                "gpu[001-004]",
                "",
                "watch-requeue",
            )
        policy = LAB.watch.model_copy(update={"policy": "requeue", "checkpoint_grace_s": 90})
        self._as(
            "watch",
            lambda: run_cycle(
                LAB, self.watch_state, CapturedSources(readings), self._admin(), policy, self.now
            ),
        )

    # --- the invariants ---------------------------------------------------------------------

    @invariant()
    def nothing_broke_a_rule(self) -> None:
        assert self.slurm.violations == [], self.slurm.violations

    # --- helpers ----------------------------------------------------------------------------

    def _admin(self) -> Any:
        from cluster_tool.slurm import AdminSlurm

        return AdminSlurm(run=self.slurm)

    def _as(self, actor: str, act: Callable[[], Any]) -> Any:
        self.slurm.actor = actor
        try:
            return act()
        finally:
            self.slurm.actor = "operator"
            self.slurm.proven = set()
            self.slurm.consent = {}
            self.slurm.lift_ok = set()

    def _prepare(
        self,
        actor: str,
        nodes: Sequence[str],
        *,
        dcgm: bool,
        gate: bool,
        soak: bool = False,
        admit: bool = False,
    ) -> None:
        self.world.skipped = {}
        self.slurm.proven = self.world.provable(nodes, dcgm=dcgm, gate=gate, soak=soak)
        self.slurm.consent = dict(self.slurm.drained) if admit else {}

    def _burn_in_live(self) -> BurnInLive:
        world, slurm = self.world, self.slurm

        class WorldGate(Live):
            def gate(self, nodes: Sequence[str], rungs: object = None) -> GateOutcome:
                return world.gate(slurm)(nodes)

        class WorldBurnIn(BurnInLive, WorldGate):
            pass

        self.runs += 1
        live = WorldBurnIn(
            cluster=LAB,
            inventory=self.tmp,
            record=RunRecord.create(self.tmp / f"runs{self.runs}", "validate-after", {}),
            slurm=self._admin(),
            gate_workdir=self.tmp / f"work{self.runs}",
            burn_in_s=20.0,
        )
        live._after_soak = lambda nodes: []  # type: ignore[method-assign]
        return live

    def _reimage(
        self,
        record: RunRecord,
        node: str,
        admit: bool,
        consent: dict[str, str],
        proven_before: set[str] | None = None,
    ) -> None:
        world, slurm = self.world, self.slurm
        bmcs = EmulatedBmcs(NODES, lag=1)
        clock = Clock()
        partner = next((n for n in NODES if n != node and n not in slurm.drained), None)

        def ladder(n: str, partner: str | None, door: Door) -> LadderResult:
            v = world.validation([n], health=True, fabric=True, dcgm=True)
            if any(f.fails for f in v.findings):
                return LadderResult(v.findings)
            nodes = [n, partner] if partner else [n]
            outcome = gate_in_reservation(
                door,
                world.gate(slurm),
                nodes,
                reservation=f"cluster-tool-reimage-{n}",
                lift=[n],
                hold_again=REIMAGE,
            )
            from cluster_tool.admission import WORKFLOW_SUITES, prove
            from cluster_tool.verdicts import Proof, settle

            proof = Proof()
            proof.add("health", [n])
            if v.fabric_checked:
                proof.add("fabric", [n])
            if partner:
                proof.trusted.add(partner)
            proof.merge_gate(outcome.proof)
            found = v.findings + outcome.findings
            verdicts, unproven = settle([n], found, proof)
            planned = {**v.planned, n: (*v.planned.get(n, ()), *GATE_CHECKS)}
            proofs = prove(
                [n],
                verdicts,
                found + unproven,
                planned=planned,
                skipped=v.skipped,
                suites=WORKFLOW_SUITES,
            )
            return LadderResult(found + unproven, proofs[n])

        deps = ReimageDeps(
            slurm=self._admin(),
            bmc=bmcs,
            wait_ssh=lambda n, t: "unreachable" not in world.faults[n],
            converge=lambda ns: {n: None for n in ns},
            ladder=ladder,
            clock=clock,
            sleep=clock.sleep,
        )
        opts = ReimageOptions(admit=admit, poll_s=1, drain_timeout_s=60)
        # The partner is a node in service, trusted as known good: its jobs carry the pair
        # (it answers and its HCAs work) whatever else it has; the node itself must be clean.
        carries = partner is not None and not world.faults[partner] & {"pair", "unreachable"}
        alone = world.provable([node, node], dcgm=True, gate=True, soak=False)
        self.slurm.proven = ({node} & alone if carries else set()) | (proven_before or set())
        proven_now = set(self.slurm.proven)
        # The operator's word of a resumed run is what the first run was given.
        self.slurm.consent = dict(consent)
        self.slurm.actor = "reimage"
        try:
            run_reimage(record, [[node]], deps, opts, partners=[partner] if partner else [])
        except Killed:
            self.killed, self.killed_node, self.killed_consent = record, node, dict(consent)
            self.killed_proven = proven_now
        finally:
            self.slurm.actor = "operator"
            self.slurm.proven = set()
            self.slurm.consent = {}

    def _summarised(
        self,
        command: str,
        phases: Sequence[Any],
        findings: Sequence[Finding],
        verdicts: dict[str, dict[str, Any]],
        run: Any,
        fabric_checked: bool,
        checked: Sequence[str],
    ) -> None:
        self.runs += 1
        record = RunRecord.create(self.tmp / f"runs{self.runs}", command, {})
        gated = [n for n, v in verdicts.items() if "gate" not in str(v.get("unproven"))]
        summary = run_summary(
            command=command,
            record=record,
            inputs={},
            phases=phases,
            findings=findings,
            verdicts=verdicts,
            run=run,
            cluster=LAB,
            health_nodes=list(checked),
            fabric_checked=fabric_checked,
            gate_nodes=gated,
            skipped=self.world.skipped,
        ).to_json()
        # 4: every planned check, and never "passed" for one whose probe did not answer.
        for node in verdicts:
            planned = set(summary["checks"][node])
            assert {*NODE_CHECKS, *VERSION_CHECKS, *GATE_CHECKS} <= planned, node
            failed = {f.check for f in findings if f.fails and f.node == node}
            skipped = set(summary["skipped"].get(node, {}))
            if "unreachable" in self.world.faults[node]:
                silent = planned - failed - skipped - set(GATE_CHECKS) - {"os.unreachable"}
                assert not silent, f"{node} unreachable, yet passed: {sorted(silent)}"
        assert set(FABRIC_CHECKS) <= set(summary["checks"]["fabric"])
        # 5: one verdict everywhere.
        assert summary["verdict"] == run.verdict and summary["headline"] == run.headline
        assert (run.exit_code == 0) == (run.verdict == "pass")
        assert run.headline in render_html(summary, [f.model_dump() for f in findings])


# CI runs a few dozen sequences of 14 steps; CT_INVARIANT_EXAMPLES runs more, and
# CT_INVARIANT_NO_SHRINK=1 reports a failing sequence as found (its steps are slow to shrink).
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)
AdmissionMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("CT_INVARIANT_EXAMPLES", "40")),
    stateful_step_count=14,
    deadline=None,
    phases=_PHASES if os.environ.get("CT_INVARIANT_NO_SHRINK") else (*_PHASES, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestAdmissionInvariants = pytest.mark.filterwarnings("ignore")(AdmissionMachine.TestCase)
