"""Under `requeue`, the watcher tells an opted-in job before it requeues it: SIGUSR1 to its batch
step, then up to `checkpoint_grace_s` for the job's report of a new complete checkpoint or its
end; the grace used is in the event log and the textfile. A job that did not opt in is never
signalled."""

from __future__ import annotations

import json
from pathlib import Path

from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Watch
from cluster_tool.watch.reports import Checkpoint, FileJobReports
from cluster_tool.watch.service import TEXTFILE, watch_once
from tests.unit.watch.fakes import (
    BOOT_LOG,
    CapturedSources,
    NodeReading,
    WatchSlurm,
    admin,
    flapping,
)

REPO = Path(__file__).resolve().parents[3]
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
GRACE = 120


class Reports:
    """What the jobs reported: job id -> their newest complete checkpoint."""

    def __init__(self) -> None:
        self.done: dict[str, Checkpoint] = {}

    def checkpoint(self, job_id: str) -> Checkpoint | None:
        return self.done.get(job_id)

    def step_times(self, job_id: str) -> dict[str, list[float]]:
        return {}


def _setup() -> tuple[WatchSlurm, CapturedSources, Watch]:
    fake = WatchSlurm(NODES)
    fake.running = {
        "101": ("gpu[001-004]", "", "watch-requeue"),  # opted in
        "102": ("gpu002", "", "(null)"),  # did not
    }
    sources = CapturedSources({n: NodeReading() for n in NODES})
    return fake, sources, Watch(policy="requeue", checkpoint_grace_s=GRACE)


def _cycle(
    tmp: Path, fake: WatchSlurm, sources: CapturedSources, watch: Watch, at: float, reports: Reports
) -> list[tuple[str, str | None, float | None]]:
    lab = load_spec(REPO / "examples" / "lab.yml")
    result = watch_once(lab, sources, admin(fake), watch, tmp, now=at, reports=reports)
    return [(a.kind, a.job_id, a.grace_s) for a in result.actions]


def _flap(tmp: Path) -> tuple[WatchSlurm, CapturedSources, Watch, Reports]:
    fake, sources, watch = _setup()
    reports = Reports()
    reports.done["101"] = Checkpoint(500, 100.0)  # its last periodic checkpoint
    assert _cycle(tmp, fake, sources, watch, 1000.0, reports) == []
    sources.readings["gpu002"].kernel_log = BOOT_LOG + flapping(3, hca=1)
    assert _cycle(tmp, fake, sources, watch, 1060.0, reports) == [
        ("drain", None, None),
        ("signal", "101", None),
    ]
    assert fake.signalled == [("101", "USR1")] and fake.requeued == []
    return fake, sources, watch, reports


def test_a_job_that_reports_its_checkpoint_within_the_grace_is_requeued_then(
    tmp_path: Path,
) -> None:
    fake, sources, watch, reports = _flap(tmp_path)
    reports.done["101"] = Checkpoint(612, 1090.0)  # written after the signal
    actions = _cycle(tmp_path, fake, sources, watch, 1120.0, reports)
    assert actions == [("requeue", "101", 60.0)]
    assert fake.requeued == ["101"] and fake.signalled == [("101", "USR1")]
    events = [json.loads(ln) for ln in (tmp_path / "events.jsonl").read_text().splitlines()]
    requeue = next(e for e in events if e["event"] == "requeue")
    assert requeue["grace_s"] == 60.0 and "checkpoint iteration 612" in requeue["detail"]
    text = (tmp_path / TEXTFILE).read_text()
    assert 'cluster_tool_watch_checkpoint_grace_seconds{job="101"} 60.0' in text


def test_a_periodic_checkpoint_saved_before_the_signal_is_not_the_jobs_answer(
    tmp_path: Path,
) -> None:
    """Seen in the lab: the trainer saved iteration 15 on its schedule 2 s before the signal; its
    sync completed 4 s after it, while the job was saving 18, its answer to the signal. Taken as
    the answer, the watcher requeued the job then and killed that write (18 set aside torn, 3
    steps lost). Only a checkpoint the trainer wrote after the signal answers it."""
    fake, sources, watch, reports = _flap(tmp_path)
    reports.done["101"] = Checkpoint(600, 1064.0, saved_at=1058.0)
    assert _cycle(tmp_path, fake, sources, watch, 1070.0, reports) == []  # still within its grace
    assert fake.requeued == []
    reports.done["101"] = Checkpoint(612, 1075.0, saved_at=1061.0)  # the one it saved on the signal
    actions = _cycle(tmp_path, fake, sources, watch, 1080.0, reports)
    assert actions == [("requeue", "101", 20.0)] and fake.requeued == ["101"]


def test_a_job_that_never_reports_is_requeued_when_its_grace_is_over(tmp_path: Path) -> None:
    fake, sources, watch, reports = _flap(tmp_path)
    assert _cycle(tmp_path, fake, sources, watch, 1120.0, reports) == []  # 60 s of 120
    assert fake.requeued == []
    actions = _cycle(tmp_path, fake, sources, watch, 1180.0, reports)
    assert actions == [("requeue", "101", 120.0)]
    assert fake.requeued == ["101"]


def test_a_job_that_checkpoints_and_requeues_itself_is_not_requeued_again(
    tmp_path: Path,
) -> None:
    fake, sources, watch, reports = _flap(tmp_path)
    reports.done["101"] = Checkpoint(612, 1075.0)
    del fake.running["101"]  # its trap requeued it: no longer running
    fake.queued["101"] = ("PENDING", "BeginTime")
    actions = _cycle(tmp_path, fake, sources, watch, 1120.0, reports)
    assert actions[0] == ("checkpointed", "101", 60.0)
    assert fake.requeued == []
    # Slurm's begin-time hold is still ended for it, as for a job the watcher requeued.
    assert ("release", "101", None) in _cycle(
        tmp_path, fake, sources, watch, 1180.0, reports
    ) + actions


def test_a_job_that_did_not_opt_in_is_never_signalled_nor_requeued(tmp_path: Path) -> None:
    fake, sources, watch, reports = _flap(tmp_path)
    _cycle(tmp_path, fake, sources, watch, 1180.0, reports)
    _cycle(tmp_path, fake, sources, watch, 1240.0, reports)
    assert all(job == "101" for job, _ in fake.signalled)
    assert "102" not in fake.requeued


def test_reports_are_read_bounded_and_a_bad_one_is_no_report(tmp_path: Path) -> None:
    reports = FileJobReports(tmp_path)
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "checkpoint").write_text('{"iteration": 40, "at": 12.5}\n')
    assert reports.checkpoint("7") == Checkpoint(40, 12.5)
    (tmp_path / "7" / "checkpoint").write_text('{"iteration": 40, "at": 12, "saved_at": 9}\n')
    assert reports.checkpoint("7") == Checkpoint(40, 12.0, saved_at=9.0)
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "checkpoint").write_text("not json")
    assert reports.checkpoint("8") is None
    assert reports.checkpoint("../7") is None  # a job id is digits, never a path


def test_a_rank_slower_than_the_jobs_others_names_its_node_from_the_jobs_own_step_times(
    tmp_path: Path,
) -> None:
    """Per-rank step times the job writes (steps/<host>.<rank>): gpu003's ranks take 1.45 s a
    step where the others take 1.00-1.02 s; after straggler_cycles cycles running it is named."""
    for rank, host in enumerate(NODES * 2):
        steps = tmp_path / "reports" / "101" / "steps"
        steps.mkdir(parents=True, exist_ok=True)
        base = 1.45 if host == "gpu003" else 1.00 + 0.01 * (rank % 3)
        (steps / f"{host}.{rank}").write_text("".join(f"{base:.2f}\n" for _ in range(20)))
    fake, sources, _ = _setup()
    watch = Watch(policy="observe")
    lab = load_spec(REPO / "examples" / "lab.yml")
    reports = FileJobReports(tmp_path / "reports")
    named = []
    for i in range(watch.straggler_cycles):
        state = tmp_path / "state"
        result = watch_once(
            lab, sources, admin(fake), watch, state, now=1000.0 + 60 * i, reports=reports
        )
        named = [f for f in result.findings if f.check == "watch.straggler"]
    assert [(f.node, f.component) for f in named] == [("gpu003", "job 101")]
    assert "step time median of its ranks 1.45 s" in named[0].message


def test_each_rank_keeps_its_own_recent_step_times(tmp_path: Path) -> None:
    """A node's step times are each rank's own latest 50: with 60 lines per rank, a tail of the
    merged list would be the last-named rank's alone."""
    steps = tmp_path / "9" / "steps"
    steps.mkdir(parents=True)
    (steps / "gpu001.0").write_text("".join(f"{2.0 + i / 1000:.3f}\n" for i in range(60)))
    (steps / "gpu001.1").write_text("1.00\n" * 60)
    times = FileJobReports(tmp_path).step_times("9")["gpu001"]
    assert len(times) == 100
    assert sorted(t for t in times if t >= 2.0) == [2.0 + i / 1000 for i in range(10, 60)]
