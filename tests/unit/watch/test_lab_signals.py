"""The lab shows what the watcher reads: its sysfs tree carries the port counters the
port-counters probe reads (LinkDowned climbing with lab fault link-flap, the count ibsim holds
at both ends of the cable), and a slow-node fault lowers the SM clock the gpu-clocks probe
reads. Figures from the faults' own definitions: a flap at the injection and every PERIOD
after it; a node at FACTOR 0.5 clocks at half of H100 SXM's 1980 MHz boost clock."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster_lab import fabric
from cluster_lab import model as lab_model
from cluster_lab.faults import inject
from cluster_lab.sim.hw import node_hardware
from cluster_lab.sim.render_smi import render_query_csv
from cluster_lab.sim.sysfs import write_sysfs_tree
from cluster_tool.parsers.nvidia_query import GPU_CLOCK_FIELDS
from cluster_tool.probes.signals import GpuClocks, PortCounters
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Watch
from cluster_tool.watch.cycle import run_cycle
from cluster_tool.watch.state import WatchState
from tests.conftest import FIXTURES, REPO
from tests.unit.watch.fakes import CapturedSources, NodeReading, WatchSlurm, admin

MODEL = FIXTURES / "sim" / "lab-model.json"
T0 = 1_800_000_000.0


@pytest.fixture
def model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MODEL.read_text())
    return data


def read_counters(model: dict[str, Any], node: str, tmp_path: Path, now: float) -> dict:
    """The port-counters probe's own command over the node's tree as the lab writes it."""
    tree = write_sysfs_tree(node_hardware(model, node), tmp_path / node, now=now)
    real = "/sys/class/infiniband"
    command = PortCounters().command().replace(real, str(tree / "infiniband"))
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return PortCounters().process(done.stdout.replace(str(tree / "infiniband"), real).splitlines())


def test_link_flap_makes_the_nodes_link_downed_climb_as_ibsim_counts_it(
    model: dict[str, Any], tmp_path: Path
) -> None:
    before = read_counters(model, "gpu002", tmp_path, T0)
    assert before["mlx5_0"]["LinkDownedCounter"] == 0
    assert before["mlx5_0"]["PortXmitData"] == 0 and before["mlx5_0"]["SymbolErrorCounter"] == 0
    inject(model, "link-flap", "gpu002", "mlx5_0", "3", now=T0)
    # Flaps at T0, T0+3, T0+6: three by T0+7, four by T0+10; the other HCAs stay at 0.
    at7 = read_counters(model, "gpu002", tmp_path, T0 + 7)
    at10 = read_counters(model, "gpu002", tmp_path, T0 + 10)
    assert (at7["mlx5_0"]["LinkDownedCounter"], at10["mlx5_0"]["LinkDownedCounter"]) == (3, 4)
    assert {h: c["LinkDownedCounter"] for h, c in at10.items() if h != "mlx5_0"} == dict.fromkeys(
        [h for h in at10 if h != "mlx5_0"], 0
    )
    # ibsim's count at both ends of the cable (what the lab agent sets) is the same.
    hca = next(h for h in lab_model.HardwareModel.model_validate(model).node("gpu002").hcas
               if h.device == "mlx5_0")  # fmt: skip
    assert fabric.link_downed(hca, T0 + 10) == (4, 4)


def test_slow_node_lowers_the_sm_clock_the_watcher_reads(model: dict[str, Any]) -> None:
    def clocks(node: str) -> list[float | None]:
        text = render_query_csv(
            node_hardware(model, node), list(GPU_CLOCK_FIELDS), header=False, units=False
        )
        return [c for _, c, _ in GpuClocks().process(text.splitlines())]

    assert clocks("gpu003") == [1980.0] * 8
    inject(model, "slow-node", "gpu003", "0.5")
    assert clocks("gpu003") == [990.0] * 8
    assert clocks("gpu001") == [1980.0] * 8


def test_the_watcher_names_the_lab_slow_node_of_a_running_job(model: dict[str, Any]) -> None:
    """The lab's nvidia-smi output as the probe would read it, through watch cycles: gpu003 at
    0.5 is the slow node of the job on all four nodes from the straggler_cycles'th cycle."""
    lab = load_spec(REPO / "examples" / "lab.yml")
    inject(model, "slow-node", "gpu003", "0.5")
    nodes = ["gpu001", "gpu002", "gpu003", "gpu004"]
    readings = {
        n: NodeReading(
            clocks=render_query_csv(
                node_hardware(model, n), list(GPU_CLOCK_FIELDS), header=False, units=False
            )
        )
        for n in nodes
    }
    fake = WatchSlurm(nodes)
    fake.running = {"41": ("gpu[001-004]", "", "watch-requeue")}
    state, policy = WatchState(), Watch.model_validate({"policy": "observe"})
    named = []
    for i in range(3):
        result = run_cycle(lab, state, CapturedSources(readings), admin(fake), policy, 60.0 * i)
        named.append([f for f in result.findings if f.check == "watch.straggler"])
    assert [[f.node for f in n] for n in named] == [[], [], ["gpu003"]]
    assert "SM clock slowest GPU 990 MHz against the job's other nodes' median 1980 MHz" in (
        named[2][0].message
    )
