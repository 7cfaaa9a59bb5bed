"""nccl-tests output (`all_reduce_perf` and friends) exactly as nccl-tests prints it, with times
from the bandwidth model, plus the NCCL INFO/WARN lines NCCL_DEBUG asks for. Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass, field

from .hw import NodeHardware
from .perf import Bandwidth, PathFailure, gdr_capable, ib_hca_filter, jitter, time_us

# collective -> (redop, bus bandwidth factor as a function of ranks, element count per size)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
_TYPE_SIZES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
               "half": 2, "float": 4, "double": 8, "bfloat16": 2}  # fmt: skip


@dataclass
class Rank:
    """One rank of the job: where it runs and which GPU it drives."""

    rank: int
    host: str
    pid: int
    device: int  # CUDA device index on its host
    bus_id: str  # "0000:19:00"
    gpu_name: str
    gpu_minor: int = -1  # the board's GPU (device numbers shift when one is missing)


@dataclass
class Options:
    """The nccl-tests command line (same flags and defaults as nccl-tests)."""

    min_bytes: int = 32 * 2**20
    max_bytes: int = 32 * 2**20
    step_factor: int = 2
    step_bytes: int = 0  # -i: fixed increment instead of a factor
    nthreads: int = 1
    ngpus: int = 1
    iters: int = 20
    warmup: int = 5
    agg_iters: int = 1
    check: int = 1
    op: str = "sum"
    datatype: str = "float"
    root: int = 0
    blocking: int = 0
    graph: int = 0
    extra: dict[str, str] = field(default_factory=dict)


def parse_size(text: str) -> int:
    """nccl-tests sizes: plain bytes or with a K/M/G suffix (powers of 1024)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().rstrip("B")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def bus_factor(collective: str, nranks: int) -> float:
    if nranks <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2 * (nranks - 1) / nranks
    return (nranks - 1) / nranks


def sizes(opts: Options) -> list[int]:
    out = []
    size = opts.min_bytes
    while size <= opts.max_bytes:
        out.append(size)
        if opts.step_bytes:
            size += opts.step_bytes
        else:
            if opts.step_factor <= 1:
                break
            size *= opts.step_factor
    return out


def _counts(collective: str, size: int, nranks: int, type_size: int) -> tuple[int, int]:
    """(bytes shown in the size column, element count column) as nccl-tests computes them."""
    count = max(size // type_size, 1) if size else 0
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        per_rank = count // nranks
        return per_rank * nranks * type_size, per_rank
    return count * type_size, count


def _time_str(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def _fmt_g(value: float) -> str:
    return f"{value:g}"


def render_header(opts: Options, ranks: list[Rank]) -> list[str]:
    lines = [
        f"# nThread {opts.nthreads} nGpus {opts.ngpus} minBytes {opts.min_bytes} "
        f"maxBytes {opts.max_bytes} step: "
        + (f"{opts.step_bytes}(bytes)" if opts.step_bytes else f"{opts.step_factor}(factor)")
        + f" warmup iters: {opts.warmup} iters: {opts.iters} agg iters: {opts.agg_iters} "
        f"validation: {opts.check} graph: {opts.graph}",
        "#",
        "# Using devices",
    ]
    for r in ranks:
        lines.append(
            f"#  Rank {r.rank:2d} Group  0 Pid {r.pid:6d} on {r.host:>10} device "
            f"{r.device:2d} [{r.bus_id}] {r.gpu_name}"
        )
    return lines


TABLE_HEAD = [
    "#",
    "#                                                              out-of-place"
    "                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)",
]


@dataclass
class Row:
    size: int
    count: int
    out_time_us: float
    in_time_us: float
    wrong: int = 0  # wrong elements, summed over the ranks (the same on both sides)


# A corrupting rank gets one element in this many wrong (at least one per check): enough to
# show in every row, few enough that `%5g` still prints the sum as a whole number.
WRONG_EVERY = 65536


def compute_rows(
    collective: str,
    opts: Options,
    nranks: int,
    bandwidth: Bandwidth,
    run_key: str,
    corrupt_ranks: int = 0,
) -> list[Row]:
    """Every message size's times; with `corrupt_ranks` (ranks on a node whose data goes bad)
    and the data check on, the wrong elements nccl-tests counts in the result."""
    type_size = _TYPE_SIZES.get(opts.datatype, 4)
    factor = bus_factor(collective, nranks)
    rows = []
    for size in sizes(opts):
        shown, count = _counts(collective, size, nranks, type_size)
        base = time_us(shown, factor, bandwidth)
        rows.append(
            Row(
                size=shown,
                count=count,
                out_time_us=base * jitter(run_key, size, "out"),
                in_time_us=base * jitter(run_key, size, "in"),
                wrong=corrupt_ranks * max(1, count // WRONG_EVERY) if opts.check and count else 0,
            )
        )
    return rows


def render_rows(collective: str, opts: Options, nranks: int, rows: list[Row]) -> list[str]:
    redop = opts.op if collective in ("all_reduce", "reduce_scatter") else "none"
    root = -1
    factor = bus_factor(collective, nranks)
    out = []
    for row in rows:
        cells = f"{row.size:12d}  {row.count:12d}  {opts.datatype:>8}  {redop:>6}  {root:6d}"
        for t in (row.out_time_us, row.in_time_us):
            algbw = row.size / (t * 1e3) if t > 0 else 0.0
            # nccl-tests prints the wrong elements summed over the ranks with `%5g`.
            wrong = f"{float(row.wrong):g}" if opts.check else "N/A"
            cells += f"  {_time_str(t)}  {algbw:6.2f}  {algbw * factor:6.2f}  {wrong:>5}"
        out.append(cells)
    return out


def avg_busbw(collective: str, nranks: int, rows: list[Row]) -> float:
    factor = bus_factor(collective, nranks)
    if not rows:
        return 0.0
    total = sum(row.size / (row.out_time_us * 1e3) * factor for row in rows if row.out_time_us)
    return total / len(rows)


def out_of_bounds(rows: list[Row], corrupt_ranks: int) -> int:
    """nccl-tests' error count: one per rank whose check found wrong values, per size and side
    (summed over the ranks, MPI_Allreduce in common.cu)."""
    return sum(2 * corrupt_ranks for row in rows if row.wrong)


def render_footer(bw_avg: float, errors: int = 0) -> list[str]:
    return [
        f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
        f"# Avg bus bandwidth    : {_fmt_g(round(bw_avg, 6))}",
        "#",
    ]


def nccl_info_lines(
    nodes: list[NodeHardware],
    ranks: list[Rank],
    bandwidth: Bandwidth | PathFailure,
    nccl_version: str,
    cuda: str,
    address_of: dict[str, str],
    ib_hca: str | None = None,
) -> list[str]:
    """The NCCL_DEBUG=INFO lines the gate reads, as srun gathers them from every rank: the
    network NCCL picked and, per channel that crosses nodes, `via NET/IB/<n>/GDRDMA`
    (GPUDirect RDMA) or plain `via NET/IB/<n>` from the host that sends it, where <n> is the
    HCA's place among those NCCL_IB_HCA lets that host use."""
    if not ranks:
        return []
    lines = []
    r0 = ranks[0]
    hw_of = {hw.name: hw for hw in nodes}
    hw0 = hw_of[r0.host]
    prefix = f"{r0.host}:{r0.pid}:{r0.pid}"
    addr = address_of.get(r0.host, "127.0.0.1")
    lines.append(f"{prefix} [0] NCCL INFO Bootstrap : Using eth0:{addr}<0>")
    lines.append(f"{prefix} [0] NCCL INFO NCCL version {nccl_version}+cuda{cuda}")
    multi = len({r.host for r in ranks}) > 1
    allowed = ib_hca_filter(ib_hca)
    usable = {hw.name: [h.device for h in hw.hcas if allowed(h.device, 1)] for hw in nodes}
    sockets = isinstance(bandwidth, Bandwidth) and multi and not bandwidth.nics
    if multi and sockets:
        lines.append(f"{prefix} [0] NCCL INFO NET/IB : No device found.")
        lines.append(f"{prefix} [0] NCCL INFO NET/Socket : Using [0]eth0:{addr}<0>")
        lines.append(f"{prefix} [0] NCCL INFO Using network Socket")
    elif multi:
        devs = " ".join(f"[{i}]{d}:1/IB" for i, d in enumerate(usable[hw0.name]))
        lines.append(f"{prefix} [0] NCCL INFO NET/IB : Using {devs} ; OOB eth0:{addr}<0>")
        lines.append(f"{prefix} [0] NCCL INFO Using network IB")
        if hw0.dmabuf:
            lines.append(f"{prefix} [0] NCCL INFO DMA-BUF is available on GPU device 0")

    def via(r: Rank, channel: int) -> str:
        """The transport of a channel leaving (or entering) rank r's host over the network."""
        if sockets:
            return "NET/Socket/0"
        hw = hw_of[r.host]
        own = next((h.device for h in hw.hcas if h.gpu_minor == r.gpu_minor), None)
        mine = usable[r.host]
        nics = bandwidth.nics_of(r.host) if isinstance(bandwidth, Bandwidth) else ()
        device = own if own in nics else (nics[channel % len(nics)] if nics else own)
        nic = mine.index(device) if device in mine else channel % max(len(mine), 1)
        # Set up at init, before any path can die: the host's own GPUDirect support decides.
        return f"NET/IB/{nic}/GDRDMA" if gdr_capable(hw) else f"NET/IB/{nic}"

    n = len(ranks)
    by_host: dict[str, list[Rank]] = {}
    for r in ranks:
        by_host.setdefault(r.host, []).append(r)
    for host, host_ranks in by_host.items():
        for channel, r in enumerate(host_ranks):
            nxt = ranks[(r.rank + 1) % n]
            p = f"{r.host}:{r.pid}:{r.pid + 17} [{r.device}]"
            if nxt.host != r.host:
                # Ring edges: the last rank of each node sends to the next node over its NIC.
                lines.append(
                    f"{p} NCCL INFO Channel {channel:02d}/0 : {r.rank}[{r.device}] -> "
                    f"{nxt.rank}[{nxt.device}] [send] via {via(r, channel)}"
                )
            elif host == r0.host:
                lines.append(
                    f"{p} NCCL INFO Channel {channel:02d}/0 : {r.rank}[{r.device}] -> "
                    f"{nxt.rank}[{nxt.device}] via P2P/CUMEM/read"
                )
    if multi:
        # The first rank receives the ring back from the last node's last rank.
        last = ranks[-1]
        lines.append(
            f"{prefix} [{r0.device}] NCCL INFO Channel 00/0 : {last.rank}[{last.device}] -> "
            f"{r0.rank}[{r0.device}] [receive] via {via(r0, 0)}"
        )
    lines.append(f"{prefix} [{r0.device}] NCCL INFO Connected all rings")
    lines.append(
        f"{prefix} [{r0.device}] NCCL INFO comm 0x5581c6a0 rank 0 nranks {n} cudaDev "
        f"{r0.device} nvmlDev {r0.device} busId {r0.bus_id[5:7]}000 commId 0x7b1c4e2d9a3f1e60 "
        "- Init COMPLETE"
    )
    return lines


def failure_lines(
    failure: PathFailure, ranks: list[Rank], peer_address: str, gpu_minor: int | None
) -> list[str]:
    """What NCCL and nccl-tests print when a rank's network path dies mid-run: the rank
    driving the GPU behind the dead HCA reports the completion error."""
    on_node = [r for r in ranks if r.host == failure.node] or ranks[:1]
    r = next((r for r in on_node if r.gpu_minor == gpu_minor), on_node[0])
    return [
        f"{r.host}:{r.pid}:{r.pid + 23} [{r.device}] transport/net_ib.cc:1696 NCCL WARN "
        f"NET/IB : Got completion from peer {peer_address}<{40000 + r.rank}> with status=12 "
        f"opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:0.0.0.0 "
        f"remoteGids::ffff:0.0.0.0 hca {failure.hca}",
        f"{r.host}:{r.pid}:{r.pid + 23} [{r.device}] NCCL INFO transport/net.cc:1298 -> 6",
        f"{r.host}: Test NCCL failure common.cu:1007 'remote process exited or there was a "
        "network error / NET/IB : Got completion from peer with status=12'",
        f" .. {r.host} pid {r.pid}: Test failure common.cu:891",
    ]
