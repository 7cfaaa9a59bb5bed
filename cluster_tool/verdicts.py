"""Who may enter service: the one place a node's verdict (pass, fail, held, unknown), the run's
verdict and exit code, and the admission rule are decided. Bring-up, re-image, validate-after,
node-check, the gate simulator and the reports all read them from here.

A node passes only on positive proof: every stage its workflow requires ran for it and passed,
and no finding covers it. A finding that names no node (`nccl.fleet`, `nccl.full`, an
unlocalised `nccl.path`) holds every node it covers; a check that could not run leaves the node
`unknown`. Absence of bad news is never proof.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cluster_tool.bounds import HostlistError, expand_hostlist
from cluster_tool.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE
from cluster_tool.findings import Finding
from cluster_tool.registry import CHECKS
from cluster_tool.registry import NOT_RUN as _REGISTRY_NOT_RUN

Verdict = Literal["pass", "fail", "held", "unknown"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "held", "unknown")

# The stages a node can be proven by. A workflow that admits nodes requires all of them
# (ADMISSION); node-check re-proves health only, to lift a drain it set itself.
CONVERGE = "converge"
HEALTH = "health"
FABRIC = "fabric"
GATE_SINGLE = "gate-single"
GATE_MULTI = "gate-multi"
GATE_STAGES = frozenset({GATE_SINGLE, GATE_MULTI})
ADMISSION = (HEALTH, FABRIC, GATE_SINGLE, GATE_MULTI)

# The finding settle() adds for a node nothing faults but the gate did not prove.
UNPROVEN = "gate.unproven"

# Error findings that say a check could not run (so nothing was judged), not that something was
# found bad: the node they name is `unknown`, and a node-less one leaves every node it covers
# unknown. The registry marks them (`CheckInfo.not_run`).
NOT_RUN = _REGISTRY_NOT_RUN
_FABRIC_NOT_RUN = frozenset(c for c in NOT_RUN if CHECKS[c].plan == "fabric")


@dataclass
class GateProof:
    """What one gate run proved, as the gate hands it to the workflows: the nodes whose
    single-node job passed, and the members of each multi-node job that passed (each proves its
    members as partners). Only a job that ran and passed every step is here."""

    single: list[str] = field(default_factory=list)
    jobs: list[tuple[str, ...]] = field(default_factory=list)

    def to_json(self) -> dict[str, list[Any]]:
        """The gate report's `summary["proof"]`: `{"single": [nodes], "jobs": [[nodes], ...]}`."""
        return {"single": list(self.single), "jobs": [list(job) for job in self.jobs]}


@dataclass
class Proof:
    """What a run proved, per node: the stages that ran to a pass, and each multi-node job it
    passed (its members are each other's partners). `trusted` are nodes outside the run already
    in service (a re-imaged node's known-good partner); `not_run` says why a stage did not run at
    all."""

    passed: dict[str, set[str]] = field(default_factory=dict)
    # Each passed multi-node job once, its distinct members sorted: a full job of N nodes is N
    # names here, not the N² partner pairs it proves.
    jobs: list[tuple[str, ...]] = field(default_factory=list)
    trusted: set[str] = field(default_factory=set)
    not_run: dict[str, str] = field(default_factory=dict)
    # Proven and admitted by an earlier run of the same record (a resumed re-image reads it
    # from the journal): every stage counts as passed.
    earlier: set[str] = field(default_factory=set)

    def add(self, stage: str, nodes: Iterable[str]) -> None:
        for node in nodes:
            self.passed.setdefault(node, set()).add(stage)

    def add_job(self, nodes: Sequence[str]) -> None:
        """A multi-node job over `nodes` passed: each proved the others as partners."""
        members = tuple(sorted(set(nodes)))
        if len(members) > 1:  # a job of one node proves no partner
            self.jobs.append(members)

    def merge_gate(self, gate_proof: GateProof) -> None:
        """What a gate run proved: its single-node passes and its passed multi-node jobs."""
        self.add(GATE_SINGLE, gate_proof.single)
        for job in gate_proof.jobs:
            self.add_job(job)


@dataclass(frozen=True)
class NodeVerdict:
    """A node's verdict, why, and what stands between it and service."""

    verdict: Verdict
    reason: str | None = None
    checks_failed: tuple[str, ...] = ()
    unproven: tuple[str, ...] = ()  # required stages with no proof, and why (for people)
    missing: frozenset[str] = frozenset()  # those stages (for code)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "checks_failed": list(self.checks_failed),
            "unproven": list(self.unproven),
        }


def covered_nodes(finding: Finding, scope: Sequence[str] | Scope) -> list[str]:
    """The nodes of `scope` a finding speaks for: the node it names; for a node-less finding the
    nodes its component names (`path a <-> b`, `job <hostlist>`), else every node. A finding on
    a host outside the scope speaks for none of it, unless the fabric's tools could not run
    there (`fabric.discover`, `ib.counters-unread` on the subnet-manager host: no cable of the
    scope was judged). Over many findings, index the scope once: `Scope(nodes)`."""
    return (scope if isinstance(scope, Scope) else Scope(scope)).covered(finding)


class Scope:
    """A run's nodes in their order, with a membership index: finding which of them a finding
    covers costs what the finding names, not the size of the fleet."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = nodes
        self.order: dict[str, int] = {}
        for i, node in enumerate(nodes):
            self.order.setdefault(node, i)
        # The nodes each component names, expanded once: `covers` asks per node.
        self._named: dict[tuple[str, str], frozenset[str]] = {}

    def __contains__(self, node: object) -> bool:
        return node in self.order

    def covered(self, finding: Finding) -> list[str]:
        """`covered_nodes(finding, self.nodes)`."""
        if finding.node is not None:
            if finding.node in self.order:
                return [finding.node]
            # The subnet manager's tools could not run there: no cable of the scope was judged.
            # Any other host outside the scope (a login node that did not answer) speaks for
            # none of it; a fabric host that did not answer at all leaves the fabric stage
            # unproven instead.
            return list(self.nodes) if finding.check in _FABRIC_NOT_RUN else []
        named = self.named(finding)
        if not named:
            return list(self.nodes)
        inside = {n for n in named if n in self.order}
        if len(inside) == len(self.order):
            return list(self.nodes)  # in the scope's order, duplicates and all
        return sorted(inside, key=self.order.__getitem__)

    def covers(self, finding: Finding, node: str) -> bool:
        """Whether `node` is among `covered(finding)`, without listing the scope."""
        if node not in self.order:
            return False
        if finding.node is not None:
            return finding.node == node or (
                finding.node not in self.order and finding.check in _FABRIC_NOT_RUN
            )
        named = self.named(finding)
        return not named or node in named

    def named(self, finding: Finding) -> frozenset[str]:
        """`_named(finding)` as a set, expanded once per component this scope is asked about."""
        key = (finding.check, finding.component or "")
        found = self._named.get(key)
        if found is None:
            found = self._named[key] = frozenset(_named(finding))
        return found


def _named(finding: Finding) -> list[str]:
    """The nodes a node-less finding's component names (`path a <-> b`, `job <hostlist>`); none
    when it names none (it speaks for every node)."""
    comp = finding.component or ""
    if comp.startswith("path ") and "<->" in comp:
        return [p.strip() for p in comp.removeprefix("path ").split("<->")]
    if comp.startswith("job "):
        text = comp.removeprefix("job ")
        try:
            return expand_hostlist(text.replace(" + ", ","), f"finding {finding.check}")
        except HostlistError:
            return []
    return []


def judge_nodes(
    scope: Sequence[str],
    findings: Sequence[Finding],
    proof: Proof,
    required: Sequence[str] = ADMISSION,
) -> dict[str, NodeVerdict]:
    """Every node's verdict: `fail` when an error finding names it; else `unknown` when a check
    could not run for it or a required stage has no proof; else `held` when a node-less error
    covers it; else `pass`. A multi-node proof counts only with a partner that is itself proven
    (clean and through every other stage) or trusted."""
    index = Scope(scope)
    failing: dict[str, list[Finding]] = {}
    not_run: dict[str, list[Finding]] = {}
    holding: dict[str, list[Finding]] = {}
    for f in findings:
        if not f.fails:
            continue
        for node in index.covered(f):
            if f.check in NOT_RUN:
                not_run.setdefault(node, []).append(f)
            elif f.node == node:
                failing.setdefault(node, []).append(f)
            else:
                holding.setdefault(node, []).append(f)

    alone = [s for s in required if s != GATE_MULTI]  # what a node proves without a partner

    def gaps_alone(node: str) -> list[str]:
        if node in proof.earlier:
            return []
        have = proof.passed.get(node, set())
        return [s for s in alone if s not in have]

    # Whether a node may stand as another's partner, decided once per node (not once per pair):
    # trusted or proven earlier, or in this run, clean and through every stage but the partner.
    good: dict[str, bool] = {}

    def is_good(node: str) -> bool:
        if node not in good:
            good[node] = (
                node in proof.trusted
                or node in proof.earlier
                or (
                    node in index
                    and node not in failing
                    and node not in not_run
                    and node not in holding
                    and not gaps_alone(node)
                )
            )
        return good[node]

    # A node has a proven partner when one of its jobs holds a good node other than itself: count
    # each job's good members once, and each node asks only its own jobs.
    jobs_of: dict[str, list[int]] = {}
    good_in: list[int] = []
    for j, job in enumerate(proof.jobs):
        good_in.append(sum(map(is_good, job)))
        for node in job:
            jobs_of.setdefault(node, []).append(j)

    def has_good_partner(node: str) -> bool:
        own = int(is_good(node))
        return any(good_in[j] > own for j in jobs_of.get(node, ()))

    def gaps(node: str) -> list[str]:
        if node in proof.earlier:
            return []
        have = proof.passed.get(node, set())
        return [
            stage
            for stage in required
            if (stage == GATE_MULTI and not has_good_partner(node))
            or (stage != GATE_MULTI and stage not in have)
        ]

    verdicts: dict[str, NodeVerdict] = {}
    for node in scope:
        if node in failing:
            bad = failing[node]
            verdicts[node] = NodeVerdict(
                "fail", bad[0].message, tuple(sorted({f.check for f in bad}))
            )
            continue
        missing = gaps(node)
        unproven = tuple(_why(stage, node, proof, jobs_of) for stage in missing)
        gap = frozenset(missing)
        if node in not_run:
            f = not_run[node][0]
            checks = tuple(sorted({x.check for x in not_run[node]}))
            verdicts[node] = NodeVerdict("unknown", f.message, checks, unproven, gap)
        elif node in holding:
            f = holding[node][0]
            checks = tuple(sorted({x.check for x in holding[node]}))
            verdicts[node] = NodeVerdict("held", f.message, checks, unproven, gap)
        elif missing:
            reason = "not proven: " + "; ".join(unproven)
            verdicts[node] = NodeVerdict("unknown", reason, (), unproven, gap)
        else:
            verdicts[node] = NodeVerdict("pass")
    return verdicts


# How many partners a reason names: it ends up in a drain reason and a report line, and a node of
# a 4,096-node full job has 4,095.
_PARTNERS_SHOWN = 8


def _why(stage: str, node: str, proof: Proof, jobs_of: Mapping[str, Sequence[int]]) -> str:
    if stage in proof.not_run:
        return f"{stage} did not run ({proof.not_run[stage]})"
    if stage == GATE_MULTI:
        if not jobs_of.get(node):
            return f"{GATE_MULTI}: no multi-node job passed"
        # The first partners in name order, from the jobs' sorted members, without expanding them.
        merged = heapq.merge(*(proof.jobs[j] for j in jobs_of[node]))
        distinct = (p for p, _ in itertools.groupby(merged) if p != node)
        shown = list(itertools.islice(distinct, _PARTNERS_SHOWN + 1))
        more = ", ..." if len(shown) > _PARTNERS_SHOWN else ""
        return f"{GATE_MULTI}: no proven partner ({', '.join(shown[:_PARTNERS_SHOWN])}{more})"
    return f"{stage} not passed"


def only_gate_missing(v: NodeVerdict) -> bool:
    return bool(v.missing) and v.missing <= GATE_STAGES


def only_unproven(v: NodeVerdict) -> bool:
    """Nothing failed, nothing is held and every check ran: only the gate's proof is missing."""
    return v.verdict == "unknown" and set(v.checks_failed) <= {UNPROVEN} and only_gate_missing(v)


def settle(
    scope: Sequence[str],
    findings: Sequence[Finding],
    proof: Proof,
    required: Sequence[str] = ADMISSION,
) -> tuple[dict[str, NodeVerdict], list[Finding]]:
    """The verdicts, plus a `gate.unproven` finding (error) for each node that nothing faults
    but the gate did not prove: so its drain reason, the JUnit case and the report say why it
    stays out. Returns the verdicts with those findings counted, and the new findings."""
    first = judge_nodes(scope, findings, proof, required)
    added = [
        Finding(
            check="gate.unproven",
            node=node,
            component="gate",
            expected="single-node job and a multi-node job with a proven partner passed",
            observed="; ".join(v.unproven),
            message=f"{node}: not admitted without proof: {'; '.join(v.unproven)}",
        )
        for node, v in first.items()
        if v.verdict == "unknown" and not v.checks_failed and only_gate_missing(v)
    ]
    if not added:
        return first, []
    return judge_nodes(scope, [*findings, *added], proof, required), added


def may_admit(v: NodeVerdict, *, admit_unproven: bool = False) -> bool:
    """Who may be admitted: a node that passed; with the operator's explicit
    `--admit-unproven`, also one whose only gap is the gate's proof (no partner, no gate)."""
    return v.verdict == "pass" or (admit_unproven and only_unproven(v))


@dataclass(frozen=True)
class RunVerdict:
    """The run's one verdict: the exit code, summary.json, the CLI's last line and the report's
    headline all come from here."""

    verdict: Verdict
    exit_code: int
    headline: str


def judge_run(
    phases: Iterable[Any],
    findings: Iterable[Finding],
    nodes: Mapping[str, NodeVerdict],
    *,
    admitted_unproven: Iterable[str] = (),
) -> RunVerdict:
    """`fail` on a failed phase, a failed node, or an error finding of a check that ran; else
    `unknown` when a node is or a check could not run; else `held` when a node is (a node the
    operator admitted unproven counts as passed, and the headline says so); else `pass`. Exit 3
    when a host was unreachable, 0 only on `pass`, else 1."""
    items = list(findings)
    failed_phases = [p for p in phases if _status(p) == "failed"]
    waived = {n for n in admitted_unproven if n in nodes and only_unproven(nodes[n])}
    counts = dict.fromkeys(VERDICTS, 0)
    for name, nv in nodes.items():
        counts["pass" if name in waived else nv.verdict] += 1
    # Every error speaks for the run too, save the gate.unproven of a node the operator admitted.
    errors = [f for f in items if f.fails and not (f.check == UNPROVEN and f.node in waived)]
    verdict: Verdict
    if failed_phases or counts["fail"] or any(f.check not in NOT_RUN for f in errors):
        verdict = "fail"
    elif counts["unknown"] or errors:
        verdict = "unknown"
    elif counts["held"]:
        verdict = "held"
    else:
        verdict = "pass"
    if any(f.fails and f.check == "os.unreachable" for f in items):
        code = EXIT_UNREACHABLE
    else:
        code = EXIT_OK if verdict == "pass" else EXIT_CHECKS_FAILED
    parts = [f"{counts[v]} {v}" for v in VERDICTS if counts[v]]
    if failed_phases:
        parts.append("failed: " + ", ".join(_name(p) for p in failed_phases))
    if waived:
        parts.append(f"{len(waived)} admitted unproven (--admit-unproven)")
    headline = verdict.upper() + (f" ({'; '.join(parts)})" if parts else "")
    return RunVerdict(verdict, code, headline)


def _status(phase: Any) -> str:
    return str(phase.get("status") if isinstance(phase, Mapping) else phase.status)


def _name(phase: Any) -> str:
    return str(phase.get("name") if isinstance(phase, Mapping) else phase.name)
