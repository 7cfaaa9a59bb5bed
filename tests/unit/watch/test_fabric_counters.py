"""Port counters read on the subnet-manager host (ibqueryerrors) judged as deltas between
cycles, both ends of the cable: what a switch port counted before the watcher started is not
held against the node; a LinkDownedCounter that climbs between two cycles is a flap that names
the node and drains it. The fabric is the lab's as planned (su1-leaf-r0 port 3 is gpu003
mlx5_0), written as ibnetdiscover prints it."""

from __future__ import annotations

import pytest

from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import run_cycle
from cluster_tool.watch.state import WatchState
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText
from tests.unit.watch.fakes import CapturedSources, NodeReading, WatchSlurm, admin

LEAF = "MF0;su1-leaf-r0:MQM8700/U1"
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def fabric_host(lab: Cluster, leaf_port_3_downed: int) -> HostResult:
    text = FabricText.from_plan(cabling_plan(lab), switch_links(lab), speed="HDR")
    text.model = "MQM8700"
    errors = (
        f'Errors for 0x9c05910300000000 "{LEAF}"\n'
        f"   GUID 0x9c05910300000000 port 3: [LinkDownedCounter == {leaf_port_3_downed}]\n"
        "\n## Summary: 45 nodes checked, 1 bad nodes found\n"
        "##          110 ports checked, 1 ports have errors beyond threshold\n"
    )
    return HostResult(
        "head",
        outputs={
            "ibnetdiscover": ProbeOutput(0, text.text()),
            # infiniband-diags' ibqueryerrors exits 1 whenever it lists a port
            # (`rc = print_summary(); if (rc) rc = 1;`): what it printed is still the reading.
            "ibqueryerrors": ProbeOutput(1, errors),
        },
    )


def test_a_link_downed_count_that_climbs_between_cycles_drains_the_node(lab: Cluster) -> None:
    fake, state = WatchSlurm(NODES), WatchState()
    watch = Watch(policy="drain")
    readings = {n: NodeReading() for n in NODES}
    results = []
    for i, downed in enumerate([2, 2, 5]):
        sources = CapturedSources(readings, fabric=fabric_host(lab, downed))
        results.append(run_cycle(lab, state, sources, admin(fake), watch, 1000.0 + 60 * i))
    # Two downs from before the watcher started, unchanged a cycle later: nothing.
    assert [f for r in results[:2] for f in r.findings if f.fails] == []
    flap = [f for f in results[2].findings if f.check == "link.flap"]
    assert [(f.node, f.component) for f in flap] == [("gpu003", "mlx5_0")]
    assert "su1-leaf-r0 port 3: LinkDownedCounter +3" in (flap[0].observed or "")
    assert list(fake.drained) == ["gpu003"]
    assert fake.drained["gpu003"].startswith("cluster-tool watch: link.flap mlx5_0: gpu003 mlx5_0")


def test_an_unreadable_fabric_is_a_warning_that_drains_nothing(lab: Cluster) -> None:
    fake = WatchSlurm(NODES)
    broken = HostResult("head", outputs={"ibnetdiscover": ProbeOutput(1, "", "ibwarn: no SM")})
    sources = CapturedSources({n: NodeReading() for n in NODES}, fabric=broken)
    result = run_cycle(lab, WatchState(), sources, admin(fake), Watch(policy="drain"), 1000.0)
    unread = sorted((f.check, f.node, f.component) for f in result.findings if f.node == "head")
    assert unread == [
        ("watch.unread", "head", "ibnetdiscover"),
        ("watch.unread", "head", "ibqueryerrors"),
    ]
    assert fake.drains() == []
