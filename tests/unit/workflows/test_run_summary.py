"""summary.json as a typed RunSummary: the keys every reader of a run record knows (report,
history, --retry-failed, people's scripts) stay exactly what the commands wrote before, and the
report of a finishing run is rendered from the findings in hand, not read back from the disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding
from cluster_tool.workflows.runs import RunRecord, RunSummary

# The keys of summary.json as `run_summary` + `RunRecord.finish` wrote them for bringup and
# validate-after before RunSummary (commands/workflows.py at 9171318): the contract's fields plus
# admitted_unproven; a re-image's summary also says whether it stopped.
KEYS = {
    "command", "run_id", "started", "inputs", "phases", "nodes", "checks", "skipped", "links",
    "busbw", "verdict", "headline", "exit_code", "admitted_unproven", "version", "finished",
}  # fmt: skip

SWAP = Finding(
    check="fabric.swapped",
    node="gpu002",
    component="mlx5_0,mlx5_1",
    expected="mlx5_0 on su1-leaf-r0 port 2, mlx5_1 on su1-leaf-r1 port 2",
    observed="mlx5_0 on su1-leaf-r1 port 2, mlx5_1 on su1-leaf-r0 port 2",
    message="gpu002: mlx5_0 and mlx5_1 are swapped",
)


def _summary(command: str, record: RunRecord, stopped: str | None = None) -> RunSummary:
    return RunSummary(
        command=command,
        run_id=record.run_id,
        started="2026-12-01T19:00:00+00:00",
        inputs={"spec": "examples/lab.yml", "nodes": "gpu[001-002]"},
        phases=[{"name": "fabric", "status": "failed", "elapsed_s": 1.5, "detail": "1 error(s)"}],
        nodes={
            "gpu001": {"verdict": "pass", "reason": None, "slurm": "idle"},
            "gpu002": {"verdict": "fail", "reason": "fabric.swapped", "slurm": "idle+drain"},
        },
        checks={"gpu001": ["nccl.single"], "fabric": ["fabric.swapped"]},
        skipped={"gpu002": {"nccl.single": "the node was not gated in this run"}},
        links=[{"node": "gpu002", "rail": 0, "hca": "mlx5_0", "state": "swapped", "detail": ""}],
        busbw=[],
        verdict="fail",
        headline="FAIL · 1 error(s); fail: gpu002",
        exit_code=1,
        stopped=stopped,
    )


def _written(record: RunRecord) -> dict[str, object]:
    data = json.loads((record.path / "summary.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("command", ["bringup", "validate-after"])
def test_summary_json_keeps_the_keys_readers_know(tmp_path: Path, command: str) -> None:
    record = RunRecord.create(tmp_path, command, {})
    summary = _summary(command, record)
    record.finish(summary, [SWAP])
    written = _written(record)
    assert set(written) == KEYS
    assert written["nodes"] == summary.nodes and written["exit_code"] == 1
    assert written["finished"], "finish stamps the time the run ended"
    # Read back, it is the same summary as the one in hand (what --json prints).
    assert RunSummary.from_json(written).to_json() == summary.to_json() == written


def test_a_reimage_summary_also_says_why_it_stopped(tmp_path: Path) -> None:
    record = RunRecord.create(tmp_path, "reimage", {})
    why = "stopped before batch 2: 1 failed node(s) > --max-fail 0"
    record.finish(_summary("reimage", record, stopped=why), [SWAP])
    written = _written(record)
    assert set(written) == KEYS | {"stopped"}
    assert written["stopped"] == why


def test_the_report_is_rendered_from_the_findings_in_hand_not_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reading_back(run_dir: Path) -> object:
        raise AssertionError(f"{run_dir}: a finishing run read its own record back")

    monkeypatch.setattr("cluster_tool.report.load_run", no_reading_back)
    record = RunRecord.create(tmp_path, "bringup", {})
    record.finish(_summary("bringup", record), [SWAP])
    page = (record.path / "report.html").read_text(encoding="utf-8")
    assert "gpu002: mlx5_0 and mlx5_1 are swapped" in page
    junit = (record.path / "junit.xml").read_text(encoding="utf-8")
    assert "fabric.swapped" in junit and "<failure" in junit


def test_a_secret_in_a_finding_never_reaches_the_report(tmp_path: Path) -> None:
    from cluster_tool.redact import Secrets

    record = RunRecord.create(tmp_path, "bringup", {}, Secrets({'bmc-"Pa55"'}))
    leak = SWAP.model_copy(update={"message": 'gpu002: login with bmc-"Pa55" refused'})
    record.finish(_summary("bringup", record), [leak])
    for name in ("report.html", "junit.xml", "findings.json"):
        text = (record.path / name).read_text(encoding="utf-8")
        assert "Pa55" not in text, name


def test_a_summary_from_elsewhere_that_is_not_a_summary_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"unreadable summary\.json"):
        RunSummary.from_json({"nodes": ["gpu001"]})


def test_the_validate_after_job_returns_what_its_record_holds_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster_tool.context import Reach
    from cluster_tool.remote import fanout
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.collect import run_validate
    from cluster_tool.workflows.jobs import ValidateAfterJob, run_validate_after
    from tests.conftest import REPO
    from tests.unit.workflows.test_proof import Unreachable

    lab = REPO / "examples" / "lab.yml"
    cluster = load_spec(lab)
    down = run_validate(cluster, health=True, fabric=True, transport=Unreachable(), dcgm=False)
    fanout.save_capture(tmp_path / "cap", down.results)
    capsys.readouterr()
    job = ValidateAfterJob(
        lab, Reach(None, None, None, None, None), nodes="gpu001", gate=False,
        replay=tmp_path / "cap", dcgm=False, runs_dir=tmp_path / "runs",
    )  # fmt: skip
    outcome = run_validate_after(cluster, job)
    assert capsys.readouterr() == ("", ""), "library code never prints"
    assert outcome.exit_code == 3  # the capture says the hosts were unreachable
    written = _written(outcome.record)
    assert written["exit_code"] == 3 and written["verdict"] == outcome.summary.verdict
    nodes = written["nodes"]
    assert isinstance(nodes, dict) and list(nodes) == ["gpu001"]
    assert outcome.report.is_file() and "gpu001" in outcome.report.read_text(encoding="utf-8")
