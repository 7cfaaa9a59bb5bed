"""Nodes judged against their own history on the emulated cluster: validate-after records each
run's gate busbw under every node's hardware identity (the simulated GPUs' serials, the HCAs'
GUIDs) in the runs folder's history store; after a healthy run, gpu004 slowed to 0.93x (above
the gate's floor: the gate passes it) is `history.regression` against its own history, and no
other node is named. The baseline is the lab's own earlier real run, the session's bring-up (its
record copied and recorded as validate-after records a run); the spec asks for one earlier run
(`thresholds.history.min_runs: 1`): the lab's busbw does not vary from run to run."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_tool.history import judge_and_record
from cluster_tool.spec.thresholds import HistoryThresholds
from tests.lab.conftest import Converged


def history_spec(c: Converged) -> Path:
    """The lab's spec with all_reduce alone (a shorter gate; the bring-up's all_reduce steps are
    the baseline) and one earlier run enough for a baseline."""
    spec = c.gate_root / "lab-history.yml"
    data = yaml.safe_load(c.lab.spec.read_text())
    data.setdefault("nccl", {}).setdefault("tests", {})["collectives"] = ["all_reduce"]
    data.setdefault("thresholds", {})["history"] = {"min_runs": 1}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def validate(
    c: Converged, spec: Path, runs: Path, name: str
) -> tuple[int, list[dict[str, Any]], str, float]:
    started = time.monotonic()
    rc, summary, err = c.run_json(
        "validate-after", str(spec), "--nodes", "gpu[001-004]", "--no-dcgm",
        "--runs-dir", str(runs), "--ssh-config", str(c.lab.ssh_config), "--slurm-via", "head",
        "--gate-workdir", str(c.gate_root / f"history-{name}"),
    )  # fmt: skip
    assert summary.get("run_dir"), err[-3000:]
    findings = json.loads((Path(summary["run_dir"]) / "findings.json").read_text())["findings"]
    return rc, findings, err, time.monotonic() - started


def seed_from_bringup(c: Converged, runs: Path) -> None:
    """The session's bring-up, a real run of the lab's gate on these nodes, as the first run of
    this test's history: its summary and health captures copied into `runs`, then recorded
    through the same call validate-after makes (saves a whole validate-after, about 50 s)."""
    record = Path(c.bringup["run_dir"])
    seeded = runs / record.name
    seeded.mkdir(parents=True)
    shutil.copy2(record / "summary.json", seeded / "summary.json")
    for capture in (record / "raw").iterdir():
        if (capture / "manifest.json").is_file():
            shutil.copytree(capture, seeded / "raw" / capture.name)
    summary = json.loads((seeded / "summary.json").read_text())
    assert judge_and_record(seeded, summary, HistoryThresholds(min_runs=1)) == []


@pytest.mark.converged
def test_a_node_at_0_93x_is_a_regression_against_its_own_history_and_no_other_node_is(
    converged: Converged, tmp_path: Path
) -> None:
    c = converged
    spec = history_spec(c)
    runs = tmp_path / "runs"
    seed_from_bringup(c, runs)
    fault = c.inject("slow-node", "gpu004", "0.93")
    try:
        rc, findings, err, slow_s = validate(c, spec, runs, "slow")
    finally:
        c.heal(fault)
    # Above the fleet floor: the gate admits it (a fleet-relative straggler is a warning).
    assert rc == 0, ([f for f in findings if f["severity"] == "error"], err[-3000:])
    regressions = [f for f in findings if f["check"] == "history.regression"]
    assert [(f["node"], f["severity"]) for f in regressions] == [("gpu004", "warning")], findings
    assert "(0.93x)" in regressions[0]["observed"], regressions
    rc, trend, err = c.run_json("history", "gpu004", "--runs-dir", str(runs))
    assert rc == 0, err
    single = next(s for s in trend["series"] if s["key"] == "single-nvls nvls-all_reduce")
    before, after = (p["value"] for p in single["points"])
    assert round(after / before, 2) == 0.93
    # The healthy nodes' own figures held: the same as at bring-up.
    rc, trend, err = c.run_json("history", "gpu001", "--runs-dir", str(runs))
    assert rc == 0, err
    single = next(s for s in trend["series"] if s["key"] == "single-nvls nvls-all_reduce")
    first, second = (p["value"] for p in single["points"])
    assert first == second
    print(f"validate-after with gpu004 at 0.93x: {slow_s:.0f} s")
