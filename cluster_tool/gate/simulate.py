"""A simulated fleet behind the gate's Slurm interface, so the whole ladder runs at 1,024 nodes in
a test and `gate simulate` measures the gate as shipped.

The fleet knows the planted faults and writes each job's nccl-tests output the way the real
binary prints it (busbw near the expectation with run-to-run noise, below it, or an IB error);
`run_gate` reads those outputs with the same parser, localisation and findings as the live gate,
and `cluster_tool.verdicts` decides who would be admitted.

Two fault models. `ideal` is the old, easy one: bad nodes at 0.3-0.8x of expected or erroring
in every job, bad paths only on pairs the first screen runs. `adversarial` (the default) mixes,
for `--bad K` nodes, the faults issue 21 lists: hard failures (an IB error in every multi-node
job), marginal nodes (0.78-0.90x of expected), intermittent nodes (an IB error in 30-70 % of
their jobs); and in addition one bad path between two healthy nodes anywhere in the fabric and
two stragglers (3-8 % slow, as throttled clocks leave a node: healthy, not to be blamed).
The ranges come from the issue, not from the gate's thresholds.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cluster_tool.fabric.topology import Topology
from cluster_tool.gate.localize import PairResult
from cluster_tool.gate.plan import GateJob, NcclTestParams, Step, pair_rotation
from cluster_tool.gate.runner import JobRun, SlurmRunner
from cluster_tool.gate.thresholds import Expectation, GateProfile, Rung, Thresholds
from cluster_tool.slurm import JobState, NodeState, SlurmError

if TYPE_CHECKING:
    from cluster_tool.gate.ladder import GateOptions, GateResult

# A simulated job: an all_reduce sweep to 16 GiB takes a few minutes with allocation and NCCL
# init; 5 minutes is the accounting unit for GPU-hours, whatever the job's size.
DEFAULT_JOB_MINUTES = 5.0
# Run-to-run spread of busbw on a healthy fabric (one sigma): repeated nccl-tests runs on the
# same nodes vary by about 1-2 %.
DEFAULT_NOISE = 0.015

FaultModel = Literal["ideal", "adversarial"]
FAULT_MODELS: tuple[FaultModel, ...] = ("ideal", "adversarial")

# The goal: a marginal node at or under 0.85x of expected must not be admitted; one in
# (0.85, 0.90] may be (it is reported, not counted against the gate).
MARGINAL_MUST_CATCH = 0.85
NODE_KINDS = ("hard", "intermittent", "marginal")
RECALL_KINDS = ("hard", "intermittent", "marginal", "marginal_mild", "path")


@dataclass(frozen=True)
class NodeFault:
    """What is wrong with a node. Network faults (an HCA, its cable) show only in jobs across
    nodes, on `rail` in the per-rail rung; a straggler is slow in one node too."""

    kind: str  # hard | marginal | intermittent | straggler
    factor: float = 1.0  # busbw over expected when the job runs; 0: the job ends in an IB error
    fail_rate: float = 0.0  # share of its jobs that end in an IB error
    rail: int = 0

    @property
    def must_catch(self) -> bool:
        """A fault the gate must not admit (the issue's goal), as opposed to one it may."""
        if self.kind == "straggler":
            return False
        return self.kind != "marginal" or self.factor <= MARGINAL_MUST_CATCH

    @property
    def recall_kind(self) -> str:
        return "marginal_mild" if self.kind == "marginal" and not self.must_catch else self.kind

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "rail": self.rail}
        if self.kind == "intermittent":
            out["fail_rate"] = round(self.fail_rate, 3)
        else:
            out["factor"] = round(self.factor, 3)
        return out


@dataclass
class SimulatedFleet:
    """Healthy nodes, planted faults and bad paths, and the noise of a real fabric."""

    nodes: list[str]
    expectation: Expectation
    faults: dict[str, NodeFault] = field(default_factory=dict)
    bad_paths: dict[frozenset[str], float] = field(default_factory=dict)  # factor; 0 = errors
    noise: float = DEFAULT_NOISE
    seed: int = 0
    su_size: int = 32
    jobs_run: int = 0
    node_minutes: float = 0.0
    job_minutes: float = DEFAULT_JOB_MINUTES
    fault_model: FaultModel = "ideal"

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def su_of(self) -> dict[str, int]:
        return {n: i // self.su_size + 1 for i, n in enumerate(self.nodes)}

    @property
    def bad_nodes(self) -> list[str]:
        return sorted(n for n, f in self.faults.items() if f.kind != "straggler")

    def plant(self, node: str, fault: NodeFault) -> None:
        self.faults[node] = fault

    def topology(self, rails: int = 8, spines: int = 16) -> Topology:
        """A rail-optimised fat tree for the fleet: a leaf per rail per SU, every leaf on
        every spine (the SuperPOD layout), so paths can be named in the simulation too."""
        su_of = self.su_of
        spine_set = frozenset(f"spine{i:02d}" for i in range(1, spines + 1))
        leaf_of = {(n, r): f"su{su_of[n]}-leaf-r{r}" for n in self.nodes for r in range(rails)}
        hca_of = {(n, r): f"mlx5_{r}" for n in self.nodes for r in range(rails)}
        return Topology(su_of, leaf_of, hca_of, dict.fromkeys(set(leaf_of.values()), spine_set))

    # -- what a job measures -----------------------------------------------------------------

    def _failing_now(self, nodes: Sequence[str]) -> set[str]:
        """The intermittent nodes of a job that fail this time (drawn once per job)."""
        return {
            n
            for n in nodes
            if (f := self.faults.get(n)) is not None
            and f.kind == "intermittent"
            and self._rng.random() < f.fail_rate
        }

    def _factor(self, nodes: Sequence[str], rail: int | None, failing: set[str]) -> float | None:
        """busbw over expected of one step over `nodes` (None: it errors). The slowest member
        sets a ring's pace; a job with both ends of a bad path crosses it."""
        factor = 1.0
        multi = len(nodes) > 1
        for n in nodes:
            f = self.faults.get(n)
            if f is None:
                continue
            if f.kind == "straggler":
                factor = min(factor, f.factor)
                continue
            if not multi or (rail is not None and rail != f.rail):
                continue
            if f.kind == "intermittent":
                if n in failing:
                    return None
            elif f.factor == 0.0:
                return None
            else:
                factor = min(factor, f.factor)
        if multi and self.bad_paths:
            members = set(nodes)
            for path, path_factor in self.bad_paths.items():
                if path <= members:
                    if path_factor == 0.0:
                        return None
                    factor = min(factor, path_factor)
        return factor

    def run_job(self, nodes: Sequence[str]) -> PairResult:
        """One all_reduce job over `nodes` as localisation sees it (for the baselines)."""
        self.jobs_run += 1
        self.node_minutes += len(nodes) * self.job_minutes
        exp = self.expectation
        factor = self._factor(nodes, None, self._failing_now(nodes))
        if factor is None:
            return PairResult(
                tuple(nodes), False, None, "NET/IB : Got completion with error 12", "nccl.ib"
            )
        busbw = round(exp.expected_gbs * factor * (1.0 + self._rng.gauss(0.0, self.noise)), 1)
        if busbw < exp.floor_gbs:
            detail = f"{busbw:.0f} GB/s < {exp.floor_gbs:.0f} GB/s"
            return PairResult(tuple(nodes), False, busbw, detail)
        return PairResult(tuple(nodes), True, busbw)

    def run_round(self, jobs: list[tuple[str, ...]]) -> list[PairResult]:
        return [self.run_job(j) for j in jobs]

    def gpu_hours(self, gpus_per_node: int) -> float:
        return round(self.node_minutes * gpus_per_node / 60.0, 2)

    def outputs(self, job: GateJob, thresholds: Thresholds) -> dict[str, str]:
        """The nccl-tests output of every step of a gate job, as the binary prints it."""
        failing = self._failing_now(job.nodes)
        texts: dict[str, str] = {}
        for step in job.steps:
            exp = thresholds.expect(step.rung, step.collective, nodes=len(job.nodes))
            factor = self._factor(job.nodes, step.rail, failing)
            if factor is None:
                culprit = next(
                    (n for n in job.nodes if n in failing or self._errors(n, step)), job.nodes[0]
                )
                texts[step.label] = _error_output(step, culprit)
            else:
                busbw = exp.expected_gbs * factor * (1.0 + self._rng.gauss(0.0, self.noise))
                texts[step.label] = _table_output(step, max(busbw, 0.01))
        return texts

    def _errors(self, node: str, step: Step) -> bool:
        f = self.faults.get(node)
        return f is not None and f.kind == "hard" and (step.rail is None or step.rail == f.rail)


_SETTINGS = (
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)\n"
)


def _row(size: int, busbw: float, collective: str) -> str:
    # algbw from busbw with all_reduce's 2(n-1)/n at 16 ranks; the gate reads busbw only.
    algbw = busbw / 1.875 if collective == "all_reduce" else busbw
    t = size / (max(algbw, 0.001) * 1e3)
    side = f"{t:9.1f} {algbw:7.2f} {busbw:7.2f}      0"
    return f"{size:12d} {size // 4:13d}     float     sum      -1 {side} {side}\n"


def _table_output(step: Step, busbw: float) -> str:
    rows = _row(8 << 30, busbw * 0.99, step.collective) + _row(16 << 30, busbw, step.collective)
    return (
        _SETTINGS
        + rows
        + "# Out of bounds values : 0 OK\n"
        + f"# Avg bus bandwidth    : {busbw * 0.4:.3f} \n#\n"
    )


def _error_output(step: Step, host: str) -> str:
    return (
        _SETTINGS
        + _row(8, 0.0, step.collective)
        + f"{host}:4242:4250 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4242> "
        "with status=12 opcode=0 len=0 vendor err 129 (Send)\n"
        + f"{host}: Test NCCL failure common.cu:1005 'remote process exited or there was a "
        "network error / '\n"
    )


class _IdleSlurm:
    """Slurm for the simulation: every node idle; jobs run through SimulatedRunner only."""

    def submit(self, script: Path) -> str:
        raise SlurmError("the simulation submits no jobs")

    def job_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        raise SlurmError("the simulation submits no jobs")

    def cancel(self, job_id: str) -> None:
        raise SlurmError("the simulation submits no jobs")

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        raise SlurmError("the simulation drains nothing")

    def resume(self, nodes: Iterable[str]) -> None:
        raise SlurmError("the simulation resumes nothing")

    def node_states(self, nodes: Iterable[str] | None = None) -> list[NodeState]:
        return [NodeState(n, "IDLE") for n in nodes or ()]


class SimulatedRunner(SlurmRunner):
    """The gate's runner with the simulated fleet in place of Slurm: one call, one round."""

    def __init__(
        self, fleet: SimulatedFleet, thresholds: Thresholds, params: NcclTestParams
    ) -> None:
        super().__init__(
            slurm=_IdleSlurm(),
            workdir=Path("simulated"),
            params=params,
            gpus_per_node=thresholds.profile.gpus_per_node,
            poll_s=0.0,
        )
        self.fleet = fleet
        self.thresholds = thresholds
        self.rounds = 0
        self.jobs = 0
        self._now = 0.0
        self.clock = lambda: self._now
        self.sleep = self._advance

    def _advance(self, seconds: float) -> None:
        self._now += seconds

    def run(self, jobs: Sequence[GateJob]) -> list[JobRun]:
        self.rounds += 1
        start, seconds = self._now, self.fleet.job_minutes * 60.0
        runs = []
        for job in jobs:
            self.jobs += 1
            self.fleet.jobs_run += 1
            self.fleet.node_minutes += len(job.nodes) * self.fleet.job_minutes
            run = JobRun(job, f"sim{self.jobs}", state="COMPLETED", started_at=start)
            run.ended_at = start + seconds
            run.texts = dict(self.fleet.outputs(job, self.thresholds))
            runs.append(run)
        self._now = start + seconds
        return runs


def node_names(count: int) -> list[str]:
    width = max(3, len(str(count)))
    return [f"gpu{i:0{width}d}" for i in range(1, count + 1)]


def plant_fleet(
    count: int,
    bad: int,
    *,
    seed: int = 0,
    bad_paths: int | None = None,
    stragglers: int | None = None,
    fault_model: FaultModel = "ideal",
    expectation: Expectation | None = None,
    job_minutes: float = DEFAULT_JOB_MINUTES,
    rails: int = 8,
) -> SimulatedFleet:
    """A fleet of `count` nodes with `bad` faulty nodes drawn by `seed` under `fault_model`.

    `bad_paths` and `stragglers` default to the model's (ideal: none; adversarial: one bad
    path anywhere and two stragglers); all are planted on distinct nodes.
    """
    if fault_model not in FAULT_MODELS:
        raise ValueError(f"unknown fault model {fault_model!r}; one of {', '.join(FAULT_MODELS)}")
    adversarial = fault_model == "adversarial"
    n_paths = bad_paths if bad_paths is not None else (1 if adversarial else 0)
    n_slow = stragglers if stragglers is not None else (2 if adversarial else 0)
    if bad > count:
        raise ValueError(f"cannot plant {bad} bad nodes in {count}")
    rng = random.Random(seed)
    names = node_names(count)
    exp = expectation or Thresholds(GateProfile()).expect(Rung.PAIRS)
    fleet = SimulatedFleet(
        names, exp, seed=seed + 1, job_minutes=job_minutes, fault_model=fault_model
    )
    for n in rng.sample(names, bad):
        rail = rng.randrange(rails)
        if not adversarial:
            # Far under the floor (degraded HCA, PCIe link down-trained) or failing outright.
            factor = 0.0 if rng.random() < 0.25 else rng.uniform(0.3, 0.8)
            fleet.plant(n, NodeFault("hard", factor, rail=rail))
            continue
        kind = rng.choice(NODE_KINDS)
        if kind == "hard":
            fleet.plant(n, NodeFault("hard", 0.0, rail=rail))
        elif kind == "marginal":
            fleet.plant(n, NodeFault("marginal", rng.uniform(0.78, 0.90), rail=rail))
        else:
            fleet.plant(n, NodeFault("intermittent", fail_rate=rng.uniform(0.3, 0.7), rail=rail))
    healthy = [n for n in names if n not in fleet.faults]
    if n_paths:
        if adversarial:
            # Anywhere in the fabric: two healthy nodes the screen need not pair.
            if 2 * n_paths > len(healthy):
                raise ValueError(f"only {len(healthy)} healthy nodes for {n_paths} bad paths")
            ends = rng.sample(healthy, 2 * n_paths)
            chosen = [(ends[2 * i], ends[2 * i + 1]) for i in range(n_paths)]
        else:
            # A bad path only shows when its two ends run together: put it on a pair the
            # screen (rotation 0) runs.
            screen, _ = pair_rotation(names, 0, fleet.su_of)
            clean = [p for p in screen if not (set(p) & set(fleet.faults))]
            if n_paths > len(clean):
                raise ValueError(f"only {len(clean)} healthy screen pairs for {n_paths} bad paths")
            chosen = rng.sample(clean, n_paths)
        for a, b in chosen:
            path_factor = 0.0 if rng.random() < 0.25 else rng.uniform(0.3, 0.8)
            fleet.bad_paths[frozenset((a, b))] = path_factor if adversarial else 0.45
    on_paths = {n for p in fleet.bad_paths for n in p}
    spare = [n for n in healthy if n not in on_paths]
    for n in rng.sample(spare, min(n_slow, len(spare))):
        fleet.plant(n, NodeFault("straggler", rng.uniform(0.92, 0.97), rail=rng.randrange(rails)))
    return fleet


@dataclass(frozen=True)
class SimulationResult:
    """What the gate cost on a simulated fleet, and whom it would admit.

    `rounds` counts every set of jobs the ladder ran in parallel: the single rung, each round
    of pairs (screens, re-tests, confirmations), the rails and the full job and its splits.
    `admitted_bad` are planted faults the gate must catch that `cluster_tool.verdicts` would
    admit; `admitted_marginal` marginal nodes above 0.85x it may admit; `blamed_good` healthy
    nodes (stragglers included) not admitted, except the two ends of a bad path held for it.
    """

    rounds: int
    jobs: int
    gpu_hours: float
    bad_nodes: list[str]
    found: list[str]
    fault_model: str = "ideal"
    admitted_bad: list[str] = field(default_factory=list)
    admitted_marginal: list[str] = field(default_factory=list)
    blamed_good: list[str] = field(default_factory=list)
    recall: dict[str, float | None] = field(default_factory=dict)
    faults: dict[str, dict[str, Any]] = field(default_factory=dict)
    paths: list[list[str]] = field(default_factory=list)
    nodes: int = 0
    # Where the GPU-hours went: per rung, and for the pairs what their rounds were for.
    gpu_hours_by_rung: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "jobs": self.jobs,
            "gpu_hours": self.gpu_hours,
            "gpu_hours_by_rung": self.gpu_hours_by_rung,
            "bad_nodes": self.bad_nodes,
            "found": self.found,
            "fault_model": self.fault_model,
            "admitted_bad": self.admitted_bad,
            "admitted_marginal": self.admitted_marginal,
            "blamed_good": self.blamed_good,
            "recall": self.recall,
            "faults": self.faults,
            "paths": self.paths,
        }

    @property
    def met_goal(self) -> bool:
        """The issue's goal: no must-catch fault admitted, at most 1 % of the fleet blamed."""
        return not self.admitted_bad and len(self.blamed_good) <= 0.01 * self.nodes


def simulate(
    fleet: SimulatedFleet,
    *,
    thresholds: Thresholds | None = None,
    options: GateOptions | None = None,
) -> tuple[SimulationResult, GateResult]:
    """Run the whole gate (single, pairs, rails if asked, full) on the simulated fleet and judge
    every node with `cluster_tool.verdicts`; returns the result and the gate's `GateResult`.
    `options` default to the spec's (`GateOptions()`), as `gate simulate` runs them."""
    # The ladder imports the runner; imported here so that the baselines need not load it.
    from cluster_tool.gate.ladder import GateOptions, run_gate
    from cluster_tool.verdicts import FABRIC, HEALTH, Proof, judge_nodes, may_admit

    th = thresholds or Thresholds(GateProfile())
    params = NcclTestParams()
    runner = SimulatedRunner(fleet, th, params)
    opts = options or GateOptions()
    gate = run_gate(fleet.nodes, runner, th, params, fleet.topology(th.profile.rails), opts)
    proof = Proof()
    proof.add(HEALTH, fleet.nodes)
    proof.add(FABRIC, fleet.nodes)
    proof.merge_gate(gate.proof)
    verdicts = judge_nodes(fleet.nodes, gate.report.findings, proof)
    admitted = {n for n, v in verdicts.items() if may_admit(v)}
    faults = fleet.faults
    bad = fleet.bad_nodes
    on_paths = {n for p in fleet.bad_paths for n in p}
    healthy = [n for n in fleet.nodes if n not in bad]
    blamed = [
        n
        for n in healthy
        if n not in admitted and (n not in on_paths or verdicts[n].verdict == "fail")
    ]
    recall: dict[str, float | None] = {}
    for kind in RECALL_KINDS:
        if kind == "path":
            caught = [not (p <= admitted) for p in fleet.bad_paths]
        else:
            caught = [n not in admitted for n in bad if faults[n].recall_kind == kind]
        recall[kind] = round(sum(caught) / len(caught), 3) if caught else None
    result = SimulationResult(
        rounds=runner.rounds,
        jobs=runner.jobs,
        gpu_hours=fleet.gpu_hours(th.profile.gpus_per_node),
        bad_nodes=bad,
        found=sorted(n for n, v in verdicts.items() if v.verdict == "fail"),
        fault_model=fleet.fault_model,
        admitted_bad=[n for n in bad if n in admitted and faults[n].must_catch],
        admitted_marginal=[n for n in bad if n in admitted and not faults[n].must_catch],
        blamed_good=blamed,
        recall=recall,
        faults={n: f.describe() for n, f in sorted(faults.items())},
        paths=sorted(sorted(p) for p in fleet.bad_paths),
        nodes=len(fleet.nodes),
        gpu_hours_by_rung=dict(gate.report.summary.get("gpu_hours_by_rung", {})),
    )
    return result, gate
