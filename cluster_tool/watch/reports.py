"""What an opted-in job tells the watcher, in a folder it shares with the watcher's host
(`training.reports_dir`, one folder per job id, written by `plan --sbatch` jobs): `checkpoint`,
its newest complete checkpoint (`{"iteration": N, "at": UNIX, "saved_at": UNIX}`: marked
complete at, written by the trainer at; replaced atomically after the checkpoint's `.complete`
marker), and `steps/<host>.<rank>`, each rank's recent step times.

Job output is data from elsewhere: each file is read bounded, and what does not parse is
ignored as no report at all, never an error that stops a cycle."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["Checkpoint", "FileJobReports", "JobReports", "parse_step_times"]

_MAX_BYTES = 64 * 1024
# How many of each rank's latest step times the watcher judges.
_RECENT_STEPS = 50
_JOB_ID = re.compile(r"[0-9]{1,12}(_[0-9]{1,12})?")
_RANK_FILE = re.compile(r"(?P<host>[a-z0-9][a-z0-9-]{0,62})\.(?P<rank>[0-9]{1,7})")


@dataclass(frozen=True)
class Checkpoint:
    """A job's newest complete checkpoint: its iteration, when it was marked complete and, when
    the job says, when the trainer wrote it (`saved_at`): a periodic checkpoint written before
    the checkpoint signal may complete after it, and is not the job's answer to the signal."""

    iteration: int
    at: float
    saved_at: float | None = None


class JobReports(Protocol):
    """Where the watcher reads what jobs report."""

    def checkpoint(self, job_id: str) -> Checkpoint | None: ...
    def step_times(self, job_id: str) -> dict[str, list[float]]: ...


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # a FIFO or a device a job put there: never read
        return os.read(fd, _MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_step_times(text: str) -> list[float]:
    """One step time in seconds per line (`12.81`); other lines are not step times."""
    out = []
    for line in text.splitlines()[-1000:]:
        try:
            value = float(line.strip())
        except ValueError:
            continue
        if 0 < value < 1e6:
            out.append(value)
    return out


@dataclass
class FileJobReports:
    """The reports folder on the watcher's host."""

    root: Path

    def _job(self, job_id: str) -> Path | None:
        return self.root / job_id if _JOB_ID.fullmatch(job_id) else None

    def checkpoint(self, job_id: str) -> Checkpoint | None:
        folder = self._job(job_id)
        text = None if folder is None else _read(folder / "checkpoint")
        if text is None:
            return None
        try:
            data = json.loads(text)
            saved = data.get("saved_at")
            return Checkpoint(
                int(data["iteration"]), float(data["at"]), None if saved is None else float(saved)
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def step_times(self, job_id: str) -> dict[str, list[float]]:
        """Per node, the step times of its ranks (each rank's own recent ones, merged)."""
        folder = self._job(job_id)
        out: dict[str, list[float]] = {}
        if folder is None:
            return out
        try:
            names = sorted(os.listdir(folder / "steps"))[:4096]
        except OSError:
            return out
        for name in names:
            m = _RANK_FILE.fullmatch(name)
            text = None if m is None else _read(folder / "steps" / name)
            if m is not None and text is not None:
                # Each rank's own recent steps: a merged tail would be the last rank's alone.
                out.setdefault(m["host"], []).extend(parse_step_times(text)[-_RECENT_STEPS:])
        return out
