"""Short NCCL probes on idle GPU nodes, and each node's busbw baseline per rail.

Where the spec allows it (`watch.probes`), every `probe_every` cycles the watcher takes the GPU
nodes Slurm shows IDLE (never a node running a job, never a drained one), rings them in fabric
order and runs, between each pair of neighbours, the gate's per-rail job (`gate.plan.rails_job`:
one rank per node on rail r's GPU pinned to rail r's HCA, all rails at once) with a single
`probe_bytes` all_reduce, through the gate's job submission (`gate.runner.SlurmRunner`) in a
low-priority partition. A ring puts every node in two jobs with two different partners, so a
slow node shows in both of its jobs and each partner holds up in its other job: the node is
named, not its neighbours (the rule `history.judge` applies to validate's pairs).

Each node's busbw per rail (the median of its jobs) goes into a history store of its own in the
state directory (`probe-history.sqlite`, the schema of `cluster_tool.history`: keyed by the
node's GPU serials, so a swapped board starts a new baseline), and is judged against the node's
baseline there: `watch.probe` (warning) when it is `probe_min_drop` below its median and past
`thresholds.history.mad_z`, after `thresholds.history.min_runs` earlier probe runs.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from cluster_tool.errors import ParseError
from cluster_tool.fileio import fresh_dir
from cluster_tool.findings import Finding
from cluster_tool.gate.evaluate import peak_busbw
from cluster_tool.gate.from_spec import gate_inputs
from cluster_tool.gate.plan import GateJob, NcclTestParams, rails_job
from cluster_tool.gate.runner import SlurmRunner
from cluster_tool.gate.thresholds import GateProfile
from cluster_tool.history import Baseline, HistoryStore, Identity, Measurement
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.slurm import Slurm
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.spec.thresholds import HistoryThresholds

__all__ = [
    "PROBE_STORE",
    "ProbeOutcome",
    "Prober",
    "Probing",
    "SlurmProber",
    "judge_probes",
    "probe_round",
    "ring",
    "slurm_prober",
    "waves",
]

PROBE_STORE = "probe-history.sqlite"
METRIC = "busbw_gbs"

Pair = tuple[str, str]
# (pair) -> rail -> busbw GB/s, None where the step printed no figure.
Busbw = Mapping[Pair, Mapping[int, float | None]]


class Prober(Protocol):
    """Runs one probe job per pair (pairs of one call may run at once: they are disjoint)."""

    def run(self, pairs: Sequence[Pair]) -> Busbw: ...


@dataclass(frozen=True)
class Probing:
    """What a cycle needs to probe: the prober and the store of the probe baselines."""

    prober: Prober
    store_path: Path


def ring(nodes: Sequence[str]) -> list[Pair]:
    """Neighbours of a ring through `nodes` in the order given: two nodes are one pair, three
    or more close the ring so every node has two partners."""
    if len(nodes) < 2:
        return []
    if len(nodes) == 2:
        return [(nodes[0], nodes[1])]
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def waves(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """The pairs in rounds where no node is in two jobs at once (an exclusive job each)."""
    rounds: list[tuple[list[Pair], set[str]]] = []
    for a, b in pairs:
        for jobs, busy in rounds:
            if a not in busy and b not in busy:
                jobs.append((a, b))
                busy.update((a, b))
                break
        else:
            rounds.append(([(a, b)], {a, b}))
    return [jobs for jobs, _ in rounds]


def _busbw(text: str | None) -> float | None:
    """The step's busbw (the gate's peak over the large sizes); None when it printed none or
    any result was wrong (a probe that corrupts data measured nothing)."""
    if not text:
        return None
    try:
        run = parse_nccl_tests(text)
    except ParseError:
        return None
    if any(
        side is not None and side.wrong not in (0, None)
        for row in run.rows
        for side in (row.out_of_place, row.in_place)
    ):
        return None
    return peak_busbw(run)


@dataclass
class SlurmProber:
    """The probes as Slurm jobs: the gate's per-rail job per pair, submitted and watched by the
    gate's runner (a job that does not start within `pending_s`, because a user's job took a
    node first, is cancelled and measures nothing)."""

    slurm: Slurm
    workdir: Path
    params: NcclTestParams
    profile: GateProfile
    pending_s: float = 60.0
    watchdog_s: float = 120.0
    poll_s: float = 2.0
    runner_options: dict[str, object] = field(default_factory=dict)

    def run(self, pairs: Sequence[Pair]) -> Busbw:
        folder = fresh_dir(self.workdir, "probe-")
        runner = SlurmRunner(
            self.slurm,
            folder,
            self.params,
            self.profile.gpus_per_node,
            watchdog_s=self.watchdog_s,
            pending_s=self.pending_s,
            poll_s=self.poll_s,
            **self.runner_options,  # type: ignore[arg-type]
        )
        out: dict[Pair, dict[int, float | None]] = {}
        for wave in waves(pairs):
            jobs: list[GateJob] = [
                rails_job(f"probe-{a}-{b}", (a, b), self.profile) for a, b in wave
            ]
            for run in runner.run(jobs):
                a, b = run.job.nodes
                out[(a, b)] = {
                    step.rail: _busbw(run.texts.get(step.label))
                    for step in run.job.steps
                    if step.rail is not None
                }
        return out


def slurm_prober(cluster: Cluster, watch: Watch, slurm: Slurm) -> SlurmProber:
    """The spec's probes: the gate's nccl-tests settings and node profile, one all_reduce of
    `probe_bytes` (5 iterations after 2 warm-up), in `probe_partition` (default: the gate's)."""
    gate = gate_inputs(cluster)
    assert watch.probe_workdir is not None  # the spec refuses probes without one
    params = replace(
        gate.params,
        collectives=("all_reduce",),
        min_bytes=watch.probe_bytes,
        max_bytes=watch.probe_bytes,
        iters=5,
        warmup_iters=2,
        time_limit="00:05:00",
        partition=watch.probe_partition or gate.params.partition,
    )
    return SlurmProber(slurm, Path(watch.probe_workdir), params, gate.thresholds.profile)


def per_node(results: Busbw) -> dict[tuple[str, int], list[tuple[str, float]]]:
    """(node, rail) -> (partner, busbw) of each of its jobs with a figure."""
    out: dict[tuple[str, int], list[tuple[str, float]]] = {}
    for (a, b), rails in results.items():
        for rail, value in rails.items():
            if value is None:
                continue
            out.setdefault((a, rail), []).append((b, value))
            out.setdefault((b, rail), []).append((a, value))
    return out


def _low(value: float, base: Baseline, min_drop: float, t: HistoryThresholds) -> bool:
    drop = base.median - value
    if base.median <= 0 or drop < min_drop * base.median:
        return False
    return base.mad == 0 or 0.6745 * drop / base.mad > t.mad_z


def judge_probes(
    results: Busbw,
    baselines: Mapping[tuple[str, int], Baseline],
    hca_of: Mapping[tuple[str, int], str],
    t: HistoryThresholds,
    min_drop: float,
) -> list[Finding]:
    """`watch.probe` for each node whose every probe job on a rail fell below its own baseline
    while each of its partners held up in a job without it."""
    jobs = per_node(results)

    def judged(node: str, rail: int) -> Baseline | None:
        base = baselines.get((node, rail))
        return base if base is not None and base.runs >= t.min_runs else None

    def low_in(node: str, rail: int, value: float) -> bool | None:
        base = judged(node, rail)
        return None if base is None else _low(value, base, min_drop, t)

    findings: list[Finding] = []
    for (node, rail), mine in sorted(jobs.items()):
        base = judged(node, rail)
        if base is None or not all(low_in(node, rail, v) for _, v in mine):
            continue
        partners = sorted({p for p, _ in mine})
        held_up = all(
            any(
                other != node and low_in(p, rail, v) is False
                for other, v in jobs.get((p, rail), [])
            )
            for p in partners
        )
        if not held_up:
            continue  # a partner was low without it too, or cannot be judged: nobody is named
        observed = statistics.median(v for _, v in mine)
        hca = hca_of.get((node, rail), f"rail {rail}")
        share = observed / base.median
        findings.append(
            Finding(
                check="watch.probe",
                severity="warning",
                node=node,
                component=hca,
                expected=f"probe busbw near its baseline {base.median:.1f} GB/s (median of its "
                f"last {base.runs} probe runs, MAD {base.mad:.2f})",
                observed=f"{observed:.1f} GB/s ({share:.2f}x) with {', '.join(partners)}",
                message=f"{node}: {hca} rail {rail} probe busbw {observed:.1f} GB/s with "
                f"{', '.join(partners)} is {share:.2f}x its own baseline {base.median:.1f} GB/s; "
                "its partners held up in their other probe jobs",
            )
        )
    return findings


@dataclass(frozen=True)
class ProbeOutcome:
    """One probe round: the findings, and per (node, rail) the latest busbw and its baseline."""

    findings: list[Finding]
    busbw: dict[tuple[str, int], tuple[float, float | None]]
    pairs: list[Pair]


def probe_round(
    prober: Prober,
    store_path: Path,
    idle: Sequence[str],
    serials: Mapping[str, Sequence[str]],
    hca_of: Mapping[tuple[str, int], str],
    t: HistoryThresholds,
    min_drop: float,
    *,
    run_id: str,
    clock: Callable[[], str] | None = None,
) -> ProbeOutcome:
    """Probe the ring of `idle` nodes, judge each node and rail against its baseline in the
    store (before this run is added), then record this run. A node without GPU serials this
    cycle has no identity: measured, neither judged nor recorded."""
    pairs = ring(list(idle))
    if not pairs:
        return ProbeOutcome([], {}, [])
    results = prober.run(pairs)
    identities = {n: Identity(n, tuple(sorted(serials[n])), ()) for n in idle if serials.get(n)}
    # Two nodes reading the same serials cannot be told apart: neither is judged or recorded.
    seen = Counter(i.fingerprint for i in identities.values())
    identities = {n: i for n, i in identities.items() if seen[i.fingerprint] == 1}
    jobs = per_node(results)
    medians = {k: statistics.median(v for _, v in items) for k, items in jobs.items()}
    with HistoryStore.open(store_path) as store:
        found = store.baselines(
            [i.fingerprint for i in identities.values()], window=t.runs, metrics=(METRIC,)
        )
        baselines = {
            (node, rail): found[(identity.fingerprint, METRIC, f"rail {rail}")]
            for node, identity in identities.items()
            for (n, rail) in medians
            if n == node and (identity.fingerprint, METRIC, f"rail {rail}") in found
        }
        findings = judge_probes(results, baselines, hca_of, t, min_drop)
        measurements = [
            Measurement(node, METRIC, f"rail {rail}", value)
            for (node, rail), value in sorted(medians.items())
        ]
        stamp = clock() if clock is not None else None
        store.add_run(run_id, "watch probe", identities.values(), measurements, at=stamp)
    busbw = {
        (node, rail): (value, baselines[(node, rail)].median if (node, rail) in baselines else None)
        for (node, rail), value in medians.items()
    }
    return ProbeOutcome(findings, busbw, pairs)
