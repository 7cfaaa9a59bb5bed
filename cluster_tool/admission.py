"""The one door into and out of service. Every drain the tool sets and every resume it makes in
Slurm happen here, nowhere else (a test greps for it):

- `Door.hold` drains, never over another's reason (`drains.may_replace`);
- `Door.admit` resumes only a node whose `NodeProof` from this run is complete (every check its
  verdict needs, from the registry, ran and passed), whose drain this run may lift
  (`drains.may_lift`, the operator's word where given) and whose drain did not change after the
  run first looked at it (a drain newer than the proof);
- `Door.gate_window` opens held nodes to the gate's jobs inside a maintenance reservation, and
  holds them again before the reservation ends, whatever the gate did;
- `Door.withdraw` takes back a hold this run set on a node that was in service, when the run
  gives up before touching it (re-image's drain timeout): it goes back as it was;
- `Breaker` is the fleet-wide stop: past a share of the fleet, nothing more is drained.

A door is one run's hand: it remembers each node's drain reason when it first looked (`seen`)
and every reason it wrote (`wrote`), and records every act and refusal (`acts`) for the run
record and for the invariant tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from cluster_tool.drains import Owner, health_checks, may_replace
from cluster_tool.drains import may_lift as may_lift_reason
from cluster_tool.findings import Finding
from cluster_tool.registry import CHECKS, GATE_CHECKS, Plan, relift
from cluster_tool.slurm import NodeState, Slurm, SlurmAdmin
from cluster_tool.verdicts import NodeVerdict, Scope, may_admit

__all__ = [
    "WORKFLOW_SUITES",
    "Act",
    "Breaker",
    "CheckResult",
    "Door",
    "NodeProof",
    "prove",
    "required_checks",
]

Status = Literal["passed", "failed", "not-run"]

# What a workflow that puts nodes into service (bring-up, validate-after --admit, re-image)
# needs proven: the registry's node checks, what the node runs against the spec's pins and the
# compatibility matrix, the fabric's checks, and the gate's rungs.
WORKFLOW_SUITES: tuple[Plan, ...] = ("node", "versions", "fabric", "gate")


@dataclass(frozen=True)
class CheckResult:
    """One check of one node in one run: passed, failed, or did not run (and why)."""

    status: Status
    why: str = ""


def required_checks(suites: Iterable[Plan]) -> tuple[str, ...]:
    """What an admission on `suites` needs proven: every check those suites plan that can keep a
    node out (it has an error severity) and that the operator may not leave out
    (`CheckInfo.optional`, DCGM's diag)."""
    wanted = set(suites)
    return tuple(
        c.id
        for c in CHECKS.values()
        if c.plan in wanted and "error" in c.severities and not c.optional
    )


@dataclass(frozen=True)
class NodeProof:
    """What one run proved of one node: its verdict and every check it planned there, each with
    its result. `requires` are the checks the admission needs; `waived` is the operator's
    `--admit-unproven` for a node whose only gap is the gate's proof."""

    node: str
    verdict: NodeVerdict
    checks: Mapping[str, CheckResult]
    requires: tuple[str, ...]
    waived: bool = False

    def refusal(self) -> str | None:
        """Why this proof admits nothing; None when it is complete."""
        if not may_admit(self.verdict, admit_unproven=self.waived):
            why = f": {self.verdict.reason}" if self.verdict.reason else ""
            return f"verdict {self.verdict.verdict}{why}"
        waivable = set(GATE_CHECKS) if self.waived else set()
        for check in self.requires:
            result = self.checks.get(check)
            if result is None:
                return f"{check} was not checked in this run"
            if result.status == "failed":
                return f"{check} failed"
            if result.status == "not-run" and check not in waivable:
                return f"{check} did not run ({result.why})"
        return None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> NodeProof:
        """A proof a run record kept (`to_json`); KeyError/TypeError/ValueError when it is not."""
        v = data["verdict"]
        checks = data["checks"]
        if not isinstance(v, dict) or not isinstance(checks, dict):
            raise TypeError("not a node proof")
        verdict = NodeVerdict(
            v["verdict"],
            v.get("reason"),
            tuple(v.get("checks_failed") or ()),
            tuple(v.get("unproven") or ()),
        )
        results = {
            str(c): CheckResult(_status(r["status"]), str(r.get("why") or ""))
            for c, r in checks.items()
        }
        requires = data["requires"]
        if not isinstance(requires, list):
            raise TypeError("not a node proof")
        return cls(
            str(data["node"]), verdict, results, tuple(map(str, requires)), bool(data["waived"])
        )

    def passed(self) -> list[str]:
        return [c for c, r in self.checks.items() if r.status == "passed"]

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "verdict": self.verdict.to_json(),
            "checks": {c: {"status": r.status, "why": r.why} for c, r in self.checks.items()},
            "requires": list(self.requires),
            "waived": self.waived,
        }


def prove(
    scope: Sequence[str],
    verdicts: Mapping[str, NodeVerdict],
    findings: Sequence[Finding],
    *,
    planned: Mapping[str, Sequence[str]],
    skipped: Mapping[str, Mapping[str, str]],
    suites: Iterable[Plan],
    waived: Iterable[str] = (),
) -> dict[str, NodeProof]:
    """Each node's proof from what the run planned per suite (a node's name, or `fabric` for the
    cables every node shares), what did not run and why, and the findings: a check failed for a
    node when an error of it covers the node (`verdicts.Scope.covered`), did not run when its
    suite skipped it, else passed."""
    requires = required_checks(suites)
    index = Scope(scope)
    failed: dict[tuple[str, str], str] = {}
    for f in findings:
        if f.fails:
            for node in index.covered(f):
                failed.setdefault((node, f.check), f.message)
    waiving = set(waived)
    proofs: dict[str, NodeProof] = {}
    for node in scope:
        checks: dict[str, CheckResult] = {}
        for suite in (node, "fabric"):
            for check in planned.get(suite, ()):
                why = skipped.get(suite, {}).get(check)
                if (node, check) in failed:
                    checks[check] = CheckResult("failed", failed[(node, check)])
                elif why is not None:
                    checks[check] = CheckResult("not-run", why)
                else:
                    checks.setdefault(check, CheckResult("passed"))
        proofs[node] = NodeProof(node, verdicts[node], checks, requires, node in waiving)
    return proofs


@dataclass(frozen=True)
class Act:
    """One thing the door did or refused: `drain`, `keep` (another's drain left as it is),
    `resume`, `refuse` (a resume refused, `why`), `open`/`close` (a gate window), `withdraw`."""

    kind: str
    node: str
    reason: str = ""
    why: str = ""
    # A refusal because the proof was incomplete (not because of whose drain holds the node).
    gap: bool = False


@dataclass(frozen=True)
class Breaker:
    """The fleet-wide stop: when more than `max_share` of `total` nodes would be held out at
    once, the cause is the fabric or the software, not the nodes, and nothing more is drained.
    `at_least` keeps one drain possible on a small fleet (the watcher's rule)."""

    max_share: float
    total: int
    at_least: int = 0

    @property
    def cap(self) -> int:
        return max(self.at_least, math.floor(self.max_share * self.total + 1e-9))

    def trips(self, count: int) -> bool:
        return self.total > 0 and count > self.cap


@dataclass
class Door:
    """One run's hand on Slurm's node states (see the module's docstring). `by` is who writes and
    lifts (`drains.Owner`); `operator_says` is the operator's word for this run (`--admit`): it
    lifts the drains the nodes had when the run first looked at them, never a newer one."""

    slurm: Slurm
    by: Owner
    operator_says: bool = False
    seen: dict[str, str] = field(default_factory=dict)
    wrote: dict[str, str] = field(default_factory=dict)
    acts: list[Act] = field(default_factory=list)

    # --- reading ----------------------------------------------------------------------------

    def look(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        """The nodes' states now; the first look at a node is remembered (its drain reason, or
        "" when it was not drained) as what the run's proof started from."""
        if not nodes:
            return {}
        states = {s.name: s for s in self.slurm.node_states(list(nodes))}
        for node in nodes:
            state = states.get(node)
            self.seen.setdefault(node, _held_reason(state))
        return states

    def held_by_others(self, state: NodeState | None) -> bool:
        """Drained by someone whose drain this run may not lift (an operator's, unless the
        operator said so for the drain they had when the run began)."""
        reason = _held_reason(state)
        return bool(reason) and not self.may_lift(state.name if state else "", reason)

    # --- drains -----------------------------------------------------------------------------

    def hold(self, nodes: Sequence[str], reason: str) -> list[str]:
        """Drain `nodes` with `reason`, except those already held for a reason this run may not
        write over (`drains.may_replace`): theirs stays, recorded as `keep`. Returns the nodes
        drained now."""
        if not nodes:
            return []
        states = self.look(nodes)
        drain: list[str] = []
        for node in nodes:
            current = _held_reason(states.get(node))
            if current == reason:
                self.wrote[node] = reason
                continue
            if current and not (self.wrote.get(node) == current or may_replace(current, self.by)):
                self.acts.append(Act("keep", node, current, f"not written over with {reason}"))
                continue
            drain.append(node)
        if drain:
            self.slurm.drain(drain, reason)
            for node in drain:
                self.wrote[node] = reason
                self.acts.append(Act("drain", node, reason))
        return drain

    def hold_each(self, reasons: Mapping[str, str]) -> list[str]:
        """`hold` with a reason of each node's own (one scontrol call per distinct reason)."""
        by_reason: dict[str, list[str]] = {}
        for node, reason in reasons.items():
            by_reason.setdefault(reason, []).append(node)
        held: list[str] = []
        for reason, nodes in by_reason.items():
            held += self.hold(nodes, reason)
        return held

    def withdraw(self, nodes: Sequence[str]) -> list[str]:
        """Undo this run's own hold on nodes that were in service when it first looked and whose
        reason is still the one it wrote: the run gave up before touching them (re-image's
        drain timeout). Anything else stays as it is, the original reason with it."""
        states = self.look(nodes)
        back = [
            n
            for n in nodes
            if self.seen.get(n) == ""
            and n in self.wrote
            and _held_reason(states.get(n)) == self.wrote[n]
        ]
        if back:
            self.slurm.resume(back)
            for n in back:
                self.acts.append(Act("withdraw", n, self.wrote.pop(n)))
        return back

    # --- into service -----------------------------------------------------------------------

    def admit(self, proofs: Iterable[NodeProof]) -> list[str]:
        """Resume the nodes whose proof is complete and whose drain this run may lift; every
        refusal is an `Act("refuse", node, reason, why)`. A node in service needs nothing."""
        wanted = {p.node: p for p in proofs}
        if not wanted:
            return []
        states = self.slurm_states(list(wanted))
        resume: list[str] = []
        for node, proof in wanted.items():
            state = states.get(node)
            current = _held_reason(state)
            if state is not None and not _out(state):
                continue  # in service already
            gap = proof.refusal()
            why = gap or self._lift_refusal(node, current, proof)
            if why is not None:
                self.acts.append(Act("refuse", node, current, why, gap=gap is not None))
                continue
            resume.append(node)
        if resume:
            self.slurm.resume(resume)
            for node in resume:
                self.wrote.pop(node, None)
                self.acts.append(Act("resume", node, _held_reason(states.get(node))))
        return resume

    def refused(self) -> dict[str, Act]:
        """Node -> the refusal, for every admission this door refused (the last per node)."""
        return {a.node: a for a in self.acts if a.kind == "refuse"}

    @contextmanager
    def gate_window(
        self,
        reservation: str,
        nodes: Sequence[str],
        *,
        lift: Sequence[str],
        hold_again: str,
    ) -> Iterator[list[str]]:
        """Reserve `nodes` for the gate's jobs alone, open those of `lift` this run holds (its own
        holds, or what the operator's word covers), run the body, then hold them again with
        `hold_again` and release the reservation, whatever happened: an interrupted gate leaves
        no node in service unproven and no reservation behind. Yields the nodes opened."""
        admin = self.admin
        admin.reserve(reservation, nodes)
        opened: list[str] = []
        try:
            states = self.look(list(lift))
            opened = [
                n
                for n in lift
                if _out(states.get(n))
                and self._lift_refusal(n, _held_reason(states.get(n))) is None
            ]
            if opened:
                self.slurm.resume(opened)
                for n in opened:
                    self.acts.append(Act("open", n, _held_reason(states.get(n)), reservation))
            yield opened
        finally:
            try:
                if lift:
                    self.hold(list(lift), hold_again)
                    for n in opened:
                        self.acts.append(Act("close", n, hold_again, reservation))
            finally:
                admin.release(reservation)

    # --- helpers ----------------------------------------------------------------------------

    def slurm_states(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        return self.look(nodes)

    def may_lift(self, node: str, reason: str) -> bool:
        """Whether this run may lift `reason` from `node`: the operator's word covers the drain
        the node had when the run began, not a newer one; the tool's own drains follow
        `drains.may_lift`."""
        operator = self.operator_says and reason == self.seen.get(node)
        return may_lift_reason(reason, self.by, operator_says=operator)

    def _lift_refusal(self, node: str, current: str, proof: NodeProof | None = None) -> str | None:
        if not current:
            return None  # down without a reason of anyone's: Slurm's own, nothing to lift
        mine = self.wrote.get(node) == current
        if not mine and current != self.seen.get(node):
            return f"drained after this run's proof began: {current}"
        if not mine and not self.may_lift(node, current):
            return f"drained by someone else: {current} (their word, or --admit, lifts it)"
        if self.by is Owner.HEALTH and not mine:
            # node-check proves only what it ran: each check its drain names, run now and clean,
            # and re-provable by a fresh reading (not an Xid gone from a rotated log).
            named = health_checks(current)
            if named is None:
                return f"the drain names checks node-check cannot tell apart: {current}"
            passed = [] if proof is None else proof.passed()
            ok, why = relift(named, passed)
            if not ok:
                return why
        return None

    @property
    def admin(self) -> SlurmAdmin:
        """The Slurm behind the door, for what is not a drain or a resume (reservations, jobs,
        node states): the workflows hold a door, not a second handle on Slurm."""
        return self.slurm  # type: ignore[return-value]


def _status(value: object) -> Status:
    if value not in ("passed", "failed", "not-run"):
        raise ValueError(f"not a check status: {value!r}")
    return value


_DOWN = frozenset({"DOWN", "FAIL"})


def _out(state: NodeState | None) -> bool:
    """Out of service in a way a resume lifts: drained, or down."""
    return state is not None and (state.drained or state.state in _DOWN or "DOWN" in state.flags)


def _held_reason(state: NodeState | None) -> str:
    """The drain reason that holds the node out, "" when nothing holds it (in service, or down
    with no reason)."""
    if state is None or not _out(state):
        return ""
    return state.reason
