"""Run records: every workflow writes `runs/<timestamp>-<id>/` with its inputs, an append-only
journal of the steps it took (fsynced, so `--resume` after a kill -9 skips finished steps), raw
captured outputs, summary.json, findings.json, junit.xml and report.html.

No secret lands in a record: every text written through a `RunRecord` has the secrets it knows
replaced, and `close()` scans the whole folder (ansible-runner artifacts included) once more.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets as _random
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding, Report

SUMMARY = "summary.json"
FINDINGS = "findings.json"
JOURNAL = "journal.jsonl"
JUNIT = "junit.xml"
REPORT = "report.html"
REDACTED = "[redacted]"
RECORD_VERSION = 1

# A secret shorter than this would match ordinary text; such values are refused upstream
# (the roles want a 32-byte munge key and a 12-character dbd password).
_MIN_SECRET_LEN = 6


def default_runs_dir() -> Path:
    """`$CLUSTER_TOOL_RUNS_DIR`, else `runs/` under the working directory."""
    return Path(os.environ.get("CLUSTER_TOOL_RUNS_DIR") or "runs")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Secrets:
    """Values that must never be written: added as they are learnt, never stored themselves."""

    values: set[str] = field(default_factory=set)

    def add(self, value: str | None) -> None:
        if value and len(value.strip()) >= _MIN_SECRET_LEN:
            self.values.add(value)
            self.values.add(value.strip())

    def redact(self, text: str) -> str:
        # Longest first, so a secret that contains another is replaced whole.
        for value in sorted(self.values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        for value in sorted(self.values, key=len, reverse=True):
            raw = value.encode()
            if raw in data:
                data = data.replace(raw, REDACTED.encode())
        return data


def known_secrets(
    environ: Mapping[str, str] | None = None, munge_key_file: Path | None = None
) -> Secrets:
    """Secrets the tool can know of without asking: the slurmdbd password and BMC password from
    the environment (by the names the roles and the spec use) and the munge key on disk."""
    env = os.environ if environ is None else environ
    found = Secrets()
    for name, value in env.items():
        upper = name.upper()
        if "PASSWORD" in upper or "SECRET" in upper or upper.endswith(("_KEY", "_TOKEN")):
            found.add(value)
    if munge_key_file is not None:
        # Not generated yet, or not readable by this user: nothing to hide then.
        with contextlib.suppress(OSError):
            found.add(munge_key_file.read_text(encoding="utf-8", errors="replace"))
    return found


@dataclass
class JournalEntry:
    """One line of the journal: a step of a workflow, for one node or batch, and its outcome."""

    step: str
    status: str  # "start", "done" or "failed"
    node: str | None = None
    batch: int | None = None
    detail: str | None = None
    at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at or _now(),
            "step": self.step,
            "status": self.status,
            "node": self.node,
            "batch": self.batch,
            "detail": self.detail,
        }


class RunRecord:
    """One run's folder. Create with `RunRecord.create`, reopen with `RunRecord.open`."""

    def __init__(self, path: Path, secrets: Secrets | None = None) -> None:
        self.path = path
        self.secrets = secrets or Secrets()

    # --- life cycle ----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        runs_dir: Path,
        command: str,
        inputs: Mapping[str, Any],
        secrets: Secrets | None = None,
    ) -> RunRecord:
        """A new run folder `<UTC timestamp>-<6 hex>` holding `inputs.json`."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        run_id = f"{stamp}-{_random.token_hex(3)}"
        path = runs_dir / run_id
        path.mkdir(parents=True, exist_ok=False, mode=0o750)
        record = cls(path, secrets)
        record.write_json(
            "inputs.json",
            {"version": RECORD_VERSION, "command": command, "started": _now(), **inputs},
        )
        return record

    @classmethod
    def open(
        cls, run: str | Path, runs_dir: Path | None = None, secrets: Secrets | None = None
    ) -> RunRecord:
        """A run by folder path or by id under `runs_dir` (UsageError when neither exists)."""
        candidates = [Path(run)]
        if runs_dir is not None:
            candidates.append(runs_dir / str(run))
        for path in candidates:
            if (path / "inputs.json").is_file():
                return cls(path, secrets)
        raise UsageError(f"{run}: no run record there (no inputs.json)")

    @property
    def run_id(self) -> str:
        return self.path.name

    def inputs(self) -> dict[str, Any]:
        data = json.loads((self.path / "inputs.json").read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}

    # --- writing -------------------------------------------------------------------------

    def write_text(self, rel: str, text: str) -> Path:
        """Write a file inside the run (secrets replaced), atomically: a reader never sees half."""
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(self.secrets.redact(text), encoding="utf-8")
        tmp.replace(target)
        return target

    def write_json(self, rel: str, data: Any) -> Path:
        return self.write_text(rel, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def raw_dir(self) -> Path:
        """Where raw captured outputs go (fan-out captures, gate job outputs)."""
        raw = self.path / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        return raw

    # --- journal -------------------------------------------------------------------------

    def log(
        self,
        step: str,
        status: str,
        *,
        node: str | None = None,
        batch: int | None = None,
        detail: str | None = None,
    ) -> None:
        """Append one step to the journal and fsync it before returning: the journal is the
        truth `--resume` reads after a kill -9, so a step is recorded before the next starts."""
        entry = JournalEntry(
            step, status, node, batch, self.secrets.redact(detail) if detail else None
        )
        line = json.dumps(entry.to_json(), sort_keys=True) + "\n"
        fd = os.open(self.path / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def journal(self) -> list[JournalEntry]:
        """Every complete line of the journal; a torn last line (killed mid-write) is ignored."""
        path = self.path / JOURNAL
        if not path.is_file():
            return []
        entries: list[JournalEntry] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "step" in data and "status" in data:
                entries.append(
                    JournalEntry(
                        data["step"],
                        data["status"],
                        data.get("node"),
                        data.get("batch"),
                        data.get("detail"),
                        data.get("at", ""),
                    )
                )
        return entries

    def done(self, step: str, node: str | None = None) -> bool:
        """Whether the journal says `step` finished (passed or failed) for `node`."""
        return any(
            e.step == step and e.node == node and e.status in ("done", "failed")
            for e in self.journal()
        )

    def started(self, step: str, node: str | None = None) -> bool:
        return any(e.step == step and e.node == node for e in self.journal())

    # --- closing -------------------------------------------------------------------------

    def finish(self, summary: Mapping[str, Any], findings: Iterable[Finding]) -> Report:
        """Write summary.json, findings.json, junit.xml and report.html, then scrub the folder."""
        from cluster_tool.report import write_report

        items = list(findings)
        report = Report.from_findings(items)
        data = dict(summary)
        data.setdefault("version", RECORD_VERSION)
        data.setdefault("run_id", self.run_id)
        data["finished"] = _now()
        data.setdefault("verdict", report.status)
        self.write_json(SUMMARY, data)
        self.write_json(FINDINGS, report.to_json())
        write_report(self.path)
        self.scrub()
        return report

    def scrub(self) -> list[Path]:
        """Replace every known secret in every file of the run (ansible-runner artifacts too);
        returns the files that held one."""
        touched: list[Path] = []
        if not self.secrets.values:
            return touched
        for path in _files(self.path):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            clean = self.secrets.redact_bytes(data)
            if clean != data:
                path.write_bytes(clean)
                touched.append(path)
        return touched


def _files(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


def find_runs(runs_dir: Path, command: str | None = None) -> list[RunRecord]:
    """The runs under `runs_dir`, oldest first (names sort by time), optionally of one command."""
    if not runs_dir.is_dir():
        return []
    found: list[RunRecord] = []
    for path in sorted(p for p in runs_dir.iterdir() if (p / "inputs.json").is_file()):
        record = RunRecord(path)
        if command is None or record.inputs().get("command") == command:
            found.append(record)
    return found


def elapsed_since(started: float) -> float:
    return round(time.monotonic() - started, 2)
