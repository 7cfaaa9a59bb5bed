"""`bringup --retry-failed` reads the newest bringup of the spec, and only that one (issue 30,
item 9c). It skipped a run without a summary and retried an older run's failures: after a
bringup that crashed (or was killed, or still runs) the operator got last week's failed nodes
back as the limit, and the nodes the crashed run had left half-converged were not among them.
Now a newest run without its summary is exit 2 with the reason (and how far its journal got)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.workflows.runs import RunRecord, last_failed
from tests.conftest import REPO

SPEC = REPO / "examples" / "lab.yml"


def finished(runs: Path, started: str, verdicts: dict[str, str]) -> RunRecord:
    record = RunRecord.create(runs, "bringup", {"spec": str(SPEC.resolve())})
    _set_started(record, started)
    record.finish({"nodes": {n: {"verdict": v} for n, v in verdicts.items()}}, [])
    return record


def crashed(runs: Path, started: str) -> RunRecord:
    """A bringup killed during its converge: inputs and journal, no summary."""
    record = RunRecord.create(runs, "bringup", {"spec": str(SPEC.resolve())})
    _set_started(record, started)
    record.log("converge", "start")
    return record


def _set_started(record: RunRecord, started: str) -> None:
    path = record.path / "inputs.json"
    data = json.loads(path.read_text())
    data["started"] = started
    path.write_text(json.dumps(data))


def test_a_crashed_last_run_is_refused_not_an_older_runs_failures_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    finished(runs, "2026-11-20T08:00:00+00:00", {"gpu001": "pass", "gpu003": "fail"})
    last = crashed(runs, "2026-11-29T08:00:00+00:00")
    with pytest.raises(UsageError) as err:
        last_failed(runs, SPEC)
    assert last.run_id in str(err.value) and "has no summary" in str(err.value)
    assert "its journal ends at `converge start`" in str(err.value)
    code = main(["bringup", str(SPEC), "--retry-failed", "--runs-dir", str(runs)])
    assert code == 2
    err_text = capsys.readouterr().err
    assert "has no summary" in err_text and len(err_text.strip().splitlines()) == 1


def test_the_newest_finished_run_is_the_one_retried(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    crashed(runs, "2026-11-20T08:00:00+00:00")
    finished(runs, "2026-11-29T08:00:00+00:00", {"gpu002": "fail", "gpu004": "pass"})
    assert last_failed(runs, SPEC) == ["gpu002"]


def test_newest_is_by_start_not_by_folder_name(tmp_path: Path) -> None:
    # Two runs started in the same second sort by their random suffix; the start time decides.
    runs = tmp_path / "runs"
    older = finished(runs, "2026-11-29T08:00:00+00:00", {"gpu001": "fail"})
    newer = crashed(runs, "2026-11-29T09:00:00+00:00")
    os.rename(older.path, runs / "20261129T090000Z-ffffff")  # sorts last by name
    os.rename(newer.path, runs / "20261129T090000Z-000000")
    with pytest.raises(UsageError, match="20261129T090000Z-000000"):
        last_failed(runs, SPEC)


def test_a_hostile_journal_step_is_not_shown_and_a_broken_summary_is_exit_2(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    record = crashed(runs, "2026-11-29T08:00:00+00:00")
    with (record.path / "journal.jsonl").open("a") as journal:
        journal.write(json.dumps({"step": "\x1b]0;pwned\x07", "status": "done"}) + "\n")
    with pytest.raises(UsageError) as err:
        last_failed(runs, SPEC)
    assert "\x1b" not in str(err.value) and "journal ends" not in str(err.value)
    (record.path / "summary.json").write_text("{not json")
    with pytest.raises(UsageError, match="not a run summary"):
        last_failed(runs, SPEC)


def test_a_retry_of_a_finished_run_still_names_error_findings(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    record = RunRecord.create(runs, "bringup", {"spec": str(SPEC.resolve())})
    swap = Finding(check="fabric.swapped", node="gpu002", message="gpu002: mlx5_0/mlx5_3")
    record.finish({"nodes": {"gpu001": {"verdict": "pass"}}}, [swap])
    assert last_failed(runs, SPEC) == ["gpu002"]
