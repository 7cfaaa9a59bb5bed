"""Rolling re-image with the cluster in service, as a state machine over small interfaces.

Per batch: drain and wait for running jobs → one-time PXE boot + power cycle (Redfish) → wait for
SSH → converge (`site.yml --limit`) → the node ladder (health, the node's cables, single gate, a
pair with a known-good node) → resume. Every step of every node is journaled (fsync) before the
next starts, so `--resume` after a kill -9 skips what finished and never re-images a node twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ClusterShell.NodeSet import NodeSet

from cluster_tool.admission import Door, NodeProof
from cluster_tool.bmc.redfish import Bmc, BmcError, wait_power
from cluster_tool.drains import REIMAGE_REASON, Owner, step_reason, workflow_reason
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.slurm import SlurmAdmin, SlurmError
from cluster_tool.workflows.common import drain_and_wait, known_good_partners, refusal_findings
from cluster_tool.workflows.runs import RunRecord

# The steps of one node, in order; the journal names them so.
STEPS = (
    "drain",
    "pxe-override",
    "power-off",
    "power-on",
    "wait-ssh",
    "converge",
    "ladder",
    "admit",
)


class Converge(Protocol):
    """Converge these nodes (site.yml --limit); per node None when it converged, else why not."""

    def __call__(self, nodes: Sequence[str]) -> dict[str, str | None]: ...


@dataclass
class LadderResult:
    """What the node ladder found, and the node's proof from it (None when it stopped early)."""

    findings: list[Finding]
    proof: NodeProof | None = None


class NodeLadder(Protocol):
    """Validate one node (with a known-good partner for the pair rung, when there is one),
    opening it to the gate's jobs through the run's door."""

    def __call__(self, node: str, partner: str | None, door: Door) -> LadderResult: ...


# The finding id of a node's failed step, the same in the run that failed and in a --resume
# that reads the failure back from the journal (the ladder's own ids come from its checks).
STEP_CHECKS: dict[str, str] = {
    "pxe-override": "bmc.refused",
    "power-off": "bmc.refused",
    "power-on": "bmc.refused",
    "wait-ssh": "reimage.no-ssh",
    "converge": "reimage.converge",
}


@dataclass
class ReimageDeps:
    """The edges the state machine drives; tests hand fakes that replay real behaviour."""

    slurm: SlurmAdmin
    bmc: Bmc
    wait_ssh: Callable[[str, float], bool]
    converge: Converge
    ladder: NodeLadder
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class ReimageOptions:
    # The operator's word (`--admit`): lift the drains the nodes had when the run began (an
    # RMA's, say), once the node is proven; never one set during the run.
    admit: bool = False
    batch: int = 1
    per_su: int = 1
    max_fail: int = 0
    force: bool = False
    drain_timeout_s: float = 3600.0
    power_timeout_s: float = 600.0
    ssh_timeout_s: float = 1800.0
    poll_s: float = 10.0


@dataclass
class NodeOutcome:
    status: str = "pending"  # pending, passed, failed, skipped
    step: str | None = None  # the step that failed or skipped it
    reason: str | None = None


@dataclass
class ReimageResult:
    batches: list[list[str]]
    nodes: dict[str, NodeOutcome]
    findings: list[Finding] = field(default_factory=list)
    stopped: str | None = None

    @property
    def failures(self) -> int:
        return sum(1 for o in self.nodes.values() if o.status == "failed")

    @property
    def exit_code(self) -> int:
        return 0 if all(o.status == "passed" for o in self.nodes.values()) else 1


def plan_batches(
    nodes: Sequence[tuple[str, int]],
    batch: int,
    per_su: int,
    protected: Sequence[str] = (),
) -> list[list[str]]:
    """Batches of at most `batch` nodes, never more than `per_su` of one SU in a batch; SUs take
    turns so each batch spreads its loss. Protected hosts (Slurm controller, subnet manager)
    are refused, never silently re-imaged."""
    if batch < 1 or per_su < 1:
        raise UsageError("--batch and --per-su must be at least 1")
    refused = [n for n, _ in nodes if n in set(protected)]
    if refused:
        raise UsageError(
            f"--nodes: {NodeSet.fromlist(refused)} runs the Slurm controller or the subnet "
            "manager; re-image it by hand, never in a rolling batch"
        )
    queues: dict[int, list[str]] = {}
    for name, su in nodes:
        queues.setdefault(su, []).append(name)
    batches: list[list[str]] = []
    while any(queues.values()):
        current: list[str] = []
        taken: dict[int, int] = {}
        progress = True
        while len(current) < batch and progress:
            progress = False
            for su in sorted(queues):
                if len(current) >= batch:
                    break
                if queues[su] and taken.get(su, 0) < per_su:
                    current.append(queues[su].pop(0))
                    taken[su] = taken.get(su, 0) + 1
                    progress = True
        batches.append(current)
    return batches


class _Machine:
    def __init__(
        self,
        record: RunRecord,
        deps: ReimageDeps,
        options: ReimageOptions,
        partners: Sequence[str],
        on_step: Callable[[str, str, str], None] | None,
    ) -> None:
        self.record = record
        self.deps = deps
        self.options = options
        self.partners = list(partners)
        self.on_step = on_step
        self.outcomes: dict[str, NodeOutcome] = {}
        self.findings: list[Finding] = []
        self._journal = record.journal()
        self.door = Door(deps.slurm, Owner.REIMAGE, operator_says=options.admit)
        # A resumed run's door remembers what the first one saw and wrote: a drain set after
        # the crash is newer than the journaled proof, and an operator's word covers only what
        # the nodes had when the run began.
        for e in self._journal:
            if e.node is None:
                continue
            if e.step == "seen":
                self.door.seen.setdefault(e.node, e.detail or "")
            elif e.step in ("held", "proof") and e.status == "done":
                self.door.wrote[e.node] = e.detail or ""

    # --- journal helpers -----------------------------------------------------------------

    def _done(self, step: str, node: str) -> bool:
        return any(e.step == step and e.node == node and e.status == "done" for e in self._journal)

    def _failed_entry(self, node: str) -> tuple[str, str] | None:
        for e in self._journal:
            if e.node == node and e.status in ("failed", "skipped"):
                return e.step, e.detail or ""
        return None

    def _log(
        self, step: str, status: str, node: str, batch: int, detail: str | None = None
    ) -> None:
        self.record.log(step, status, node=node, batch=batch, detail=detail)
        self._journal = self.record.journal()
        if self.on_step is not None:
            self.on_step(node, step, status)

    def fail(self, node: str, batch: int, step: str, reason: str, check: str) -> None:
        """The node stays drained, with the reason; counts toward --max-fail."""
        self._log(step, "failed", node, batch, reason)
        self.outcomes[node] = NodeOutcome("failed", step, reason)
        self.findings.append(
            Finding(
                check=check,
                node=node,
                component=step,
                observed=reason,
                message=f"{node}: {step}: {reason}",
            )
        )
        slurm_reason = step_reason(step, reason)
        try:
            if self.door.hold([node], slurm_reason):
                self._log("held", "done", node, batch, slurm_reason)
        except Exception as exc:  # the node is already drained; the record keeps the reason
            self.findings.append(
                Finding(
                    check="slurm.drain",
                    severity="warning",
                    node=node,
                    message=f"{node}: could not set the drain reason: {exc}",
                )
            )

    # --- the steps -----------------------------------------------------------------------

    def restore(self, nodes: Sequence[str]) -> list[str]:
        """Nodes the journal already settled keep their outcome; the rest still have work."""
        todo = []
        for node in nodes:
            settled = self._failed_entry(node)
            if settled is not None:
                step, detail = settled
                skipped = any(e.node == node and e.status == "skipped" for e in self._journal)
                self.outcomes[node] = NodeOutcome("skipped" if skipped else "failed", step, detail)
                if not skipped:
                    self.findings.append(
                        Finding(
                            check=STEP_CHECKS.get(step, f"reimage.{step}"),
                            node=node,
                            component=step,
                            observed=detail,
                            message=f"{node}: {step}: {detail}",
                        )
                    )
            elif self._done("admit", node):
                self.outcomes[node] = NodeOutcome("passed")
            else:
                self.outcomes[node] = NodeOutcome()
                todo.append(node)
        return todo

    def drain(self, nodes: list[str], batch: int) -> list[str]:
        need = [n for n in nodes if not self._done("drain", n)]
        if need:
            # What each node had when the run first looked: the operator's --admit covers it,
            # and a later drain is newer than any proof (journaled for --resume).
            self.door.look(need)
            for n in need:
                if not any(e.step == "seen" and e.node == n for e in self._journal):
                    self._log("seen", "done", n, batch, self.door.seen.get(n, ""))
            for n in need:
                self._log("drain", "start", n, batch)
            got = drain_and_wait(
                self.door,
                need,
                REIMAGE_REASON,
                timeout_s=self.options.drain_timeout_s,
                force=self.options.force,
                poll_s=self.options.poll_s,
                clock=self.deps.clock,
                sleep=self.deps.sleep,
            )
            for n in need:
                if self.door.wrote.get(n) == REIMAGE_REASON:
                    self._log("held", "done", n, batch, REIMAGE_REASON)
                if n in got.problems:
                    # Not the node's fault, and nothing was done to it: the run's own hold is
                    # taken back (a node that was in service goes back to its jobs); a node
                    # someone else held keeps their drain and their reason.
                    self.door.withdraw([n])
                    self._log("drain", "skipped", n, batch, got.problems[n])
                    self.outcomes[n] = NodeOutcome("skipped", "drain", got.problems[n])
                    self.findings.append(
                        Finding(
                            check="reimage.drain-timeout",
                            severity="warning",
                            node=n,
                            observed=got.problems[n],
                            message=f"{n}: not re-imaged, left as it was: {got.problems[n]}",
                        )
                    )
                else:
                    detail = f"waited {got.waited_s} s"
                    if n in got.cancelled:
                        detail += "; jobs cancelled (--force)"
                    self._log("drain", "done", n, batch, detail)
        return [n for n in nodes if self.outcomes[n].status == "pending"]

    def power_cycle(self, node: str, batch: int) -> bool:
        """One-time PXE + off + on; each sub-step is skipped when the journal has it done, and
        off/on are checked against the power state first, so a resumed run never cycles twice."""
        bmc, opts = self.deps.bmc, self.options
        wait = {"poll_s": min(opts.poll_s, 5.0), "clock": self.deps.clock, "sleep": self.deps.sleep}
        try:
            if not self._done("pxe-override", node):
                self._log("pxe-override", "start", node, batch)
                bmc.set_pxe_once(node)
                self._log("pxe-override", "done", node, batch)
            if not self._done("power-off", node):
                self._log("power-off", "start", node, batch)
                if bmc.power_state(node).lower() != "off":
                    bmc.power_off(node)
                wait_power(bmc, node, "Off", opts.power_timeout_s, **wait)  # type: ignore[arg-type]
                self._log("power-off", "done", node, batch)
            if not self._done("power-on", node):
                self._log("power-on", "start", node, batch)
                if bmc.power_state(node).lower() != "on":
                    bmc.power_on(node)
                wait_power(bmc, node, "On", opts.power_timeout_s, **wait)  # type: ignore[arg-type]
                self._log("power-on", "done", node, batch)
        except BmcError as exc:
            step = next(
                s for s in ("pxe-override", "power-off", "power-on") if not self._done(s, node)
            )
            self.fail(node, batch, step, str(exc).removeprefix(f"{node}: "), STEP_CHECKS[step])
            return False
        return True

    def wait_ssh(self, node: str, batch: int) -> bool:
        if self._done("wait-ssh", node):
            return True
        self._log("wait-ssh", "start", node, batch)
        started = self.deps.clock()
        if not self.deps.wait_ssh(node, self.options.ssh_timeout_s):
            self.fail(
                node,
                batch,
                "wait-ssh",
                f"never came back: no SSH after {self.options.ssh_timeout_s:.0f} s",
                STEP_CHECKS["wait-ssh"],
            )
            return False
        self._log("wait-ssh", "done", node, batch, f"{self.deps.clock() - started:.0f} s")
        return True

    def converge(self, nodes: list[str], batch: int) -> list[str]:
        need = [n for n in nodes if not self._done("converge", n)]
        if need:
            for n in need:
                self._log("converge", "start", n, batch)
            results = self.deps.converge(need)
            for n in need:
                why = results.get(n, "not in the play recap")
                if why is None:
                    self._log("converge", "done", n, batch)
                else:
                    self.fail(n, batch, "converge", why, STEP_CHECKS["converge"])
        return [n for n in nodes if self.outcomes[n].status == "pending"]

    def partner_for(self, node: str) -> str | None:
        """A known-good node: one re-imaged and passed in this run, else one of the run's
        partners (nodes outside it) that is still idle in service with no job now: the list was
        made when the run began, hours of batches ago, and a user's job may hold any of them
        by this node's turn."""
        passed = [n for n, o in self.outcomes.items() if o.status == "passed" and n != node]
        candidates = [*passed, *self.partners]
        if not candidates:
            return None
        try:
            free = known_good_partners(self.door.admin, candidates)
        except SlurmError:
            return None  # no word from Slurm: no partner, the node stays unproven
        return free[0] if free else None

    def ladder(self, node: str, batch: int) -> NodeProof | None:
        """The node's proof: from the ladder now, or, on a resumed run, the one journaled before
        the crash when the node's drain is still the one it was proven under. A drain that
        changed since is newer than that proof: a drain of the tool's own (the watcher's) is
        proven again by a fresh ladder; anyone else's stays, the node with it."""
        if self._done("ladder", node):
            proof = self._journaled_proof(node)
            if proof is not None:
                return proof
            self._log("ladder", "restart", node, batch, "the drain changed after its proof")
        self._log("ladder", "start", node, batch)
        partner = self.partner_for(node)
        result = self.deps.ladder(node, partner, self.door)
        self.findings += result.findings
        errors = [f for f in result.findings if f.fails]
        if errors or result.proof is None:
            why = workflow_reason(errors) if errors else "the ladder gave no proof"
            self._log("ladder", "failed", node, batch, why)
            self.outcomes[node] = NodeOutcome(
                "failed", "ladder", errors[0].message if errors else why
            )
            reason = workflow_reason(errors, by=Owner.REIMAGE)
            if self.door.hold([node], reason):
                self._log("held", "done", node, batch, reason)
            return None
        self.record.write_json(f"proofs/{node}.json", result.proof.to_json())
        self._log("ladder", "done", node, batch, f"partner {partner or 'none'}")
        self._log("proof", "done", node, batch, self.door.wrote.get(node, ""))
        return result.proof

    def _journaled_proof(self, node: str) -> NodeProof | None:
        """The proof written before a crash, while the node's drain is still the one the run
        held it with then; None when it must be proven again."""
        try:
            proof = NodeProof.from_json(self.record.read_json(f"proofs/{node}.json"))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            state = self.door.look([node]).get(node)
        except SlurmError:
            return None
        current = state.reason if state is not None and state.drained else ""
        if current == self.door.wrote.get(node) or current == self.door.seen.get(node):
            return proof
        if current and not self.door.may_lift(node, current):
            return proof  # the door refuses it at admission, saying whose drain it is
        self.door.seen[node] = current  # a drain of the tool's own: proven afresh from here
        return None

    def admit(self, node: str, batch: int, proof: NodeProof) -> None:
        self._log("admit", "start", node, batch)
        if self.door.admit([proof]) or not self._held(node):
            self._log("admit", "done", node, batch)
            self.outcomes[node] = NodeOutcome("passed")
            return
        refusal = self.door.refused()[node]
        self.findings += refusal_findings({node: refusal})
        self._log("admit", "skipped", node, batch, refusal.why)
        self.outcomes[node] = NodeOutcome("skipped", "admit", refusal.why)

    def _held(self, node: str) -> bool:
        state = self.door.look([node]).get(node)
        return state is None or not state.usable


def run_reimage(
    record: RunRecord,
    batches: list[list[str]],
    deps: ReimageDeps,
    options: ReimageOptions,
    *,
    partners: Sequence[str] = (),
    on_step: Callable[[str, str, str], None] | None = None,
) -> ReimageResult:
    """Drive every batch through the steps; resumable from `record`'s journal."""
    m = _Machine(record, deps, options, partners, on_step)
    every = [n for b in batches for n in b]
    todo = set(m.restore(every))
    stopped: str | None = None
    for index, batch in enumerate(batches, 1):
        failed = sum(1 for o in m.outcomes.values() if o.status == "failed")
        if failed > options.max_fail:
            stopped = (
                f"stopped before batch {index}: {failed} failed node(s) > --max-fail "
                f"{options.max_fail}; failed nodes stay drained with the reason"
            )
            break
        nodes = [n for n in batch if n in todo]
        if not nodes:
            continue
        record.log("batch", "start", batch=index, detail=str(NodeSet.fromlist(nodes)))
        alive = m.drain(nodes, index)
        alive = [n for n in alive if m.power_cycle(n, index)]
        alive = [n for n in alive if m.wait_ssh(n, index)]
        alive = m.converge(alive, index) if alive else []
        for n in alive:
            proof = m.ladder(n, index)
            if proof is not None:
                m.admit(n, index, proof)
        record.log("batch", "done", batch=index)
    if stopped:
        record.log("run", "failed", detail=stopped)
    return ReimageResult(batches, m.outcomes, m.findings, stopped)
