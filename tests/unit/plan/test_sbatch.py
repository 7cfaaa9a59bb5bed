"""`plan --sbatch`: the job for the example specs is valid bash, asks Slurm for what the layout
needs (nodes, GPUs, requeue, the signal ahead of the end, the container) and names every
Megatron-LM flag of the layout; run with Slurm's commands stood in, it resumes from the newest
complete checkpoint and sets a torn newer one aside."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from cluster_tool.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _plan(capsys: pytest.CaptureFixture[str], spec: str, model: str, tmp: Path) -> tuple[dict, str]:
    script = tmp / "job.sbatch"
    args = ["plan", "--spec", str(EXAMPLES / spec), "--model", model]
    assert main([*args, "--sbatch", str(script), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    return doc, script.read_text(encoding="utf-8")


def _array(text: str, name: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{name}=("))
    return shlex.split(line[len(name) + 2 : -1])


@pytest.mark.parametrize(
    ("spec", "model", "save_interval", "image"),
    [
        ("h100-1su.yml", "llama3-70b", "500", "nvcr.io#nvidia/pytorch:24.05-py3"),
        ("h200-4su.yml", "llama3-405b", "250", "nvcr.io#nvidia/nemo:24.07"),
    ],
)
def test_the_example_specs_give_a_valid_job_with_every_flag_of_the_layout(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    spec: str,
    model: str,
    save_interval: str,
    image: str,
) -> None:
    doc, text = _plan(capsys, spec, model, tmp_path)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)
    lay = doc["layouts"][0]
    nodes = lay["placement"]["nodes"]
    directives = {ln for ln in text.splitlines() if ln.startswith("#SBATCH ")}
    assert {
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --comment=watch-requeue",
    } <= directives
    args = _array(text, "MEGATRON_ARGS")
    pairs = dict(zip(args, [*args[1:], ""], strict=True))
    # The layout's own numbers, from the plan's JSON (not from the flag list itself).
    assert pairs["--tensor-model-parallel-size"] == str(lay["tp"])
    assert pairs["--pipeline-model-parallel-size"] == str(lay["pp"])
    assert pairs["--context-parallel-size"] == str(lay["cp"])
    assert pairs["--micro-batch-size"] == str(lay["micro_batch"])
    assert pairs["--num-layers"] == str(doc["model"]["layers"])
    for flag in doc["launch"]["megatron_args"]:
        words = shlex.split(flag)
        at = args.index(words[0])
        assert args[at : at + len(words)] == words, flag
    # Checkpoints: saved to scratch, loaded from the shared filesystem, on the spec's interval.
    assert '--save "$LOCAL" --load "$CKPT" --save-interval "$SAVE_INTERVAL"' in text
    assert f"SAVE_INTERVAL={save_interval}" in text
    assert "--exit-signal-handler" in text
    assert f"--container-image={image}" in text
    assert "export NCCL_IB_HCA==mlx5_0,mlx5_3," in text
    assert _array(text, "PLACEMENT") == lay["placement"]["hostfile"]


def test_sbatch_without_a_spec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--nodes", "4", "--model", "llama3-8b", "--sbatch", "/tmp/never"])
    assert rc == 2
    assert "--sbatch needs --spec" in capsys.readouterr().err
    assert not Path("/tmp/never").exists()


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_job_resumes_from_the_newest_complete_checkpoint_never_a_torn_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, text = _plan(capsys, "h100-1su.yml", "llama3-8b", tmp_path)
    shared, scratch = tmp_path / "shared", tmp_path / "scratch"
    text = text.replace("CKPT_ROOT=/shared/checkpoints", f"CKPT_ROOT={shared}/checkpoints")
    text = text.replace("LOCAL_ROOT=/scratch/checkpoints", f"LOCAL_ROOT={scratch}/checkpoints")
    text = text.replace("REPORTS_ROOT=/shared/cluster-tool/jobs", f"REPORTS_ROOT={shared}/jobs")
    (tmp_path / "job.sbatch").write_text(text, encoding="utf-8")
    run = shared / "checkpoints" / "llama3-8b"
    (run / "iter_0000500").mkdir(parents=True)
    (run / "iter_0000500" / ".complete").touch()
    (run / "iter_0001000").mkdir()  # killed mid-write: parts, no marker
    (run / "iter_0001000" / ".synced.gpu001").touch()
    (run / "latest_checkpointed_iteration.txt").write_text("1000\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "scontrol", "echo gpu002; echo gpu001\n")
    # The trainer's srun records how it was launched; the sync helpers' srun does nothing.
    _stub(
        bin_dir,
        "srun",
        'case "$1" in --overlap) '
        f'echo "$@" "hostfile=${{SLURM_HOSTFILE:-}}" > {tmp_path}/helper.args; exit 0;; esac\n'
        # (the trainer's lasts a moment: the job ends its helpers once it has ended)
        f'echo "$@" "hostfile=${{SLURM_HOSTFILE:-}}" > {tmp_path}/srun.args; sleep 0.5\n',
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu[001-002]",
        "SLURM_NTASKS_PER_NODE": "8",
    }
    out = subprocess.run(
        ["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "resuming from complete checkpoint iteration 500" in out.stdout
    assert (run / "latest_checkpointed_iteration.txt").read_text().strip() == "500"
    assert not (run / "iter_0001000").exists()
    assert any(p.name.startswith("torn-iter_0001000") for p in run.iterdir())
    launched = (tmp_path / "srun.args").read_text()
    assert f"--load {run}" in launched and f"--save {scratch}/checkpoints/llama3-8b" in launched
    hostfile = (shared / "jobs" / "77" / "hostfile").read_text().split()
    assert hostfile[:1] == ["gpu001"] and len(hostfile) == 16  # the placement's order, 8 per node
    # A host without a container has python3 and no `python` (Ubuntu 22.04 without
    # python-is-python3: the lab's nodes); NGC's containers have both.
    assert " python3 /opt/megatron-lm/pretrain_gpt.py " in launched, launched
    # One sync helper per node: the step inherits the job's 16 tasks (SLURM_NTASKS) unless it
    # says how many, and real srun then ignores --ntasks-per-node=1 (8 helpers per node).
    helper = (tmp_path / "helper.args").read_text().split()
    assert "--ntasks=2" in helper and "--ntasks-per-node=1" in helper, helper
    # The rank order is the trainer's step's alone: srun reads SLURM_HOSTFILE for any step, and
    # the helpers' took its first two lines, both rank 0's node (the lab's first run: gpu002's
    # part never synced, no checkpoint ever completed).
    assert helper[-1] == "hostfile=", helper
    assert launched.split()[-1] == f"hostfile={shared}/jobs/77/hostfile", launched


def _started(local: Path, gone: Path | None = None) -> None:
    """Wait until a helper has started: it has cleared what an earlier run left in its scratch
    (`gone`) and made the folder again. Never a fixed sleep: a loaded machine starts bash late,
    and the helper would clear what the test wrote after the sleep."""
    deadline = time.monotonic() + 20
    while not local.is_dir() or (gone is not None and gone.exists()):
        assert time.monotonic() < deadline, "the helper never started"
        time.sleep(0.05)


@pytest.mark.parametrize("scratch", [True, False], ids=["scratch", "no-scratch"])
def test_the_sync_helper_completes_a_checkpoint_with_and_without_local_scratch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scratch: bool
) -> None:
    """The per-node sync helper on a one-node job whose rank 0 saves iteration 500: the part is
    on the shared filesystem and `.complete` written, named by Slurm's node name
    (SLURMD_NODENAME), also when the trainer saves to the shared folder itself (no scratch:
    copying a folder onto itself failed and no checkpoint ever completed). What an earlier run
    left in the node's scratch (iteration 400 and its tracker) is never synced: in the lab a
    resubmitted run's helper completed a checkpoint of the run before it."""
    _, text = _plan(capsys, "h100-1su.yml", "llama3-8b", tmp_path)
    helper = text.split("<<'HELPER'\n", 1)[1].split("\nHELPER\n", 1)[0]
    ckpt = tmp_path / "shared"
    local = tmp_path / "scratch" if scratch else ckpt
    report = tmp_path / "report"
    report.mkdir()

    def save(it: int) -> None:
        (local / f"iter_{it:07d}").mkdir(parents=True)
        (local / f"iter_{it:07d}" / "model.pt").write_text(f"weights {it}")
        (local / "latest_checkpointed_iteration.txt").write_text(f"{it}\n")

    if scratch:
        save(400)  # an earlier run's, on the node before this run's helper starts
    env = {**os.environ, "SLURMD_NODENAME": "gpu001"}
    args = ["gpu001", "1", str(ckpt), str(local), str(report)]
    run = subprocess.Popen(["bash", "-c", helper, "_", *args], env=env)
    done = ckpt / "iter_0000500"
    try:  # it loops (a pass every 5 s) until the job ends
        _started(local, gone=local / "iter_0000400" if scratch else None)
        save(500)
        written = int((local / "latest_checkpointed_iteration.txt").stat().st_mtime)
        deadline = time.monotonic() + 15
        # `.complete`, then the report (moved into place): the helper is stopped after both.
        while time.monotonic() < deadline and not (
            (done / ".complete").exists() and (report / "checkpoint").exists()
        ):
            time.sleep(0.1)
    finally:
        run.kill()
        run.wait()
    assert not (ckpt / "iter_0000400").exists()
    assert (done / ".complete").is_file() and (done / "model.pt").read_text() == "weights 500"
    reported = json.loads((report / "checkpoint").read_text())
    assert reported["iteration"] == 500
    # When the trainer wrote it (its tracker's time): the watcher tells a checkpoint saved on
    # its signal from a periodic one saved before it and completed after.
    assert reported["saved_at"] == written, reported


def test_every_nodes_helper_deletes_its_parts_of_checkpoints_older_than_a_complete_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Not only rank 0's node: gpu002's helper, once iteration 500 is complete on the shared
    filesystem, deletes its part of 400 from its scratch (before, only rank 0's node did and
    every other node's scratch filled, one checkpoint part per save interval)."""
    _, text = _plan(capsys, "h100-1su.yml", "llama3-8b", tmp_path)
    helper = text.split("<<'HELPER'\n", 1)[1].split("\nHELPER\n", 1)[0]
    ckpt, local, report = tmp_path / "shared", tmp_path / "scratch", tmp_path / "report"
    done = ckpt / "iter_0000500"
    done.mkdir(parents=True)
    for name in (".saved", ".synced.gpu001", ".synced.gpu002", ".complete"):
        (done / name).touch()
    report.mkdir()
    env = {**os.environ, "SLURMD_NODENAME": "gpu002"}
    args = ["gpu001", "2", str(ckpt), str(local), str(report)]
    run = subprocess.Popen(["bash", "-c", helper, "_", *args], env=env)
    try:
        _started(local)
        for it in (400, 500):
            (local / f"iter_{it:07d}").mkdir(parents=True)
        deadline = time.monotonic() + 15  # its next pass, 5 s after the first
        while (local / "iter_0000400").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        run.kill()
        run.wait()
    assert sorted(p.name for p in local.iterdir()) == ["iter_0000500"]


def test_a_tracker_read_while_being_written_is_no_checkpoint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Megatron-LM writes latest_checkpointed_iteration.txt in place (open "w", write): the
    helper can read it empty. Read as iteration 0 it flagged `iter_0000000`; without scratch it
    completed it and pointed the shared tracker at 0, so a restart would start from scratch."""
    _, text = _plan(capsys, "h100-1su.yml", "llama3-8b", tmp_path)
    helper = text.split("<<'HELPER'\n", 1)[1].split("\nHELPER\n", 1)[0]
    ckpt, report = tmp_path / "shared", tmp_path / "report"
    (ckpt / "iter_0000500").mkdir(parents=True)
    (ckpt / "iter_0000500" / ".complete").touch()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("")  # mid-write
    report.mkdir()
    env = {**os.environ, "SLURMD_NODENAME": "gpu001"}
    args = ["gpu001", "1", str(ckpt), str(ckpt), str(report)]
    with pytest.raises(subprocess.TimeoutExpired):  # one pass, then it sleeps
        subprocess.run(["bash", "-c", helper, "_", *args], env=env, timeout=3, check=False)
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "iter_0000500",
        "latest_checkpointed_iteration.txt",
    ]
    assert not (report / "checkpoint").exists()


def test_a_sharp_run_exports_collnet_in_its_job_as_in_its_launch_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # h200-4su has fabric.sharp: nccl.conf leaves CollNet off (it is mounted into every job),
    # so the run that wants SHARP must export it itself, in the job script too.
    doc, text = _plan(capsys, "h200-4su.yml", "llama3-405b", tmp_path)
    assert "NCCL_COLLNET_ENABLE=1" in doc["launch"]["env"]
    assert "export NCCL_COLLNET_ENABLE=1" in text.splitlines()


def test_on_sigusr1_the_trainers_step_gets_sigterm_through_slurm_and_the_job_requeues(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The watcher's (or Slurm's) SIGUSR1 to the batch script must reach the trainer's tasks as
    SIGTERM (Megatron-LM's --exit-signal-handler saves and stops). srun itself takes a SIGTERM
    as "kill the step": Slurm 22.05's srun printed `forcing job termination` and every task was
    SIGKILLed, nothing saved (the lab's first signalled run). So the step is signalled through
    Slurm, by its name, and srun never is."""
    _, text = _plan(capsys, "h100-1su.yml", "llama3-8b", tmp_path)
    shared = tmp_path / "shared"
    text = text.replace("CKPT_ROOT=/shared/checkpoints", f"CKPT_ROOT={shared}/checkpoints")
    text = text.replace("LOCAL_ROOT=/scratch/checkpoints", f"LOCAL_ROOT={tmp_path}/scratch")
    text = text.replace("REPORTS_ROOT=/shared/cluster-tool/jobs", f"REPORTS_ROOT={shared}/jobs")
    (tmp_path / "job.sbatch").write_text(text, encoding="utf-8")
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    _stub(
        bin_dir,
        "scontrol",
        f'case "$1" in show) echo gpu001; echo gpu002;; *) echo "scontrol $*" >> {log};; esac\n',
    )
    _stub(bin_dir, "squeue", 'echo "77.0 bash"; echo "77.1 trainer"\n')
    # The trainer's srun runs until its tasks end: scancel's SIGTERM to step 77.1 ends them
    # (HUP here, to the stand-in srun); a SIGTERM to srun itself is recorded as the bug.
    _stub(
        bin_dir,
        "srun",
        'case "$1" in --overlap) exec sleep 10;; esac\n'
        f"echo $$ > {tmp_path}/srun.pid\n"
        f"trap 'echo srun got SIGTERM >> {log}; exit 143' TERM\n"
        "trap 'exit 0' HUP\n"
        "sleep 10 & wait\n",
    )
    _stub(
        bin_dir,
        "scancel",
        f'echo "scancel $*" >> {log}\n'
        f'[ "$*" = "--signal=TERM 77.1" ] && kill -HUP "$(cat {tmp_path}/srun.pid)"\n',
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu[001-002]",
        "SLURM_NTASKS_PER_NODE": "8",
    }
    output = (tmp_path / "job.out").open("w")
    # Output to a file: the stand-in steps' sleeps would hold a pipe open past the job's end.
    job = subprocess.Popen(["bash", str(tmp_path / "job.sbatch")], env=env, stdout=output)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "srun.pid").exists():
            assert time.monotonic() < deadline, "the trainer never started"
            time.sleep(0.05)
        time.sleep(0.2)  # the trap is set before the trainer starts; let srun's traps be set
        job.send_signal(signal.SIGUSR1)
        job.wait(timeout=20)
    finally:
        job.kill()
        output.close()
    assert job.returncode == 0, (tmp_path / "job.out").read_text()
    calls = log.read_text().splitlines()
    assert calls == ["scancel --signal=TERM 77.1", "scontrol requeue 77"], calls
