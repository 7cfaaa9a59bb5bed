"""Run records for the history tests, made the way a validation makes them: the health capture
written by the fan-out's own save_capture from real `nvidia-smi -q` and `ibstat` captures, and the
gate's busbw rows from the real gate (run_gate through RecordingRunner) over real nccl-tests
captures scaled per node (tests/unit/gate/fakes.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cluster_tool.gate.ladder import GateOptions, run_gate
from cluster_tool.gate.plan import NcclTestParams
from cluster_tool.gate.thresholds import GateProfile, Thresholds
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.slurm import SlurmCLI
from cluster_tool.workflows.common import RecordingRunner
from tests.conftest import read_real_output
from tests.unit.gate.fakes import SINGLE, FakeClock, ReplaySlurm, pair_output, scaled_output

NODES = ("gpu001", "gpu002", "gpu003", "gpu004")
SMI = "nvidia-smi-q_h100x8_driver535.161.08_full.txt"
IBSTAT = "ibstat_h100_8xcx7_ndr_ib_all_active.txt"
# The real capture's first GPU serial and first HCA node GUID (hand-read).
FIRST_SERIAL = "1650124031592"
FIRST_GUID = "0x58a2e10300a7820e"
THRESHOLDS = Thresholds(GateProfile(), min_fraction=0.85)


def node_probes(node: str, board: int = 0) -> dict[str, ProbeOutput]:
    """The real captures as `node` would answer them: every serial and GUID gets the node's
    number (and `board`, a swapped one) in its last digits, so four nodes are four identities."""
    tag = f"{NODES.index(node) + 1}{board}" if node in NODES else f"9{board}"
    smi = re.sub(r"(Serial Number\s+: )16501240", rf"\g<1>165012{tag}", read_real_output(SMI))
    ibstat = read_real_output(IBSTAT).replace("GUID: 0x58a2e10300a7", f"GUID: 0x58a2e103{tag}a7")
    return {"nvidia-smi-q": ProbeOutput(0, smi), "ibstat": ProbeOutput(0, ibstat)}


def gate_rows(factors: Mapping[str, float], workdir: Path) -> list[dict[str, Any]]:
    """The busbw rows of a real gate run (single + pairs, 3 screens) where each node moves data
    at its factor of the captures' speed (a job at the pace of its slowest node)."""

    def answer(name: str, nodes: tuple[str, ...], label: str) -> str | None:
        pace = min(factors.get(n, 1.0) for n in nodes)
        if len(nodes) == 1:
            return scaled_output(SINGLE, pace)
        return pair_output(pace, hosts=nodes[:2])

    clock = FakeClock()
    runner = RecordingRunner(
        slurm=SlurmCLI(run=ReplaySlurm(answer)),
        workdir=workdir,
        params=NcclTestParams(),
        gpus_per_node=8,
        poll_s=1,
        clock=clock,
        sleep=clock.sleep,
        thresholds=THRESHOLDS,
    )
    options = GateOptions(rungs=("single", "pairs"), screens=3)
    result = run_gate(list(factors), runner, THRESHOLDS, NcclTestParams(), options=options)
    assert result.report.status == "pass", result.report.findings  # above the fleet floor
    return runner.busbw


def write_run(
    runs_dir: Path,
    run_id: str,
    busbw: Sequence[dict[str, Any]],
    nodes: Sequence[str] = NODES,
    boards: Mapping[str, int] | None = None,
    replayed: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """A run folder as validate-after leaves it before its findings are written."""
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    results = {
        n: HostResult(n, node_probes(n, (boards or {}).get(n, 0)), probes=("nvidia-smi-q",))
        for n in nodes
    }
    save_capture(run_dir / "raw" / "02-health", results)
    summary = {
        "command": "validate-after",
        "run_id": run_id,
        "inputs": {"replayed_from": "capture" if replayed else None},
        "nodes": {n: {"verdict": "pass"} for n in nodes},
        "busbw": list(busbw),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir, summary
