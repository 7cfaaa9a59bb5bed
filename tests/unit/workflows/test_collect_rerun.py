"""A fabric tool killed by a signal is run once more (validate's collection): in the lab,
infiniband-diags' ibqueryerrors has died with SIGSEGV (exit 139) while ports changed state under
it, and a re-imaged node then stayed drained for `ib.counters-unread`. Stand-in tools on PATH
print the lab's fabric as ibnetdiscover does; ibqueryerrors crashes as told."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.remote.fanout import LocalTransport
from cluster_tool.spec import load_spec
from cluster_tool.workflows.collect import run_validate
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText

CLEAN = (
    "## Summary: 45 nodes checked, 0 bad nodes found\n"
    "##          110 ports checked, 0 ports have errors beyond threshold\n"
)


def _tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crashes: int) -> Path:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    fabric = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster), speed="HDR")
    fabric.model = "MQM8700"
    bin_dir, runs = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()
    (tmp_path / "fabric.txt").write_text(fabric.text())
    (tmp_path / "clean.txt").write_text(CLEAN)
    (bin_dir / "ibnetdiscover").write_text(f"#!/bin/sh\ncat {tmp_path}/fabric.txt\n")
    (bin_dir / "ibqueryerrors").write_text(
        "#!/bin/sh\n"
        f"echo run >> {runs}\n"
        f'if [ "$(wc -l < {runs})" -le {crashes} ]; then kill -SEGV $$; fi\n'
        f"cat {tmp_path}/clean.txt\n"
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return runs


def test_a_fabric_tool_that_crashed_once_is_run_again_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _tools(tmp_path, monkeypatch, crashes=1)
    cluster = load_spec(REPO / "examples" / "lab.yml")
    result = run_validate(cluster, transport=LocalTransport(), health=False, fabric=True)
    assert runs.read_text().count("run") == 2
    assert [f.check for f in result.report.findings if f.fails] == []


def test_a_fabric_tool_that_crashes_again_is_unread_after_one_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _tools(tmp_path, monkeypatch, crashes=5)
    cluster = load_spec(REPO / "examples" / "lab.yml")
    result = run_validate(cluster, transport=LocalTransport(), health=False, fabric=True)
    assert runs.read_text().count("run") == 2
    unread = [f for f in result.report.findings if f.check == "ib.counters-unread"]
    assert unread and "139" in (unread[0].message or ""), result.report.findings
