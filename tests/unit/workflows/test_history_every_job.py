"""History from every job (issue 20): a bring-up's run ends with its nodes' rows in the history
store beside the run records, keyed by their GPU serials, so a node's baseline starts at its
bring-up; a dry run (--check) records nothing. The edges are fakes: Slurm answers as the
workflow tests' fake does, the converge reports success, the health collection saves the real
8x H100 `nvidia-smi -q` capture (serials made per node) as a real collection would, and the
gate reports one single-node busbw per node."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.ansible.runner import HostStats, PlaybookResult
from cluster_tool.context import Reach
from cluster_tool.history import STORE_NAME
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.spec import load_spec
from cluster_tool.workflows import burnin, jobs, preflight
from cluster_tool.workflows.bringup import GateOutcome, Validation
from tests.conftest import REPO, read_real_output
from tests.unit.workflows.fakes import AnsweringTransport, SlurmCluster, admin_slurm, gate_proof

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
SPEC = REPO / "examples" / "lab.yml"


def _smi(node: str) -> str:
    """The real capture with serials of this node's own (a board is its serials)."""
    text = read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
    return re.sub(r"(Serial Number\s+: )\d+", lambda m: f"{m[1]}{node}{m.start()}", text)


class FakeEdges(burnin.BurnInLive):
    """The live edges with every machine replaced: what each job step would have recorded."""

    def converge(self, **_: Any) -> PlaybookResult:  # type: ignore[override]
        hosts = {h: HostStats(ok=5) for h in ["head", *NODES]}
        return PlaybookResult("site.yml", "successful", 0, hosts, [])

    def validate(self, nodes: Sequence[str]) -> Validation:
        results = {
            n: HostResult(n, {"nvidia-smi-q": ProbeOutput(0, _smi(n))}, probes=("nvidia-smi-q",))
            for n in nodes
        }
        save_capture(self.record.raw_dir() / "01-validate", results)
        return Validation.of(nodes)

    def gate(self, nodes: Sequence[str], rungs: tuple[str, ...] | None = None) -> GateOutcome:
        busbw = [
            {"rung": "single-nvls", "label": n, "nodes": [n], "points": [[1 << 30, 470.0]]}
            for n in nodes
        ]
        return GateOutcome([], busbw, gate_proof(nodes, []))


@pytest.fixture
def fake_edges(monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    slurm = SlurmCluster(NODES)
    monkeypatch.setattr(jobs, "connect", lambda *_: admin_slurm(slurm))
    monkeypatch.setattr(burnin, "BurnInLive", FakeEdges)
    # The preflight finds every host up and the slurmdbd password set.
    up = AnsweringTransport(runs={"head": "debian-12.txt"})  # as lab.yml says
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: up)
    monkeypatch.setenv("CLUSTER_TOOL_SLURMDBD_PASSWORD", "a-lab-only-password")
    return slurm


def _bringup(tmp_path: Path, **options: Any) -> jobs.RunOutcome:
    reach = Reach(tmp_path, None, None, tmp_path / "gate", None)
    job = jobs.BringupJob(spec=SPEC, reach=reach, runs_dir=tmp_path / "runs", **options)
    return jobs.run_bringup(load_spec(SPEC), job)


def _rows(store: Path) -> dict[str, Any]:
    with sqlite3.connect(store) as conn:
        return {
            "runs": conn.execute("SELECT run_id, command FROM runs").fetchall(),
            "nodes": sorted(n for (n,) in conn.execute("SELECT node FROM node_runs")),
            "busbw": conn.execute(
                "SELECT COUNT(*) FROM series WHERE metric = 'busbw_gbs'"
            ).fetchone()[0],
            "temperatures": conn.execute(
                "SELECT COUNT(*) FROM series WHERE metric = 'gpu_temp_c'"
            ).fetchone()[0],
        }


def test_a_bringup_ends_with_its_nodes_in_the_history_store(
    tmp_path: Path, fake_edges: SlurmCluster
) -> None:
    outcome = _bringup(tmp_path)
    assert outcome.exit_code == 0
    store = tmp_path / "runs" / STORE_NAME
    assert store.is_file()
    rows = _rows(store)
    assert rows["runs"] == [(outcome.record.run_id, "bringup")]
    assert rows["nodes"] == NODES
    assert rows["busbw"] == len(NODES)  # each node's single-node busbw
    assert rows["temperatures"] == 8 * len(NODES)  # each GPU's temperature at the probe


def test_a_dry_run_records_nothing(tmp_path: Path, fake_edges: SlurmCluster) -> None:
    _bringup(tmp_path, check=True)
    assert not (tmp_path / "runs" / STORE_NAME).exists()
