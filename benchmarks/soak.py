"""What the burn-in soak costs the controller, per node and per sample, with N simulated nodes.

The soak's outputs are made here the way the soak job writes them: every pair's file holds, per
step, the marker line and an nccl-tests output (header, the 16 rank lines of a 2-node job, one
row per -N cycle, footer) in the layout of the real 2-node H100 capture; one node slows to 0.84x
from the middle of the soak. Then the controller's three parts are timed: rendering the job
script, reading every pair's file back (`read_pair_output`: marker split + the nccl-tests
parser), and judging (`judge_soak`). No lab and no Slurm: this is the controller's CPU only.

Run: `.venv/bin/python benchmarks/soak.py [--nodes 128 1024] [--steps 24] [--cycles 5]`.
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster_tool.gate.plan import NcclTestParams
from cluster_tool.gate.soak import (
    SagRule,
    SoakSample,
    judge_soak,
    plan_soak,
    read_pair_output,
    render_soak_sbatch,
)

SIZE = 8589934592
# The real capture's 8 GiB row (all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt):
# time 34381 us, algbw 249.84, busbw 468.46 out of place.
ROW = (
    "  {size:>10}  {count:>12}     float     sum      -1  {t:>7.0f}  {alg:6.2f}  {bus:6.2f}      0"
)


def step_text(a: str, b: str, cycles: int, factor: float) -> str:
    lines = [
        f"# nThread 1 nGpus 1 minBytes {SIZE} maxBytes {SIZE} step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank in range(16):
        host = a if rank < 8 else b
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid  {29262 + rank} on {host:>10} device  {rank % 8} "
            "[0000:19:00] NVIDIA H100 80GB HBM3"
        )
    lines += [
        "NCCL version 2.26.2+cuda12.8",
        "#",
        "#                                                              out-of-place"
        "                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    for _ in range(cycles):
        side = ROW.format(
            size=SIZE, count=SIZE // 4, t=34381 / factor, alg=249.84 * factor, bus=468.46 * factor
        )
        lines.append(side + side[side.index("sum      -1") + 11 :])
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {468.46 * factor:.2f}",
        "#",
    ]
    return "\n".join(lines) + "\n"


def soak_files(nodes: list[str], steps: int, cycles: int, slow: str) -> dict[tuple[str, str], str]:
    plan = plan_soak(nodes, 3600.0, message_bytes=SIZE, cycles=cycles)
    files: dict[tuple[str, str], list[str]] = {}
    for step in range(steps):
        for pair in plan.rotations[step % len(plan.rotations)]:
            factor = 0.84 if slow in pair and step >= steps // 2 else 1.0
            text = f"# cluster-tool soak: step {step} at {1000.0 + 60 * step}\n"
            files.setdefault(pair, []).append(text + step_text(*pair, cycles, factor))
    return {p: "".join(t) for p, t in files.items()}


def bench(n: int, steps: int, cycles: int) -> None:
    nodes = [f"gpu{i:04d}" for i in range(1, n + 1)]
    slow = nodes[n // 3]
    files = soak_files(nodes, steps, cycles, slow)
    started = time.process_time()
    plan = plan_soak(nodes, 3600.0, message_bytes=SIZE, cycles=cycles)
    script = render_soak_sbatch(plan, NcclTestParams(), Path("/shared/soak"), 8)
    t_render = time.process_time() - started
    started = time.process_time()
    samples: list[SoakSample] = []
    for pair, text in files.items():
        samples += read_pair_output(pair, text).samples
    t_read = time.process_time() - started
    started = time.process_time()
    findings = judge_soak(nodes, samples, SagRule())
    t_judge = time.process_time() - started
    per_node_samples = 2 * len(samples) / n  # each sample is both nodes' of its pair
    total = t_render + t_read + t_judge
    named = sorted({f.node for f in findings if f.check == "burnin.sag"})
    print(
        f"N={n:5d} steps={steps} cycles={cycles}: {len(samples)} samples "
        f"({per_node_samples:.0f}/node), {sum(len(t) for t in files.values()) / 1e6:.1f} MB read; "
        f"script {len(script) / 1e3:.0f} kB"
    )
    print(
        f"   CPU: render {t_render * 1e3:7.1f} ms, read+parse {t_read * 1e3:8.1f} ms, "
        f"judge {t_judge * 1e3:7.1f} ms; total {total:.2f} s = "
        f"{total / n * 1e3:.2f} ms/node, {total / (n * per_node_samples) * 1e6:.0f} us per node "
        f"per sample; read+parse is {t_read / total:.0%}"
    )
    print(f"   named: {', '.join(named) or 'none'} (planted {slow})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    for n in args.nodes:
        bench(n, args.steps, args.cycles)


if __name__ == "__main__":
    main()
