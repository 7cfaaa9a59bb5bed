"""The three workflows end to end on the emulated cluster, through real Slurm (on the head) and
the sushy-tools Redfish emulators: bring-up from bare nodes, a cable swap named and drained,
a rolling re-image beside a running job, kill -9 + --resume, validate after maintenance, and no
secret in any run record.

The tests share one bring-up (module fixture) and run in file order, as an operator would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.lab.conftest import LabHandle

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]
BMC_PASSWORD = "lab-bmc-Planted-secret-7731"
DBD_PASSWORD = "lab-dbd-Planted-secret-4410"

# The lab has no filesystem shared between this machine and the nodes, which the gate's job
# outputs need (`--gate-workdir`); the workflows run health + fabric + admission here.
NO_GATE = "--no-gate"

# Each test converges the lab with site.yml (minutes each on two cores): run with
# `make lab-converged`, not in `make test` (see the marker's description in pyproject.toml).
pytestmark = pytest.mark.converged


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


def _env(lab: LabHandle, runs: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CLUSTER_TOOL_RUNS_DIR": str(runs),
            "CLUSTER_TOOL_LAB_DIR": str(lab.config.lab_dir),  # type: ignore[attr-defined]
            "LAB_BMC_USERNAME": "lab",
            "LAB_BMC_PASSWORD": BMC_PASSWORD,
            "CLUSTER_TOOL_SLURMDBD_PASSWORD": DBD_PASSWORD,
        }
    )
    return env


def _common(lab: LabHandle) -> list[str]:
    return [
        "--inventory", str(lab.inventory),
        "--ssh-config", str(lab.ssh_config),
        "--slurm-via", "head",
    ]  # fmt: skip


def cli(
    lab: LabHandle, runs: Path, *args: str, timeout: float = 3600
) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [*CLI, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=_env(lab, runs),
    )
    try:
        data = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr


def sinfo(lab: LabHandle) -> dict[str, tuple[str, str]]:
    out = lab.ssh("head", "sinfo -h -N -o '%N|%T|%E'")
    assert out.returncode == 0, out.stderr
    states: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        name, state, reason = [*line.split("|", 2), "", ""][:3]
        states.setdefault(name, (state, reason))
    return states


def lab_cli(lab: LabHandle, runs: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [*CLI, "lab", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(lab, runs),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


@pytest.fixture(scope="module")
def brought_up(lab: LabHandle, runs: Path) -> Iterator[tuple[LabHandle, dict[str, Any]]]:
    rc, summary, err = cli(lab, runs, "bringup", str(lab.spec), *_common(lab), NO_GATE)
    assert rc == 0, err[-3000:]
    yield lab, summary


def test_bringup_from_bare_nodes_ends_with_every_node_idle_and_a_passing_report(
    brought_up: tuple[LabHandle, dict[str, Any]],
) -> None:
    lab, summary = brought_up
    states = sinfo(lab)
    assert {n: states[n][0] for n in ("gpu001", "gpu002", "gpu003", "gpu004")} == dict.fromkeys(
        ("gpu001", "gpu002", "gpu003", "gpu004"), "idle"
    )
    assert summary["verdict"] == "pass"
    run_dir = Path(summary["run_dir"])
    for name in ("summary.json", "findings.json", "junit.xml", "report.html", "journal.jsonl"):
        if name == "journal.jsonl":
            continue  # bring-up's steps are the ansible events, under ansible/
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "ansible").rglob("job_events/*.json")), "runner events kept"
    assert list((run_dir / "raw").rglob("*.out")), "raw outputs kept"


def test_bringup_with_a_cable_swap_drains_that_node_names_the_swap_and_exits_1(
    brought_up: tuple[LabHandle, dict[str, Any]], runs: Path
) -> None:
    lab, _ = brought_up
    fault = lab_cli(lab, runs, "inject", "cable-swap", "gpu002", "mlx5_0", "mlx5_1")
    try:
        rc, summary, err = cli(lab, runs, "bringup", str(lab.spec), *_common(lab), NO_GATE)
        assert rc == 1, err[-2000:]
        state, reason = sinfo(lab)["gpu002"]
        assert state.startswith("drain"), (state, reason)
        assert "swapped" in reason
        findings = json.loads((Path(summary["run_dir"]) / "findings.json").read_text())
        assert any(
            f["check"] == "fabric.swapped" and f["node"] == "gpu002" for f in findings["findings"]
        )
        assert sinfo(lab)["gpu001"][0] == "idle"
    finally:
        lab_cli(lab, runs, "heal", str(fault.get("id", "--all")))
    rc, summary, err = cli(
        lab, runs, "bringup", str(lab.spec), *_common(lab), NO_GATE, "--retry-failed"
    )
    assert rc == 0, err[-2000:]
    assert summary["inputs"]["limit"] == "gpu002"
    assert sinfo(lab)["gpu002"][0] == "idle"


def _reimage_args(lab: LabHandle, *extra: str) -> list[str]:
    return [
        "reimage", str(lab.spec), *_common(lab), NO_GATE,
        "--insecure-bmc", "--bmc-scheme", "http", "--ssh-timeout", "600", *extra,
    ]  # fmt: skip


def test_reimage_two_nodes_one_at_a_time_while_a_job_runs_on_a_third(
    brought_up: tuple[LabHandle, dict[str, Any]], runs: Path
) -> None:
    lab, _ = brought_up
    for node in ("gpu001", "gpu002"):
        assert lab.ssh(node, "echo before > /root/reimage-marker").returncode == 0
    job = lab.ssh("head", "sbatch --parsable -w gpu004 -N1 --wrap 'sleep 900'")
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    try:
        rc, summary, err = cli(
            lab, runs, *_reimage_args(lab, "--nodes", "gpu[001-002]", "--batch", "1")
        )
        assert rc == 0, err[-3000:]
        squeue = lab.ssh("head", f"squeue -h -j {job_id} -o %T")
        assert squeue.stdout.strip() == "RUNNING", "the job on gpu004 survived"
        for node in ("gpu001", "gpu002"):
            assert lab.ssh(node, "test -e /root/reimage-marker").returncode == 1, "came back bare"
            assert sinfo(lab)[node][0] == "idle"
        journal = [
            json.loads(line)
            for line in (Path(summary["run_dir"]) / "journal.jsonl").read_text().splitlines()
        ]
        done = [(e["node"], e["step"]) for e in journal if e["status"] == "done" and e["node"]]
        assert done.index(("gpu001", "admit")) < done.index(("gpu002", "drain")), "one at a time"
    finally:
        lab.ssh("head", f"scancel {job_id}")


def test_a_drain_waits_for_the_job_on_a_target_node(
    brought_up: tuple[LabHandle, dict[str, Any]], runs: Path
) -> None:
    lab, _ = brought_up
    job = lab.ssh("head", "sbatch --parsable -w gpu003 -N1 --wrap 'sleep 45'")
    job_id = job.stdout.strip().split(";")[0]
    started = time.monotonic()
    rc, summary, err = cli(lab, runs, *_reimage_args(lab, "--nodes", "gpu003"))
    assert rc == 0, err[-3000:]
    journal = (Path(summary["run_dir"]) / "journal.jsonl").read_text()
    drain = next(
        json.loads(ln) for ln in journal.splitlines() if '"drain"' in ln and '"done"' in ln
    )
    waited = float(drain["detail"].split()[1])
    assert waited >= 20, f"the drain did not wait for job {job_id}: {drain}"
    assert time.monotonic() - started >= 30
    state = lab.ssh("head", f"sacct -n -X -j {job_id} -o State").stdout.split()
    assert state == ["COMPLETED"], "the job ended on its own; nothing killed it"


def test_sigkill_mid_batch_then_resume_finishes_without_reimaging_twice(
    brought_up: tuple[LabHandle, dict[str, Any]], runs: Path
) -> None:
    lab, _ = brought_up
    proc = subprocess.Popen(
        [*CLI, *_reimage_args(lab, "--nodes", "gpu[002-003]", "--batch", "1"), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(lab, runs),
    )
    deadline = time.monotonic() + 900
    journal: Path | None = None
    while time.monotonic() < deadline:
        found = sorted(runs.glob("*/journal.jsonl"), key=lambda p: p.stat().st_mtime)
        journal = found[-1] if found else None
        if journal and any(
            json.loads(ln).get("step") == "power-on" and json.loads(ln).get("status") == "done"
            for ln in journal.read_text().splitlines()
            if ln.strip()
        ):
            break
        time.sleep(1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert journal is not None
    run_id = journal.parent.name
    rc, summary, err = cli(lab, runs, *_reimage_args(lab, "--resume", run_id))
    assert rc == 0, err[-3000:]
    entries = [json.loads(ln) for ln in journal.read_text().splitlines() if ln.strip()]
    pxe = [e["node"] for e in entries if e["step"] == "pxe-override" and e["status"] == "done"]
    assert sorted(pxe) == ["gpu002", "gpu003"], "each node PXE-booted exactly once"
    assert summary["nodes"]["gpu002"]["verdict"] == "pass"


def test_validate_after_maintenance_on_a_leaf_checks_its_nodes_and_the_whole_fabric(
    brought_up: tuple[LabHandle, dict[str, Any]], runs: Path
) -> None:
    lab, _ = brought_up
    # `validate --after-maintenance` runs the same workflow; `validate-after` takes --no-gate.
    rc, summary, err = cli(
        lab, runs, "validate-after", str(lab.spec), "--switch", "su1-leaf-r0",
        "--ssh-config", str(lab.ssh_config), "--slurm-via", "head", NO_GATE,
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    assert [p["name"] for p in summary["phases"]][:2] == ["fabric", "health"]
    # The lab's one SU: every node has an HCA on each rail's leaf.
    assert sorted(summary["nodes"]) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert "fabric" in summary["checks"]


def test_no_secret_in_any_run_record(
    brought_up: tuple[LabHandle, dict[str, Any]], runs: Path
) -> None:
    secrets = [BMC_PASSWORD, DBD_PASSWORD]
    # Where the slurm role generates the munge key (it is never in the repository).
    munge = Path.home() / ".cluster-tool" / "secrets" / "lab" / "munge.key"
    assert munge.is_file(), "bring-up generated no munge key where the slurm role keeps it"
    secrets.append(munge.read_text().strip())
    for path in runs.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, f"a secret is in {path}"
