"""The three workflows end to end on the emulated cluster, through real Slurm (on the head), the
real gate (its jobs in the lab's shared folder) and the sushy-tools Redfish emulators.

The session's one bring-up from bare nodes (`converged` in conftest.py) is the first workflow
under test; the tests below run in file order after it, as an operator would: a second bring-up
that must change nothing and name a cable swap, a dry run, a rolling re-image beside running
jobs, kill -9 + --resume, a node that never comes back, validate after maintenance, and no
secret in any run record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser import open_in_chromium
from tests.lab.conftest import CLI, Converged

pytestmark = pytest.mark.converged

GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")
# The daemons a no-change converge must leave running as they were (host, process name).
DAEMONS = (
    ("head", "slurmctld"),
    ("head", "slurmdbd"),
    ("head", "munged"),
    *((node, "slurmd") for node in GPU_NODES),
    *((node, "munged") for node in GPU_NODES),
)


def bringup(c: Converged, *extra: str) -> tuple[int, dict[str, Any], str]:
    return c.run_json(
        "bringup", str(c.lab.spec), *c.common(),
        "--gate-workdir", str(c.gate_root / f"bringup-{time.monotonic_ns()}"), *extra,
    )  # fmt: skip


def reimage_args(c: Converged, *extra: str) -> list[str]:
    """Re-image with its gate on (the default): single + a pair with a known-good node."""
    return [
        "reimage", str(c.lab.spec), *c.common(),
        "--gate-workdir", str(c.gate_root / f"reimage-{time.monotonic_ns()}"),
        "--insecure-bmc", "--bmc-scheme", "http", "--ssh-timeout", "600", *extra,
    ]  # fmt: skip


def journal(summary: dict[str, Any]) -> list[dict[str, Any]]:
    text = (Path(summary["run_dir"]) / "journal.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def converge_stats(summary: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per-host counters of the run's site.yml, from the runner events in the run record."""
    for path in (Path(summary["run_dir"]) / "ansible").rglob("job_events/*.json"):
        event = json.loads(path.read_text())
        if event.get("event") == "playbook_on_stats":
            data = event["event_data"]
            keys = ("ok", "changed", "failures", "dark")
            hosts = set().union(*(data.get(k) or {} for k in keys))
            return {h: {k: (data.get(k) or {}).get(h, 0) for k in keys} for h in hosts}
    raise AssertionError(f"no playbook_on_stats event under {summary['run_dir']}")


def daemon_pids(c: Converged) -> dict[tuple[str, str], str]:
    pids = {}
    for host, name in DAEMONS:
        out = c.lab.ssh(host, f"pgrep -xo {name}")
        assert out.returncode == 0, f"{name} is not running on {host}"
        pids[(host, name)] = out.stdout.strip()
    return pids


def test_bringup_from_bare_nodes_ends_with_every_node_idle_and_a_passing_report(
    converged: Converged,
) -> None:
    summary = converged.bringup
    assert summary["verdict"] == "pass"
    phases = {p["name"]: p["status"] for p in summary["phases"]}
    assert phases["converge"] == "passed"
    assert phases["gate"] == "passed", summary["phases"]
    states = converged.sinfo()
    assert {n: states[n][0] for n in GPU_NODES} == dict.fromkeys(GPU_NODES, "idle")
    run_dir = Path(summary["run_dir"])
    for name in ("summary.json", "findings.json", "junit.xml", "report.html"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "ansible").rglob("job_events/*.json")), "runner events kept"
    assert list((run_dir / "raw").rglob("*.out")), "raw outputs kept"
    stats = converge_stats(summary)
    assert set(stats) >= {"head", *GPU_NODES}
    assert all(s["changed"] > 0 for h, s in stats.items() if h in GPU_NODES), "from bare nodes"
    # The report an operator opens: it loads without errors and says what the summary says.
    opened = open_in_chromium(run_dir / "report.html", Path(converged.runs))
    assert not opened.console_errors, opened.console_errors
    assert summary["headline"] in opened.dom
    assert all(node in opened.dom for node in GPU_NODES)


def test_slurm_sees_every_node_with_its_gpus_and_runs_a_job_on_all_four(
    converged: Converged,
) -> None:
    lab = converged.lab
    gres = lab.ssh("head", "sinfo -h -N -o '%N %G'")
    assert gres.returncode == 0, gres.stderr
    seen = dict(line.split(None, 1) for line in gres.stdout.splitlines())
    assert all(seen[n].startswith("gpu:") and ":8" in seen[n] for n in GPU_NODES), seen
    job = lab.ssh("head", "srun -N4 hostname", timeout=180)
    assert job.returncode == 0, job.stderr
    assert sorted(job.stdout.split()) == list(GPU_NODES)
    # The rendered nccl.conf is what the nccl role installed, byte for byte.
    rendered = (lab.inventory / "nccl.conf").read_text()
    for node in GPU_NODES:
        assert lab.ssh(node, "cat /etc/nccl.conf").stdout == rendered, node
        key = lab.ssh(node, "stat -c '%a %U' /etc/munge/munge.key").stdout.split()
        assert key == ["400", "munge"], (node, key)


def test_a_second_bringup_changes_nothing_restarts_nothing_and_names_a_cable_swap(
    converged: Converged,
) -> None:
    c = converged
    before = daemon_pids(c)
    fault = c.inject("cable-swap", "gpu002", "mlx5_0", "mlx5_3")
    try:
        rc, summary, err = bringup(c)
        assert rc == 1, err[-3000:]
        stats = converge_stats(summary)
        assert {h: s["changed"] for h, s in stats.items()} == dict.fromkeys(stats, 0)
        assert not any(s["failures"] or s["dark"] for s in stats.values()), stats
        assert daemon_pids(c) == before, "a no-change converge restarted a daemon"
        state, reason = c.sinfo()["gpu002"]
        assert state.startswith("drain"), (state, reason)
        assert "swapped" in reason
        findings = json.loads((Path(summary["run_dir"]) / "findings.json").read_text())
        assert any(
            f["check"] == "fabric.swapped" and f["node"] == "gpu002" for f in findings["findings"]
        )
        assert {n: c.sinfo()[n][0] for n in ("gpu001", "gpu003", "gpu004")} == dict.fromkeys(
            ("gpu001", "gpu003", "gpu004"), "idle"
        )
    finally:
        c.heal(fault)
    rc, summary, err = bringup(c, "--retry-failed")
    assert rc == 0, err[-3000:]
    assert summary["inputs"]["limit"] == "gpu002"
    assert c.sinfo()["gpu002"][0] == "idle"


def test_check_mode_on_the_converged_lab_reports_no_change_and_no_failure(
    converged: Converged,
) -> None:
    c = converged
    rc, summary, err = c.run_json("bringup", str(c.lab.spec), *c.common(), "--check")
    assert rc == 0, err[-3000:]
    stats = converge_stats(summary)
    assert set(stats) >= {"head", *GPU_NODES}
    assert {h: s["changed"] for h, s in stats.items()} == dict.fromkeys(stats, 0)
    assert not any(s["failures"] or s["dark"] for s in stats.values()), stats


def test_reimage_two_nodes_one_at_a_time_beside_running_jobs(converged: Converged) -> None:
    """gpu001 and gpu002 re-imaged (batch 1) while a long job runs on gpu004, which must
    survive, and a short one on gpu001, which the drain must wait for (never kill it)."""
    c, lab = converged, converged.lab
    for node in ("gpu001", "gpu002"):
        assert lab.ssh(node, "echo before > /root/reimage-marker").returncode == 0
    long_job = lab.ssh("head", "sbatch --parsable -w gpu004 -N1 --wrap 'sleep 1800'")
    short_job = lab.ssh("head", "sbatch --parsable -w gpu001 -N1 --wrap 'sleep 25'")
    assert long_job.returncode == 0 and short_job.returncode == 0, (long_job, short_job)
    long_id, short_id = (j.stdout.strip().split(";")[0] for j in (long_job, short_job))
    try:
        # Both running before the drain: a job still pending on gpu001 would simply run after
        # the re-image, and the drain would have nothing to wait for.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = lab.ssh("head", f"squeue -h -j {long_id},{short_id} -o %T").stdout.split()
            if states == ["RUNNING", "RUNNING"]:
                break
            time.sleep(1)
        assert states == ["RUNNING", "RUNNING"], states
        rc, summary, err = c.run_json(*reimage_args(c, "--nodes", "gpu[001-002]", "--batch", "1"))
        assert rc == 0, err[-3000:]
        # The gate on: each node passed its single job and a pair with a proven partner.
        run_dir = Path(summary["run_dir"])
        for node in ("gpu001", "gpu002"):
            assert summary["nodes"][node]["unproven"] == []
            rungs = {r["rung"] for r in summary["busbw"] if node in r["nodes"]}
            assert any(r.startswith("single") for r in rungs), rungs
            assert any(len(r["nodes"]) == 2 for r in summary["busbw"] if node in r["nodes"])
        assert summary["verdict"] == "pass" and summary["admitted_unproven"] == []
        assert (run_dir / "junit.xml").is_file() and (run_dir / "report.html").is_file()
        assert (run_dir / "summary.json").is_file()
        admits = [e for e in journal(summary) if e["step"] == "admit" and e["status"] == "done"]
        assert sorted(e["node"] for e in admits) == ["gpu001", "gpu002"], "admitted once each"
        squeue = lab.ssh("head", f"squeue -h -j {long_id} -o %T")
        assert squeue.stdout.strip() == "RUNNING", "the job on gpu004 survived"
        for node in ("gpu001", "gpu002"):
            assert lab.ssh(node, "test -e /root/reimage-marker").returncode == 1, "came back bare"
            assert c.sinfo()[node][0] == "idle"
            assert summary["nodes"][node]["verdict"] == "pass"
        entries = journal(summary)
        done = [(e["node"], e["step"]) for e in entries if e["status"] == "done" and e["node"]]
        assert done.index(("gpu001", "admit")) < done.index(("gpu002", "drain")), "one at a time"
        drain = next(
            e for e in entries if (e["node"], e["step"], e["status"]) == ("gpu001", "drain", "done")
        )
        waited = float(drain["detail"].split()[1])
        assert waited >= 10, f"the drain did not wait for job {short_id}: {drain}"
        state = lab.ssh("head", f"sacct -n -X -j {short_id} -o State").stdout.split()
        assert state == ["COMPLETED"], "the job on gpu001 ended on its own; nothing killed it"
    finally:
        lab.ssh("head", f"scancel {long_id}")


def test_sigkill_mid_batch_then_an_operators_drain_survives_the_resume(
    converged: Converged,
) -> None:
    """A re-image of gpu003 killed mid-batch (after its power-on); while it is dead an operator
    drains gpu003 for an RMA. The resumed run finishes the node without re-imaging it twice, and
    leaves it drained with the operator's reason (issue 30, items 1 and 2): the drain is newer
    than the run's proof, so only the operator lifts it."""
    c, rma = converged, "RMA: bad PSU (ticket 4411)"
    proc = subprocess.Popen(
        [*CLI, *reimage_args(c, "--nodes", "gpu003", "--no-gate", "--admit-unproven"), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=c.env(),
    )
    before = set(c.runs.glob("*/journal.jsonl"))
    deadline = time.monotonic() + 900
    path: Path | None = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = set(c.runs.glob("*/journal.jsonl")) - before
        path = next(iter(found), None)
        if path and any(
            (e.get("step"), e.get("status")) == ("power-on", "done")
            for e in (json.loads(ln) for ln in path.read_text().splitlines() if ln.strip())
        ):
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the re-image ended before it could be killed mid-batch"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert path is not None
    drained = c.lab.ssh("head", f"scontrol update nodename=gpu003 state=drain reason='{rma}'")
    assert drained.returncode == 0, drained.stderr
    try:
        rc, summary, err = c.run_json(*reimage_args(c, "--resume", path.parent.name))
        assert rc == 1, err[-3000:]
        entries = journal(summary)
        pxe = [e["node"] for e in entries if e["step"] == "pxe-override" and e["status"] == "done"]
        assert pxe == ["gpu003"], "the node PXE-booted exactly once"
        assert c.sinfo()["gpu003"] == ("drained", rma), c.sinfo()["gpu003"]
        assert summary["nodes"]["gpu003"]["admitted"] is False
        findings = json.loads((Path(summary["run_dir"]) / "findings.json").read_text())
        refused = [f for f in findings["findings"] if f["check"] == "admission.refused"]
        assert refused and rma in refused[0]["observed"], findings["findings"]
    finally:
        c.lab.ssh("head", "scontrol update nodename=gpu003 state=resume")  # the operator's word
    assert c.sinfo()["gpu003"][0] == "idle"


def test_a_node_that_never_comes_back_stays_drained_and_stops_the_run(
    converged: Converged,
) -> None:
    """gpu001's hardware dies (its BMC powers it on, nothing boots): it stays drained with the
    reason, counts toward --max-fail 0, and the run stops before gpu004's batch."""
    c, lab = converged, converged.lab
    # Nothing boots, so the SSH wait is spent whole: short, since its length proves nothing.
    fault = c.inject("node-down", "gpu001")
    try:
        rc, summary, err = c.run_json(
            "reimage", str(lab.spec), *c.common(), "--no-gate", "--insecure-bmc",
            "--bmc-scheme", "http", "--ssh-timeout", "15", "--drain-timeout", "30",
            "--nodes", "gpu[001,004]", "--batch", "1", "--max-fail", "0",
        )  # fmt: skip
        assert rc == 1, err[-3000:]
        state, reason = c.sinfo()["gpu001"]
        assert state.startswith(("drain", "down")), (state, reason)
        assert reason.startswith("cluster-tool"), reason
        assert summary["nodes"]["gpu001"]["verdict"] == "fail"
        assert summary["stopped"], summary.get("phases")
        touched = {e["node"] for e in journal(summary) if e["node"]}
        assert "gpu004" not in touched, "the run went on past --max-fail"
        assert c.sinfo()["gpu004"][0] == "idle"
    finally:
        c.heal(fault)
    # The hardware is repaired: validated after maintenance and admitted again.
    # Alone: a node in service is its pair's partner, so it can be proven and admitted.
    rc, summary, err = c.run_json(
        "validate-after", str(lab.spec), "--nodes", "gpu001", "--admit",
        "--ssh-config", str(lab.ssh_config), "--slurm-via", "head",
        "--gate-workdir", str(c.gate_root / "validate-after-gpu001"),
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    assert c.sinfo()["gpu001"][0] == "idle"


def test_validate_after_maintenance_on_a_leaf_checks_its_nodes_and_the_whole_fabric(
    converged: Converged,
) -> None:
    c = converged
    rc, summary, err = c.run_json(
        "validate-after", str(c.lab.spec), "--switch", "su1-leaf-r0",
        "--ssh-config", str(c.lab.ssh_config), "--slurm-via", "head",
        "--gate-workdir", str(c.gate_root / "validate-after"),
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    assert [p["name"] for p in summary["phases"]][:2] == ["fabric", "health"]
    # The lab's one SU: every node has an HCA on each rail's leaf.
    assert sorted(summary["nodes"]) == list(GPU_NODES)
    assert "fabric" in summary["checks"]


def test_no_secret_in_any_run_record(converged: Converged) -> None:
    # Generated by `lab up` into the lab's context: the slurmdbd password, the BMC credentials,
    # the UFM stand-in's credentials.
    secrets = list(converged.secrets().values())
    assert len(secrets) == 5, secrets
    # Where the slurm role generates the munge key (it is never in the repository).
    munge = Path.home() / ".cluster-tool" / "secrets" / "lab" / "munge.key"
    assert munge.is_file(), "bring-up generated no munge key where the slurm role keeps it"
    secrets.append(munge.read_text().strip())
    records = [p for p in converged.runs.rglob("*") if p.is_file()]
    assert len(records) > 100, "the converged tests left their run records here"
    for path in records:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a secret is in {path}"
