"""The simulated nccl-tests binaries: the real nccl-tests layout, ranks from Slurm/PMIx, bus
bandwidth from the model (NVLink, slowest rail, stragglers), errors and hangs on dead paths."""

from __future__ import annotations

import re
from typing import Any

import pytest

from cluster_lab.sim.hw import default_hardware
from cluster_lab.sim.nccl_tests import (
    UsageFailure,
    expand_hostlist,
    expand_tasks_per_node,
    nccl_environment,
    parse_args,
    run,
)
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from tests.conftest import read_real_output

NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def lab_model() -> dict[str, Any]:
    nodes = {}
    for i, name in enumerate(NODES):
        hw = default_hardware(name)
        for hca in hw.hcas:
            hca.leaf, hca.leaf_port = f"su1-leaf-r{hca.rail}", i + 1
        nodes[name] = {"name": name, "address": f"10.77.0.{11 + i}", "hardware": hw.to_dict()}
    return {"nodes": nodes}


def srun_env(rank: int, nodes: str = "gpu[001-002]", per_node: str = "8(x2)") -> dict[str, str]:
    """What `srun --mpi=pmix -N2 --ntasks-per-node=8` gives each task."""
    total = sum(int(p.split("(")[0]) * (int(p.split("x")[1][:-1]) if "x" in p else 1)
                for p in per_node.split(","))  # fmt: skip
    return {
        "SLURM_PROCID": str(rank),
        "PMIX_RANK": str(rank),
        "SLURM_NTASKS": str(total),
        "SLURM_STEP_NUM_TASKS": str(total),
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_LOCALID": str(rank % 8),
        "SLURM_MPI_TYPE": "pmix",
    }


ARGS = ["-b", "8", "-e", "8G", "-f", "2", "-g", "1"]


def two_node_busbw(model: dict[str, Any], collective: str = "all_reduce") -> float:
    out = run(collective, ARGS, srun_env(0), model, "gpu001", 4242)
    assert out.exit_code == 0, out.stdout
    parsed = parse_nccl_tests(out.stdout)
    assert parsed.complete and parsed.out_of_bounds == 0
    return max(row.out_of_place.busbw for row in parsed.rows if row.out_of_place)


def test_single_node_layout_matches_real_nccl_tests() -> None:
    model = lab_model()
    out = run("all_reduce", ["-b", "8", "-e", "16G", "-f", "2", "-g", "8"], {}, model, "gpu001", 1)
    real = read_real_output("all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt")
    real_lines = real.splitlines()
    ours = out.stdout.splitlines()
    # Column header and the first data row line up character for character.
    head = real_lines.index(next(x for x in real_lines if x.startswith("#       size")))
    assert (
        ours[ours.index(real_lines[head]) - 1 : ours.index(real_lines[head]) + 2]
        == (real_lines[head - 1 : head + 2])
    )
    first_row = next(x for x in ours if x.strip().startswith("8 "))
    real_row = next(x for x in real_lines if x.strip().startswith("8 "))
    assert [len(c) for c in first_row.split(" ") if c] == [len(c) for c in real_row.split(" ") if c]
    assert [i for i, ch in enumerate(first_row) if ch != " "][-1] == len(real_row.rstrip()) - 1
    assert ours[-3].startswith("# Out of bounds values : 0 OK") and ours[-1] == "#"
    parsed = parse_nccl_tests(out.stdout)
    assert parsed.collective == "all_reduce" and len(parsed.ranks) == 8
    assert parsed.ranks[3].bus_id.endswith("61:00")
    top = max(r.out_of_place.busbw for r in parsed.rows if r.out_of_place)
    assert 450 <= top <= 482  # NVLS inside one H100 node
    small = parsed.rows[0].out_of_place
    assert small is not None and 10 < small.time_us < 20  # latency-bound


def test_ring_is_slower_than_nvls_inside_a_node() -> None:
    model = lab_model()
    args = ["-b", "1G", "-e", "4G", "-g", "8"]
    nvls = parse_nccl_tests(run("all_reduce", args, {}, model, "gpu001", 1).stdout)
    ring = parse_nccl_tests(
        run("all_reduce", args, {"NCCL_ALGO": "Ring"}, model, "gpu001", 1).stdout
    )
    assert nvls.avg_busbw and ring.avg_busbw
    assert 340 < ring.avg_busbw < 380 < nvls.avg_busbw


def test_two_nodes_are_limited_by_the_hdr_rails() -> None:
    model = lab_model()
    # 8 rails x 4X HDR = 200 GB/s: a ring (what the gate's pairs force) stays just under it;
    # NVLSTree, NCCL's default on two full nodes, reports more, as on the NDR capture.
    env = {**srun_env(0), "NCCL_ALGO": "Ring"}
    ring = busbw_of(run("all_reduce", ARGS, env, model, "gpu001", 4242))
    assert 180 < ring < 200
    assert two_node_busbw(model) > 1.1 * ring


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "alltoall"])
def test_other_collectives_parse_and_count_per_rank(collective: str) -> None:
    out = run(collective, ARGS, srun_env(0), lab_model(), "gpu001", 7)
    parsed = parse_nccl_tests(out.stdout)
    assert parsed.complete
    # nccl-tests never names its binary: all_gather and alltoall print identical columns.
    assert parsed.collective == ("reduce_scatter" if collective == "reduce_scatter" else None)
    big = parsed.rows[-1]
    assert big.count * 16 * 4 == big.size
    assert big.redop == ("sum" if collective == "reduce_scatter" else "none")


def test_only_rank_zero_prints() -> None:
    model = lab_model()
    for rank in (1, 8, 15):
        out = run("all_reduce", ARGS, srun_env(rank), model, "gpu002" if rank >= 8 else "gpu001", 9)
        assert (out.stdout, out.exit_code, out.hang) == ("", 0, False)


def test_slow_node_lowers_busbw() -> None:
    model = lab_model()
    healthy = two_node_busbw(model)
    model["nodes"]["gpu002"]["hardware"]["slow_factor"] = 0.5
    assert two_node_busbw(model) < healthy * 0.55


def test_degraded_rail_lowers_busbw_to_its_width() -> None:
    model = lab_model()
    healthy = two_node_busbw(model)
    model["nodes"]["gpu001"]["hardware"]["hcas"][4]["width"] = "1X"
    degraded = two_node_busbw(model)
    # A ring moves at the pace of its slowest hop: one 1X link quarters every rail.
    assert degraded == pytest.approx(healthy / 4, rel=0.05)


def test_a_node_outside_the_job_changes_nothing() -> None:
    model = lab_model()
    healthy = two_node_busbw(model)
    model["nodes"]["gpu004"]["hardware"]["slow_factor"] = 0.2
    model["nodes"]["gpu004"]["hardware"]["hcas"][0]["state"] = "Down"
    assert two_node_busbw(model) == healthy


def test_link_down_gives_an_nccl_error_naming_the_node() -> None:
    model = lab_model()
    model["nodes"]["gpu002"]["hardware"]["hcas"][2]["state"] = "Down"
    out = run("all_reduce", ARGS, srun_env(0), model, "gpu001", 4242)
    assert out.exit_code == 1 and not out.hang
    assert "NET/IB : Got completion from peer 10.77.0.11<" in out.stdout
    parsed = parse_nccl_tests(out.stdout)
    assert not parsed.complete
    assert any("gpu002" in e for e in parsed.errors)
    # Every rank fails, only rank 0 prints.
    other = run("all_reduce", ARGS, srun_env(9), model, "gpu002", 4243)
    assert (other.stdout, other.exit_code) == ("", 1)


def test_link_down_can_hang_instead() -> None:
    model = lab_model()
    hca = model["nodes"]["gpu002"]["hardware"]["hcas"][2]
    hca["state"], hca["nccl_on_down"] = "Down", "hang"
    out = run("all_reduce", ARGS, srun_env(0), model, "gpu001", 4242)
    assert out.hang
    assert "# Avg bus bandwidth" not in out.stdout
    # The channels were set up before the path died: still GPUDirect on both hosts.
    env = {**srun_env(0), "NCCL_DEBUG": "INFO"}
    info = run("all_reduce", ARGS, env, model, "gpu001", 4242).stdout
    sends = [line for line in info.splitlines() if "[send] via NET/IB/" in line]
    assert len(sends) == 2 and all(line.endswith("/GDRDMA") for line in sends)


def test_nccl_debug_info_shows_gdr_only_with_peermem_or_dmabuf() -> None:
    model = lab_model()
    env = {**srun_env(0), "NCCL_DEBUG": "INFO"}
    out = run("all_reduce", ARGS, env, model, "gpu001", 4242).stdout
    assert "via NET/IB/0/GDRDMA" in out
    for name in ("gpu001", "gpu002"):
        hw = model["nodes"][name]["hardware"]
        hw["modules"].remove("nvidia_peermem")
    # dma-buf alone still gives GPUDirect
    assert "GDRDMA" in run("all_reduce", ARGS, env, model, "gpu001", 4242).stdout
    model["nodes"]["gpu002"]["hardware"]["dmabuf"] = False
    out = run("all_reduce", ARGS, env, model, "gpu001", 4242).stdout
    # Each host's channel lines say its own transport: gpu002 bounces through host memory.
    gpu002 = [line for line in out.splitlines() if line.startswith("gpu002:") and " via " in line]
    assert gpu002 and all("GDRDMA" not in line for line in gpu002)
    assert "[send] via NET/IB/7/GDRDMA" in out  # gpu001's own sends
    assert parse_nccl_tests(out).complete


def test_srun_without_pmix_runs_independent_one_rank_tests() -> None:
    env = srun_env(5)
    del env["PMIX_RANK"]
    env["SLURM_MPI_TYPE"] = "none"
    out = run("all_reduce", ARGS, env, lab_model(), "gpu001", 99)
    parsed = parse_nccl_tests(out.stdout)
    assert len(parsed.ranks) == 1 and parsed.complete


def test_command_line_flags() -> None:
    opts = parse_args(["-b", "1M", "-e", "1G", "-f", "4", "-g", "8", "-n", "50", "-w", "10",
                       "-c", "0", "-o", "max", "-d", "half", "-z", "1"])  # fmt: skip
    assert (opts.min_bytes, opts.max_bytes, opts.step_factor, opts.ngpus) == (
        2**20,
        2**30,
        4,
        8,
    )
    assert (opts.iters, opts.warmup, opts.check, opts.op, opts.datatype, opts.blocking) == (
        50,
        10,
        0,
        "max",
        "half",
        1,
    )
    with pytest.raises(UsageFailure):
        parse_args(["-b", "1G", "-e", "1M"])
    out = run("all_reduce", ["-b", "1M", "-e", "4M", "-i", "1M", "-c", "0"], {}, lab_model(),
              "gpu001", 1)  # fmt: skip
    parsed = parse_nccl_tests(out.stdout)
    assert [r.size for r in parsed.rows] == [2**20, 2 * 2**20, 3 * 2**20, 4 * 2**20]


def test_slurm_hostlists() -> None:
    assert expand_hostlist("gpu[001-003,007],head") == [
        "gpu001",
        "gpu002",
        "gpu003",
        "gpu007",
        "head",
    ]
    assert expand_tasks_per_node("8(x2),4") == [8, 8, 4]


def test_a_missing_gpu_shifts_devices_but_not_nics() -> None:
    model = lab_model()
    for name in ("gpu001", "gpu002"):
        model["nodes"][name]["hardware"]["gpus"][0]["present"] = False
    # Eight ranks per node no longer fit: CUDA has seven devices.
    full = run("all_reduce", ARGS, srun_env(0), model, "gpu001", 5)
    assert full.exit_code == 1 and "invalid device ordinal" in full.stdout
    env = {**srun_env(0, per_node="7(x2)"), "NCCL_DEBUG": "INFO"}
    out = run("all_reduce", ARGS, env, model, "gpu001", 5).stdout
    # Rank 6 drives device 6, the board's GPU 7, whose HCA is mlx5_11 (NCCL's NET/IB/7).
    assert "6[6] -> 7[0] [send] via NET/IB/7/GDRDMA" in out
    assert parse_nccl_tests(out).ranks[6].bus_id == "0000:df:00"


def rail_env(rank: int, gpu: int, hca: str) -> dict[str, str]:
    """One rank per node on rail `gpu`'s GPU, pinned to its HCA (the gate's per-rail step)."""
    return {
        **srun_env(rank, per_node="1(x2)"),
        "SLURM_LOCALID": "0",
        "CUDA_VISIBLE_DEVICES": str(gpu),
        "NCCL_IB_HCA": f"={hca}",
        "NCCL_ALGO": "Ring",
    }


def busbw_of(out: Any) -> float:
    assert out.exit_code == 0, out.stdout
    parsed = parse_nccl_tests(out.stdout)
    assert parsed.complete and parsed.out_of_bounds == 0
    return max(row.out_of_place.busbw for row in parsed.rows if row.out_of_place)


RAIL_HCAS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")


def test_a_per_rail_job_runs_at_one_rails_rate_and_sees_only_its_own_rail() -> None:
    model = lab_model()
    healthy = [busbw_of(run("all_reduce", ARGS, rail_env(0, r, h), model, "gpu001", 7))
               for r, h in enumerate(RAIL_HCAS)]  # fmt: skip
    # One 4X HDR rail (25 GB/s) x ring efficiency, not the eight rails of a full node.
    assert all(20.0 < b < 25.0 for b in healthy), healthy
    assert two_node_busbw(model) > 6 * max(healthy)
    model["nodes"]["gpu002"]["hardware"]["hcas"][3]["width"] = "1X"  # mlx5_5, rail 3
    degraded = [busbw_of(run("all_reduce", ARGS, rail_env(0, r, h), model, "gpu001", 7))
                for r, h in enumerate(RAIL_HCAS)]  # fmt: skip
    assert degraded[3] == pytest.approx(healthy[3] / 4, rel=0.05)
    assert [b for r, b in enumerate(degraded) if r != 3] == [
        b for r, b in enumerate(healthy) if r != 3
    ]


def test_the_rank_drives_the_gpu_cuda_visible_devices_gives_it() -> None:
    model = lab_model()
    out = run("all_reduce", ARGS, rail_env(0, 5, "mlx5_9"), model, "gpu001", 7)
    parsed = parse_nccl_tests(out.stdout)
    # Device 0 of what the process sees: the board's GPU 5 (PCI 0000:c3:00).
    assert [(r.host, r.device, r.bus_id) for r in parsed.ranks] == [
        ("gpu001", 0, "0000:c3:00"),
        ("gpu002", 0, "0000:c3:00"),
    ]
    # A UUID names one node's GPU: a one-rank run on that node.
    uuid = model["nodes"]["gpu001"]["hardware"]["gpus"][5]["uuid"]
    one = run("all_reduce", ARGS, {"CUDA_VISIBLE_DEVICES": uuid[:12]}, model, "gpu001", 7)
    assert parse_nccl_tests(one.stdout).ranks[0].bus_id == "0000:c3:00"
    # CUDA stops at the first entry that names no GPU: nothing visible, the rank fails.
    env = {**rail_env(0, 5, "mlx5_9"), "CUDA_VISIBLE_DEVICES": "9,5"}
    failed = run("all_reduce", ARGS, env, model, "gpu001", 7)
    assert failed.exit_code == 1 and "invalid device ordinal" in failed.stdout
    # Eight ranks per node, each shown only its own GPU by index (per-task binding): the
    # second local rank asks for device 1 of one, as nccl-tests does, and fails.
    env = {**srun_env(0), "CUDA_VISIBLE_DEVICES": "0"}
    assert run("all_reduce", ARGS, env, model, "gpu001", 7).exit_code == 1
    # Slurm's per-node binding shows all eight: the usual two-node run.
    env = {**srun_env(0), "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert busbw_of(run("all_reduce", ARGS, env, model, "gpu001", 7)) == two_node_busbw(model)


@pytest.mark.parametrize(
    ("ib_hca", "hcas"),
    [
        ("mlx5", RAIL_HCAS),  # a prefix: every mlx5_N
        ("mlx5_1", ("mlx5_10", "mlx5_11")),  # a prefix too (mlx5_1 is a storage NIC)
        ("=mlx5_10,mlx5_11", ("mlx5_10", "mlx5_11")),  # exact names
        ("=mlx5_0:1", ("mlx5_0",)),  # a port
        ("=mlx5_0:2", ()),  # no such port: no IB device
        ("=mlx5_1", ()),  # exact: not mlx5_10 nor mlx5_11
        ("^=mlx5_5", tuple(h for h in RAIL_HCAS if h != "mlx5_5")),  # all but one
        ("^mlx5_1", tuple(h for h in RAIL_HCAS if not h.startswith("mlx5_1"))),
    ],
)
def test_nccl_ib_hca_picks_the_hcas_as_nccl_documents(ib_hca: str, hcas: tuple[str, ...]) -> None:
    model = lab_model()
    env = {**srun_env(0), "NCCL_IB_HCA": ib_hca, "NCCL_DEBUG": "INFO"}
    out = run("all_reduce", ARGS, env, model, "gpu001", 7)
    busbw = busbw_of(out)
    if not hcas:
        # NCCL finds no IB device it may use and falls back to TCP sockets.
        assert "NET/IB : No device found." in out.stdout and "via NET/Socket/0" in out.stdout
        assert busbw < 2.0
        return
    using = next(line for line in out.stdout.splitlines() if "NET/IB : Using" in line)
    assert tuple(re.findall(r"\](mlx5_\d+):1/IB", using)) == hcas
    assert busbw == pytest.approx(two_node_busbw(lab_model()) * len(hcas) / 8, rel=0.05)


def test_excluding_a_degraded_hca_moves_its_gpu_to_another_rail() -> None:
    model = lab_model()
    model["nodes"]["gpu001"]["hardware"]["hcas"][3]["width"] = "1X"  # mlx5_5
    slow = two_node_busbw(model)
    env = {**srun_env(0), "NCCL_IB_HCA": "^=mlx5_5"}
    fast = busbw_of(run("all_reduce", ARGS, env, model, "gpu001", 7))
    # Seven healthy rails beat eight held to one 1X link.
    assert fast > 3 * slow


def test_nccl_conf_sets_what_the_environment_does_not() -> None:
    conf = "# rendered\nNCCL_IB_HCA==mlx5_0,mlx5_3\nNCCL_SOCKET_IFNAME==eth0\n"
    env = nccl_environment({"NCCL_ALGO": "Ring"}, [conf])
    assert (env["NCCL_IB_HCA"], env["NCCL_SOCKET_IFNAME"], env["NCCL_ALGO"]) == (
        "=mlx5_0,mlx5_3",
        "=eth0",
        "Ring",
    )
    # The job's own setting (the gate's per-rail step) wins over the site's file.
    assert nccl_environment({"NCCL_IB_HCA": "=mlx5_5"}, [conf])["NCCL_IB_HCA"] == "=mlx5_5"
    # The lab's rendered nccl.conf names the eight compute HCAs: the usual two-node rate.
    model = lab_model()
    site = "NCCL_IB_HCA==" + ",".join(RAIL_HCAS) + "\n"
    out = run("all_reduce", ARGS, nccl_environment(srun_env(0), [site]), model, "gpu001", 7)
    assert busbw_of(out) == two_node_busbw(model)


def test_run_cycles_repeat_the_sweep_and_read_faults_injected_between_cycles() -> None:
    """-N 4 prints the 8 GiB row four times (nccl-tests' run_cycles); a straggler injected after
    the second cycle shows in cycles 3 and 4 only, and each cycle waits its own run time."""
    import copy

    model = lab_model()
    slowed = copy.deepcopy(model)
    slowed["nodes"]["gpu002"]["hardware"]["slow_factor"] = 0.8
    reads = iter([model, slowed, slowed])
    waits: list[float] = []
    args = ["-b", "8G", "-e", "8G", "-g", "1", "-n", "20", "-N", "4"]
    out = run("all_reduce", args, srun_env(0), model, "gpu001", 4242,
              reload=lambda: next(reads), pace=waits.append)  # fmt: skip
    assert out.exit_code == 0, out.stdout
    parsed = parse_nccl_tests(out.stdout)
    busbw = [r.out_of_place.busbw for r in parsed.rows if r.out_of_place]
    assert len(busbw) == 4 and parsed.complete
    assert min(busbw[:2]) > 1.15 * max(busbw[2:])  # 0.8x, with the runs' 0-3 % jitter
    assert len(waits) == 3 and all(w > 0.1 for w in waits)  # 20 iterations of ~8 GiB each


def test_run_cycles_zero_is_refused_in_the_lab() -> None:
    with pytest.raises(UsageFailure, match="run_cycles"):
        parse_args(["-N", "0"])
