"""A training run survives its cluster, in the converged lab, through real Slurm (issue 34).

The job is `cluster-tool plan --sbatch`'s script for the lab, submitted as written; its trainer
is the lab's Megatron-LM stand-in (cluster_lab/data/pretrain_standin.py: 8 ranks per node in
lockstep over TCP, a checkpoint part per rank every SAVE_INTERVAL iterations, resume from the
tracker, save and stop on SIGTERM). Checkpoints go to each node's own /var/tmp first and the
script's helpers sync them to the lab's shared folder, `.complete` last.

The job is a 2-node layout (TP 8 x DP 2) on the lab's four GPU nodes, so that a requeue has
somewhere to go: one node drained by the watcher, one held by a job that did not opt in, two
left for the requeued run.

1. Link flap to resume: a sleep job without the watcher's marker (but `--requeue`, so only the
   marker keeps the watcher off it) on gpu003; the training job on two of the others. Once it
   has a complete checkpoint, `lab inject link-flap` on the training job's first node (its batch
   host and rank 0) and on gpu003. Watch cycles under `--policy requeue`: both nodes drained
   with `link.flap` and the cable named, the training job's batch step gets SIGUSR1, the job
   saves, completes that checkpoint, requeues itself; the watcher releases Slurm's begin-time
   hold; the job runs on the two nodes left and resumes at the iteration it stopped at. The
   sleep job is never signalled (a SIGUSR1 would end it) nor requeued.
2. Killed during a checkpoint write: a fresh run is killed (SIGKILL, every step and the batch
   shell) while a checkpoint is being written to the shared folder (flagged `.saved`, not yet
   `.complete`); resubmitted as is, it sets the torn folder aside and resumes from the previous
   complete checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import Converged

SAVE_INTERVAL = 5  # iterations between checkpoints; the stand-in takes ~1 s per iteration
HCA, BYSTANDER = "mlx5_0", "gpu003"
STANDIN = REPO / "cluster_lab" / "data" / "pretrain_standin.py"


def _spec(converged: Converged, dest: Path) -> Path:
    shared = converged.gate_root
    data = yaml.safe_load(converged.lab.spec.read_text())
    data["training"] = {
        "checkpoint_dir": f"{shared}/checkpoints",
        "local_checkpoint_dir": "/var/tmp/checkpoints",  # each node's own root
        "reports_dir": f"{shared}/jobs",
        "save_interval": SAVE_INTERVAL,
        "signal_lead_s": 60,
        "time_limit": "00:30:00",
        "trainer": f"{shared}/standin/pretrain_gpt.py",
    }
    data["watch"] = {
        "policy": "requeue",
        "max_drained_share": 0.5,  # the flapping node and the bystander's
        "checkpoint_grace_s": 60,
        "requeue_marker": "watch-requeue",
    }
    spec = dest / "lab-training.yml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    trainer = shared / "standin" / "pretrain_gpt.py"
    trainer.parent.mkdir(exist_ok=True)
    shutil.copyfile(STANDIN, trainer)
    return spec


def _plan(converged: Converged, spec: Path, run: str) -> Path:
    """The plan's job for a 2-node layout, in a folder of the shared one (its output lands
    there too)."""
    folder = converged.gate_root / f"train-{run}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(converged.gate_root / "checkpoints" / run, ignore_errors=True)
    folder.mkdir()
    out = converged.run(
        "plan", "--spec", str(spec), "--model", "llama3-8b", "--layout", "8,1,1,2",
        "--run-name", run, "--sbatch", str(folder / "job.sbatch"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return folder


def _submit(converged: Converged, folder: Path, nodelist: str = "") -> str:
    """The plan's script submitted as it is; `nodelist` (a hostlist squeue printed) pins the job
    on the command line, the script unchanged."""
    pin = f"--nodelist='{nodelist}' " if nodelist else ""
    out = converged.lab.ssh("head", f"cd {folder} && sbatch --parsable {pin}job.sbatch")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def _job(converged: Converged, job: str) -> tuple[str, str, str]:
    """(state, node list, reason) of a job, from squeue; ('', '', '') once it has left."""
    out = converged.lab.ssh("head", f"squeue -h -j {job} -o '%T|%N|%r'")
    state, nodes, reason = [*out.stdout.strip().split("|"), "", "", ""][:3]
    return state, nodes, reason


def _nodes(converged: Converged, hostlist: str) -> list[str]:
    out = converged.lab.ssh("head", f"scontrol show hostnames '{hostlist}'")
    return out.stdout.split()


def _log(folder: Path, job: str) -> str:
    path = folder / f"{folder.name.removeprefix('train-')}-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _numbers(text: str, event: str) -> list[int]:
    return [int(n) for n in re.findall(rf"^{event} (\d+)$", text, re.M)]


def _complete(ckpt: Path) -> list[int]:
    """The iterations of the run's complete checkpoints on the shared folder."""
    return sorted(int(p.parent.name[5:]) for p in ckpt.glob("iter_*/.complete"))


def _writing(ckpt: Path, after: int) -> int | None:
    """A checkpoint newer than `after` being written to the shared folder: flagged by rank 0's
    helper (`.saved`), not yet complete."""
    for flag in ckpt.glob("iter_*/.saved"):
        iteration = int(flag.parent.name[5:])
        if iteration > after and not (flag.parent / ".complete").exists():
            return iteration
    return None


def _wait(what: str, probe: Any, timeout: float, step: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := probe()):
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(step)
    return got


def _cycle(converged: Converged, spec: Path, state: Path, took: list[float]) -> dict[str, Any]:
    start = time.monotonic()
    rc, out, err = converged.run_json(
        "watch", "--spec", str(spec), "--once", "--policy", "requeue", "--state-dir", str(state),
        timeout=300,
    )  # fmt: skip
    took.append(round(time.monotonic() - start, 1))
    assert rc in (0, 1) and out.get("policy") == "requeue", (rc, err[-3000:])
    return out


def _cable(converged: Converged, node: str) -> tuple[str, int]:
    from cluster_lab import model as hw

    model = hw.load(converged.lab.config.model_dir)  # type: ignore[attr-defined]
    cable = next(h for h in model.node(node).hcas if h.device == HCA)
    return cable.leaf, cable.leaf_port


@pytest.mark.converged
def test_a_flapping_link_drains_its_node_and_the_run_resumes_elsewhere_from_its_checkpoint(
    converged: Converged, tmp_path: Path
) -> None:
    lab, took = converged.lab, list[float]()
    spec, state = _spec(converged, tmp_path), tmp_path / "watch-state"
    folder = _plan(converged, spec, "flap")
    ckpt = converged.gate_root / "checkpoints" / "flap"
    bystander = lab.ssh(
        "head",
        f"sbatch --parsable --requeue -N1 -w {BYSTANDER} -o /dev/null --wrap 'sleep 900'",
    )
    assert bystander.returncode == 0, bystander.stderr
    other = bystander.stdout.strip().split(";")[0]
    job = _submit(converged, folder)
    faults: list[str] = []
    flapped = ""
    try:
        state_nodes = _wait("both jobs running", lambda: (
            _job(converged, other)[0] == "RUNNING"
            and (j := _job(converged, job))[0] == "RUNNING" and j
        ), 60)  # fmt: skip
        first = _nodes(converged, state_nodes[1])
        assert len(first) == 2 and BYSTANDER not in first, first
        flapped = first[0]  # the batch host and rank 0's node
        _wait("a complete checkpoint", lambda: _complete(ckpt), 90)

        started = time.monotonic()
        faults = [
            converged.inject("link-flap", flapped, HCA, "3"),
            converged.inject("link-flap", BYSTANDER, HCA, "3"),
        ]
        baseline = _cycle(converged, spec, state, took)
        assert baseline["actions"] == [], baseline["actions"]
        # Within a few cycles (each node's flaps are its own, a cycle may see one before the
        # other): both drained, the training job signalled.
        expected = {("drain", flapped, None), ("drain", BYSTANDER, None), ("signal", flapped, job)}
        acting: list[dict[str, Any]] = []
        for _ in range(4):
            time.sleep(3.5)  # at least one more flap
            out = _cycle(converged, spec, state, took)
            acting += out["actions"]
            actions = {(a["action"], a["node"], a["job_id"]) for a in acting}
            if any(a["action"] == "signal" for a in out["actions"]):
                complete_before = max(_complete(ckpt))
            if expected <= actions:
                break
        shown = [(f["check"], f["node"], f["message"][:160]) for f in out["findings"]]
        assert sorted(actions) == sorted(expected), (actions, shown)
        states = converged.sinfo()
        for node in (flapped, BYSTANDER):
            leaf, port = _cable(converged, node)
            node_state, reason = states[node]
            assert node_state in ("drained", "draining"), (node, node_state, reason)
            assert reason.startswith(f"cluster-tool watch: link.flap {HCA}: "), reason
            assert leaf in reason and str(port) in reason, (leaf, port, reason)

        # The job saves, completes that checkpoint, requeues itself and leaves; the watcher
        # releases Slurm's hold once it is PENDING for BeginTime; it runs on the two nodes left.
        every: list[dict[str, Any]] = [*baseline["actions"], *acting]
        for _ in range(20):
            time.sleep(2)
            out = _cycle(converged, spec, state, took)
            every += out["actions"]
            released = any(a["action"] == "release" for a in every)
            if released and _job(converged, job)[0] == "RUNNING":
                break
        kinds = [(a["action"], a["job_id"]) for a in every]
        assert ("release", job) in kinds, every
        assert all(a["job_id"] != other for a in every), every
        # Requeued by itself once its checkpoint completed (`checkpointed`), or by the watcher on
        # reading that checkpoint's report first (`requeue`): either way after that checkpoint.
        answered = [a for a in every if a["action"] in ("checkpointed", "requeue")]
        assert len(answered) == 1 and 0 < answered[0]["grace_s"] <= 60, answered

        again, nodes, _ = _job(converged, job)
        assert again == "RUNNING", (again, nodes)
        assert sorted(_nodes(converged, nodes)) == sorted(
            n for n in lab.node_names if n.startswith("gpu") and n not in (flapped, BYSTANDER)
        ), nodes
        log = _wait(
            "the run to resume",
            lambda: "resumed from checkpoint" in (t := _log(folder, job)) and t, 60,
        )  # fmt: skip
        cycle_s = time.monotonic() - started
        stopped = _numbers(log, "stopped on SIGTERM at iteration")
        resumed = _numbers(log, "resumed from checkpoint iteration")
        assert len(stopped) == 1 and len(resumed) == 1, log[-3000:]
        assert (ckpt / f"iter_{stopped[0]:07d}" / ".complete").exists()
        assert f"checkpoint iteration {stopped[0]}" in answered[0]["detail"], answered
        assert resumed[0] >= complete_before, (resumed, complete_before)
        assert stopped[0] - resumed[0] <= SAVE_INTERVAL, (stopped, resumed)
        # The run goes on from there on its new nodes (a rank missing its part would have
        # failed the step: every rank reads its own).
        _wait(
            "two iterations past the resume",
            lambda: max(_numbers(_log(folder, job), "iteration")) >= resumed[0] + 2, 30,
        )  # fmt: skip
        shown_job = lab.ssh("head", f"scontrol show job {job}").stdout
        assert "Restarts=1" in shown_job, shown_job
        # The job that did not opt in: untouched on its drained node.
        assert _job(converged, other)[:2] == ("RUNNING", BYSTANDER), _job(converged, other)
        shown_other = lab.ssh("head", f"scontrol show job {other}").stdout
        assert "Restarts=0" in shown_other, shown_other
        print(
            f"link flap to resumed run: {cycle_s:.0f} s (stopped at {stopped[0]}, resumed at "
            f"{resumed[0]}, last complete before the signal {complete_before}); "
            f"watch cycles {took} s"
        )
    finally:
        lab.ssh("head", f"scancel {job} {other}")
        converged.heal(*faults)
        time.sleep(1.5)  # the agent's last tick
        for node in {flapped, BYSTANDER} - {""}:
            leaf, port = _cable(converged, node)
            for end, number in ((f"{node} {HCA}", 1), (leaf, port)):
                lab.ibsim(f'PerformanceSet "{end}"[{number}] PortCounters.LinkDownedCounter=0')
            lab.ssh("head", f"scontrol update nodename={node} state=resume")


@pytest.mark.converged
def test_a_run_killed_while_writing_a_checkpoint_resumes_from_the_previous_complete_one(
    converged: Converged, tmp_path: Path
) -> None:
    lab = converged.lab
    spec = _spec(converged, tmp_path)
    folder = _plan(converged, spec, "torn")
    ckpt = converged.gate_root / "checkpoints" / "torn"
    first = _submit(converged, folder)
    second = ""
    try:
        _, hostlist, _ = _wait("the run to start", lambda: (
            (j := _job(converged, first))[0] == "RUNNING" and j
        ), 60)  # fmt: skip
        nodes = _nodes(converged, hostlist)
        previous = max(_wait("a complete checkpoint", lambda: _complete(ckpt), 90))
        # The next one, being written to the shared folder: flagged, not complete.
        torn = _wait("the next checkpoint's write", lambda: _writing(ckpt, previous), 30, 0.05)
        # SIGKILL to every process of the job on its nodes (the ranks, the sync helpers, the
        # batch shell), by the ids slurmd lists: `scancel --signal=KILL` is Slurm's cancel (its
        # steps get SIGTERM first, and the trainer would save, as it cannot when a node dies).
        for node in nodes:
            killed = lab.ssh(
                node,
                f"kill -KILL $(scontrol listpids {first} | awk 'NR > 1 {{ print $1 }}')",
            )
            assert killed.returncode == 0, (node, killed.stderr)
        _wait("the killed run to end", lambda: _job(converged, first)[0] in ("", "FAILED"), 60)
        assert max(_complete(ckpt)) == previous, (_complete(ckpt), "the kill came too late")
        # Resubmitted onto the same nodes once they are idle again, so that it finds the killed
        # run's parts in their scratch. Pinned: first fit is not enough, since a node an earlier
        # test drained can come back in between (CI: the first run got gpu[002,004], and the
        # second, unpinned, gpu[001-002]).
        _wait("the nodes idle", lambda: all(converged.sinfo()[n][0] == "idle" for n in nodes), 60)
        second = _submit(converged, folder, hostlist)
        log = _wait(
            "the resubmitted run to resume",
            lambda: "resumed from checkpoint" in (t := _log(folder, second)) and t, 90,
        )  # fmt: skip
        assert f"resuming from complete checkpoint iteration {previous}" in log, log[-3000:]
        assert _nodes(converged, _job(converged, second)[1]) == nodes, _job(converged, second)
        assert _numbers(log, "resumed from checkpoint iteration") == [previous], log[-3000:]
        aside = [p for p in ckpt.iterdir() if p.name.startswith(f"torn-iter_{torn:07d}-")]
        assert len(aside) == 1 and not (aside[0] / ".complete").exists(), list(ckpt.iterdir())
        # The resumed run writes that iteration again; what completes from then on is its own,
        # never the killed run's parts left in the nodes' scratch.
        _wait("the iteration written again", lambda: torn in _complete(ckpt), 60)
        for it in _complete(ckpt):
            parts = (ckpt / f"iter_{it:07d}").glob("rank_*.json")
            jobs = {json.loads(p.read_text())["job"] for p in parts}
            assert jobs == ({first} if it <= previous else {second}), (it, jobs, first, second)
        print(f"killed while writing iteration {torn}; resumed from {previous}")
    finally:
        lab.ssh("head", f"scancel {first} {second}")
