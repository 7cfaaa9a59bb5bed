"""Runs one round of gate jobs through Slurm: submit all, watch all, cancel the ones that hang.

The watchdog is per job: a running job whose output files stop growing for
`watchdog_s` is cancelled and reported as hung (`nccl.hang`), so a stalled collective
ends as a finding within the watchdog instead of a time limit buried in a log. A job
that never leaves the queue is cancelled after `pending_s` and reported with Slurm's
reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.fileio import atomic_write, remove_stale
from cluster_tool.gate.plan import GateJob, NcclTestParams, render_sbatch
from cluster_tool.gate.thresholds import SPEC_DEFAULTS
from cluster_tool.polling import poll_delays
from cluster_tool.slurm import Slurm, SlurmError


@dataclass
class JobRun:
    """One submitted job and what came back: Slurm's last word, its texts, hung or stuck."""

    job: GateJob
    job_id: str
    state: str = "PENDING"
    texts: dict[str, str | None] = field(default_factory=dict)
    slurm_text: str = ""
    hung_after_s: float | None = None
    stuck_reason: str | None = None
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def node_seconds(self) -> float:
        if self.started_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else self.started_at
        return (end - self.started_at) * len(self.job.nodes)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@dataclass
class SlurmRunner:
    """Submits gate jobs and watches them; `clock`/`sleep` are injectable for tests."""

    slurm: Slurm
    workdir: Path
    params: NcclTestParams
    gpus_per_node: int
    watchdog_s: float = SPEC_DEFAULTS.watchdog_s
    pending_s: float = 3600.0
    poll_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    size_of: Callable[[Path], int] = _size
    read: Callable[[Path], str | None] = _read

    def run(self, jobs: Sequence[GateJob]) -> list[JobRun]:
        """Submit every job, wait for all to end (or be cancelled), read their outputs."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        runs: list[JobRun] = []
        try:
            for job in jobs:
                script = self.workdir / f"{job.name}.sbatch"
                text = render_sbatch(job, self.params, self.workdir, self.gpus_per_node)
                atomic_write(script, text, mode=0o644)  # no secrets; read where sbatch runs
                remove_stale(job.outputs(self.workdir))
                runs.append(JobRun(job, self.slurm.submit(script)))
            self._watch(runs)
        except BaseException:
            # Interrupted or Slurm failed us: leave no gate job holding nodes behind.
            for r in runs:
                if r.ended_at is None:
                    self._cancel_quietly(r.job_id)
            raise
        for r in runs:
            r.texts = {s.label: self.read(r.job.step_output(self.workdir, s)) for s in r.job.steps}
            r.slurm_text = self.read(r.job.slurm_output(self.workdir)) or ""
        return runs

    def _cancel_quietly(self, job_id: str) -> None:
        # Already gone, or Slurm itself is down: the error that got us here matters more.
        with contextlib.suppress(SlurmError):
            self.slurm.cancel(job_id)

    def _watch(self, runs: list[JobRun]) -> None:
        """Poll until every job ended (`poll_delays`: a round of short jobs on reserved nodes
        ends in seconds, and a fixed `poll_s` would add up to a whole poll to every round)."""
        submitted = self.clock()
        delays = poll_delays(self.poll_s)
        last_size: dict[str, int] = {}
        last_growth: dict[str, float] = {}
        open_runs = {r.job_id: r for r in runs}
        while open_runs:
            states = self.slurm.job_states(list(open_runs))
            now = self.clock()
            for job_id, r in list(open_runs.items()):
                st = states.get(job_id)
                if st is not None:
                    r.state = st.state
                if st is not None and st.finished:
                    r.ended_at = now
                    del open_runs[job_id]
                    continue
                if r.state == "RUNNING":
                    if r.started_at is None:
                        r.started_at = now
                        last_growth[job_id] = now
                    size = sum(self.size_of(p) for p in r.job.outputs(self.workdir))
                    if size != last_size.get(job_id):
                        last_size[job_id] = size
                        last_growth[job_id] = now
                    elif now - last_growth[job_id] >= self.watchdog_s:
                        self.slurm.cancel(job_id)
                        r.hung_after_s = now - last_growth[job_id]
                        r.state, r.ended_at = "CANCELLED", now
                        del open_runs[job_id]
                elif now - submitted >= self.pending_s and r.started_at is None:
                    self.slurm.cancel(job_id)
                    reason = st.reason if st is not None and st.reason else "never started"
                    r.stuck_reason = f"pending for {now - submitted:.0f} s ({reason})"
                    r.state, r.ended_at = "CANCELLED", now
                    del open_runs[job_id]
            if open_runs:
                self.sleep(next(delays))
