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
import re
import secrets as _random
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster_tool.errors import UsageError
from cluster_tool.fileio import (
    PRIVATE_DIR,
    PRIVATE_FILE,
    atomic_write,
    load_json,
    private_dir,
    read_input_bytes,
    read_input_text,
)
from cluster_tool.findings import Finding, Report
from cluster_tool.redact import REDACTED, Secrets

if TYPE_CHECKING:
    from cluster_tool.spec import Cluster

__all__ = [
    "REDACTED",
    "RunRecord",
    "RunSummary",
    "Secrets",
    "cluster_secrets",
    "find_runs",
    "known_secrets",
    "last_failed",
    "run_secrets",
]

SUMMARY = "summary.json"
FINDINGS = "findings.json"
JOURNAL = "journal.jsonl"
JUNIT = "junit.xml"
REPORT = "report.html"
RECORD_VERSION = 1


def default_runs_dir() -> Path:
    """`$CLUSTER_TOOL_RUNS_DIR`, else `runs/` under the working directory."""
    return Path(os.environ.get("CLUSTER_TOOL_RUNS_DIR") or "runs")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def known_secrets(
    environ: Mapping[str, str] | None = None, munge_key_file: Path | None = None
) -> Secrets:
    """Secrets the tool can know of without asking: the slurmdbd password and BMC password from
    the environment (by the names the roles and the spec use) and the munge key on disk."""
    found = Secrets.from_environ(os.environ if environ is None else environ)
    if munge_key_file is not None:
        # Not generated yet, or not readable by this user: nothing to hide then.
        with contextlib.suppress(OSError):
            found.add(munge_key_file.read_text(encoding="utf-8", errors="replace"))
    return found


# `lookup('env', 'NAME')` / `lookup('ansible.builtin.env', "NAME")` in an ansible_vars value.
_ENV_LOOKUP = re.compile(
    r"""lookup\(\s*['"](?:ansible\.builtin\.)?env['"]\s*,\s*['"]([^'"]+)['"]"""
)


def cluster_secrets(
    cluster: Cluster,
    environ: Mapping[str, str] | None = None,
    secret_dirs: Iterable[Path] | None = None,
) -> Secrets:
    """Every secret a run on this cluster could meet, all in one registry: passwords and keys
    in the environment (`known_secrets`), the BMC user name and password wherever the spec
    points, the munge key where the slurm role keeps it (`<dir>/<slurm_cluster_name>/munge.key`
    for each of `secret_dirs`, default `~/.cluster-tool/secrets`, or the `slurm_munge_key_file`
    given), and every value `ansible_vars` holds under a secret name (`is_secret_name`), or the
    environment variable such a value looks up."""
    env = os.environ if environ is None else environ
    found = known_secrets(env)
    # The password, not the user name: a BMC login is `admin` or `root`, words a run record
    # holds in paths and messages, and it opens nothing without the password.
    password = cluster.bmc.credentials.password
    if password.env:
        found.add(env.get(password.env))
    named = Secrets()
    named.add_named(cluster.ansible_vars)
    for value in named.values:
        found.update(_looked_up(value, env) if "{{" in value else Secrets({value}))
    dirs = [Path.home() / ".cluster-tool" / "secrets"] if secret_dirs is None else secret_dirs
    key_files = [folder / cluster.slurm_cluster_name / "munge.key" for folder in dirs]
    given = cluster.ansible_vars.get("slurm_munge_key_file")
    if isinstance(given, str) and "{{" not in given:
        key_files.append(Path(given))
    for key_file in key_files:
        # Not generated yet, or not readable by this user: nothing to hide then.
        with contextlib.suppress(OSError, UnicodeDecodeError):
            found.add(key_file.read_text(encoding="utf-8"))
    return found


def _looked_up(template: str, env: Mapping[str, str]) -> Secrets:
    looked = Secrets()
    for name in _ENV_LOOKUP.findall(template):
        looked.add(env.get(name))
    return looked


def run_secrets(cluster: Cluster) -> Secrets:
    """Every secret a run on `cluster` could meet (`cluster_secrets`), the munge key looked for
    where the slurm role keeps it: ~/.cluster-tool/secrets/<slurm_cluster_name>/ or the
    repository's runs/secrets/."""
    # The checkout's runs/secrets (ansible.runner's REPO_ROOT, without loading ansible-runner
    # for every command that shows a finding).
    repo_root = Path(__file__).resolve().parents[2]
    dirs = [Path.home() / ".cluster-tool" / "secrets", repo_root / "runs" / "secrets"]
    return cluster_secrets(cluster, secret_dirs=dirs)


@dataclass
class RunSummary:
    """summary.json of a run: what it was asked (`inputs`), its phases, the verdict per node, the
    run's verdict (from cluster_tool.verdicts: the exit code, this file, the CLI's last line and
    the report's headline all read it), the checks planned per JUnit suite and those that did
    not run and why, the link matrix and the busbw rows for the report. `to_json` writes the
    keys every reader of a record (report, history, --retry-failed) knows."""

    command: str
    run_id: str
    started: str | None
    inputs: dict[str, Any]
    phases: list[dict[str, Any]]
    nodes: dict[str, dict[str, Any]]
    checks: dict[str, list[str]]
    skipped: dict[str, dict[str, str]]
    links: list[dict[str, Any]]
    busbw: list[dict[str, Any]]
    verdict: str
    headline: str
    exit_code: int
    admitted_unproven: list[str] = field(default_factory=list)
    # A re-image's only: why it stopped before its last batch (None: it did not).
    stopped: str | None = None
    version: int = RECORD_VERSION
    finished: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "command": self.command,
            "run_id": self.run_id,
            "started": self.started,
            "inputs": self.inputs,
            "phases": self.phases,
            "nodes": self.nodes,
            "checks": self.checks,
            "skipped": self.skipped,
            "links": self.links,
            "busbw": self.busbw,
            "verdict": self.verdict,
            "headline": self.headline,
            "exit_code": self.exit_code,
            "admitted_unproven": self.admitted_unproven,
            "version": self.version,
            "finished": self.finished,
        }
        if self.command == "reimage":
            data["stopped"] = self.stopped
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        """A summary.json read back; a record from elsewhere that lacks a field gets its empty
        value, and one whose fields are not what the tool writes is a UsageError."""
        try:
            return cls(
                command=str(data.get("command") or ""),
                run_id=str(data.get("run_id") or ""),
                started=data.get("started"),
                inputs=dict(data.get("inputs") or {}),
                phases=[dict(p) for p in data.get("phases") or []],
                nodes={str(n): dict(v) for n, v in (data.get("nodes") or {}).items()},
                checks={str(k): list(v) for k, v in (data.get("checks") or {}).items()},
                skipped={str(k): dict(v) for k, v in (data.get("skipped") or {}).items()},
                links=[dict(x) for x in data.get("links") or []],
                busbw=[dict(x) for x in data.get("busbw") or []],
                verdict=str(data.get("verdict") or "fail"),
                headline=str(data.get("headline") or ""),
                exit_code=int(data.get("exit_code", 1)),
                admitted_unproven=[str(n) for n in data.get("admitted_unproven") or []],
                stopped=data.get("stopped"),
                version=int(data.get("version", RECORD_VERSION)),
                finished=data.get("finished"),
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise UsageError(f"unreadable summary.json: {type(exc).__name__}: {exc}") from None


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
        private_dir(runs_dir)
        path.mkdir(exist_ok=False, mode=PRIVATE_DIR)
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
        """The run's inputs.json; a record from elsewhere that is not JSON is a UsageError."""
        path = self.path / "inputs.json"
        data = load_json(read_input_bytes(path), f"{path}: not a run record")
        return data if isinstance(data, dict) else {}

    # --- writing -------------------------------------------------------------------------

    def write_text(self, rel: str, text: str) -> Path:
        """Write a file inside the run (secrets replaced), atomically: a reader never sees half,
        and only the owner may read it (a record holds site data)."""
        target = self.path / rel
        private_dir(target.parent)
        return atomic_write(target, self.secrets.redact(text), mode=PRIVATE_FILE)

    def read_json(self, rel: str) -> Any:
        """A JSON file of the record (`write_json`'s); OSError when absent, ValueError when it
        is not JSON."""
        return json.loads(read_input_text(self.path / rel))

    def write_json(self, rel: str, data: Any) -> Path:
        """Write JSON with the secrets replaced in the values, before encoding: a secret holding
        a quote, a backslash or a non-ASCII letter is escaped in the file and still caught."""
        self._write_json(rel, data)
        return self.path / rel

    def _write_json(self, rel: str, data: Any) -> Any:
        # Through JSON once first, so any object (dates, paths) is a plain string to redact.
        plain = json.loads(json.dumps(data, default=str))
        clean = self.secrets.redact_value(plain)
        target = self.path / rel
        private_dir(target.parent)
        text = json.dumps(clean, indent=2, sort_keys=True) + "\n"
        atomic_write(target, text, mode=PRIVATE_FILE)
        return clean  # what the file holds, as plain JSON values

    def raw_dir(self) -> Path:
        """Where raw captured outputs go (fan-out captures, gate job outputs)."""
        return private_dir(self.path / "raw")

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
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path / JOURNAL, flags, PRIVATE_FILE)
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
        for line in read_input_text(path).splitlines():
            try:
                data = load_json(line, path)
            except UsageError:
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

    def finish(
        self, summary: RunSummary | Mapping[str, Any], findings: Iterable[Finding]
    ) -> Report:
        """Write summary.json, findings.json, junit.xml and report.html, then scrub the folder.
        The report is rendered from what the two JSON files hold (secrets replaced), not from
        reading them back."""
        from cluster_tool.report import write_rendered

        items = list(findings)
        report = Report.from_findings(items)
        finished = _now()
        if isinstance(summary, RunSummary):
            summary.finished = finished  # the summary in hand says what the file says
        data = summary.to_json() if isinstance(summary, RunSummary) else dict(summary)
        data.setdefault("version", RECORD_VERSION)
        data.setdefault("run_id", self.run_id)
        data["finished"] = finished
        data.setdefault("verdict", report.status)
        clean_summary = self._write_json(SUMMARY, data)
        clean_findings = self._write_json(FINDINGS, report.to_json())
        write_rendered(self.path, clean_summary, clean_findings["findings"])
        self.scrub()
        return report

    def scrub(self) -> list[Path]:
        """Replace every known secret in every file of the run (ansible-runner artifacts too),
        in any encoding, each file rewritten beside itself and renamed over (a kill or a full disk
        leaves the old file whole); returns the files that held one."""
        touched: list[Path] = []
        if not self.secrets.values:
            return touched
        for path in _files(self.path):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            clean = self.secrets.redact_file_content(path, data)
            if clean != data:
                atomic_write(path, clean, mode=PRIVATE_FILE)
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


# A journal step name as the tool writes it (`converge`, `gate`, `ladder`): shown to the operator
# only when it is one, since an earlier record is read as data.
_STEP_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,39}$")


def last_failed(runs_dir: Path, spec: Path) -> list[str]:
    """Hosts that did not pass in the last bringup of this spec (`--retry-failed`): GPU nodes
    whose verdict is not pass, and any other host an error finding names (a head that failed to
    converge). UsageError when there is no such run, when nothing in it failed, and when the
    last one has no summary (it crashed, was killed or still runs): its failures are unknown,
    and an older run's are not the ones to retry."""
    wanted = str(spec.resolve())
    mine = [r for r in find_runs(runs_dir, "bringup") if r.inputs().get("spec") == wanted]
    if not mine:
        raise UsageError(f"--retry-failed: no earlier bringup of {spec} under {runs_dir}")
    # The newest by when it started; the folder name (seconds, a random suffix) breaks ties.
    record = max(mine, key=lambda r: (str(r.inputs().get("started") or ""), r.run_id))
    path = record.path / SUMMARY
    if not path.is_file():
        entries = record.journal()
        last = entries[-1] if entries else None
        reached = (
            f"; its journal ends at `{last.step} {last.status}`"
            if last is not None
            and all(isinstance(w, str) and _STEP_NAME.match(w) for w in (last.step, last.status))
            else ""
        )
        raise UsageError(
            f"--retry-failed: the last bringup of {spec} ({record.run_id}) has no summary "
            f"(crashed, killed, or still running){reached}, so which hosts failed is unknown; "
            "run `bringup` again, or name the hosts with --limit"
        )
    try:
        data = load_json(read_input_bytes(path), f"{path}: not a run summary")
        summary = RunSummary.from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UsageError(f"--retry-failed: {path}: not a run summary: {exc}") from None
    failed = [n for n, v in summary.nodes.items() if v.get("verdict") != "pass"]
    findings_path = record.path / FINDINGS
    if findings_path.is_file():
        # An earlier run's record: read as data, as any record from elsewhere.
        findings = load_json(read_input_bytes(findings_path), findings_path)
        findings = findings.get("findings", []) if isinstance(findings, dict) else []
        failed += [
            str(f["node"])
            for f in findings
            if f.get("severity") == "error" and f.get("node") and f["node"] not in failed
        ]
    if not failed:
        raise UsageError(f"--retry-failed: nothing failed in the last bringup ({record.run_id})")
    return list(dict.fromkeys(failed))
