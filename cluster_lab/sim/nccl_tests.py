"""The nccl-tests binaries of the lab (`all_reduce_perf`, `all_gather_perf`,
`reduce_scatter_perf`, `alltoall_perf`): one process per rank under Slurm + PMIx, rank 0
prints the whole output computed from the lab model, every rank exits the same way.

Ranks never talk to each other: each computes the same answer from the same model, so no
barrier is needed. Stdlib only (runs inside lab nodes)."""

from __future__ import annotations

import getopt
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .hw import Gpu, NodeHardware, node_down, node_hardware
from .perf import Bandwidth, PathFailure, peak_busbw, visible_gpus
from .render_nccl import (
    COLLECTIVES,
    TABLE_HEAD,
    Options,
    Rank,
    avg_busbw,
    compute_rows,
    failure_lines,
    nccl_info_lines,
    out_of_bounds,
    parse_size,
    render_footer,
    render_header,
    render_rows,
)


class UsageFailure(Exception):
    """A command line nccl-tests would reject."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm hostlist syntax (`gpu[001-003,007],head`) as names, in order."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]*(?:\[[^\]]*\])?[^,]*", text):
        if not part:
            continue
        m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", part)
        if not m:
            names.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{len(lo)}d}{suffix}")
    return names


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE (`8(x2),4`) as one count per node."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise UsageFailure(f"cannot read tasks per node {text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


_SHORT = "t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:hG:C:a:N:"
_LONG = [
    "nthreads=", "ngpus=", "minbytes=", "maxbytes=", "stepbytes=", "stepfactor=", "iters=",
    "agg_iters=", "warmup_iters=", "parallel_init=", "check=", "op=", "datatype=", "root=",
    "blocking=", "stream_null=", "timeout=", "cudagraph=", "report_cputime=", "average=",
    "help", "local_register=", "run_cycles=",
]  # fmt: skip


def parse_args(argv: list[str]) -> Options:
    try:
        pairs, rest = getopt.gnu_getopt(argv, _SHORT, _LONG)
    except getopt.GetoptError as e:
        raise UsageFailure(str(e)) from e
    if rest:
        raise UsageFailure(f"unexpected argument {rest[0]!r}")
    o = Options()
    for flag, value in pairs:
        name = flag.lstrip("-")
        if name in ("b", "minbytes"):
            o.min_bytes = parse_size(value)
        elif name in ("e", "maxbytes"):
            o.max_bytes = parse_size(value)
        elif name in ("f", "stepfactor"):
            o.step_factor = int(value)
        elif name in ("i", "stepbytes"):
            o.step_bytes = parse_size(value)
        elif name in ("g", "ngpus"):
            o.ngpus = int(value)
        elif name in ("t", "nthreads"):
            o.nthreads = int(value)
        elif name in ("n", "iters"):
            o.iters = int(value)
        elif name in ("w", "warmup_iters"):
            o.warmup = int(value)
        elif name in ("m", "agg_iters"):
            o.agg_iters = int(value)
        elif name in ("c", "check"):
            o.check = int(value)
        elif name in ("o", "op"):
            o.op = value
        elif name in ("d", "datatype"):
            o.datatype = value
        elif name in ("r", "root"):
            o.root = int(value)
        elif name in ("z", "blocking"):
            o.blocking = int(value)
        elif name in ("G", "cudagraph"):
            o.graph = int(value)
        elif name in ("N", "run_cycles"):
            o.extra["N"] = value
            if not value.isdigit() or int(value) < 1:
                # 0 (forever) would never end in the lab; the soak always gives a count.
                raise UsageFailure(f"run_cycles {value!r}: the lab runs 1 or more cycles")
        elif name in ("h", "help"):
            raise UsageFailure("help")
        else:
            o.extra[name] = value
    if o.min_bytes > o.max_bytes:
        raise UsageFailure(f"minbytes {o.min_bytes} is larger than maxbytes {o.max_bytes}")
    return o


@dataclass
class Job:
    """Where this process sits in the job: its rank, every rank's host, GPUs per process."""

    rank: int
    nprocs: int
    hosts_by_proc: list[str]
    local_id: int


def job_from_env(env: Mapping[str, str], hostname: str) -> Job:
    """Ranks from PMIx/Slurm (or Open MPI's mpirun, single node). Without an MPI launcher
    (srun without --mpi=pmix) every process is its own one-rank job, as with the real
    MPI-built nccl-tests."""
    mpi = "PMIX_RANK" in env or "pmi" in env.get("SLURM_MPI_TYPE", "")
    if "SLURM_PROCID" in env and mpi:
        rank = int(env.get("PMIX_RANK", env["SLURM_PROCID"]))
        nprocs = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")))
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or hostname
        hosts = expand_hostlist(nodelist)
        per_node_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")
        if per_node_text:
            per_node = expand_tasks_per_node(per_node_text)
        else:
            per_node = [nprocs // len(hosts)] * len(hosts)
        by_proc = [h for h, n in zip(hosts, per_node, strict=False) for _ in range(n)]
        if len(by_proc) != nprocs:
            raise UsageFailure(f"{nprocs} tasks do not fit tasks-per-node {per_node_text!r}")
        return Job(rank, nprocs, by_proc, int(env.get("SLURM_LOCALID", "0")))
    if "OMPI_COMM_WORLD_RANK" in env:
        n = int(env.get("OMPI_COMM_WORLD_SIZE", "1"))
        return Job(
            int(env["OMPI_COMM_WORLD_RANK"]),
            n,
            [hostname] * n,
            int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")),
        )
    return Job(0, 1, [hostname], 0)


@dataclass
class Outcome:
    """What this process prints and how it ends; `hang` means it never returns."""

    stdout: str
    exit_code: int
    hang: bool = False


def _gpu_count(hw: NodeHardware) -> int:
    return len(hw.present_gpus())


def run(
    collective: str,
    argv: list[str],
    env: Mapping[str, str],
    model: dict[str, Any],
    hostname: str,
    pid: int,
    adjust: Callable[[NodeHardware], None] | None = None,
    reload: Callable[[], dict[str, Any]] | None = None,
    pace: Callable[[float], None] | None = None,
    tell: Callable[[str], None] | None = None,
) -> Outcome:
    """One process of `<collective>_perf ARGV`: what it prints and its exit status.

    With `-N CYCLES` the sweep is printed CYCLES times, as nccl-tests does; each cycle after the
    first reads the model again (`reload`: faults injected meanwhile show) and `pace` waits the
    cycle's own run time (its rows' times x iterations), so a cycle takes time as on GPUs.

    `tell` (rank 0 of a Slurm step) hears how every other rank ends as soon as that is known,
    before the sweep is printed or paced: `0`, `1` or `hang` (the packaged wrapper's fast path
    for those ranks, cluster_lab/sim/packages.py)."""

    def told(outcome: Outcome) -> Outcome:
        if tell is not None:
            tell("hang" if outcome.hang else str(outcome.exit_code))
        return outcome

    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    try:
        opts = parse_args(argv)
        job = job_from_env(env, hostname)
    except UsageFailure as e:
        usage = f"USAGE: {collective}_perf [-t,--nthreads <num threads>] [-g,--ngpus <gpus>] ..."
        return told(
            Outcome(
                f"{usage}\n" if str(e) == "help" else f"{e}\n{usage}\n",
                0 if str(e) == "help" else 1,
            )
        )
    hosts_in_order: list[str] = []
    for h in job.hosts_by_proc:
        if h not in hosts_in_order:
            hosts_in_order.append(h)
    nodes = [node_hardware(model, h) for h in hosts_in_order]
    for hw in nodes:
        if adjust is not None:
            adjust(hw)
    per_proc = opts.nthreads * opts.ngpus
    # Each process knows only its own environment; the job's steps give every rank the same
    # CUDA_VISIBLE_DEVICES and NCCL_IB_HCA (Slurm's per-node GPU binding and the gate's
    # per-rail steps do), so this rank computes every rank's devices from its own.
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    first_device = env.get("NCCL_TESTS_DEVICE", "").strip()
    ranks: list[Rank] = []
    local_seen: dict[str, int] = {}
    used: dict[str, list[Gpu]] = {}
    for proc, host in enumerate(job.hosts_by_proc):
        hw = nodes[hosts_in_order.index(host)]
        gpus = visible_gpus(hw, cvd)
        local = local_seen.get(host, 0)
        local_seen[host] = local + 1
        for k in range(per_proc):
            # nccl-tests: device = NCCL_TESTS_DEVICE, else localRank * nThreads * nGpus, + i.
            base = int(first_device) if first_device.isdigit() else local * per_proc
            device = base + k
            if device >= len(gpus):
                # The rank with no GPU fails and the job aborts; rank 0 reports it.
                failed_pid = pid - job.rank + proc
                return told(
                    Outcome(
                        f"{host}: Test CUDA failure common.cu:1028 'invalid device ordinal'\n"
                        f" .. {host} pid {failed_pid}: Test failure common.cu:891\n"
                        if job.rank == 0
                        else "",
                        1,
                    )
                )
            g = gpus[device]
            used.setdefault(host, []).append(g)
            ranks.append(
                Rank(
                    rank=len(ranks),
                    host=host,
                    # Each process knows only its own pid; the others are stand-ins.
                    pid=pid if proc == job.rank else pid - job.rank + proc,
                    device=device,
                    bus_id=g.short_bus_id,
                    gpu_name=g.spec.name,
                    gpu_minor=g.minor,
                )
            )
    down = [h for h in hosts_in_order if node_down(model, h)]
    gpus_per_node = max(local_seen.values()) * per_proc
    algo = env.get("NCCL_ALGO") or None
    bandwidth: Bandwidth | PathFailure = peak_busbw(
        model,
        nodes,
        collective,
        gpus_per_node,
        algo,
        gpus=used,
        ib_hca=env.get("NCCL_IB_HCA"),
        nvls=env.get("NCCL_NVLS_ENABLE", "1").strip() != "0",
    )
    if down:
        bandwidth = PathFailure(down[0], "eth0", "hang", f"{down[0]} is down")
    debug = env.get("NCCL_DEBUG", "").upper()
    lead = job.rank == 0
    lines: list[str] = []
    raw_nodes = model.get("nodes", {})
    addresses: dict[str, str] = {
        name: str(n.get("address", name))
        for name, n in (
            raw_nodes.items()
            if isinstance(raw_nodes, dict)
            else ((n["name"], n) for n in raw_nodes)
        )
    }
    if lead:
        lines += render_header(opts, ranks)
        hw0 = nodes[0]
        if debug == "INFO":
            lines += nccl_info_lines(
                nodes,
                ranks,
                bandwidth,
                hw0.nccl_version,
                hw0.cuda_version,
                addresses,
                env.get("NCCL_IB_HCA"),
            )
        elif debug in ("VERSION", "WARN"):
            lines.append(f"NCCL version {hw0.nccl_version}+cuda{hw0.cuda_version}")
        lines += TABLE_HEAD
    if isinstance(bandwidth, PathFailure):
        if bandwidth.mode == "hang":
            return told(Outcome("\n".join(lines) + "\n" if lines else "", 0, hang=True))
        peer = next((h for h in hosts_in_order if h != bandwidth.node), bandwidth.node)
        failed_hw = nodes[hosts_in_order.index(bandwidth.node)]
        hca = next((h for h in failed_hw.hcas if h.device == bandwidth.hca), None)
        if lead:
            lines += failure_lines(
                bandwidth, ranks, addresses.get(peer, peer), hca.gpu_minor if hca else None
            )
        return told(Outcome("\n".join(lines) + "\n" if lines else "", 1))
    if not lead:
        return Outcome("", 0)
    # The others end well now; a data check that fails is rank 0's exit status alone.
    told(Outcome("", 0))
    run_key = f"{collective}/{','.join(hosts_in_order)}/{len(ranks)}"
    corrupting = {hw.name for hw in nodes if hw.nccl_corrupt}
    corrupt_ranks = sum(1 for r in ranks if r.host in corrupting)
    rows = compute_rows(collective, opts, len(ranks), bandwidth, run_key, corrupt_ranks)
    every = list(rows)
    lines += render_rows(collective, opts, len(ranks), rows)
    for cycle in range(1, int(opts.extra.get("N", "1"))):
        if pace is not None:
            pace(sum(r.out_time_us + r.in_time_us for r in rows) * opts.iters / 1e6)
        if reload is not None:
            fresh = reload()
            nodes = [node_hardware(fresh, h) for h in hosts_in_order]
            for hw in nodes:
                if adjust is not None:
                    adjust(hw)
            # The same GPUs, as the model now has them.
            minors = {h: {g.minor for g in gs} for h, gs in used.items()}
            used = {hw.name: [g for g in hw.gpus if g.minor in minors[hw.name]] for hw in nodes}
            again = peak_busbw(
                fresh, nodes, collective, gpus_per_node, algo, gpus=used,
                ib_hca=env.get("NCCL_IB_HCA"),
                nvls=env.get("NCCL_NVLS_ENABLE", "1").strip() != "0",
            )  # fmt: skip
            if isinstance(again, Bandwidth):
                bandwidth = again
        rows = compute_rows(
            collective, opts, len(ranks), bandwidth, f"{run_key}/{cycle}", corrupt_ranks
        )
        every += rows
        lines += render_rows(collective, opts, len(ranks), rows)
    errors = out_of_bounds(every, corrupt_ranks)
    lines += render_footer(avg_busbw(collective, len(ranks), every), errors)
    # nccl-tests exits EXIT_FAILURE when the check found wrong values.
    return Outcome("\n".join(lines) + "\n", 1 if errors else 0)


def nccl_environment(env: Mapping[str, str], conf_texts: list[str]) -> dict[str, str]:
    """The process environment with NCCL's configuration files under it, as NCCL reads them:
    `NAME=VALUE` lines (`NCCL_IB_HCA==mlx5_0` keeps its `=mlx5_0`), `#` comments; a variable
    already in the environment wins, then the first file that sets it."""
    merged = dict(env)
    for text in conf_texts:
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            name, _, value = line.partition("=")
            merged.setdefault(name.strip(), value.strip())
    return merged


def _conf_texts(env: Mapping[str, str]) -> list[str]:
    # NCCL_CONF_FILE (NCCL 2.23+) or the user's ~/.nccl.conf, then the site's /etc/nccl.conf.
    from pathlib import Path

    first = env.get("NCCL_CONF_FILE") or str(Path(env.get("HOME", "/root")) / ".nccl.conf")
    texts = []
    for path in (first, "/etc/nccl.conf"):
        try:
            texts.append(Path(path).read_text(encoding="utf-8"))
        except OSError:
            continue
    return texts


STEPS_DIR = "/run/lab-steps"


def step_word(env: Mapping[str, str]) -> Callable[[str], None] | None:
    """For rank 0 of an `srun --mpi=pmix` step: leave how the step's other ranks end in the
    lab's steps folder (`$LAB_STEPS_DIR`, else the one every node mounts), named after the job
    and step, once. None for any other process."""
    job, step = env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", "")
    if env.get("PMIX_RANK") != "0" or not job.isdigit() or not step.isdigit():
        return None
    from pathlib import Path

    folder = Path(env.get("LAB_STEPS_DIR") or STEPS_DIR)
    said: list[str] = []

    def tell(end: str) -> None:
        if said:
            return
        said.append(end)
        tmp = folder / f".{job}.{step}.{os.getpid()}"
        try:
            tmp.write_text(end + "\n", encoding="utf-8")
            tmp.replace(folder / f"{job}.{step}")
        except OSError:
            pass  # no folder (an older lab): the other ranks compute it themselves

    return tell


def main(
    collective: str, argv: list[str], adjust: Callable[[NodeHardware], None] | None = None
) -> int:
    """Entry point of the `<collective>_perf` executables inside lab nodes."""
    import socket
    import sys

    from .hw import load_model

    hostname = os.environ.get("LAB_NODE") or socket.gethostname().split(".")[0]
    env = nccl_environment(os.environ, _conf_texts(os.environ))
    outcome = run(
        collective, argv, env, load_model(), hostname, os.getpid(), adjust,
        reload=load_model, pace=lambda s: time.sleep(min(s, 60.0)), tell=step_word(os.environ),
    )  # fmt: skip
    sys.stdout.write(outcome.stdout)
    sys.stdout.flush()
    if outcome.hang:
        # A dead path leaves NCCL waiting forever; Slurm's time limit ends it.
        while True:
            time.sleep(3600)
    return outcome.exit_code
