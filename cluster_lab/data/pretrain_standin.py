#!/usr/bin/env python3
"""The lab's stand-in for Megatron-LM's `pretrain_gpt.py`: no model, no GPU, no NCCL.

What it keeps of the real trainer is what a resumable job depends on, so `plan --sbatch`'s
script runs it unchanged (`training.trainer` points here):

- one process per task of the job step (srun, 8 per node), ranks from SLURM_PROCID;
- a collective per step: every rank sends its iteration and its stop flag to rank 0 over TCP
  (MASTER_ADDR, the management network; not NCCL, not the fabric) and gets back the agreed
  flag, so all ranks advance in lockstep and stop at the same iteration;
- `--save DIR --save-interval N`: every N iterations each rank writes its part to
  `DIR/iter_%07d/rank_%05d.json` (its iteration, rank and job id), then, once every rank has
  written (a second collective), rank 0 writes `DIR/latest_checkpointed_iteration.txt`,
  Megatron-LM's tracker;
- `--load DIR`: on start, the tracker's iteration, this rank's part read back (a missing or
  wrong part is an error, exit 1: the job's sync lost it);
- `--exit-signal-handler`: on SIGTERM every rank agrees to stop, saves the current iteration
  and exits 0, as Megatron-LM does.

Every other argument (the layout's flags) is accepted and ignored. Rank 0 prints one line per
event, for the job's output file: `iteration N`, `saved checkpoint iteration N`, `resumed from
checkpoint iteration N` or `no checkpoint: starting at iteration 0`, `stopped on SIGTERM at
iteration N`. STANDIN_STEP_S (seconds per iteration, default 1) and STANDIN_SAVE_S (seconds each
rank spends writing its part, in ten pieces, default 0) come from the job's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

TIMEOUT_S = 120.0
_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


class Group:
    """Rank 0 holds one TCP connection per other rank; a collective is one line each way."""

    def __init__(self, rank: int, world: int, addr: str, port: int) -> None:
        self.rank, self.world = rank, world
        self.peers: list[tuple[socket.socket, object]] = []
        if world == 1:
            return
        if rank == 0:
            server = socket.create_server(("", port), reuse_port=True, backlog=world)
            server.settimeout(TIMEOUT_S)
            while len(self.peers) < world - 1:
                conn, _ = server.accept()
                conn.settimeout(TIMEOUT_S)
                self.peers.append((conn, conn.makefile("r")))
            server.close()
            return
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=TIMEOUT_S)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        conn.settimeout(TIMEOUT_S)
        self.peers = [(conn, conn.makefile("r"))]

    def agree(self, iteration: int, flag: int) -> int:
        """Every rank's flag, max-reduced; every rank must be at the same iteration."""
        if self.world == 1:
            return flag
        if self.rank != 0:
            conn, reader = self.peers[0]
            conn.sendall(f"{iteration} {flag}\n".encode())
            line = reader.readline()  # type: ignore[attr-defined]
            if not line:
                raise ConnectionError("rank 0 went away")
            return int(line)
        result = flag
        for _, reader in self.peers:
            line = reader.readline()  # type: ignore[attr-defined]
            if not line:
                raise ConnectionError("a rank went away")
            theirs, their_flag = (int(w) for w in line.split())
            if theirs != iteration:
                raise RuntimeError(f"ranks disagree: iteration {iteration} and {theirs}")
            result = max(result, their_flag)
        for conn, _ in self.peers:
            conn.sendall(f"{result}\n".encode())
        return result


def _say(rank: int, text: str) -> None:
    if rank == 0:
        print(text, flush=True)


def _part(folder: str, iteration: int, rank: int) -> Path:
    return Path(folder) / f"iter_{iteration:07d}" / f"rank_{rank:05d}.json"


def _save(folder: str, iteration: int, rank: int, world: int, save_s: float) -> None:
    path = _part(folder, iteration, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    job = os.environ.get("SLURM_JOB_ID", "")
    body = json.dumps({"iteration": iteration, "rank": rank, "world": world, "job": job}) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as out:
        for piece in range(10):  # a slow write, for the lab test that kills one mid-way
            out.write(body[piece * len(body) // 10 : (piece + 1) * len(body) // 10])
            out.flush()
            time.sleep(save_s / 10)
        os.fsync(out.fileno())
    tmp.rename(path)


def _load(folder: str | None, rank: int) -> int:
    if folder is None:
        return 0
    try:
        text = (Path(folder) / "latest_checkpointed_iteration.txt").read_text().strip()
    except FileNotFoundError:
        _say(rank, "no checkpoint: starting at iteration 0")
        return 0
    iteration = int(text)
    part = json.loads(_part(folder, iteration, rank).read_text())
    if part["iteration"] != iteration or part["rank"] != rank:
        raise RuntimeError(f"checkpoint {iteration}: rank {rank}'s part says {part}")
    _say(rank, f"resumed from checkpoint iteration {iteration}")
    return iteration


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--save")
    parser.add_argument("--load")
    parser.add_argument("--save-interval", type=int, default=0)
    parser.add_argument("--train-iters", type=int, default=0)
    parser.add_argument("--exit-signal-handler", action="store_true")
    args, _ = parser.parse_known_args(argv)
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    world = int(os.environ.get("SLURM_NTASKS", "1"))
    if args.exit_signal_handler:
        signal.signal(signal.SIGTERM, _on_term)
    step_s = float(os.environ.get("STANDIN_STEP_S", "1"))
    save_s = float(os.environ.get("STANDIN_SAVE_S", "0"))
    # One port per run of the job (a requeued job keeps its id, its restart count grows).
    job = int(os.environ.get("SLURM_JOB_ID", "0"))
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    port = 20000 + (job * 7 + restarts) % 20000
    group = Group(rank, world, os.environ.get("MASTER_ADDR", "localhost"), port)
    iteration = saved = _load(args.load, rank)
    while not args.train_iters or iteration < args.train_iters:
        time.sleep(step_s)  # the step's compute
        stop = group.agree(iteration, int(_stop))
        if not stop:
            iteration += 1
            _say(rank, f"iteration {iteration}")
        due = stop or (args.save_interval and iteration % args.save_interval == 0)
        if args.save and due and iteration != saved:
            _save(args.save, iteration, rank, world, save_s)
            group.agree(iteration, 0)  # every rank's part is written
            if rank == 0:
                tracker = Path(args.save) / "latest_checkpointed_iteration.txt"
                tracker.with_suffix(".tmp").write_text(f"{iteration}\n")
                tracker.with_suffix(".tmp").rename(tracker)
            _say(rank, f"saved checkpoint iteration {iteration}")
            saved = iteration
        if stop:
            _say(rank, f"stopped on SIGTERM at iteration {iteration}")
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
