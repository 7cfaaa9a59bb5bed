"""Stragglers named from the rates the watcher reads without the job's help: a node of a
running job that sends far less on a rail than the job's other nodes, cycles running.
Figures are hand-set: 60 s cycles, 6e9 words (24 GB, 400 MB/s) per rail on a healthy node."""

from __future__ import annotations

import pytest

from cluster_tool.slurm import RunningJob
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import CycleResult, run_cycle
from cluster_tool.watch.state import WatchState
from cluster_tool.watch.straggler import Signal, find_slow, robust_z
from tests.conftest import REPO
from tests.unit.watch.fakes import (
    HCAS,
    CapturedSources,
    NodeReading,
    WatchSlurm,
    admin,
    gpu_clocks,
    port_counters,
)

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
HEALTHY = 6_000_000_000  # words per cycle per rail
SLOW = 1_500_000_000  # a quarter of it


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def run(lab: Cluster, slow_in: list[set[str]], **watch: object) -> list[CycleResult]:
    """Cycle 0 reads the baseline; cycle i > 0 adds a healthy cycle's words on every node
    and rail, except on mlx5_3 of the nodes in slow_in[i-1]."""
    fake = WatchSlurm(NODES)
    fake.running = {"7001": ("gpu[001-004]", "", "")}
    policy = Watch.model_validate({"policy": "observe", **watch})
    state = WatchState()
    totals = {n: {d: 0 for d, _, _ in HCAS} for n in NODES}
    out = []
    for i in range(len(slow_in) + 1):
        if i:
            for n in NODES:
                for d in totals[n]:
                    # a little wobble between nodes, as real traffic has
                    step = HEALTHY + 7_000_000 * NODES.index(n)
                    totals[n][d] += SLOW if (d == "mlx5_3" and n in slow_in[i - 1]) else step
        readings = {n: NodeReading(counters=port_counters(totals[n])) for n in NODES}
        out.append(run_cycle(lab, state, CapturedSources(readings), admin(fake), policy, 60.0 * i))
    return out


def stragglers(result: CycleResult) -> list[tuple[str | None, str | None]]:
    return [(f.node, f.component) for f in result.findings if f.check == "watch.straggler"]


def test_a_node_slow_on_one_rail_for_three_cycles_is_named_with_its_figures(lab: Cluster) -> None:
    results = run(lab, [{"gpu003"}, {"gpu003"}, {"gpu003"}])
    assert [stragglers(r) for r in results] == [[], [], [], [("gpu003", "job 7001")]]
    finding = next(f for f in results[3].findings if f.check == "watch.straggler")
    # 1.5e9 words x 4 bytes / 60 s = 0.10 GB/s; the others' median 6.007e9 x 4 / 60 = 0.40 GB/s
    assert "PortXmitData mlx5_3 rail 1 0.10 GB/s" in finding.message
    assert "median 0.40 GB/s" in finding.message
    assert "3 cycles running" in finding.message
    assert finding.severity == "error"


def test_a_one_off_blip_is_not_named(lab: Cluster) -> None:
    results = run(lab, [set(), {"gpu003"}, set(), set(), {"gpu003"}, set()])
    assert all(stragglers(r) == [] for r in results)


def test_a_streak_broken_by_a_healthy_cycle_starts_again(lab: Cluster) -> None:
    results = run(lab, [{"gpu002"}, {"gpu002"}, set(), {"gpu002"}, {"gpu002"}, {"gpu002"}])
    assert [bool(stragglers(r)) for r in results] == [False] * 6 + [True]


def test_the_cycles_needed_come_from_the_spec(lab: Cluster) -> None:
    results = run(lab, [{"gpu001"}, {"gpu001"}], straggler_cycles=2)
    assert stragglers(results[2]) == [("gpu001", "job 7001")]


def test_robust_z_and_a_job_too_small_to_tell() -> None:
    assert robust_z(10.0, [10.0, 10.0, 10.0]) == 0.0
    assert robust_z(5.0, [10.0, 10.0, 10.0]) == float("-inf")
    # median 10, MAD 1: 0.6745 x (6 - 10) / 1
    assert robust_z(6.0, [9.0, 10.0, 11.0]) == pytest.approx(-2.698)
    two = RunningJob("1", ("a", "b"))
    signals = {
        "a": [Signal("PortXmitData", "mlx5_0 rail 0", 1.0, "B/s")],
        "b": [Signal("PortXmitData", "mlx5_0 rail 0", 100.0, "B/s")],
    }
    assert find_slow([two], signals, Watch()) == []


def test_a_node_whose_gpu_clocks_down_for_three_cycles_is_named(lab: Cluster) -> None:
    """No counters at all (the job's traffic unknown): the slowest GPU's SM clock alone.
    gpu004's GPU5 runs at 1200 MHz (throttled) while every other GPU holds 1980 MHz."""
    fake = WatchSlurm(NODES)
    fake.running = {"7002": ("gpu[001-004]", "", "")}
    state = WatchState()
    policy = Watch.model_validate({"policy": "observe"})
    results = []
    for i in range(4):
        readings = {n: NodeReading() for n in NODES}
        readings["gpu004"].clocks = gpu_clocks(slow_gpu=5, slow_mhz=1200)
        sources = CapturedSources(readings)
        results.append(run_cycle(lab, state, sources, admin(fake), policy, 60.0 * i))
    assert [stragglers(r) for r in results] == [
        [],
        [],
        [("gpu004", "job 7002")],
        [("gpu004", "job 7002")],
    ]
    finding = next(f for f in results[2].findings if f.check == "watch.straggler")
    assert "SM clock slowest GPU 1200 MHz against the job's other nodes' median 1980 MHz" in (
        finding.message
    )
