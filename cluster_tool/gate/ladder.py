"""The whole gate: single, pairs (with localisation), rails, full; findings, report and drains.

`run_gate` is the live command's logic with Slurm behind the `Slurm` interface, so tests
drive it with a fake Slurm that replays captured outputs, and the lab with the real one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ClusterShell.NodeSet import NodeSet

from cluster_tool.drains import gate_reason
from cluster_tool.fabric.topology import Topology
from cluster_tool.findings import Finding, Report
from cluster_tool.gate.classify import GdrUse, gdr_findings
from cluster_tool.gate.evaluate import JobOutcome, evaluate_job
from cluster_tool.gate.localize import (
    DEFAULT_RETESTS,
    FullSplit,
    Localisation,
    Localizer,
    stragglers,
)
from cluster_tool.gate.plan import (
    GateJob,
    NcclTestParams,
    multi_node_job,
    rails_job,
    single_job,
)
from cluster_tool.gate.rungs import RUNG_NAMES
from cluster_tool.gate.runner import JobRun, SlurmRunner
from cluster_tool.gate.thresholds import SPEC_DEFAULTS, Rung, Thresholds
from cluster_tool.gate.verdict import (
    DrainPlan,
    NodeVerdict,
    apply_drains,
    fleet_finding,
    localisation_findings,
    path_finding,
    plan_drains,
)
from cluster_tool.slurm import NodeState
from cluster_tool.spec.thresholds import NcclGateThresholds
from cluster_tool.verdicts import GateProof


@dataclass(frozen=True)
class GateOptions:
    """What the operator asked for, over the spec's `thresholds.nccl_gate` (`from_spec`). The
    limits' defaults are that model's, written there and only read here: `GateOptions()` is
    the gate of a spec that sets none of them."""

    rungs: tuple[str, ...] = RUNG_NAMES
    rails: bool = False
    rotation: int = 0
    drain: bool = False
    dry_run: bool = False
    max_fail_share: float = SPEC_DEFAULTS.max_failing_share
    straggler_z: float = SPEC_DEFAULTS.straggler_zscore
    # Pair screens (each node with another partner each time) and the passes in a row that clear
    # a node of a failure nobody explains: see cluster_tool.gate.localize.
    screens: int = SPEC_DEFAULTS.screens
    retests: int = DEFAULT_RETESTS
    # A slurmd started moments ago is NOT_RESPONDING until it registers with slurmctld (a
    # bring-up gates right after the converge): wait this long for it before leaving it out.
    settle_s: float = 120.0

    @classmethod
    def from_spec(cls, limits: NcclGateThresholds) -> GateOptions:
        """The gate as the spec's `thresholds.nccl_gate` sets it; what the operator asks for
        (rungs, drain, `--screens`) goes on top with `dataclasses.replace`."""
        return cls(
            max_fail_share=limits.max_failing_share,
            straggler_z=limits.straggler_zscore,
            screens=limits.screens,
        )


@dataclass
class GateResult:
    """The gate's verdict: a report in the findings contract, and what it drained (or would)."""

    report: Report
    drains: DrainPlan
    rungs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Positive proof, for admission (cluster_tool.verdicts): the workflows take it as it is;
    # `to_json` writes it for the report and `--json` only.
    proof: GateProof = field(default_factory=GateProof)

    def to_json(self) -> dict[str, Any]:
        data = self.report.to_json()
        data["summary"] = {
            **data["summary"],
            "rungs": self.rungs,
            "proof": self.proof.to_json(),
            "drain": {
                "applied": self.drains.applied,
                "stopped": self.drains.stopped,
                "nodes": dict(sorted(self.drains.drains.items())),
            },
        }
        return data


class _Ladder:
    def __init__(
        self,
        runner: SlurmRunner,
        thresholds: Thresholds,
        params: NcclTestParams,
        topology: Topology,
        options: GateOptions,
    ) -> None:
        self.runner = runner
        self.thresholds = thresholds
        self.params = params
        self.topology = topology
        self.options = options
        self.findings: list[Finding] = []
        self.guilty: list[NodeVerdict] = []
        self.rungs: dict[str, dict[str, Any]] = {}
        self._seen: set[tuple[str, str | None, str | None, str]] = set()
        self._round = 0
        self.node_seconds = 0.0
        # Node-seconds per rung and what its rounds were for (`pairs screen`, `full split`):
        # where the gate's GPU-hours go.
        self.node_seconds_by: dict[str, float] = {}
        self.jobs = 0
        self.gdr_evidence: list[tuple[tuple[str, ...], dict[str, GdrUse]]] = []
        self.proof = GateProof()

    def _run(self, jobs: list[GateJob], spent_on: str) -> list[JobOutcome]:
        runs = self.runner.run(jobs)
        spent = sum(r.node_seconds for r in runs)
        self.node_seconds += spent
        self.node_seconds_by[spent_on] = self.node_seconds_by.get(spent_on, 0.0) + spent
        self.jobs += len(runs)
        outcomes = [self._judge(r) for r in runs]
        for o in outcomes:
            # Only a job that ran and passed every step proves anything of its nodes.
            if not o.passed:
                continue
            if len(o.job.nodes) == 1:
                self.proof.single.append(o.job.nodes[0])
            else:
                self.proof.jobs.append(tuple(o.job.nodes))
        return outcomes

    def preflight(self, nodes: list[str]) -> list[str]:
        """Leave out nodes Slurm will not run jobs on; their jobs would only sit in the queue."""
        states = {n.name: n for n in self.runner.slurm.node_states(nodes)}
        deadline = self.runner.clock() + self.options.settle_s
        while any(_registering(states.get(n)) for n in nodes) and self.runner.clock() < deadline:
            self.runner.sleep(self.runner.poll_s)
            states = {n.name: n for n in self.runner.slurm.node_states(nodes)}
        usable: list[str] = []
        for node in nodes:
            st = states.get(node)
            if st is not None and st.usable:
                usable.append(node)
                continue
            observed = (
                "not known to Slurm" if st is None else "+".join([st.state, *sorted(st.flags)])
            )
            if st is not None and st.reason:
                observed += f" ({st.reason})"
            self._add(
                Finding(
                    check="slurm.unavailable",
                    severity="warning",
                    node=node,
                    expected="IDLE, MIXED or ALLOCATED",
                    observed=observed,
                    message=f"{node} left out of the gate: {observed}",
                )
            )
        self.rungs["preflight"] = {"nodes": len(nodes), "usable": len(usable)}
        return usable

    def _judge(self, run: JobRun) -> JobOutcome:
        outcome = evaluate_job(
            run.job,
            run.texts,
            run.slurm_text,
            self.thresholds,
            hung_after_s=run.hung_after_s,
            stuck=run.stuck_reason,
        )
        for f in outcome.findings:
            self._add(f)
        self.gdr_evidence.append((run.job.nodes, outcome.gdr))
        if run.stuck_reason:
            self._add(
                Finding(
                    check="slurm.pending",
                    severity="warning",
                    node=None,
                    component="job " + " + ".join(run.job.nodes),
                    observed=run.stuck_reason,
                    message=f"gate job on {', '.join(run.job.nodes)} never ran: {run.stuck_reason}",
                )
            )
        return outcome

    def _add(self, f: Finding) -> None:
        # Severity too: a job's info line naming a host (`nccl.ib` seen on gpu003) must not
        # shadow the error localisation then raises against that host.
        key = (f.check, f.node, f.component, f.severity)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(f)

    def single(self, nodes: list[str]) -> list[str]:
        outcomes = self._run([single_job(n, self.params) for n in nodes], "single")
        admitted: list[str] = []
        nvls: dict[str, float] = {}
        for o in outcomes:
            node = o.job.nodes[0]
            bad = o.first_failure
            first = o.steps[0] if o.steps else None
            if first is not None and first.busbw_gbs is not None and first.passed:
                nvls[node] = first.busbw_gbs
            if o.passed:
                admitted.append(node)
                continue
            assert bad is not None
            check = "nccl.hang" if o.hung else bad.check
            f = Finding(
                check=check,
                severity="error",
                node=node,
                component=bad.step.label,
                expected=f">= {bad.expectation.floor_gbs:.0f} GB/s ({bad.expectation.basis})",
                observed=bad.detail,
                message=f"{node} alone ({bad.step.label}): {bad.detail}",
            )
            self._add(f)
            self.guilty.append(NodeVerdict(node, f, gate_reason(check, bad.detail)))
        slow = stragglers(nvls, self.options.straggler_z)
        for node, z in slow.items():
            self._add(
                Finding(
                    check="nccl.straggler",
                    severity="warning",
                    node=node,
                    component="single-nvls",
                    observed=f"{nvls[node]:.0f} GB/s (z = {z})",
                    message=f"{node} alone is far below the fleet (robust z = {z})",
                )
            )
        self.rungs["single"] = {
            "jobs": len(outcomes),
            "passed": len(admitted),
            "failed": sorted(set(nodes) - set(admitted)),
            "stragglers": sorted(slow),
        }
        return admitted

    def localise(self, name: str, rung: Rung, nodes: list[str], rotation: int) -> Localisation:
        loc = Localizer(
            nodes,
            su_of=self.topology.su_of,
            rotation=rotation,
            max_fail_share=self.options.max_fail_share,
            straggler_z=self.options.straggler_z,
            # The rails rung re-runs nodes the pairs rung already screened, to name the rail.
            screens=1 if rung is Rung.RAILS else self.options.screens,
            retests=self.options.retests,
        )
        profile = self.thresholds.profile
        while pairs := loc.next_round():
            self._round += 1
            jobs = [self._pair_job(name, rung, p) for p in pairs]
            outcomes = self._run(jobs, f"{name} {loc.phase}")
            loc.record([o.as_pair_result(profile) for o in outcomes])
        result = loc.verdict()
        exp = self.thresholds.expect(rung, "all_reduce")
        check = "nccl.rail" if rung is Rung.RAILS else "nccl.pair"
        found, guilty = localisation_findings(result, exp, self.topology, check=check)
        for f in found:
            self._add(f)
        self.guilty += guilty
        self.rungs[name] = {
            "rounds": result.rounds,
            "jobs": result.jobs,
            "bad": sorted(result.bad),
            "paths": [list(p.nodes) for p in result.paths],
            "stragglers": sorted(result.stragglers),
            "unresolved": sorted(result.suspect),
            "stopped": result.stop_reason,
        }
        return result

    def _pair_job(self, name: str, rung: Rung, nodes: tuple[str, ...]) -> GateJob:
        job_name = f"r{self._round}-{name}-{'-'.join(nodes)}"
        if rung is Rung.RAILS:
            return rails_job(job_name, nodes, self.thresholds.profile, round_no=self._round)
        return multi_node_job(job_name, rung, nodes, self.params, round_no=self._round)

    def full(self, nodes: list[str]) -> None:
        if len(nodes) < 2:
            self.rungs["full"] = {"jobs": 0, "skipped": "fewer than two admitted nodes"}
            return
        self._round += 1
        full = multi_node_job(f"r{self._round}-full", Rung.FULL, nodes, self.params)
        (o,) = self._run([full], "full")
        bad = o.first_failure
        split: FullSplit | None = None
        if bad is not None and "pairs" in self.options.rungs and not o.hung:
            split = self._split_full(nodes, o.as_pair_result(self.thresholds.profile))
        if split is not None and split.path is not None:
            exp = self.thresholds.expect(Rung.FULL, "all_reduce")
            self._add(path_finding(split.path, exp, self.topology, split.evidence))
        elif bad is not None:
            check = "nccl.hang" if o.hung else bad.check
            # No one node is to blame when only the set fails: the finding names them all (the
            # smallest set that still failed, when the split got that far).
            held = split.suspects if split is not None else nodes
            job_nodes = str(NodeSet.fromlist(held))
            self._add(
                Finding(
                    check=check,
                    severity="error",
                    node=None,
                    component=f"job {job_nodes}",
                    expected=f">= {bad.expectation.floor_gbs:.0f} GB/s ({bad.expectation.basis})",
                    observed=bad.detail,
                    message=(
                        f"the full job over {len(nodes)} nodes ({NodeSet.fromlist(nodes)}) "
                        f"fails ({bad.detail})"
                        + (f", and so do {len(held)} of them ({job_nodes})" if split else "")
                        + (
                            " though every pair passed: suspect the spines or the routing"
                            if "pairs" in self.options.rungs
                            else ""
                        )
                    ),
                )
            )
        self.rungs["full"] = {
            "jobs": 1 + (split.jobs if split else 0),
            "nodes": len(nodes),
            "passed": o.passed,
            "busbw_gbs": o.busbw_gbs,
            "split_rounds": split.rounds if split else 0,
            "held": sorted(split.suspects if split else nodes) if bad is not None else [],
        }

    def _split_full(self, nodes: list[str], first: Any) -> FullSplit:
        """The full job failed though every node passed its pairs: split it to the two nodes
        that fail only together (a path no pair crossed), or the smallest set that fails."""
        split = FullSplit(nodes, first)
        profile = self.thresholds.profile
        while groups := split.next_round():
            self._round += 1
            jobs = [
                multi_node_job(f"r{self._round}-split{i}", Rung.FULL, g, self.params)
                for i, g in enumerate(groups)
            ]
            split.record([o.as_pair_result(profile) for o in self._run(jobs, "full split")])
        return split


def _kept_out(loc: Localisation) -> set[str]:
    """Nodes the full job must not run: the bad, the ends of a bad path and the nodes never
    cleared of a failure (their findings already hold them; in the full job they would only
    fail it again and hold everyone)."""
    return set(loc.bad) | {n for p in loc.paths for n in p.nodes} | set(loc.suspect)


def _registering(state: NodeState | None) -> bool:
    """Not responding, and nothing else keeps jobs off it: a slurmd that has not registered."""
    return (
        state is not None
        and "NOT_RESPONDING" in state.flags
        and not state.drained
        and state.state in {"IDLE", "UNKNOWN"}
    )


def run_gate(
    nodes: Sequence[str],
    runner: SlurmRunner,
    thresholds: Thresholds,
    params: NcclTestParams,
    topology: Topology | None = None,
    options: GateOptions | None = None,
) -> GateResult:
    """Climb the ladder over `nodes`, localise failures, and drain (or say what it would)."""
    opts = options or GateOptions()
    unknown = [r for r in opts.rungs if r not in RUNG_NAMES]
    if unknown:
        raise ValueError(f"unknown rung(s) {unknown}; rungs are {', '.join(RUNG_NAMES)}")
    ladder = _Ladder(runner, thresholds, params, topology or Topology(), opts)
    admitted = ladder.preflight(list(nodes))
    stopped: str | None = None
    if "single" in opts.rungs:
        admitted = ladder.single(admitted)
    named: set[str] = set()
    if "pairs" in opts.rungs and len(admitted) >= 2:
        loc = ladder.localise("pairs", Rung.PAIRS, admitted, opts.rotation)
        stopped = stopped or loc.stop_reason
        named |= _kept_out(loc)
    if opts.rails and len(admitted) >= 2 and not stopped:
        # The nodes the pairs rung named run again here: a degraded HCA slows the whole
        # ring, and only the per-rail runs say which rail. Another rotation than the pairs
        # rung, so the rails see other partners.
        loc = ladder.localise("rails", Rung.RAILS, admitted, opts.rotation + 1)
        stopped = stopped or loc.stop_reason
        named |= _kept_out(loc)
    admitted = [n for n in admitted if n not in named]
    if "full" in opts.rungs and not stopped:
        ladder.full(admitted)
    for f in gdr_findings(ladder.gdr_evidence):
        ladder._add(f)
    plan = plan_drains(ladder.guilty, len(nodes), opts.max_fail_share)
    if stopped:
        plan = DrainPlan(stopped=stopped)
    elif plan.stopped:
        # Too many nodes guilty (the single rung, say) for the nodes to be the cause: the safety
        # stop is itself a finding that names no node, so no workflow admits anyone on this run.
        ladder._add(fleet_finding(plan.stopped))
    if opts.drain and not opts.dry_run:
        plan = apply_drains(plan, runner.slurm)
    report = Report.from_findings(
        ladder.findings,
        {
            "nodes": len(nodes),
            "admitted": len(admitted),
            "jobs": ladder.jobs,
            "gpu_hours": round(ladder.node_seconds * thresholds.profile.gpus_per_node / 3600, 2),
            "gpu_hours_by_rung": {
                spent_on: round(seconds * thresholds.profile.gpus_per_node / 3600, 2)
                for spent_on, seconds in ladder.node_seconds_by.items()
            },
            "drain": plan.lines(),
        },
    )
    return GateResult(report, plan, ladder.rungs, ladder.proof)
