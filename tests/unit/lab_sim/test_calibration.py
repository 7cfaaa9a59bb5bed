"""The simulated all_reduce curve against real captures, size by size: one H100 node with NVLS
and two H100 nodes over 8 NDR rails each. The expected figures are read from the capture files
with the project's own parser, never from the gate's thresholds or the simulator's constants,
so a simulator that drifts from what real hardware measured fails here."""

from __future__ import annotations

from typing import Any

from cluster_lab.sim.hw import default_hardware
from cluster_lab.sim.nccl_tests import run
from cluster_tool.parsers.nccl_tests import NcclTestsRun, parse_nccl_tests
from tests.conftest import read_real_output

SINGLE_NODE = "all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt"
TWO_NODES_NDR = "all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"
# What each capture ran: 8B to 16 GiB, factor 2, one GPU per process (as in both headers).
CAPTURE_ARGS = ["-b", "8", "-e", "16G", "-f", "2", "-g", "1"]


def model(speed: str) -> dict[str, Any]:
    """Two HGX H100 nodes, 8 GPUs and 8 compute HCAs each, on `speed` rails (one leaf per rail)."""
    nodes = {}
    for i, name in enumerate(("gpu001", "gpu002")):
        hw = default_hardware(name, speed=speed)
        for hca in hw.hcas:
            hca.leaf, hca.leaf_port = f"su1-leaf-r{hca.rail}", i + 1
        nodes[name] = {"name": name, "hardware": hw.to_dict()}
    return {"nodes": nodes}


def srun_env(nodes: str, per_node: str, total: int) -> dict[str, str]:
    """Rank 0 of `srun --mpi=pmix` with one task per GPU; no NCCL_ALGO, as in the captures."""
    return {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_NTASKS": str(total),
        "SLURM_STEP_NUM_TASKS": str(total),
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_LOCALID": "0",
        "SLURM_MPI_TYPE": "pmix",
    }


def simulate(speed: str, nodes: str, per_node: str, total: int) -> NcclTestsRun:
    env = srun_env(nodes, per_node, total)
    out = run("all_reduce", CAPTURE_ARGS, env, model(speed), "gpu001", 1)
    assert out.exit_code == 0, out.stdout
    return parse_nccl_tests(out.stdout)


def best_busbw(run_: NcclTestsRun) -> dict[int, float]:
    """busbw per message size, the better of out-of-place and in-place: a hiccup (another
    process, a page fault) only ever slows one side, as the captures' odd rows show."""
    return {
        r.size: max(side.busbw for side in (r.out_of_place, r.in_place) if side is not None)
        for r in run_.rows
    }


def best_time(run_: NcclTestsRun) -> dict[int, float]:
    return {
        r.size: min(side.time_us for side in (r.out_of_place, r.in_place) if side is not None)
        for r in run_.rows
    }


def off_by_more_than(
    simulated: dict[int, float], captured: dict[int, float], share: float
) -> list[str]:
    """Sizes where the simulated figure is off the captured one by more than `share` of it, or
    by more than the 0.01 the table prints (tiny busbw values are rounded to two decimals)."""
    both = sorted(set(simulated) & set(captured))
    assert both, "no message size in common"
    return [
        f"{size} B: simulated {simulated[size]:.2f}, captured {captured[size]:.2f}"
        for size in both
        if abs(simulated[size] - captured[size]) > max(share * captured[size], 0.01)
    ]


def test_one_node_nvls_all_reduce_follows_the_dgxc_capture_at_every_size() -> None:
    captured = parse_nccl_tests(read_real_output(SINGLE_NODE))
    assert len(captured.ranks) == 8 and len({r.host for r in captured.ranks}) == 1
    simulated = simulate("NDR", "gpu001", "8", 8)
    assert len(best_busbw(captured)) == 32  # 8 B to 16 GiB
    assert off_by_more_than(best_busbw(simulated), best_busbw(captured), 0.10) == []


def test_two_nodes_over_ndr_follow_the_xe9680_capture_at_every_size() -> None:
    # The capture's conditions: 16 ranks, 8 per node, 8 ConnectX-7 at NDR per node, NCCL's
    # default algorithm.
    captured = parse_nccl_tests(read_real_output(TWO_NODES_NDR))
    assert len(captured.ranks) == 16 and len({r.host for r in captured.ranks}) == 2
    simulated = simulate("NDR", "gpu[001-002]", "8(x2)", 16)
    assert len(best_busbw(captured)) == 32
    assert off_by_more_than(best_busbw(simulated), best_busbw(captured), 0.10) == []


def test_the_labs_hdr_rails_halve_the_ndr_capture_only_where_bandwidth_counts() -> None:
    # ibsim cannot do NDR: the lab's rails are 4X HDR, half NDR's rate. Small messages are
    # latency-bound (the same time as on NDR); the largest move at half the captured busbw.
    captured = parse_nccl_tests(read_real_output(TWO_NODES_NDR))
    simulated = simulate("HDR", "gpu[001-002]", "8(x2)", 16)
    small = {s: t for s, t in best_time(simulated).items() if s <= 4096}
    assert len(small) == 10
    assert off_by_more_than(small, best_time(captured), 0.10) == []
    largest = sorted(best_busbw(captured))[-4:]
    halved = {s: best_busbw(captured)[s] / 2 for s in largest}
    assert off_by_more_than({s: best_busbw(simulated)[s] for s in largest}, halved, 0.10) == []
