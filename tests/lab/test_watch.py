"""`cluster-tool watch` against the converged lab, through real Slurm (issue 22).

A sleep job that opted in to requeue (`--requeue`, the spec's marker in its comment) runs on all
four GPU nodes. `lab inject link-flap` takes gpu002's mlx5_0 down and back every 3 s (its
kernel log, its sysfs LinkDowned and ibsim's at both cable ends count the flaps);
`lab inject slow-node` runs gpu003's GPUs at half clock. One state dir, one cycle per call
(`watch --once --json`), the policy per call:

1. observe: the baseline.
2. observe: link.flap on gpu002, gpu003 the job's straggler, and two failing nodes out of four
   is past the spec's share (one node): watch.fleet; nothing drained. gpu002's own sysfs
   LinkDowned has climbed with ibsim's at both cable ends.
3. drain: the same two still failing: watch.fleet again, nothing drained.
4. slow-node healed; requeue: gpu002 drained with `cluster-tool watch: link.flap mlx5_0 ...`
   and the job requeued; it is back in the queue (PENDING for BeginTime, Restarts=1): Slurm
   holds a requeued batch job cred_expire + 1 s (121 s) after its previous run is cleaned up.
5. requeue again: the watcher releases that hold (StartTime=now) and the job runs again, on
   the three nodes left (gpu[001,003-004]).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.conftest import Converged

FLAPPING, HCA, SLOW = "gpu002", "mlx5_0", "gpu003"


def _watch_spec(converged: Converged, dest: Path) -> Path:
    data = yaml.safe_load(converged.lab.spec.read_text())
    data["watch"] = {
        "policy": "requeue",
        "max_drained_share": 0.25,  # one node of four
        "straggler_cycles": 2,
        "requeue_marker": "watch-requeue",
        # A sleep job writes no checkpoint: requeued at once, as this test was written (the
        # signal and its grace: tests/unit/watch/test_checkpoint_signal.py).
        "checkpoint_grace_s": 0,
    }
    spec = dest / "lab-watch.yml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _cycle(
    converged: Converged, spec: Path, state: Path, policy: str, took: list[float]
) -> dict[str, Any]:
    start = time.monotonic()
    rc, out, err = converged.run_json(
        "watch", "--spec", str(spec), "--once", "--policy", policy, "--state-dir", str(state),
        timeout=300,
    )  # fmt: skip
    took.append(round(time.monotonic() - start, 1))
    assert rc in (0, 1) and out.get("policy") == policy, (rc, err[-3000:])
    return out


def _named(out: dict[str, Any], check: str) -> list[tuple[str | None, str | None]]:
    return [(f["node"], f["component"]) for f in out["findings"] if f["check"] == check]


def _job(converged: Converged, job: str) -> tuple[str, str, str]:
    """(state, node list, reason) of a job, from squeue."""
    out = converged.lab.ssh("head", f"squeue -h -j {job} -o '%T|%N|%r'")
    state, nodes, reason = [*out.stdout.strip().split("|"), "", "", ""][:3]
    return state, nodes, reason


def _link_downed(converged: Converged, leaf: str, port: int) -> tuple[int, tuple[int, int], int]:
    """The flapping HCA's LinkDowned from its node's sysfs, then ibsim's at (the HCA, the leaf
    port) through ibqueryerrors on the head, then the node's again."""
    from cluster_tool.parsers.ibcounters import parse_ibqueryerrors

    path = f"/sys/class/infiniband/{HCA}/ports/1/counters/link_downed"

    def node() -> int:
        out = converged.lab.ssh(FLAPPING, f"cat {path}")
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    first = node()
    fabric = converged.lab.ssh("head", "ibqueryerrors", timeout=120)
    last = node()
    hca_end = leaf_end = 0
    for p in parse_ibqueryerrors(fabric.stdout).ports:
        downed = p.counters.get("LinkDownedCounter", 0)
        if (p.node_description, p.port) == (f"{FLAPPING} {HCA}", 1):
            hca_end = downed
        # ibsim's switches describe themselves as `MF0;NAME:MODEL/U1`
        elif p.port == port and f";{leaf}:" in f";{p.node_description}:":
            leaf_end = downed
    return first, (hca_end, leaf_end), last


def _leaf(converged: Converged) -> tuple[str, int]:
    from cluster_lab import model as hw

    model = hw.load(converged.lab.config.model_dir)  # type: ignore[attr-defined]
    cable = next(h for h in model.node(FLAPPING).hcas if h.device == HCA)
    return cable.leaf, cable.leaf_port


@pytest.mark.converged
def test_watch_drains_the_flapping_node_and_requeues_the_job_onto_the_others(
    converged: Converged, tmp_path: Path
) -> None:
    lab, took = converged.lab, list[float]()
    spec, state = _watch_spec(converged, tmp_path), tmp_path / "watch-state"
    leaf, port = _leaf(converged)
    submitted = lab.ssh(
        "head",
        "sbatch --parsable --requeue --comment watch-requeue --nodes 3-4 --wrap 'sleep 600'",
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    faults: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while _job(converged, job)[:2] != ("RUNNING", "gpu[001-004]"):
            assert time.monotonic() < deadline, _job(converged, job)
            time.sleep(1)
        slow = converged.inject("slow-node", SLOW, "0.5")
        faults = [converged.inject("link-flap", FLAPPING, HCA, "3"), slow]

        baseline = _cycle(converged, spec, state, "observe", took)
        assert _named(baseline, "link.flap") == [] and baseline["actions"] == [], baseline

        time.sleep(3.5)  # at least one more flap after the baseline
        observed = _cycle(converged, spec, state, "observe", took)
        shown = [(f["check"], f["node"], f["message"][:160]) for f in observed["findings"]]
        assert (FLAPPING, HCA) in _named(observed, "link.flap"), shown
        assert _named(observed, "watch.straggler") == [(SLOW, f"job {job}")], shown
        straggler = next(f for f in observed["findings"] if f["check"] == "watch.straggler")
        assert (
            "SM clock slowest GPU 990 MHz against the job's other nodes' median 1980 MHz"
            in (straggler["message"])
        ), straggler
        assert _named(observed, "watch.fleet") == [(None, None)], shown
        assert observed["actions"] == [] and observed["drained"] == [], observed
        assert converged.sinfo()[FLAPPING][0] not in ("drained", "draining"), converged.sinfo()
        # The node's own LinkDowned (sysfs) climbs with the flaps, as ibsim's does at both
        # cable ends: read the node, the fabric, the node again.
        first, ends, last = _link_downed(converged, leaf, port)
        assert first >= 2 and first <= ends[0] <= last and first <= ends[1] <= last, (
            first, ends, last,
        )  # fmt: skip

        time.sleep(3.5)
        acting = _cycle(converged, spec, state, "drain", took)
        shown = [(f["check"], f["node"], f["message"][:160]) for f in acting["findings"]]
        assert _named(acting, "watch.fleet") == [(None, None)], shown
        assert acting["actions"] == [] and acting["drained"] == [], acting

        converged.heal(slow)
        faults.remove(slow)
        time.sleep(3.5)
        requeued = _cycle(converged, spec, state, "requeue", took)
        shown = [(f["check"], f["node"], f["message"][:160]) for f in requeued["findings"]]
        actions = [(a["action"], a["node"], a["job_id"]) for a in requeued["actions"]]
        assert actions == [("drain", FLAPPING, None), ("requeue", FLAPPING, job)], (actions, shown)
        assert requeued["drained"] == [FLAPPING] and _named(requeued, "watch.fleet") == []
        node_state, reason = converged.sinfo()[FLAPPING]
        assert node_state in ("drained", "draining"), (node_state, reason)
        assert reason.startswith(f"cluster-tool watch: link.flap {HCA}: "), reason

        # Back in the queue, its restart counted: Slurm holds it (Reason=BeginTime) for
        # cred_expire + 1 s once its previous run's epilog is done on every node; the next
        # cycle releases that hold and the job runs again on the three nodes left.
        deadline = time.monotonic() + 20
        while (after := _job(converged, job)) != ("PENDING", "", "BeginTime"):
            assert time.monotonic() < deadline and after[0] in (
                "COMPLETING",
                "REQUEUED",
                "PENDING",
            ), after
            time.sleep(0.5)
        shown_job = lab.ssh("head", f"scontrol show job {job}").stdout
        assert "Restarts=1" in shown_job, shown_job
        released = _cycle(converged, spec, state, "requeue", took)
        actions = [(a["action"], a["job_id"], a["check"]) for a in released["actions"]]
        assert actions == [("release", job, "link.flap")], released["actions"]
        deadline = time.monotonic() + 20
        while (again := _job(converged, job))[0] != "RUNNING":
            log = lab.ssh(
                "head",
                f"scontrol show job {job}; (cat /var/log/slurm/slurmctld.log 2>/dev/null || "
                f"journalctl -u slurmctld --no-pager) | grep -i 'JobId={job}' | tail -8",
            )
            assert time.monotonic() < deadline and again[0] == "PENDING", (again, log.stdout)
            time.sleep(0.5)
        assert again[1] == "gpu[001,003-004]", again
        print(f"watch cycles took {took} s; the job runs again on {again[1]}")
    finally:
        lab.ssh("head", f"scancel {job}")
        converged.heal(*faults)
        time.sleep(1.5)  # the agent's last tick
        for end, number in ((f"{FLAPPING} {HCA}", 1), (leaf, port)):
            lab.ibsim(f'PerformanceSet "{end}"[{number}] PortCounters.LinkDownedCounter=0')
        lab.ssh("head", f"scontrol update nodename={FLAPPING} state=resume")
