"""`reimage --check` (issue 33): the batches, the partners and each node's drain and BMC
actions, with nothing changed: Slurm is only read (no drain, reservation, cancel or job), no
BMC is asked anything, no run record is written. Slurm is the workflow tests' fake, which
answers in Slurm's formats and records every command it is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.bmc import redfish
from cluster_tool.cli import main
from cluster_tool.workflows import jobs
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

LAB = str(REPO / "examples" / "lab.yml")
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
CHANGES = (["scontrol", "update"], ["scontrol", "create"], ["scontrol", "delete"])


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    cluster = SlurmCluster(NODES)
    cluster.jobs["4242"] = (NODES[1], 1000)  # a user's job on gpu002 (never ends here)
    cluster.drained[NODES[2]] = "RMA ticket 77"  # an operator's drain on gpu003
    monkeypatch.setattr(jobs, "connect", lambda *_: admin_slurm(cluster))

    def no_bmc(*_: Any, **__: Any) -> None:
        raise AssertionError("a dry run asked a BMC")

    for method in ("__init__", "power_state", "set_pxe_once", "power_off", "power_on"):
        monkeypatch.setattr(redfish.SushyBmc, method, no_bmc)
    monkeypatch.setenv("LAB_BMC_USERNAME", "admin")
    monkeypatch.setenv("LAB_BMC_PASSWORD", "a-lab-only-bmc-password")
    return cluster


def _check(tmp_path: Path, *extra: str) -> int:
    args = ["reimage", LAB, "--nodes", "gpu[002-003]", "--check", "--runs-dir", str(tmp_path)]
    return main([*args, "--insecure-bmc", "--bmc-scheme", "http", *extra])


def test_the_plan_is_printed_and_nothing_changes(
    tmp_path: Path, slurm: SlurmCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "batch 1: gpu002" and "batch 2: gpu003" in lines, out
    assert "wait for jobs 4242 (up to 3600 s, then skip the node, left as it was)" in out
    assert "drained now: 'RMA ticket 77'" in out
    assert "one-time PXE boot, power off, power on" in out
    assert lines[-2] == "partners (idle, in service, no job): gpu[001,004]"
    assert lines[-1] == "CHECK: nothing was changed"
    changes = [c for c in slurm.calls if c[:2] in CHANGES or c[0] in ("scancel", "sbatch")]
    assert changes == []
    assert slurm.drained == {"gpu003": "RMA ticket 77"} and slurm.reservations == {}
    assert not any(tmp_path.iterdir()), "a dry run writes no run record"


def test_the_plan_as_json(
    tmp_path: Path, slurm: SlurmCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path, "--json", "--force") == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["batches"] == [["gpu002"], ["gpu003"]]
    assert plan["partners"] == ["gpu001", "gpu004"]
    assert plan["jobs"] == {"gpu002": ["4242"]}
    assert set(plan["bmc"]) == {"gpu002", "gpu003"}
    assert all(url.startswith("http://") for url in plan["bmc"].values())
    assert plan["options"]["force"] is True


def test_check_does_not_resume_a_run(
    tmp_path: Path, slurm: SlurmCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path, "--resume", "20261203T000000Z-abcdef") == 2
    assert "cannot --resume" in capsys.readouterr().err
