"""The burn-in's NCCL soak: pairs of nodes run all_reduce across every rail for the soak's length,
rotating partners (the gate's circle schedule), each nccl-tests `-N` cycle one busbw sample; and
the rule that names a node whose busbw sags over the soak (`burnin.sag`).

One Slurm job holds every soaked node; its script loops over the rotations until the deadline,
each rotation's pairs as concurrent `srun` steps. Every pair appends to its own file, each step
after a marker line with the time it started, so a sample is (pair, step, cycle, time, busbw).
"""

from __future__ import annotations

import re
import shlex
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.errors import ParseError, UsageError
from cluster_tool.fileio import atomic_write, remove_stale
from cluster_tool.findings import Finding
from cluster_tool.gate.classify import classify_errors
from cluster_tool.gate.plan import GateJob, NcclTestParams, Step, pair_rotation
from cluster_tool.gate.runner import JobRun, SlurmRunner
from cluster_tool.gate.thresholds import Rung
from cluster_tool.parsers.nccl_tests import parse_nccl_tests

MARKER = "# cluster-tool soak: step"
_MARKER_LINE = re.compile(r"^# cluster-tool soak: step (\d+) at (\d+(?:\.\d+)?)\s*$")
# The batch script's line after each step's pairs ended (`render_soak_sbatch`).
_STEP_DONE = re.compile(r"^cluster-tool soak: step (\d+) done at \d+\s*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# At most this many distinct rotations are cycled through: enough partners per node for the
# rule's majority, a script of bounded size at any fleet size.
MAX_ROTATIONS = 16


def parse_duration(text: str, option: str = "--burn-in") -> float:
    """`20s`, `30m`, `4h`, `1h30m` or plain seconds, as seconds; UsageError otherwise."""
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        parts = _DURATION.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise UsageError(f"{option} {text!r}: give a duration such as 20s, 30m, 4h or 1h30m")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"{option} {text!r}: the duration must be above zero")
    return seconds


@dataclass(frozen=True)
class SagRule:
    """When a node's busbw sags (the spec's `thresholds.burn_in`)."""

    baseline_samples: int = 3
    sag_max: float = 0.10
    fleet_floor: float = 0.90


@dataclass(frozen=True)
class SoakPlan:
    """The soaked nodes and the partner rotations the job cycles through until `duration_s`."""

    nodes: tuple[str, ...]
    rotations: tuple[tuple[tuple[str, str], ...], ...]
    duration_s: float
    message_bytes: int
    cycles: int

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return sorted({p for r in self.rotations for p in r})


def plan_soak(
    nodes: Sequence[str],
    duration_s: float,
    *,
    message_bytes: int,
    cycles: int,
    su_of: Mapping[str, int] | None = None,
) -> SoakPlan:
    """Rotations 0..R-1 of the circle schedule (each node meets a new partner every step);
    a node alone has no partner and is not soaked."""
    ordered = sorted(dict.fromkeys(nodes))
    count = len(ordered) - 1 if len(ordered) % 2 == 0 else len(ordered)
    rotations = []
    for r in range(max(0, min(count, MAX_ROTATIONS))):
        pairs, _ = pair_rotation(ordered, r, su_of)
        if pairs:
            rotations.append(tuple(pairs))
    return SoakPlan(tuple(ordered), tuple(rotations), duration_s, message_bytes, cycles)


def pair_output(workdir: Path, pair: tuple[str, str]) -> Path:
    return workdir / f"soak.{pair[0]}+{pair[1]}.out"


def soak_job(plan: SoakPlan) -> GateJob:
    """The soak as the gate's job record (name, nodes): what the Slurm runner watches."""
    step = Step("soak", "all_reduce", Rung.PAIRS, (("NCCL_ALGO", "Ring"),))
    return GateJob("burnin-soak", Rung.PAIRS, plan.nodes, (step,))


def render_soak_sbatch(
    plan: SoakPlan, params: NcclTestParams, workdir: Path, gpus_per_node: int
) -> str:
    """The soak's sbatch script: until the deadline, each rotation's pairs at once, each pair an
    `srun` of all_reduce over both nodes' GPUs (every rail) with `-N cycles`."""
    job = soak_job(plan)
    size = str(plan.message_bytes)
    argv = params.argv("all_reduce")
    # The sweep is one size, repeated: each -N cycle prints one row, one sample.
    for flag, value in (("-b", size), ("-e", size)):
        argv[argv.index(flag) + 1] = value
    argv += ["-N", str(plan.cycles)]
    cmd = "stdbuf -oL " + " ".join(shlex.quote(a) for a in argv)
    # Slurm's limit leaves room for the last step to finish after the deadline.
    minutes = int(plan.duration_s // 60) + 30
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=ct-burnin-soak",
        f"#SBATCH --nodes={len(plan.nodes)}",
        f"#SBATCH --nodelist={','.join(plan.nodes)}",
        f"#SBATCH --ntasks-per-node={gpus_per_node}",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        "#SBATCH --exclusive",
        f"#SBATCH --time={minutes}",
        f"#SBATCH --output={job.slurm_output(workdir)}",
    ]
    if params.partition:
        lines.append(f"#SBATCH --partition={params.partition}")
    lines += [
        "# Written by cluster-tool burn-in: the NCCL soak, one file per pair.",
        "export NCCL_ALGO=Ring",
        f"deadline=$(( $(date +%s) + {round(plan.duration_s)} ))",
        "step=0",
        'while [ "$(date +%s)" -lt "$deadline" ]; do',
        f"  case $(( step % {len(plan.rotations)} )) in",
    ]
    for r, pairs in enumerate(plan.rotations):
        lines.append(f"  {r})")
        for a, b in pairs:
            out = shlex.quote(str(pair_output(workdir, (a, b))))
            srun = (
                f"srun --mpi=pmix --cpu-bind=none -N 2 -n {2 * gpus_per_node} -w {a},{b} "
                f"--ntasks-per-node={gpus_per_node} --gpus-per-node={gpus_per_node} {cmd}"
            )
            lines.append(
                f'    {{ echo "{MARKER} $step at $(date +%s.%N)"; {srun}; }} >> {out} 2>&1 &'
            )
        lines.append("    ;;")
    lines += [
        "  esac",
        "  wait",
        '  echo "cluster-tool soak: step $step done at $(date +%s)"',
        "  step=$(( step + 1 ))",
        "done",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SoakSample:
    """One -N cycle of one pair's step: its busbw at the soak's message size."""

    pair: tuple[str, str]
    step: int
    cycle: int
    at: float
    busbw: float
    wrong: int = 0


@dataclass
class PairOutput:
    """A pair's file read back: its samples, and the steps that gave none (why)."""

    samples: list[SoakSample] = field(default_factory=list)
    failed_steps: list[str] = field(default_factory=list)
    steps: set[int] = field(default_factory=set)


def steps_done(batch_text: str) -> list[int]:
    """The steps the soak's batch script finished (every pair of the step ended), from its
    output; the step that was running when the job ended is not among them."""
    return [int(m.group(1)) for ln in batch_text.splitlines() if (m := _STEP_DONE.match(ln))]


def read_pair_output(pair: tuple[str, str], text: str) -> PairOutput:
    """Each step's nccl-tests output after its marker; every row is one cycle's sample."""
    out = PairOutput()
    segments: list[tuple[int, float, list[str]]] = []
    for line in text.splitlines():
        m = _MARKER_LINE.match(line)
        if m:
            segments.append((int(m.group(1)), float(m.group(2)), []))
        elif segments:
            segments[-1][2].append(line)
    for step, at, body in segments:
        out.steps.add(step)
        try:
            run = parse_nccl_tests("\n".join(body))
        except ParseError as exc:
            out.failed_steps.append(f"step {step}: {exc}")
            continue
        rows = [r for r in run.rows if r.out_of_place or r.in_place]
        if not rows:
            # The step's own first error line says why (the gate's classifier), if it has one.
            errors = classify_errors("\n".join(body))
            why = f"{errors[0].check}: {errors[0].text[:160]}" if errors else "no result row"
            out.failed_steps.append(f"step {step}: {why}")
            continue
        for cycle, row in enumerate(rows):
            sides = [s for s in (row.out_of_place, row.in_place) if s is not None]
            out.samples.append(
                SoakSample(
                    pair,
                    step,
                    cycle,
                    at,
                    max(s.busbw for s in sides),
                    sum(s.wrong or 0 for s in sides),
                )
            )
    return out


@dataclass
class SoakResult:
    """What the soak measured: samples of every pair, the steps that failed, how long it ran."""

    plan: SoakPlan
    samples: list[SoakSample]
    failed_steps: dict[tuple[str, str], list[str]]
    slurm_state: str = ""
    elapsed_s: float = 0.0
    # Per pair: the steps it was due in that the batch script finished.
    due: dict[tuple[str, str], int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "nodes": list(self.plan.nodes),
            "duration_s": self.plan.duration_s,
            "message_bytes": self.plan.message_bytes,
            "cycles_per_step": self.plan.cycles,
            "slurm_state": self.slurm_state,
            "elapsed_s": round(self.elapsed_s, 1),
            "samples": [
                {
                    "pair": list(s.pair),
                    "step": s.step,
                    "cycle": s.cycle,
                    "at": s.at,
                    "busbw": s.busbw,
                    "wrong": s.wrong,
                }
                for s in self.samples
            ],
            "failed_steps": {"+".join(p): why for p, why in self.failed_steps.items()},
            "due_steps": {"+".join(p): n for p, n in self.due.items()},
        }


@dataclass
class SoakRunner(SlurmRunner):
    """Submits the soak job and watches it with the gate's watchdog (its batch output grows a
    line per step); reads every pair's file back."""

    def soak(self, plan: SoakPlan) -> SoakResult:
        self.workdir.mkdir(parents=True, exist_ok=True)
        started = self.clock()
        job = soak_job(plan)
        script = self.workdir / "burnin-soak.sbatch"
        text = render_soak_sbatch(plan, self.params, self.workdir, self.gpus_per_node)
        atomic_write(script, text, mode=0o644)  # no secrets; read where sbatch runs
        # The pairs' files are appended to, step after step: never onto an earlier run's.
        remove_stale(
            [job.slurm_output(self.workdir), *(pair_output(self.workdir, p) for p in plan.pairs)]
        )
        run = JobRun(job, self.slurm.submit(script))
        try:
            self._watch([run])
        except BaseException:
            if run.ended_at is None:
                self._cancel_quietly(run.job_id)
            raise
        samples: list[SoakSample] = []
        failed: dict[tuple[str, str], list[str]] = {}
        done = steps_done(self.read(job.slurm_output(self.workdir)) or "")
        due: dict[tuple[str, str], int] = {}
        for pair in plan.pairs:
            read = read_pair_output(pair, self.read(pair_output(self.workdir, pair)) or "")
            samples += read.samples
            # A step the script finished that left no marker in the pair's file: the pair's
            # srun never started or its output was lost. Not a sample, and not a pass.
            mine = (
                [st for st in done if pair in plan.rotations[st % len(plan.rotations)]]
                if plan.rotations
                else []
            )
            due[pair] = len(set(mine) | read.steps)
            missing = [f"step {st}: no output" for st in mine if st not in read.steps]
            if read.failed_steps or missing:
                failed[pair] = read.failed_steps + missing
        state = run.state + (
            f" (hung for {run.hung_after_s:.0f} s)" if run.hung_after_s is not None else ""
        )
        return SoakResult(plan, samples, failed, state, self.clock() - started, due)


def judge_steps(result: SoakResult) -> list[Finding]:
    """`burnin.step-failed` for the soak steps that failed (no result row: an error such as
    `NET/IB : Got completion ... error 12`) or left no output: a pair that did not run through
    its soak proves nothing, however good its other samples.

    Judged as the gate judges its pairs: a node whose steps failed with more than half of its
    partners, two at least, is the one named (its partners' other pairs ran); a failure no such
    node explains names both nodes of its pair, as does any failure when a node had one partner."""
    failed = {pair: why for pair, why in result.failed_steps.items() if why}
    partners: dict[str, set[str]] = {}
    for pair in result.plan.pairs:
        if result.due.get(pair, 1) > 0:
            for node in pair:
                partners.setdefault(node, set()).add(pair[1] if node == pair[0] else pair[0])
    bad: dict[str, set[str]] = {}
    for a, b in failed:
        bad.setdefault(a, set()).add(b)
        bad.setdefault(b, set()).add(a)
    named = {
        n
        for n, with_ in bad.items()
        if len(with_) >= 2 and 2 * len(with_) > len(partners.get(n, with_))
    }
    findings: list[Finding] = []
    for pair, why in sorted(failed.items()):
        blamed = [n for n in pair if n in named] or list(pair)
        due = max(result.due.get(pair, 0), len(why))
        shown = "; ".join(why[:2]) + (f" (and {len(why) - 2} more)" if len(why) > 2 else "")
        for node in blamed:
            partner = pair[1] if node == pair[0] else pair[0]
            findings.append(
                Finding(
                    check="burnin.step-failed",
                    node=node,
                    component="soak all_reduce",
                    expected="every soak step with a result",
                    observed=f"{len(why)} of {due} step(s) with {partner} failed",
                    message=f"{node}: {len(why)} of {due} soak step(s) with {partner} failed: "
                    f"{shown}",
                )
            )
    return findings


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def judge_soak(nodes: Sequence[str], samples: Sequence[SoakSample], rule: SagRule) -> list[Finding]:
    """`burnin.sag` for each node whose late samples fell, with most of its partners, below its
    own first samples by `sag_max` or below `fleet_floor` of the fleet's figure (the median over
    the nodes of each one's median sample);
    `burnin.unread` for a node with too few samples to judge; `burnin.wrong` for a pair whose
    data check counted wrong elements.

    A pair's busbw is both nodes' at once: a node is named only when the drop shows with more
    than half of its late partners (the slow node's every partner sags, each of its partners
    only with it). A node that had a single partner (two nodes soaked) cannot be told from it:
    both are named. A sag no named node explains names both nodes of that pair."""
    k = rule.baseline_samples
    own: dict[str, list[SoakSample]] = {n: [] for n in nodes}
    for s in sorted(samples, key=lambda s: (s.at, s.step, s.cycle)):
        for n in s.pair:
            if n in own:
                own[n].append(s)
    findings: list[Finding] = []
    baseline: dict[str, float] = {}
    for n, series in own.items():
        if len(series) <= k:
            findings.append(
                Finding(
                    check="burnin.unread",
                    node=n,
                    component="soak all_reduce",
                    expected=f"more than {k} busbw samples",
                    observed=f"{len(series)} sample(s)",
                    message=f"{n}: the soak gave {len(series)} busbw sample(s); its sag cannot be "
                    f"judged (the first {k} are its baseline)",
                )
            )
            continue
        baseline[n] = _median([s.busbw for s in series[:k]])
    wrong_pairs = sorted({s.pair for s in samples if s.wrong})
    for pair in wrong_pairs:
        for n in pair:
            if n in own:
                findings.append(
                    Finding(
                        check="burnin.wrong",
                        node=n,
                        component="soak all_reduce",
                        expected="#wrong 0",
                        observed=f"wrong elements with {'+'.join(pair)}",
                        message=f"{n}: all_reduce's data check counted wrong elements during "
                        f"the soak with {'+'.join(pair)}",
                    )
                )
    if not baseline:
        return findings
    # The fleet's figure: the median over the nodes of each node's median sample. A slow node
    # drags every pair it is in, but only its own median: the others' stay with the fleet.
    fleet = _median([_median([s.busbw for s in own[n]]) for n in baseline])
    floor = rule.fleet_floor * fleet
    sagged_pairs: dict[tuple[str, str], str] = {}
    named: dict[str, Finding] = {}
    for n, base in baseline.items():
        series = own[n]
        partners = {p for s in series for p in s.pair if p != n}
        late: dict[str, list[float]] = {}
        for s in series[k:]:
            late.setdefault(next(p for p in s.pair if p != n), []).append(s.busbw)
        drop_to = (1 - rule.sag_max) * base
        shown: dict[str, float] = {}
        for partner, values in late.items():
            value = _median(values[-k:])
            if value < drop_to or value < floor:
                shown[partner] = value
                sagged_pairs[(n, partner) if n < partner else (partner, n)] = partner
        if not shown:
            continue
        alone = len(partners) == 1
        if not alone and not (len(late) >= 2 and 2 * len(shown) > len(late)):
            continue
        worst = min(shown.values())
        why = " and ".join(
            w
            for w, hit in (
                ("below its own baseline", worst < drop_to),
                ("below the fleet floor", worst < floor),
            )
            if hit
        )
        note = f" (its only partner was {next(iter(partners))})" if alone else ""
        named[n] = Finding(
            check="burnin.sag",
            node=n,
            component="soak all_reduce",
            expected=f">= {drop_to:.1f} GB/s ({1 - rule.sag_max:.2f}x its first {k} samples' "
            f"{base:.1f}) and >= {floor:.1f} GB/s ({rule.fleet_floor:.2f}x the fleet's "
            f"{fleet:.1f})",
            observed=f"{worst:.1f} GB/s ({worst / base:.2f}x) late in the soak with "
            f"{len(shown)} of {len(late)} partner(s)",
            message=f"{n}: busbw sagged during the soak, {why}: {base:.1f} -> {worst:.1f} GB/s "
            f"with {', '.join(sorted(shown))}{note}",
        )
    findings += named.values()
    for pair in sorted(sagged_pairs):
        if any(n in named for n in pair):
            continue
        for n in pair:
            findings.append(
                Finding(
                    check="burnin.sag",
                    node=n,
                    component="soak all_reduce",
                    expected=f">= {(1 - rule.sag_max):.2f}x its own baseline and >= {floor:.1f} "
                    "GB/s",
                    observed=f"the pair {'+'.join(pair)} sagged; no other partner tells which",
                    message=f"{n}: busbw of {'+'.join(pair)} sagged during the soak and neither "
                    "node sagged with its other partners: both are held",
                )
            )
    return findings
