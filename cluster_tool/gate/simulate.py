"""A simulated fleet that answers the gate's jobs, so localisation runs at 1,024 nodes in a test.

The fleet knows the planted faults (bad nodes, bad paths between two healthy nodes,
slow nodes) and answers each job the way nccl-tests would report it: busbw near the
expectation with noise, or far below, or an error. The localisation driven against it
is the same code the live gate drives against Slurm.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster_tool.gate.localize import Localisation, PairResult, localize
from cluster_tool.gate.plan import pair_rotation
from cluster_tool.gate.thresholds import Expectation, GateProfile, Rung, Thresholds
from cluster_tool.gate.topology import Topology

# A simulated pair job: an all_reduce sweep to 16 GiB on 16 GPUs takes a few minutes
# with allocation and NCCL init; 5 minutes is the accounting unit for GPU-hours.
DEFAULT_JOB_MINUTES = 5.0


@dataclass
class SimulatedFleet:
    """Healthy nodes, planted bad nodes/paths/stragglers, and the noise of a real fabric."""

    nodes: list[str]
    expectation: Expectation
    bad: dict[str, float] = field(default_factory=dict)  # node -> busbw factor (0 = errors)
    bad_paths: set[frozenset[str]] = field(default_factory=set)
    slow: dict[str, float] = field(default_factory=dict)  # node -> factor above the floor
    noise: float = 0.015
    seed: int = 0
    su_size: int = 32
    jobs_run: int = 0
    node_minutes: float = 0.0
    job_minutes: float = DEFAULT_JOB_MINUTES

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def su_of(self) -> dict[str, int]:
        return {n: i // self.su_size + 1 for i, n in enumerate(self.nodes)}

    def topology(self, rails: int = 8, spines: int = 16) -> Topology:
        """A rail-optimised fat tree for the fleet: a leaf per rail per SU, every leaf on
        every spine (the SuperPOD layout), so paths can be named in the simulation too."""
        su_of = self.su_of
        spine_set = frozenset(f"spine{i:02d}" for i in range(1, spines + 1))
        leaf_of = {(n, r): f"su{su_of[n]}-leaf-r{r}" for n in self.nodes for r in range(rails)}
        hca_of = {(n, r): f"mlx5_{r}" for n in self.nodes for r in range(rails)}
        return Topology(su_of, leaf_of, hca_of, dict.fromkeys(set(leaf_of.values()), spine_set))

    def run_job(self, nodes: Sequence[str]) -> PairResult:
        """What nccl-tests on `nodes` would report: the slowest member sets the ring's pace."""
        self.jobs_run += 1
        self.node_minutes += len(nodes) * self.job_minutes
        exp = self.expectation
        factor = 1.0
        for n in nodes:
            factor = min(factor, self.bad.get(n, 1.0), self.slow.get(n, 1.0))
        members = set(nodes)
        if any(p <= members for p in self.bad_paths):
            factor = min(factor, 0.45)
        if factor == 0.0:
            return PairResult(
                tuple(nodes),
                False,
                None,
                "NET/IB : Got completion with error 12",
                "nccl.ib",
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


def node_names(count: int) -> list[str]:
    width = max(3, len(str(count)))
    return [f"gpu{i:0{width}d}" for i in range(1, count + 1)]


def plant_fleet(
    count: int,
    bad: int,
    *,
    seed: int = 0,
    bad_paths: int = 0,
    expectation: Expectation | None = None,
    job_minutes: float = DEFAULT_JOB_MINUTES,
) -> SimulatedFleet:
    """A fleet of `count` nodes with `bad` bad nodes drawn at random (some erroring, some slow)."""
    if bad > count:
        raise ValueError(f"cannot plant {bad} bad nodes in {count}")
    rng = random.Random(seed)
    names = node_names(count)
    exp = expectation or Thresholds(GateProfile()).expect(Rung.PAIRS)
    chosen = rng.sample(names, bad)
    # Bad nodes either run far under the floor (degraded HCA, PCIe link down-trained)
    # or fail outright (IB completion errors): both must be found.
    bad_map = {n: (0.0 if rng.random() < 0.25 else rng.uniform(0.3, 0.8)) for n in chosen}
    fleet = SimulatedFleet(names, exp, bad=bad_map, seed=seed + 1, job_minutes=job_minutes)
    # A bad path only shows when its two ends run together, so plant it on a pair the
    # screen (rotation 0) runs; the full rung is what catches paths no pair crosses.
    screen, _ = pair_rotation(names, 0, fleet.su_of)
    clean = [p for p in screen if not (set(p) & set(bad_map))]
    if bad_paths > len(clean):
        raise ValueError(f"only {len(clean)} healthy screen pairs to put {bad_paths} bad paths on")
    for a, b in rng.sample(clean, bad_paths):
        fleet.bad_paths.add(frozenset((a, b)))
    return fleet


@dataclass(frozen=True)
class SimulationResult:
    """The cost of localisation on a simulated fleet and whether it named the planted nodes.

    `rounds` counts sets of pair jobs run in parallel (screen, split, confirm); the single
    rung before them is one round at any size and is not counted.
    """

    rounds: int
    jobs: int
    gpu_hours: float
    bad_nodes: list[str]
    found: list[str]

    def to_json(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "jobs": self.jobs,
            "gpu_hours": self.gpu_hours,
            "bad_nodes": self.bad_nodes,
            "found": self.found,
        }


def simulate(
    fleet: SimulatedFleet,
    *,
    gpus_per_node: int = 8,
    rotation: int = 0,
    max_fail_share: float = 0.25,
) -> tuple[SimulationResult, Localisation]:
    """Localise on the simulated fleet with the gate's own code; its cost and what it named."""
    loc = localize(
        fleet.nodes,
        fleet.run_round,
        su_of=fleet.su_of,
        rotation=rotation,
        max_fail_share=max_fail_share,
    )
    result = SimulationResult(
        rounds=loc.rounds,
        jobs=loc.jobs,
        gpu_hours=fleet.gpu_hours(gpus_per_node),
        bad_nodes=sorted(fleet.bad),
        found=sorted(loc.bad),
    )
    return result, loc
