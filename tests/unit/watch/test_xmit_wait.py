"""Credit waits are not blamed on the sender (issue 30, item 8b). A port's PortXmitWait counts
the time it had data and no credits from the far end of its cable: when gpu002 is slow to take
what its job sends it, the leaf ports sending to gpu002 wait, and so does gpu001, which sends to
gpu002 (and its HCAs count it). The watcher named gpu001, the healthy sender, as the straggler
(and under drain/requeue would drain it and requeue the job). Now the node's own waits say
nothing against it; the leaf ports' waits toward a node do, on several of its links at once; one
waiting link is that link's, named as `link.congestion`, never a drain.

The lab's fabric as planned (rail r's leaf is su1-leaf-r<r>, gpu00N on its port N) in
ibnetdiscover's format; the waits in ibqueryerrors' `[PortXmitWait == N]` form (infiniband-diags
lists the counter with the errors). Figures are hand-set: a waiting port gains 1.27e8 ticks a
cycle (the size of a real `[PortXmitWait == 127475528 (121.570M)]` reading); a port that does
not wait is not listed (ibqueryerrors lists only ports with a counter above zero)."""

from __future__ import annotations

import pytest

from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import CycleResult, run_cycle
from cluster_tool.watch.state import WatchState
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText
from tests.unit.watch.fakes import (
    HCAS,
    CapturedSources,
    NodeReading,
    WatchSlurm,
    admin,
    port_counters,
)

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
WORDS = 6_000_000_000  # PortXmitData words per cycle per rail: every node sends alike
WAIT = 127_475_528  # PortXmitWait ticks a waiting port gains per cycle


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def fabric(lab: Cluster, waits: dict[tuple[str, int], int]) -> HostResult:
    """ibqueryerrors listing `waits`: (node description, port) -> PortXmitWait."""
    text = FabricText.from_plan(cabling_plan(lab), switch_links(lab), speed="HDR")
    text.model = "MQM8700"
    lines = []
    for i, ((description, port), value) in enumerate(sorted(waits.items())):
        guid = 0x9C05910300001000 + i
        lines.append(f'Errors for {guid:#x} "{description}"')
        lines.append(f"   GUID {guid:#x} port {port}: [PortXmitWait == {value}]")
    lines += [
        "",
        f"## Summary: 45 nodes checked, {len(waits)} bad nodes found",
        f"##          110 ports checked, {len(waits)} ports have errors beyond threshold",
    ]
    return HostResult(
        "head",
        outputs={
            "ibnetdiscover": ProbeOutput(0, text.text()),
            "ibqueryerrors": ProbeOutput(1 if waits else 0, "\n".join(lines) + "\n"),
        },
    )


def leaf(rail: int) -> str:
    return f"MF0;su1-leaf-r{rail}:MQM8700/U1"


def run(
    lab: Cluster,
    *,
    sender_waits: set[str],
    toward: dict[str, list[int]],
    with_fabric: bool = True,
    cycles: int = 4,
) -> tuple[WatchSlurm, list[CycleResult]]:
    """Job 7001 on the four nodes, `cycles` cycles (the first a baseline). Each cycle every node
    sends alike; the nodes in `sender_waits` count PortXmitWait on all their HCAs; the leaf
    ports sending to `toward[node]`'s rails count it on the fabric's side."""
    fake = WatchSlurm(NODES)
    fake.running = {"7001": ("gpu[001-004]", "", "ckpt watch-requeue")}
    policy = Watch(policy="requeue", checkpoint_grace_s=0)
    state, out = WatchState(), []
    for i in range(cycles):
        readings = {
            n: NodeReading(
                counters=port_counters(
                    {d: WORDS * i for d, _, _ in HCAS}, wait=WAIT * i if n in sender_waits else 0
                )
            )
            for n in NODES
        }
        waits: dict[tuple[str, int], int] = {}
        for n in sender_waits:
            for d, _, _ in HCAS:
                waits[(f"{n} {d}", 1)] = WAIT * i
        for n, rails in toward.items():
            for r in rails:
                waits[(leaf(r), NODES.index(n) + 1)] = WAIT * i
        sources = CapturedSources(readings, fabric=fabric(lab, waits) if with_fabric else None)
        out.append(run_cycle(lab, state, sources, admin(fake), policy, 60.0 * i))
    return fake, out


def named(result: CycleResult) -> list[str | None]:
    return [f.node for f in result.findings if f.check == "watch.straggler"]


def test_the_slow_receiver_is_named_not_the_sender_that_waits_for_it(lab: Cluster) -> None:
    fake, results = run(lab, sender_waits={"gpu001"}, toward={"gpu002": list(range(8))})
    assert [named(r) for r in results] == [[], [], [], ["gpu002"]]
    (finding,) = [f for f in results[-1].findings if f.check == "watch.straggler"]
    # The evidence names the link and the port that waited: the leaf's end, toward gpu002.
    assert "PortXmitWait toward mlx5_3 rail 1 at su1-leaf-r1 port 2" in finding.message
    assert list(fake.drained) == ["gpu002"]
    assert fake.requeued == ["7001"]
    # Both ends of the sender's cables are named as congestion, never as its fault.
    congestion = {f.node for f in results[-1].findings if f.check == "link.congestion"}
    assert congestion == {"gpu001", "gpu002"}
    assert all(not f.fails for f in results[-1].findings if f.check == "link.congestion")


def test_a_node_whose_own_hcas_wait_is_not_the_straggler(lab: Cluster) -> None:
    # Without the fabric's side the waits of gpu001's HCAs point at nobody it can name.
    fake, results = run(lab, sender_waits={"gpu001"}, toward={}, with_fabric=False)
    assert [named(r) for r in results] == [[], [], [], []]
    assert fake.drains() == [] and fake.requeued == []


def test_one_waiting_link_toward_a_node_is_the_links_not_a_drain(lab: Cluster) -> None:
    fake, results = run(lab, sender_waits=set(), toward={"gpu003": [5]})
    assert [named(r) for r in results] == [[], [], [], []]
    congestion = [
        (f.node, f.component, f.severity)
        for f in results[-1].findings
        if f.check == "link.congestion"
    ]
    assert congestion == [("gpu003", "mlx5_9", "info")]
    assert fake.drains() == []
