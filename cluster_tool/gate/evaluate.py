"""One job's outputs against its expectation: passed or not, its busbw, and why in words.

Correctness comes before speed: any `#wrong` or out-of-bounds value fails the job even
at line rate (that is silent data corruption). The figure held to the floor is the peak
busbw of the large messages, where busbw approaches the link rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster_tool.errors import ParseError
from cluster_tool.findings import Finding
from cluster_tool.gate.classify import GdrUse, classify_errors, error_findings, gdr_use
from cluster_tool.gate.localize import PairResult
from cluster_tool.gate.plan import GateJob, Step
from cluster_tool.gate.thresholds import Expectation, GateProfile, Rung, Thresholds
from cluster_tool.parsers.nccl_tests import NcclTestsRun, parse_nccl_tests

RUNG_CHECK = {
    Rung.SINGLE_NVLS: "nccl.single",
    Rung.SINGLE_RING: "nccl.single",
    Rung.PAIRS: "nccl.pair",
    Rung.FULL: "nccl.full",
    Rung.RAILS: "nccl.rail",
}


def peak_busbw(run: NcclTestsRun) -> float | None:
    """Best busbw (out-of-place or in-place) over the largest message sizes (top quarter)."""
    if not run.rows:
        return None
    biggest = max(r.size for r in run.rows)
    values = [
        side.busbw
        for r in run.rows
        if r.size * 4 >= biggest
        for side in (r.out_of_place, r.in_place)
        if side is not None
    ]
    return max(values) if values else None


@dataclass(frozen=True)
class StepOutcome:
    """One srun step of a job, judged."""

    step: Step
    passed: bool
    busbw_gbs: float | None
    expectation: Expectation
    check: str
    detail: str = ""


@dataclass(frozen=True)
class JobOutcome:
    """A whole job, judged: its steps, and the findings its raw text holds (errors, GDR)."""

    job: GateJob
    steps: tuple[StepOutcome, ...]
    findings: tuple[Finding, ...] = field(default=())
    hung: bool = False
    stuck: str | None = None  # never left the queue: says nothing about the nodes
    gdr: dict[str, GdrUse] = field(default_factory=dict)  # NET channels per host

    @property
    def passed(self) -> bool:
        return not self.hung and self.stuck is None and all(s.passed for s in self.steps)

    @property
    def first_failure(self) -> StepOutcome | None:
        return next((s for s in self.steps if not s.passed), None)

    @property
    def busbw_gbs(self) -> float | None:
        """The busbw of the job's first step (all_reduce): comparable across the fleet."""
        return self.steps[0].busbw_gbs if self.steps else None

    def failed_rails(self) -> list[int]:
        return [s.step.rail for s in self.steps if not s.passed and s.step.rail is not None]

    def as_pair_result(self, profile: GateProfile) -> PairResult:
        """What localisation needs to know of this job."""
        bad = self.first_failure
        comps = tuple(
            f"rail {r} ({profile.rail_hcas[r]})" for r in self.failed_rails() if r < profile.rails
        )
        if self.stuck is not None:
            return PairResult(self.job.nodes, False, None, self.stuck, "slurm.pending")
        if self.hung:
            return PairResult(
                self.job.nodes, False, self.busbw_gbs, bad.detail if bad else "", "nccl.hang", comps
            )
        if bad is None:
            return PairResult(self.job.nodes, True, self.busbw_gbs)
        return PairResult(self.job.nodes, False, bad.busbw_gbs, bad.detail, bad.check, comps)


def evaluate_step(
    step: Step, text: str | None, expectation: Expectation, *, hung_after_s: float | None = None
) -> StepOutcome:
    """Judge one step's nccl-tests output; a missing or cut-short output is a failure."""
    check = RUNG_CHECK[step.rung]

    def fail(why: str, busbw: float | None = None, c: str = check) -> StepOutcome:
        return StepOutcome(step, False, busbw, expectation, c, why)

    run: NcclTestsRun | None = None
    unreadable: str | None = None
    if text is not None and text.strip():
        try:
            run = parse_nccl_tests(text)
        except ParseError as exc:
            unreadable = str(exc)
    if hung_after_s is not None and (run is None or not run.complete):
        # The watchdog cancelled the job: every step that had not finished is part of it
        # (rails run at once, so a stalled rail is named by its own unfinished output).
        return fail(f"no output for {hung_after_s:.0f} s, cancelled", c="nccl.hang")
    if unreadable is not None:
        return fail(f"unreadable nccl-tests output: {unreadable}", c="nccl.output")
    if run is None:
        return fail("no output (the step did not start)", c="nccl.launch")
    if run.wrong_total:
        return fail(
            f"{run.wrong_total} #wrong values (data corruption)", peak_busbw(run), "nccl.wrong"
        )
    if run.out_of_bounds:
        return fail(f"{run.out_of_bounds} out-of-bounds values", peak_busbw(run), "nccl.wrong")
    busbw = peak_busbw(run)
    if run.errors or not run.complete:
        classified = classify_errors(text or "")
        c = classified[0].check if classified else "nccl.abort"
        why = run.errors[0] if run.errors else (classified[0].text if classified else "")
        return fail(f"did not finish: {why}".rstrip(": "), busbw, c)
    if busbw is None:
        return fail("no result rows")
    if busbw < expectation.floor_gbs:
        return fail(f"{busbw:.0f} GB/s < {expectation.floor_gbs:.0f} GB/s", busbw)
    return StepOutcome(step, True, busbw, expectation, check)


def evaluate_job(
    job: GateJob,
    texts: Mapping[str, str | None],
    slurm_text: str,
    thresholds: Thresholds,
    *,
    hung_after_s: float | None = None,
    stuck: str | None = None,
) -> JobOutcome:
    """Judge every step of a job and read its raw text for classified errors and GDR use."""
    steps = []
    for step in job.steps:
        exp = thresholds.expect(step.rung, step.collective, nodes=len(job.nodes))
        text = texts.get(step.label)
        steps.append(evaluate_step(step, text, exp, hung_after_s=hung_after_s))
    everything = "\n".join([slurm_text, *(t for t in texts.values() if t)])
    findings = error_findings(classify_errors(everything), job.nodes)
    return JobOutcome(
        job,
        tuple(steps),
        tuple(findings),
        hung=hung_after_s is not None,
        stuck=stuck,
        gdr=gdr_use(everything) if len(job.nodes) > 1 else {},
    )
