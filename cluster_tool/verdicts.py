"""Who may enter service: the one place a node's verdict (pass, fail, held, unknown), the run's
verdict and exit code, and the admission rule are decided. Bring-up, re-image, validate-after,
node-check, the gate simulator and the reports all read them from here.

A node passes only on positive proof: every stage its workflow requires ran for it and passed,
and no finding covers it. A finding that names no node (`nccl.fleet`, `nccl.full`, an
unlocalised `nccl.path`) holds every node it covers; a check that could not run leaves the node
`unknown`. Absence of bad news is never proof.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cluster_tool.bounds import HostlistError, expand_hostlist
from cluster_tool.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE
from cluster_tool.findings import Finding

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
# unknown.
NOT_RUN = frozenset(
    {
        "os.unreachable",
        "os.kernel-log",
        "ib.counters-unread",
        "fabric.discover",
        "slurm.error",
        "slurm.unavailable",
        "slurm.pending",
        UNPROVEN,
    }
)


@dataclass
class Proof:
    """What a run proved, per node: the stages that ran to a pass, and the partners of each
    multi-node job it passed. `trusted` are nodes outside the run already in service (a
    re-imaged node's known-good partner); `not_run` says why a stage did not run at all."""

    passed: dict[str, set[str]] = field(default_factory=dict)
    partners: dict[str, set[str]] = field(default_factory=dict)
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
        for node in nodes:
            self.partners.setdefault(node, set()).update(n for n in nodes if n != node)

    def merge_gate(self, gate_proof: Mapping[str, Any]) -> None:
        """The gate's `summary["proof"]`: `{"single": [nodes], "jobs": [[nodes], ...]}`."""
        self.add(GATE_SINGLE, gate_proof.get("single", ()))
        for job in gate_proof.get("jobs", ()):
            self.add_job(list(job))


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


def covered_nodes(finding: Finding, scope: Sequence[str]) -> list[str]:
    """The nodes of `scope` a finding speaks for: the node it names; for a node-less finding the
    nodes its component names (`path a <-> b`, `job <hostlist>`), else every node. A finding on
    a host outside the scope speaks for none of it, unless a check could not run there (the
    subnet-manager host unreachable: no cable of the scope was judged)."""
    if finding.node is not None:
        if finding.node in scope:
            return [finding.node]
        return list(scope) if finding.check in NOT_RUN else []
    comp = finding.component or ""
    named: list[str] = []
    if comp.startswith("path ") and "<->" in comp:
        named = [p.strip() for p in comp.removeprefix("path ").split("<->")]
    elif comp.startswith("job "):
        text = comp.removeprefix("job ")
        try:
            named = expand_hostlist(text.replace(" + ", ","), f"finding {finding.check}")
        except HostlistError:
            named = []
    inside = [n for n in scope if n in set(named)]
    return inside if named else list(scope)


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
    errors = [f for f in findings if f.fails]
    failing: dict[str, list[Finding]] = {}
    not_run: dict[str, list[Finding]] = {}
    holding: dict[str, list[Finding]] = {}
    for f in errors:
        for node in covered_nodes(f, scope):
            named = f.node == node
            if f.check in NOT_RUN:
                not_run.setdefault(node, []).append(f)
            elif named:
                failing.setdefault(node, []).append(f)
            else:
                holding.setdefault(node, []).append(f)

    def clean(node: str) -> bool:
        return node not in failing and node not in not_run and node not in holding

    def gaps(node: str, *, partner_check: bool) -> list[str]:
        if node in proof.earlier:
            return []
        have = proof.passed.get(node, set())
        missing = []
        for stage in required:
            if stage == GATE_MULTI:
                if not partner_check:
                    continue
                good = [
                    p
                    for p in sorted(proof.partners.get(node, ()))
                    if p in proof.trusted
                    or p in proof.earlier
                    or (p in scope and clean(p) and not partial(p))
                ]
                if not good:
                    missing.append(stage)
            elif stage not in have:
                missing.append(stage)
        return missing

    def partial(node: str) -> list[str]:
        return gaps(node, partner_check=False)

    verdicts: dict[str, NodeVerdict] = {}
    for node in scope:
        if node in failing:
            bad = failing[node]
            verdicts[node] = NodeVerdict(
                "fail", bad[0].message, tuple(sorted({f.check for f in bad}))
            )
            continue
        missing = gaps(node, partner_check=True)
        unproven = tuple(_why(stage, node, proof) for stage in missing)
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


def _why(stage: str, node: str, proof: Proof) -> str:
    if stage in proof.not_run:
        return f"{stage} did not run ({proof.not_run[stage]})"
    if stage == GATE_MULTI:
        if not proof.partners.get(node):
            return f"{GATE_MULTI}: no multi-node job passed"
        return f"{GATE_MULTI}: no proven partner ({', '.join(sorted(proof.partners[node]))})"
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
