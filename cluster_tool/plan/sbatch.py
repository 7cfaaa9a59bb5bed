"""`plan --sbatch FILE`: a submittable, resumable Megatron-LM job for the chosen layout.

The job checkpoints to each node's local scratch and a helper on every node syncs each
checkpoint to the shared filesystem in the background; a checkpoint counts as complete only when
every node's part is there and the marker `.complete` has been written after them. On start the
job resumes from the newest complete checkpoint (a newer torn one is set aside, never loaded).
Slurm's `--signal=B:USR1@LEAD` before the time limit, or `cluster-tool watch` under its requeue
policy, sends the batch script SIGUSR1: it asks the trainer to checkpoint and stop
(Megatron-LM's `--exit-signal-handler`, on SIGTERM), waits for the marker, requeues itself and
exits. The job reports its newest complete checkpoint to the watcher in `training.reports_dir`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from cluster_tool.errors import UsageError
from cluster_tool.render.engine import nccl_environment
from cluster_tool.spec.models import Cluster

__all__ = ["CHECKPOINT_FLAGS", "sbatch_script"]

# The flags the script adds to the layout's: where checkpoints go and come from, how often, and
# the handler that saves and exits on SIGTERM (Megatron-LM arguments.py, `--exit-signal-handler`:
# "Dynamically save the checkpoint and shutdown the training if SIGTERM is received").
CHECKPOINT_FLAGS = ("--save", "--load", "--save-interval", "--exit-signal-handler")


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _directives(
    cluster: Cluster, run: str, nodes: int, gpus: int, partition: str | None
) -> list[str]:
    t = cluster.training
    lines = [
        f"#SBATCH --job-name={run}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={gpus}",
        f"#SBATCH --gpus-per-node={gpus}",
        "#SBATCH --exclusive",
        f"#SBATCH --time={t.time_limit}",
        # Requeued rather than failed when a node goes bad or the time runs out; the output
        # file is appended to across runs.
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --signal=B:USR1@{t.signal_lead_s}",
        # The word `cluster-tool watch` looks for before it signals and requeues a job.
        f"#SBATCH --comment={cluster.watch.requeue_marker}",
        f"#SBATCH --output={run}-%j.out",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    return lines


_BODY = r"""
set -euo pipefail

# --- where this run keeps its checkpoints ---------------------------------------------------
CKPT="$CKPT_ROOT/$RUN"            # complete checkpoints, on the shared filesystem
LOCAL="$LOCAL_ROOT/$RUN"          # each node writes its part here first (node-local scratch)
REPORT="$REPORTS_ROOT/$SLURM_JOB_ID"  # what the job tells cluster-tool watch
mkdir -p "$CKPT" "$REPORT"
NNODES=$SLURM_JOB_NUM_NODES

# --- resume from the newest complete checkpoint ---------------------------------------------
# A checkpoint is complete when its `.complete` marker exists: written last, after every node's
# part was synced. A newer folder without it (a job killed mid-write or mid-sync) is torn: set
# aside, never loaded, and the tracker Megatron-LM reads points at the complete one.
newest_complete() {
    local d best=""
    for d in "$CKPT"/iter_*; do
        [ -f "$d/.complete" ] || continue
        best=${d##*/iter_}
    done
    [ -n "$best" ] && echo $((10#$best))
}
for d in "$CKPT"/iter_*; do
    [ -d "$d" ] || continue
    [ -f "$d/.complete" ] && continue
    mv "$d" "$CKPT/torn-${d##*/}-$(date +%s)"
done
RESUME=$(newest_complete || true)
if [ -n "$RESUME" ]; then
    echo "$RESUME" > "$CKPT/latest_checkpointed_iteration.txt"
    echo "resuming from complete checkpoint iteration $RESUME"
else
    rm -f "$CKPT/latest_checkpointed_iteration.txt"
    echo "no complete checkpoint: starting from scratch"
fi

# --- the nodes in the planner's order -------------------------------------------------------
# Node rank k is the k-th node of the planner's placement where the allocation has it; after a
# requeue onto other nodes, the newcomers take the ranks left, in the allocation's order.
mapfile -t ALLOC < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
ORDERED=()
for h in "${PLACEMENT[@]}"; do
    for a in "${ALLOC[@]}"; do [ "$a" = "$h" ] && ORDERED+=("$h"); done
done
for a in "${ALLOC[@]}"; do
    case " ${ORDERED[*]} " in *" $a "*) ;; *) ORDERED+=("$a") ;; esac
done
export MASTER_ADDR=${ORDERED[0]}
HOSTFILE="$REPORT/hostfile"
: > "$HOSTFILE"
for h in "${ORDERED[@]}"; do
    for _ in $(seq "$SLURM_NTASKS_PER_NODE"); do echo "$h" >> "$HOSTFILE"; done
done

# --- the background sync: local scratch -> shared filesystem, one helper per node -----------
# Megatron-LM writes its tracker on rank 0's node once every rank has saved; that node's helper
# then flags the iteration on the shared filesystem, every helper copies its node's part there
# and says so, and rank 0's helper writes `.complete` last, once all NNODES parts are in.
sync_helper() {
    cat <<'HELPER'
set -u
# Slurm's name for this node, as ORDERED holds it (a site's hostname may be the FQDN).
first=$1 nnodes=$2 ckpt=$3 local=$4 report=$5 me=${SLURMD_NODENAME:-$(hostname -s)}
# What an earlier run of the job (before a requeue or a kill) left on this node is not this
# run's: its tracker would flag, sync and complete a checkpoint of that run, even one the job
# has just set aside as torn. The trainer writes its first checkpoint well after this.
[ "$local" = "$ckpt" ] || rm -rf "$local"
mkdir -p "$local"
while :; do
    it=""
    if [ "$me" = "$first" ] && [ -f "$local/latest_checkpointed_iteration.txt" ]; then
        it=$(cat "$local/latest_checkpointed_iteration.txt")
    fi
    # Megatron-LM writes its tracker in place: read mid-write it is empty, never iteration 0.
    case $it in '' | *[!0-9]*) it="" ;; esac
    if [ -n "$it" ]; then
        dir=$(printf 'iter_%07d' "$((10#$it))")
        # .saved holds when the trainer wrote it (the tracker's time), for the watcher.
        [ -f "$ckpt/$dir/.complete" ] || [ -f "$ckpt/$dir/.saved" ] || {
            mkdir -p "$ckpt/$dir"
            stat -c %Y "$local/latest_checkpointed_iteration.txt" > "$ckpt/$dir/.saved"
        }
    fi
    for flag in "$ckpt"/iter_*/.saved; do
        [ -f "$flag" ] || continue
        dir=$(basename "$(dirname "$flag")")
        if [ -d "$local/$dir" ] && [ ! -f "$ckpt/$dir/.synced.$me" ]; then
            # Without local scratch the trainer saved to the shared filesystem itself.
            if [ "$local" = "$ckpt" ]; then
                touch "$ckpt/$dir/.synced.$me"
            else
                cp -a "$local/$dir/." "$ckpt/$dir/" && sync && touch "$ckpt/$dir/.synced.$me"
            fi
        fi
        if [ "$me" = "$first" ] && [ ! -f "$ckpt/$dir/.complete" ] &&
           [ "$(ls "$ckpt/$dir" -a | grep -c '^\.synced\.')" -ge "$nnodes" ]; then
            touch "$ckpt/$dir/.complete"
            it=$((10#${dir#iter_}))
            echo "$it" > "$ckpt/latest_checkpointed_iteration.txt"
            saved_at=$(cat "$ckpt/$dir/.saved" 2>/dev/null || echo 0)
            printf '{"iteration": %d, "at": %d, "saved_at": %d}\n' \
                "$it" "$(date +%s)" "$((10#${saved_at:-0}))" > "$report/checkpoint.tmp"
            mv "$report/checkpoint.tmp" "$report/checkpoint"
        fi
        # Older local parts are safe on the shared filesystem once a newer checkpoint is
        # complete, on every node (not only rank 0's: the others' scratch would fill).
        if [ -f "$ckpt/$dir/.complete" ] && [ "$local" != "$ckpt" ]; then
            for old in "$local"/iter_*; do [ "$old" \< "$local/$dir" ] && rm -rf "$old"; done
        fi
    done
    sleep 5
done
HELPER
}
# One task per node: the step would otherwise inherit the job's task count (SLURM_NTASKS) and
# srun ignores --ntasks-per-node against it, starting a helper per rank.
srun --overlap --ntasks="$NNODES" --ntasks-per-node=1 --nodes="$NNODES" \
    bash -c "$(sync_helper)" _ \
    "${ORDERED[0]}" "$NNODES" "$CKPT" "$LOCAL" "$REPORT" &
SYNC_PID=$!

# --- checkpoint, requeue, exit on SIGUSR1 ---------------------------------------------------
REQUEUED=0
on_usr1() {
    echo "SIGUSR1: asking the trainer to checkpoint and stop"
    REQUEUED=1
    # SIGTERM to the trainer's tasks, through Slurm, to its step alone: srun takes a SIGTERM of
    # its own as "kill the step" (every task SIGKILLed, nothing saved), and the job's other
    # steps are the helpers that must finish the sync.
    local step
    step=$(squeue --steps --jobs="$SLURM_JOB_ID" --noheader --format='%i %j' 2>/dev/null |
        awk '$2 == "trainer" { print $1; exit }') || true
    [ -n "$step" ] && scancel --signal=TERM "$step" || true
}
trap on_usr1 USR1

# --- the trainer ----------------------------------------------------------------------------
# python3: a host without a container (Debian, Ubuntu 22.04) has no `python` unless
# python-is-python3 is installed; NGC's containers have both.
# The hostfile for this step only: srun reads SLURM_HOSTFILE for any step, and the helpers'
# would take its first lines (every helper on rank 0's node).
SLURM_HOSTFILE="$HOSTFILE" srun --job-name=trainer --distribution=arbitrary --kill-on-bad-exit=1 \
    "${CONTAINER[@]}" \
    python3 "$TRAINER" "${MEGATRON_ARGS[@]}" \
    --save "$LOCAL" --load "$CKPT" --save-interval "$SAVE_INTERVAL" --exit-signal-handler &
TRAIN_PID=$!
status=0
while :; do
    wait "$TRAIN_PID" && status=0 || status=$?
    # A trapped signal interrupts `wait` (status > 128) while the trainer still runs.
    kill -0 "$TRAIN_PID" 2>/dev/null || break
done

if [ "$REQUEUED" = 1 ]; then
    # Let the helpers finish the checkpoint the trainer just wrote: its marker, or the lead.
    saved=$(cat "$LOCAL/latest_checkpointed_iteration.txt" 2>/dev/null || echo "")
    for _ in $(seq $((SIGNAL_LEAD_S / 2 / 5))); do
        [ -z "$saved" ] && break
        [ -f "$CKPT/$(printf 'iter_%07d' "$saved")/.complete" ] && break
        sleep 5
    done
    kill "$SYNC_PID" 2>/dev/null || true
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
kill "$SYNC_PID" 2>/dev/null || true
exit "$status"
"""


def sbatch_script(
    cluster: Cluster,
    *,
    run: str,
    hostfile: Sequence[str],
    gpus_per_node: int,
    megatron_args: Sequence[str],
    title: str,
    partition: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The job script; UsageError when the spec does not say where checkpoints go."""
    t = cluster.training
    ckpt = t.checkpoints(cluster.storage)
    reports = t.reports(cluster.storage)
    if ckpt is None or reports is None:
        raise UsageError(
            "the spec has no shared filesystem for checkpoints: give storage.shared, or "
            "training.checkpoint_dir and training.reports_dir"
        )
    local = t.local_checkpoints(cluster.storage) or ckpt
    if partition is None:
        partition = next((p.name for p in cluster.slurm.partitions if p.default), None)
    lines = ["#!/bin/bash", f"# {title}", "# Written by `cluster-tool plan --sbatch`.", ""]
    lines += _directives(cluster, run, len(hostfile), gpus_per_node, partition)
    lines += ["", f"RUN={_q(run)}", f"CKPT_ROOT={_q(ckpt)}", f"LOCAL_ROOT={_q(local)}"]
    lines += [f"REPORTS_ROOT={_q(reports)}", f"TRAINER={_q(t.trainer)}"]
    lines += [f"SAVE_INTERVAL={t.save_interval}", f"SIGNAL_LEAD_S={t.signal_lead_s}"]
    lines.append("PLACEMENT=(" + " ".join(_q(h) for h in hostfile) + ")")
    args: list[str] = []
    for flag in megatron_args:
        args += shlex.split(flag)
    if t.data_path is not None:
        args += ["--data-path", t.data_path]
    else:
        args.append("--mock-data")
    lines.append("MEGATRON_ARGS=(" + " ".join(_q(a) for a in args) + ")")
    if t.container_image is not None:
        # The storage section's mounts hold every folder above; without one, the folders.
        mounts = sorted(_mounts(cluster) or {ckpt, local, reports})
        lines.append(
            "CONTAINER=("
            + _q(f"--container-image={t.container_image}")
            + " "
            + _q("--container-mounts=" + ",".join(f"{m}:{m}" for m in mounts))
            + ")"
        )
    else:
        lines.append("CONTAINER=()")
    lines.append(
        "# The cluster's NCCL settings (its nccl.conf), for the trainer and its container."
    )
    for name, value in (env if env is not None else nccl_environment(cluster)).items():
        lines.append(f"export {name}={_q(value)}")
    return "\n".join(lines) + "\n" + _BODY


def _mounts(cluster: Cluster) -> set[str]:
    out = set()
    if cluster.storage.shared is not None:
        out.add(cluster.storage.shared.mount)
    if cluster.storage.scratch is not None:
        out.add(cluster.storage.scratch.mount)
    return out
