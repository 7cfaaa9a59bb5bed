"""From what the ladder concluded to findings and Slurm drains, with the fleet-wide safety stop.

A drain reason says the check, the number against its floor and the partners it was
measured with, so `sinfo -R` alone tells the next person why the node is out:
`cluster-tool gate: nccl.pair 212 GB/s < 333 GB/s with gpu004 and gpu019`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cluster_tool.admission import Breaker, Door
from cluster_tool.drains import Owner, gate_reason
from cluster_tool.fabric.topology import Topology
from cluster_tool.findings import Finding
from cluster_tool.gate.localize import Localisation, PairResult
from cluster_tool.gate.thresholds import SPEC_DEFAULTS, Expectation
from cluster_tool.slurm import Slurm


def _gbs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} GB/s"


# Jobs quoted in a finding: a node failing every one of twelve screens has twelve.
_SHOWN = 3


def _count(n: int) -> str:
    return {2: "two", 3: "three"}.get(n, str(n))


def _with(res: PairResult, node: str, floor: float) -> str:
    return f"{_what(res, floor)} with {res.partner_of(node)}"


def _more(evidence: Sequence[PairResult]) -> str:
    return f" (and {len(evidence) - _SHOWN} more)" if len(evidence) > _SHOWN else ""


def _what(res: PairResult, floor: float) -> str:
    # The job's own words ("212 GB/s < 333 GB/s", "no output for 300 s"), else the numbers.
    if res.passed:
        return f"{_gbs(res.busbw_gbs)} (passed, far below the fleet)"
    return res.detail or f"{_gbs(res.busbw_gbs)} < {_gbs(floor)}"


@dataclass(frozen=True)
class NodeVerdict:
    """A node the gate holds guilty, the finding that says so, and the reason to drain it."""

    node: str
    finding: Finding
    reason: str


def fleet_finding(why: str) -> Finding:
    """`nccl.fleet`: the safety stop, a finding that names no node (so it holds every node the
    run judged: suspect the fabric or the software, not the nodes)."""
    return Finding(
        check="nccl.fleet",
        severity="error",
        expected="failures on a few nodes, not a large share of the fleet",
        observed=why,
        message=f"{why}; nothing drained",
    )


def localisation_findings(
    loc: Localisation,
    expectation: Expectation,
    topology: Topology | None = None,
    *,
    check: str = "nccl.pair",
) -> tuple[list[Finding], list[NodeVerdict]]:
    """Findings for bad nodes, paths, stragglers, flaky and unresolved pairs; the guilty nodes."""
    floor, expected = expectation.floor_gbs, expectation.expected_gbs
    findings: list[Finding] = []
    guilty: list[NodeVerdict] = []
    if loc.stop_reason:
        findings.append(fleet_finding(loc.stop_reason))
    for node, evidence in sorted(loc.bad.items()):
        partners = list(dict.fromkeys(r.partner_of(node) for r in evidence))
        # The worst job that ran names the fault; one Slurm never started has no busbw to rank.
        ran = [r for r in evidence if r.check != "slurm.pending"] or evidence
        worst = min(ran, key=lambda r: r.busbw_gbs if r.busbw_gbs is not None else -1.0)
        res_check = worst.check if worst.check != "nccl.pair" else check
        comps = sorted({c for r in evidence for c in r.components})
        what = _what(worst, floor)
        # A job Slurm never started says nothing about the node's health: report, keep it.
        unscheduled = all(r.check == "slurm.pending" for r in evidence)
        f = Finding(
            check=res_check,
            severity="warning" if unscheduled else "error",
            node=node,
            component=", ".join(comps) or None,
            expected=f">= {_gbs(floor)} ({expectation.basis}, {_gbs(expected)} expected)",
            observed="; ".join(_with(r, node, floor) for r in evidence[:_SHOWN]) + _more(evidence),
            message=(
                f"{node} fails with {_count(len(partners))} partners "
                f"({' and '.join(partners[:_SHOWN])}{', ...' if len(partners) > _SHOWN else ''}): "
                + "; ".join(_with(r, node, floor) for r in evidence[:_SHOWN])
                + _more(evidence)
            ),
        )
        findings.append(f)
        if not unscheduled:
            reason = gate_reason(res_check, what, partners[:2], f.component)
            guilty.append(NodeVerdict(node, f, reason))
    for res in loc.paths:
        findings.append(path_finding(res, expectation, topology))
    for node, (z, evidence) in sorted(loc.stragglers.items()):
        median = loc.stats.median if loc.stats else None
        findings.append(
            Finding(
                check="nccl.straggler",
                severity="warning",
                node=node,
                component=", ".join(sorted({c for r in evidence for c in r.components})) or None,
                expected=f"fleet median {_gbs(median)}",
                observed="; ".join(
                    f"{_gbs(r.busbw_gbs)} with {r.partner_of(node)}" for r in evidence
                )
                + f" (z = {z})",
                message=f"{node} is far below the fleet (robust z = {z}) though above the floor",
            )
        )
    for res in loc.flaky:
        findings.append(
            Finding(
                check="nccl.flaky",
                severity="warning",
                node=None,
                component="job " + " + ".join(res.nodes),
                expected=f">= {_gbs(floor)}",
                observed=f"{_what(res, floor)} once, passed when re-run",
                message=f"{' + '.join(res.nodes)} failed once and passed on re-run",
            )
        )
    for node, evidence in sorted(loc.suspect.items()):
        # It failed a job no bad partner explains and was not cleared: never admitted on that.
        findings.append(
            Finding(
                check="nccl.unresolved",
                severity="error",
                node=node,
                expected=f"{_gbs(floor)} or more, or a failure a bad partner explains",
                observed="; ".join(_with(r, node, floor) for r in evidence[:_SHOWN]),
                message=(
                    f"{node} failed a job no bad partner explains and could not be cleared: "
                    + loc.unresolved.get(node, "not re-tested enough")
                ),
            )
        )
    for node, why in sorted(loc.unresolved.items()):
        if node in loc.suspect:
            continue
        findings.append(
            Finding(
                check="nccl.unresolved",
                severity="warning",
                node=node,
                message=f"{node} could not be cleared or blamed: {why}",
            )
        )
    return findings, guilty


def path_finding(
    res: PairResult,
    expectation: Expectation,
    topology: Topology | None = None,
    evidence: Sequence[PairResult] = (),
) -> Finding:
    """`nccl.path`: two nodes that fail only together; it holds those two and no other."""
    floor = expectation.floor_gbs
    a, b = sorted(res.nodes)[:2]
    hops = topology.path(a, b) if topology is not None else []
    observed = f"{_what(res, floor)}, twice; both pass with other partners"
    if len(evidence) > 1:
        observed = (
            f"{_what(res, floor)}; every job holding both of them failed "
            f"({len(evidence)} jobs, the first over {len(evidence[0].nodes)} nodes); "
            "both pass with other partners"
        )
    return Finding(
        check="nccl.path",
        severity="error",
        node=None,
        component=f"path {a} <-> {b}",
        expected=f">= {_gbs(floor)}",
        observed=observed,
        message=(
            f"{a} and {b} fail only together: suspect the cables/switches between them"
            + (": " + " | ".join(hops) if hops else "")
        ),
    )


@dataclass
class DrainPlan:
    """Which nodes to drain and why; empty with `stopped` set when the safety stop holds."""

    drains: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None
    applied: bool = False

    def lines(self) -> list[str]:
        if self.stopped:
            return [f"drain nothing: {self.stopped}"]
        verb = "drained" if self.applied else "would drain"
        return [f"{verb} {node}: {reason}" for node, reason in sorted(self.drains.items())]


def plan_drains(
    guilty: Iterable[NodeVerdict],
    total_nodes: int,
    max_fail_share: float = SPEC_DEFAULTS.max_failing_share,
) -> DrainPlan:
    """Drain every guilty node, unless more than `max_fail_share` of the fleet is guilty (the
    admission door's fleet breaker)."""
    drains: dict[str, str] = {}
    specific: set[str] = set()
    for v in guilty:
        # First reason wins, unless a later one names the component (the rail) and it did not.
        if v.node not in drains or (v.finding.component and v.node not in specific):
            drains[v.node] = v.reason
        if v.finding.component:
            specific.add(v.node)
    if Breaker(max_fail_share, total_nodes).trips(len(drains)):
        return DrainPlan(
            stopped=(
                f"{len(drains)} of {total_nodes} nodes failed (more than {max_fail_share:.0%}): "
                "suspect the fabric or the software, not the nodes"
            )
        )
    return DrainPlan(drains=drains)


def apply_drains(plan: DrainPlan, slurm: Slurm) -> DrainPlan:
    """Drain each node with its own reason, through the admission door (one scontrol call per
    distinct reason; a node someone else holds keeps their reason)."""
    if plan.stopped:
        return plan
    Door(slurm, Owner.GATE).hold_each(plan.drains)
    plan.applied = True
    return plan
