"""watch's NCCL probes on idle nodes: which nodes are probed with whom, the job the gate's runner
submits for it, each node's busbw baseline per rail, and `watch.probe` for the node (not its
neighbours) that falls below its own. The busbw a probe reads comes from a real nccl-tests run
(tests/fixtures real-outputs: all_reduce_perf on two 8x H100 nodes, NVIDIA/nccl-tests#309)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster_tool.slurm import JobState, NodeState
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.spec.thresholds import HistoryThresholds
from cluster_tool.watch.probes import Busbw, Pair, probe_round, ring, slurm_prober, waves
from cluster_tool.watch.service import watch_once
from tests.conftest import REPO, read_real_output
from tests.unit.watch.fakes import NVIDIA_SMI_Q, CapturedSources, NodeReading, WatchSlurm, admin

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
# Hand-read from the capture: the largest quarter of sizes (4 GiB and up) peaks at 469.21 GB/s
# busbw (16 GiB out-of-place).
TWO_NODE_RUN = read_real_output("all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt")
T = HistoryThresholds(runs=20, min_runs=3, mad_z=3.5, min_drop=0.05)
HCA_OF = {(n, r): d for n in NODES for r, d in enumerate(["mlx5_0", "mlx5_3", "mlx5_4"])}


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def test_neighbours_of_a_ring_and_rounds_where_no_node_is_in_two_jobs() -> None:
    assert ring(NODES) == [
        ("gpu001", "gpu002"), ("gpu002", "gpu003"), ("gpu003", "gpu004"), ("gpu004", "gpu001"),
    ]  # fmt: skip
    assert waves(ring(NODES)) == [
        [("gpu001", "gpu002"), ("gpu003", "gpu004")],
        [("gpu002", "gpu003"), ("gpu004", "gpu001")],
    ]
    assert len(waves(ring(NODES[:3]))) == 3  # a triangle: one job at a time
    assert ring(NODES[:2]) == [("gpu001", "gpu002")] and ring(NODES[:1]) == []


@dataclass
class ScriptSlurm:
    """Takes sbatch scripts and says each job completed at the first look."""

    scripts: list[str] = field(default_factory=list)

    def submit(self, script: Path) -> str:
        self.scripts.append(script.read_text())
        return str(500 + len(self.scripts))

    def job_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return {j: JobState(j, "COMPLETED") for j in job_ids}

    def cancel(self, job_id: str) -> None:
        raise AssertionError("nothing hangs here")

    def drain(self, nodes: object, reason: str) -> None:
        raise AssertionError("probes never drain")

    def resume(self, nodes: object) -> None:
        raise AssertionError("probes never resume")

    def node_states(self, nodes: object = None) -> list[NodeState]:
        return []


def test_the_probe_is_the_gates_per_rail_job_in_the_spec_partition(
    lab: Cluster, tmp_path: Path
) -> None:
    watch = Watch(probes=True, probe_workdir=str(tmp_path), probe_partition="scavenger")
    fake = ScriptSlurm()
    prober = slurm_prober(lab, watch, fake)  # type: ignore[arg-type]
    prober.runner_options = {"read": lambda path: TWO_NODE_RUN, "sleep": lambda s: None}
    got = prober.run([("gpu001", "gpu002")])
    # Every rail's step read the capture: its busbw, 469.21 GB/s, on each of the 8 rails.
    assert got == {("gpu001", "gpu002"): dict.fromkeys(range(8), 469.21)}
    (script,) = fake.scripts
    assert "#SBATCH --partition=scavenger" in script
    assert "#SBATCH --nodelist=gpu001,gpu002" in script and "#SBATCH --exclusive" in script
    # One size (-b = -e = 64M), one rank per node on rail 1's GPU pinned to its HCA (mlx5_3).
    assert " -b 64M -e 64M " in script
    assert "NCCL_IB_HCA==mlx5_3" in script and script.count("srun --overlap") == 8


class RingProber:
    """Answers each pair's per-rail busbw: `base`, except rails listed slow for a node, where
    any job with that node reads `slow` (the pair is as slow as its slower end)."""

    def __init__(self, base: float = 400.0) -> None:
        self.base = base
        self.slow: dict[tuple[str, int], float] = {}
        self.asked: list[list[Pair]] = []

    def run(self, pairs: Sequence[Pair]) -> Busbw:
        self.asked.append(list(pairs))
        out: dict[Pair, dict[int, float | None]] = {}
        for a, b in pairs:
            out[(a, b)] = {
                r: min(self.slow.get((a, r), self.base), self.slow.get((b, r), self.base))
                for r in range(3)
            }
        return out


SERIALS: Mapping[str, Sequence[str]] = {n: [f"{n}-gpu{i}" for i in range(8)] for n in NODES}


def _round(prober: RingProber, store: Path, i: int, idle: Sequence[str] = NODES) -> list:
    out = probe_round(prober, store, idle, SERIALS, HCA_OF, T, 0.2, run_id=f"r{i}")
    return out.findings


def test_a_node_below_its_own_baseline_is_named_and_its_neighbours_are_not(
    tmp_path: Path,
) -> None:
    store, prober = tmp_path / "probe-history.sqlite", RingProber()
    for i in range(3):  # min_runs earlier runs make a baseline
        prober.base = 400.0 + i  # a little spread, as real runs have
        assert _round(prober, store, i) == []
    prober.slow[("gpu003", 1)] = 200.0
    findings = _round(prober, store, 3)
    assert [(f.check, f.node, f.component, f.severity) for f in findings] == [
        ("watch.probe", "gpu003", "mlx5_3", "warning")
    ]
    assert "rail 1 probe busbw 200.0 GB/s with gpu002, gpu004 is 0.50x its own baseline 401.0" in (
        findings[0].message
    )


def test_no_baseline_yet_or_two_nodes_only_names_nobody(tmp_path: Path) -> None:
    store, prober = tmp_path / "s.sqlite", RingProber()
    prober.slow[("gpu003", 1)] = 200.0
    assert _round(prober, store, 0) == []  # no earlier run: nothing to compare with
    # With two idle nodes there is one job: a slow pair cannot say which end is slow.
    store2, pair = tmp_path / "p.sqlite", RingProber()
    for i in range(3):
        _round(pair, store2, i, idle=["gpu002", "gpu003"])
    pair.slow[("gpu003", 1)] = 200.0
    assert _round(pair, store2, 3, idle=["gpu002", "gpu003"]) == []


def _serial_smi(node: str) -> str:
    """The real nvidia-smi -q with this node's own serial numbers."""
    return re.sub(r"(Serial Number\s+: )(\d+)", rf"\g<1>{node[-1]}\2", NVIDIA_SMI_Q)


def _sources() -> CapturedSources:
    return CapturedSources({n: NodeReading(smi=_serial_smi(n)) for n in NODES})


def test_only_idle_nodes_are_probed_and_only_when_the_spec_allows_it(
    lab: Cluster, tmp_path: Path
) -> None:
    fake = WatchSlurm(NODES, drained={"gpu004": "RMA 17"})
    fake.running = {"101": ("gpu001", "", "")}  # a user's job: never probed
    prober = RingProber()
    off = Watch(state_dir=str(tmp_path))
    watch_once(lab, _sources(), admin(fake), off, tmp_path / "a", prober=prober)
    assert prober.asked == []  # probes are off by default
    on = Watch(probes=True, probe_workdir=str(tmp_path), probe_every=2)
    for i in range(3):
        watch_once(lab, _sources(), admin(fake), on, tmp_path / "b", prober=prober, now=1e9 + i)
    # Cycles 1 and 3 (every 2nd): gpu001 runs a job, gpu004 is drained.
    assert prober.asked == [[("gpu002", "gpu003")], [("gpu002", "gpu003")]]


def test_the_textfile_carries_each_rails_probe_busbw_and_baseline(
    lab: Cluster, tmp_path: Path
) -> None:
    fake, prober = WatchSlurm(NODES), RingProber()
    on = Watch(probes=True, probe_workdir=str(tmp_path), probe_every=1)
    for i in range(6):  # thresholds.history.min_runs (5) runs, then one with a baseline
        watch_once(lab, _sources(), admin(fake), on, tmp_path, prober=prober, now=1e9 + i)
    text = (tmp_path / "cluster_tool_watch.prom").read_text()
    samples = {
        (s.name, s.labels.get("node"), s.labels.get("rail")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("cluster_tool_watch_busbw_gbps", "gpu002", "1")] == 400.0
    assert samples[("cluster_tool_watch_busbw_baseline_gbps", "gpu002", "1")] == 400.0
    assert ("cluster_tool_watch_busbw_gbps", "gpu004", "2") in samples
