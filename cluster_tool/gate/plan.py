"""The ladder as data: which nodes run together in which rung, and the sbatch script of each job.

Pure: nothing here talks to Slurm. Pairs follow the circle method (round-robin
tournament), so successive rotations never repeat a pair; rotation 0 folds the
SU-sorted node list so the first pairs cross SUs and exercise the spines.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.gate.thresholds import COLLECTIVES, GateProfile, Rung

# nccl-tests binaries by collective (`all_reduce` -> `all_reduce_perf`).
BINARIES = {c: f"{c}_perf" for c in COLLECTIVES}

# NCCL_DEBUG=INFO for INIT and NET is what names the transport of every channel
# (`via NET/IB/0/GDRDMA`) and the host of every error line, at a few hundred lines a job.
_DEBUG_ENV = (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET"))


@dataclass(frozen=True)
class NcclTestParams:
    """How nccl-tests runs: sweep, iterations, collectives (the spec holds the site's defaults)."""

    collectives: tuple[str, ...] = ("all_reduce",)
    min_bytes: str = "8"
    max_bytes: str = "16G"
    step_factor: int = 2
    iters: int = 20
    warmup_iters: int = 5
    bin_dir: str = ""  # empty: the binaries are on PATH
    time_limit: str = "00:30:00"
    partition: str | None = None
    # SHARP on the fabric: the full rung runs all_reduce with CollNet too (per job, never in
    # nccl.conf), so the report shows the fabric with and without in-network reduction.
    collnet: bool = False

    def __post_init__(self) -> None:
        unknown = [c for c in self.collectives if c not in COLLECTIVES]
        if unknown or not self.collectives:
            raise ValueError(f"collectives must be among {', '.join(COLLECTIVES)}: {unknown}")

    def argv(self, collective: str) -> list[str]:
        binary = BINARIES[collective]
        path = f"{self.bin_dir.rstrip('/')}/{binary}" if self.bin_dir else binary
        # -g 1: one GPU per rank (Slurm starts one rank per GPU); -c 1: check results,
        # which is what makes `#wrong` mean something.
        return [
            path,
            "-b",
            self.min_bytes,
            "-e",
            self.max_bytes,
            "-f",
            str(self.step_factor),
            "-g",
            "1",
            "-n",
            str(self.iters),
            "-w",
            str(self.warmup_iters),
            "-c",
            "1",
        ]


@dataclass(frozen=True)
class Step:
    """One srun inside a job: a collective with its environment, writing to its own file."""

    label: str
    collective: str
    rung: Rung
    env: tuple[tuple[str, str], ...] = ()
    rail: int | None = None


@dataclass(frozen=True)
class GateJob:
    """One Slurm job of the ladder: its nodes and the steps it runs one after the other."""

    name: str
    rung: Rung
    nodes: tuple[str, ...]
    steps: tuple[Step, ...]
    round: int = 1
    env: tuple[tuple[str, str], ...] = field(default=())

    def step_output(self, workdir: Path, step: Step) -> Path:
        """Where a step's output lands. srun forwards every task's output to the batch host,
        which alone writes the file: no two nodes ever write one file on a shared filesystem."""
        return workdir / f"{self.name}.{step.label}.out"

    def slurm_output(self, workdir: Path) -> Path:
        return workdir / f"{self.name}.slurm.out"

    def outputs(self, workdir: Path) -> list[Path]:
        return [self.slurm_output(workdir)] + [self.step_output(workdir, s) for s in self.steps]


def sort_by_su(nodes: Sequence[str], su_of: Mapping[str, int] | None = None) -> list[str]:
    """Nodes in fabric order: by SU, then by name."""
    su = su_of or {}
    return sorted(nodes, key=lambda n: (su.get(n, 0), n))


def pair_rotation(
    nodes: Sequence[str], rotation: int = 0, su_of: Mapping[str, int] | None = None
) -> tuple[list[tuple[str, str]], str | None]:
    """Rotation `rotation` of the circle schedule: disjoint pairs and the node left out (odd N).

    Over rotations 0..N-2 (N even; N-1 rounds of a tournament) every pair appears exactly
    once, so the gate can rotate between runs and never retest the same pair.
    """
    order = sort_by_su(nodes, su_of)
    players: list[str | None] = list(order)
    if len(players) % 2:
        players.append(None)  # a bye: whoever meets it sits this rotation out
    n = len(players)
    if n < 2:
        return [], order[0] if order else None
    fixed, circle = players[-1], players[:-1]
    m = len(circle)
    r = rotation % m
    raw: list[tuple[str | None, str | None]] = [(circle[r], fixed)]
    for k in range(1, n // 2):
        raw.append((circle[(r + k) % m], circle[(r - k) % m]))
    pairs: list[tuple[str, str]] = []
    left_out: str | None = None
    for a, b in raw:
        if a is None or b is None:
            left_out = a if b is None else b
        else:
            pairs.append((a, b) if a < b else (b, a))
    return sorted(pairs), left_out


def _env_lines(env: Sequence[tuple[str, str]]) -> list[str]:
    return [f"export {k}={shlex.quote(v)}" for k, v in env]


def single_job(node: str, params: NcclTestParams, *, round_no: int = 1) -> GateJob:
    """One node alone: every collective with NVLS on, then all_reduce with NVLS off (ring)."""
    steps = [
        Step(f"nvls-{c}", c, Rung.SINGLE_NVLS, (("NCCL_NVLS_ENABLE", "1"),))
        for c in params.collectives
    ]
    steps.append(
        Step(
            "ring-all_reduce",
            "all_reduce",
            Rung.SINGLE_RING,
            (("NCCL_NVLS_ENABLE", "0"), ("NCCL_ALGO", "Ring")),
        )
    )
    return GateJob(f"single-{node}", Rung.SINGLE_NVLS, (node,), tuple(steps), round_no)


def multi_node_job(
    name: str, rung: Rung, nodes: Sequence[str], params: NcclTestParams, *, round_no: int = 1
) -> GateJob:
    """Pairs or full, NCCL_ALGO=Ring: on 2 nodes the default (NVLSTree) overstates the fabric.
    Where SHARP is on, the full rung adds all_reduce with CollNet (NCCL picks its algorithm:
    Ring would leave CollNet unused), beside the ring's, which runs with CollNet off."""
    ring: tuple[tuple[str, str], ...] = (("NCCL_ALGO", "Ring"),)
    if params.collnet:
        ring = (*ring, ("NCCL_COLLNET_ENABLE", "0"))
    steps = [Step(c, c, rung, ring) for c in params.collectives]
    if params.collnet and rung is Rung.FULL:
        steps.append(
            Step("collnet-all_reduce", "all_reduce", rung, (("NCCL_COLLNET_ENABLE", "1"),))
        )
    return GateJob(name, rung, tuple(nodes), tuple(steps), round_no, _DEBUG_ENV)


def rails_job(
    name: str, nodes: Sequence[str], profile: GateProfile, *, round_no: int = 1
) -> GateJob:
    """Per-rail all_reduce: one rank per node on rail r's GPU, pinned to rail r's HCA.

    The effect of NCCL_TESTS_SPLIT="MOD 8" (groups of the same local GPU across nodes),
    but each group is its own srun writing its own file, so one slow rail is read as
    such instead of being averaged away in rank 0's line.
    """
    # The rail's GPU index is nvidia-smi's (PCI bus order); CUDA numbers devices fastest first
    # unless CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA Programming Guide, "CUDA Environment
    # Variables"), and then the index can name another GPU than the rail's.
    steps = tuple(
        Step(
            f"rail{rail}",
            "all_reduce",
            Rung.RAILS,
            (
                ("NCCL_ALGO", "Ring"),
                ("NCCL_IB_HCA", f"={hca}"),
                ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                ("CUDA_VISIBLE_DEVICES", str(gpu)),
            ),
            rail=rail,
        )
        for rail, (hca, gpu) in enumerate(zip(profile.rail_hcas, profile.rail_gpus, strict=True))
    )
    return GateJob(name, Rung.RAILS, tuple(nodes), steps, round_no, _DEBUG_ENV)


def render_sbatch(job: GateJob, params: NcclTestParams, workdir: Path, gpus_per_node: int) -> str:
    """The sbatch script of one job: its steps as `srun --mpi=pmix`, one rank per GPU."""
    n = len(job.nodes)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=ct-gate-{job.name}",
        f"#SBATCH --nodes={n}",
        f"#SBATCH --nodelist={','.join(job.nodes)}",
        f"#SBATCH --ntasks-per-node={gpus_per_node}",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        "#SBATCH --exclusive",
        f"#SBATCH --time={params.time_limit}",
        f"#SBATCH --output={job.slurm_output(workdir)}",
    ]
    if params.partition:
        lines.append(f"#SBATCH --partition={params.partition}")
    lines += ["# Written by cluster-tool gate; one file per step so each is read alone.", ""]
    lines += _env_lines(job.env)
    parallel = any(s.rail is not None for s in job.steps)
    for step in job.steps:
        out = shlex.quote(str(job.step_output(workdir, step)))
        # Line-buffered, so the output grows row by row and the watchdog sees progress
        # (through srun stdout is a pipe, and a fully buffered test says nothing until exit).
        cmd = "stdbuf -oL " + " ".join(shlex.quote(a) for a in params.argv(step.collective))
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in step.env)
        if step.rail is not None:
            # Rail steps share the allocation (--overlap) and run at once, like split groups.
            # -n too: srun inherits the batch's SLURM_NTASKS (8 per node), which would
            # override --ntasks-per-node=1 ("can't honor --ntasks-per-node").
            srun = (
                f"srun --overlap --mpi=pmix --cpu-bind=none -N {n} -n {n} --ntasks-per-node=1 "
                f"--gpus-per-node={gpus_per_node} env {env} {cmd} > {out} 2>&1 &"
            )
        else:
            # Every rank sees the node's GPUs and nccl-tests picks device localRank. Not
            # --gpus-per-task=1: Slurm then binds each task to its own GPU, and local rank k
            # asks for device k of the one it sees ("Invalid number of GPUs").
            srun = (
                f"srun --mpi=pmix --cpu-bind=none -N {n} --ntasks-per-node={gpus_per_node} "
                f"--gpus-per-node={gpus_per_node} env {env} {cmd} > {out} 2>&1"
            )
        lines.append(f"echo 'cluster-tool gate: step {step.label}'")
        lines.append(srun)
    if parallel:
        lines.append("wait")
    return "\n".join(lines) + "\n"
