"""A failing run ends with why it failed on screen (issue 33): its first error findings folded by
id with their nodes as a hostlist, the nodes that did not pass folded by what they share, all
within one screen, and the report's path last. The case is the issue's own: 31 HGX nodes and a
head, whose converge stopped at the preflight because the slurmdbd password was not set; the
run used to end with one `unknown` line per node and the cause only in findings.json."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.ansible.runner import HostStats, PlaybookEvent, PlaybookResult
from cluster_tool.cli import main
from cluster_tool.workflows import burnin, jobs
from cluster_tool.workflows.bringup import Validation
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

SPEC = REPO / "examples" / "h100-1su.yml"
GPU = [f"gpu{i:03d}" for i in range(1, 32)]
TASK = "Check that the slurmdbd password is available (vault or CLUSTER_TOOL_SLURMDBD_PASSWORD)"
# The preflight play's fail_msg (playbooks/phases/preflight.yml) as ansible-runner hands it over.
SAID = (
    "preflight: slurmdbd runs on head01 but neither slurm_dbd_storage_pass (vault) nor "
    "CLUSTER_TOOL_SLURMDBD_PASSWORD holds a password of 12+ characters"
)


class PreflightFails(burnin.BurnInLive):
    """The converge as ansible-runner reports it when the preflight's assert fails: the play
    runs on localhost with any_errors_fatal, so localhost failed and no node got a task."""

    def converge(self, **_: Any) -> PlaybookResult:  # type: ignore[override]
        hosts = {"localhost": HostStats(ok=4, failed=1)}
        failed = PlaybookEvent("runner_on_failed", 7, host="localhost", task=TASK, message=SAID)
        return PlaybookResult("site.yml", "failed", 2, hosts, [failed])

    def validate(self, nodes: Sequence[str]) -> Validation:
        return Validation.of(nodes)  # the nodes themselves are healthy


@pytest.fixture
def preflight_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "connect", lambda *_: admin_slurm(SlurmCluster(GPU)))
    monkeypatch.setattr(burnin, "BurnInLive", PreflightFails)
    monkeypatch.setenv("LINES", "24")  # the screen the output must fit
    monkeypatch.setenv("COLUMNS", "100")


def test_the_cause_of_a_failed_bringup_is_on_screen_within_one_screen(
    tmp_path: Path, preflight_fails: None, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    # The tool's own preflight (tests/unit/workflows/test_preflight.py) would stop this run
    # before Ansible; this test is about what a converge's failure leaves on screen.
    args = ["bringup", str(SPEC), "--inventory", str(tmp_path), "--no-preflight"]
    code = main([*args, "--runs-dir", str(runs)])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert code == 1, (out, err)
    assert len(lines) <= 24, out
    # The cause, once, naming the host and the variable to set.
    cause = [line for line in lines if "CLUSTER_TOOL_SLURMDBD_PASSWORD holds a password" in line]
    assert len(cause) == 1, out
    assert cause[0].split()[:2] == ["ansible.converge", "localhost:"], cause
    # The 31 GPU nodes that were never judged: one line, their hostlist.
    unknown = [line for line in lines if line.startswith("gpu")]
    assert len(unknown) == 1, out
    assert unknown[0].startswith("gpu[001-031]: unknown: not proven: converge not passed"), out
    # The report's path last.
    (run,) = runs.glob("*-*")
    assert lines[-1].endswith(f"report: {run / 'report.html'}"), out


def test_many_different_errors_stop_at_a_screen_and_say_how_many_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class EveryHostItsOwnFault(PreflightFails):
        def converge(self, **_: Any) -> PlaybookResult:  # type: ignore[override]
            hosts = {n: HostStats(failed=1) for n in GPU}
            events = [
                PlaybookEvent("runner_on_failed", i, host=n, task=f"task {i}", message=f"fault {i}")
                for i, n in enumerate(GPU)
            ]
            return PlaybookResult("site.yml", "failed", 2, hosts, events)

    monkeypatch.setattr(jobs, "connect", lambda *_: admin_slurm(SlurmCluster(GPU)))
    monkeypatch.setattr(burnin, "BurnInLive", EveryHostItsOwnFault)
    monkeypatch.setenv("LINES", "24")
    args = ["bringup", str(SPEC), "--inventory", str(tmp_path), "--no-preflight"]
    code = main([*args, "--runs-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert len(lines) <= 24, lines
    assert any("gpu001: task 'task 0' failed: fault 0" in line for line in lines), lines
    more = [line for line in lines if "more in findings.json" in line]
    assert len(more) == 1, lines
    shown = sum("ansible.converge" in line for line in lines)
    assert more[0].strip() == f"... {31 - shown} more in findings.json"
    assert "report: " in lines[-1]
