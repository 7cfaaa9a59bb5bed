"""Slurm's own reboots are not flaps (issue 30, item 8c). `scontrol reboot` takes every link of
the node down: the switch port and the HCA each count LinkDowned +1, which the watcher read as
`link.flap` and drained the node for. Now a cable whose node Slurm showed rebooting
(REBOOT_REQUESTED / REBOOT_ISSUED, this cycle or the last) or whose BootTime moved is
`link.downed-reboot` (info, the `validate` id for the same thing), and a flap after the reboot is
still a flap.

Slurm's words are as `scontrol show node` prints them during a reboot it issued:
`State=DOWN+CLOUD+REBOOT_ISSUED ... BootTime=2023-01-26T09:56:30 ... Reason=Reboot ASAP : reboot
issued [slurm@2023-01-26T10:11:39]` (Slurm 22.05.7, aws-parallelcluster-node
tests/common/schedulers/test_slurm_commands.py); the CLOUD flag is that site's and left out.
The fabric is the lab's as planned: su1-leaf-r0 port 3 is gpu003 mlx5_0."""

from __future__ import annotations

import pytest

from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult
from cluster_tool.slurm import parse_scontrol_nodes
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import CycleResult, run_cycle
from cluster_tool.watch.state import WatchState, load_state, save_state
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText
from tests.unit.watch.fakes import CapturedSources, NodeReading, WatchSlurm, admin

LEAF = "MF0;su1-leaf-r0:MQM8700/U1"
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
ISSUED = "DOWN+REBOOT_ISSUED Reason=Reboot ASAP : reboot issued [slurm@2023-01-26T10:11:39]"
BOOTED = "2023-01-26T09:56:30"
BOOTED_AGAIN = "2023-01-26T10:14:02"


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def fabric(lab: Cluster, leaf_downed: int, hca: dict[str, int]) -> HostResult:
    """ibqueryerrors with su1-leaf-r0 port 3's LinkDowned and gpu003 mlx5_0's counters."""
    text = FabricText.from_plan(cabling_plan(lab), switch_links(lab), speed="HDR")
    text.model = "MQM8700"
    errors = (
        f'Errors for 0x9c05910300000000 "{LEAF}"\n'
        f"   GUID 0x9c05910300000000 port 3: [LinkDownedCounter == {leaf_downed}]\n"
    )
    if hca:
        counters = " ".join(f"[{k} == {v}]" for k, v in hca.items())
        errors += (
            'Errors for 0x9c05910300000031 "gpu003 mlx5_0"\n'
            f"   GUID 0x9c05910300000031 port 1: {counters}\n"
        )
    errors += (
        "\n## Summary: 45 nodes checked, 2 bad nodes found\n"
        "##          110 ports checked, 2 ports have errors beyond threshold\n"
    )
    return HostResult(
        "head",
        outputs={
            "ibnetdiscover": ProbeOutput(0, text.text()),
            "ibqueryerrors": ProbeOutput(1, errors),
        },
    )


def run(
    lab: Cluster, steps: list[tuple[str | None, str, int, dict[str, int]]]
) -> tuple[WatchSlurm, list[CycleResult]]:
    """One cycle per step: (gpu003's State= or None for IDLE, its BootTime, the leaf port's
    LinkDowned, gpu003 mlx5_0's counters); the state goes through its file between cycles."""
    fake = WatchSlurm(NODES)
    state, out = WatchState(), []
    for i, (shown, boot, leaf_downed, hca) in enumerate(steps):
        fake.shown = {"gpu003": shown} if shown else {}
        fake.boot = {n: BOOTED for n in NODES} | {"gpu003": boot}
        sources = CapturedSources(
            {n: NodeReading() for n in NODES}, fabric=fabric(lab, leaf_downed, hca)
        )
        watch = Watch(policy="drain")
        out.append(run_cycle(lab, state, sources, admin(fake), watch, 1000.0 + 60 * i))
    return fake, out


def on_gpu003(result: CycleResult) -> list[tuple[str, str]]:
    """gpu003's link findings (the real nvidia-smi capture adds gpu.throttle warnings)."""
    return [
        (f.check, f.severity)
        for f in result.findings
        if f.node == "gpu003" and f.check.startswith("link.")
    ]


def test_slurms_reboot_is_not_a_flap_and_a_flap_after_it_still_is(lab: Cluster) -> None:
    fake, (base, rebooting, back, flapped) = run(
        lab,
        [
            (None, BOOTED, 2, {}),
            # `scontrol reboot`: both ends of the cable count LinkDowned +1.
            (ISSUED, BOOTED, 3, {"LinkDownedCounter": 1}),
            # Back in service, booted again; the driver's load took the link down once more.
            (None, BOOTED_AGAIN, 4, {"LinkDownedCounter": 2}),
            # Nothing rebooted now: a link going down is a flap again.
            (None, BOOTED_AGAIN, 5, {"LinkDownedCounter": 2}),
        ],
    )
    assert on_gpu003(base) == []
    assert on_gpu003(rebooting) == [("link.downed-reboot", "info")]
    (note,) = [f for f in rebooting.findings if f.check == "link.downed-reboot"]
    assert note.component == "mlx5_0"
    assert "su1-leaf-r0 port 3: LinkDownedCounter +1" in (note.observed or "")
    assert "gpu003 mlx5_0: LinkDownedCounter +1" in (note.observed or "")
    assert "Slurm's reboot, REBOOT_ISSUED" in note.message
    assert on_gpu003(back) == [("link.downed-reboot", "info")]
    assert on_gpu003(flapped) == [("link.flap", "error")]
    assert [(a.kind, a.node, a.check) for r in (rebooting, back) for a in r.actions] == []
    assert list(fake.drained) == ["gpu003"] and "link.flap" in fake.drained["gpu003"]


def test_a_reboot_seen_only_by_its_new_boot_time_is_not_a_flap(lab: Cluster) -> None:
    """The reboot began and ended between two cycles: Slurm no longer shows its flags, the
    node's BootTime moved; its HCA's counters start again from zero (read lower than before)."""
    fake, (_, after) = run(
        lab,
        [
            (None, BOOTED, 2, {"SymbolErrorCounter": 5}),
            (None, BOOTED_AGAIN, 3, {"LinkDownedCounter": 1}),
        ],
    )
    assert on_gpu003(after) == [("link.downed-reboot", "info")]
    (note,) = [f for f in after.findings if f.check == "link.downed-reboot"]
    assert f"booted {BOOTED_AGAIN}, BootTime was {BOOTED}" in note.message
    assert fake.drains() == []


def test_the_reboot_is_remembered_across_a_restart_of_the_watcher(
    lab: Cluster, tmp_path: pytest.TempPathFactory
) -> None:
    """REBOOT_ISSUED seen in the cycle before a restart still explains the next cycle's
    LinkDowned: the flag and the boot time are in the state file."""
    fake = WatchSlurm(NODES)
    fake.boot = {n: BOOTED for n in NODES}
    state = WatchState()
    fake.shown = {"gpu003": ISSUED}
    sources = CapturedSources({n: NodeReading() for n in NODES}, fabric=fabric(lab, 2, {}))
    run_cycle(lab, state, sources, admin(fake), Watch(policy="drain"), 1000.0)
    save_state(tmp_path, state)  # type: ignore[arg-type]
    restarted = load_state(tmp_path).state  # type: ignore[arg-type]
    fake.shown, fake.boot["gpu003"] = {}, BOOTED_AGAIN
    sources = CapturedSources({n: NodeReading() for n in NODES}, fabric=fabric(lab, 3, {}))
    result = run_cycle(lab, restarted, sources, admin(fake), Watch(policy="drain"), 1060.0)
    assert on_gpu003(result) == [("link.downed-reboot", "info")]
    assert fake.drains() == []


def test_scontrol_show_node_gives_the_boot_time_and_the_reboot_flags() -> None:
    (node,) = parse_scontrol_nodes(
        "NodeName=gpu003 Arch=x86_64 CoresPerSocket=1 State=DOWN+CLOUD+REBOOT_ISSUED "
        "ThreadsPerCore=1 NextState=RESUME Partitions=queue1 BootTime=2023-01-26T09:56:30 "
        "SlurmdStartTime=2023-01-26T09:57:15 LastBusyTime=2023-01-26T09:57:15 "
        "Reason=Reboot ASAP : reboot issued [slurm@2023-01-26T10:11:39]\n"
    )
    assert (node.state, node.boot_time, node.reason) == (
        "DOWN",
        "2023-01-26T09:56:30",
        "Reboot ASAP : reboot issued",
    )
    assert "REBOOT_ISSUED" in node.flags
