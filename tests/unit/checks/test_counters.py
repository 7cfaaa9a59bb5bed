"""Port counters judged as deltas between a snapshot before the run's traffic and one after,
and link flaps from those deltas and from the kernel log. Figures are hand-counted; the cable
names come from the lab spec's cabling plan (gpu003 mlx5_0 on su1-leaf-r0 port 3)."""

from __future__ import annotations

import pytest

from cluster_tool.checks.counters import (
    CounterSnapshot,
    check_counter_deltas,
    drop_reboot_link_downs,
    port_deltas,
    snapshot,
)
from cluster_tool.checks.fabric import check_fabric, fabric_findings
from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.findings import Finding
from cluster_tool.parsers.ibcounters import IbQueryErrors, parse_ibqueryerrors, parse_perfquery
from cluster_tool.parsers.ibnetdiscover import Fabric, parse_ibnetdiscover
from cluster_tool.probes import ProbeOutput
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText

LEAF = "MF0;su1-leaf-r0:MQM8700/U1"
HOUR = 3600.0


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


@pytest.fixture(scope="module")
def fabric(lab: Cluster) -> Fabric:
    text = FabricText.from_plan(cabling_plan(lab), switch_links(lab), speed="HDR")
    text.model = "MQM8700"
    return parse_ibnetdiscover(text.text())


def ibqueryerrors(*lines: str, pma_failures: int = 0) -> IbQueryErrors:
    """ibqueryerrors output with `lines` (`node|port|[Counter == n] ...`) and its summary."""
    out = []
    for line in lines:
        node, port, counters = line.split("|")
        head = f'Errors for 0x9c05910300000000 "{node}"' if node == LEAF else f'Errors for "{node}"'
        out += [head, f"   GUID 0x9c05910300000000 port {port}: {counters}"]
    out += [
        "",
        "## Summary: 45 nodes checked, 1 bad nodes found",
        f"##          110 ports checked, {len(lines)} ports have errors beyond threshold",
    ]
    if pma_failures:
        out.append(f"##          {pma_failures} PMA query failures")
    return parse_ibqueryerrors("\n".join(out) + "\n")


def snap(at: float, *lines: str) -> CounterSnapshot:
    return snapshot(ibqueryerrors(*lines), at)


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [f.message for f in findings]
    return findings[0]


def test_link_downs_of_a_reboot_before_the_snapshot_do_not_fail_the_node(
    lab: Cluster, fabric: Fabric
) -> None:
    # gpu003 was power-cycled in the maintenance: the leaf end counted its link going down
    # twice, and the HCA end (reset at boot) nothing. The run's traffic then changed nothing.
    reading = (f"{LEAF}|3|[LinkDownedCounter == 2]",)
    before, after = snap(0, *reading), snap(HOUR / 4, *reading)
    assert check_counter_deltas(lab, fabric, before, after) == []
    # Read alone (a plain validate --fabric, no snapshot), the same count is history: info.
    absolute = fabric_findings(lab, fabric, ibqueryerrors(*reading), host="sm")
    assert [(f.check, f.node, f.severity) for f in absolute] == [
        ("link.downed-history", "gpu003", "info")
    ]


def test_a_link_that_went_down_during_the_traffic_is_a_flap_naming_its_cable(
    lab: Cluster, fabric: Fabric
) -> None:
    before = snap(0, f"{LEAF}|3|[LinkDownedCounter == 2]")
    after = snap(
        HOUR / 4,
        f"{LEAF}|3|[LinkDownedCounter == 5]",
        "gpu003 mlx5_0|1|[LinkDownedCounter == 3]",
    )
    f = only(check_counter_deltas(lab, fabric, before, after))
    assert (f.check, f.severity, f.node, f.component) == ("link.flap", "error", "gpu003", "mlx5_0")
    assert f.message.startswith("gpu003 mlx5_0 ↔ su1-leaf-r0 port 3: the link went down")
    assert f.message.endswith(
        "and is up again now (at su1-leaf-r0 port 3: LinkDownedCounter +3; "
        "at gpu003 mlx5_0: LinkDownedCounter +3, 15 min of traffic)"
    )


def test_error_counters_are_judged_per_hour_of_traffic(lab: Cluster, fabric: Fabric) -> None:
    # SymbolErrorCounter's limit is 10 an hour: 30 minutes of traffic may add 5, not 6.
    before = snap(0, f"{LEAF}|3|[SymbolErrorCounter == 100]")
    five = snap(HOUR / 2, f"{LEAF}|3|[SymbolErrorCounter == 105]")
    six = snap(HOUR / 2, f"{LEAF}|3|[SymbolErrorCounter == 106]")
    assert check_counter_deltas(lab, fabric, before, five) == []
    f = only(check_counter_deltas(lab, fabric, before, six))
    assert (f.check, f.severity, f.node, f.component) == (
        "link.errors",
        "error",
        "gpu003",
        "mlx5_0",
    )
    assert f.observed == "at su1-leaf-r0 port 3: SymbolErrorCounter +6 (limit 10/h)"
    # A port absent before (ibqueryerrors lists only ports above zero) read zero then.
    fresh = snap(HOUR / 2, "gpu002 mlx5_3|1|[PortRcvErrors == 11] [PortXmitDiscards == 1]")
    f = only(check_counter_deltas(lab, fabric, snap(0), fresh))
    assert (f.check, f.node, f.component, f.observed) == (
        "link.errors",
        "gpu002",
        "mlx5_3",
        "at gpu002 mlx5_3: PortRcvErrors +11 (limit 10/h)",
    )


def test_a_counter_cleared_between_the_reads_is_unknown_never_negative(
    lab: Cluster, fabric: Fabric
) -> None:
    before = snap(0, f"{LEAF}|3|[SymbolErrorCounter == 500] [LinkDownedCounter == 4]")
    after = snap(HOUR, f"{LEAF}|3|[SymbolErrorCounter == 20] [LinkDownedCounter == 4]")
    (delta,) = port_deltas(before, after)
    assert delta.delta == {} and "SymbolErrorCounter" in delta.unknown
    f = only(check_counter_deltas(lab, fabric, before, after))
    assert (f.check, f.severity, f.node) == ("link.counters-unknown", "warning", "gpu003")
    assert "read 20 after 500" in f.message


def test_a_saturated_counter_counts_as_at_least_its_climb(lab: Cluster, fabric: Fabric) -> None:
    # LinkErrorRecoveryCounter is 8 bits: it stops at 255. 250 -> 255 is at least 5 recoveries.
    before = snap(0, "gpu003 mlx5_0|1|[LinkErrorRecoveryCounter == 250]")
    after = snap(HOUR, "gpu003 mlx5_0|1|[LinkErrorRecoveryCounter == 255]")
    f = only(check_counter_deltas(lab, fabric, before, after))
    assert (f.check, f.observed) == (
        "link.errors",
        "at gpu003 mlx5_0: LinkErrorRecoveryCounter +at least 5 (limit 0/h)",
    )
    # Pinned at the maximum in both reads: nothing can be said, and the run says so.
    stuck = snap(0, "gpu003 mlx5_0|1|[LinkErrorRecoveryCounter == 255]")
    f = only(check_counter_deltas(lab, fabric, stuck, after))
    assert (f.check, f.severity) == ("link.counters-unknown", "warning")


def test_transmit_wait_is_congestion_never_an_error(lab: Cluster, fabric: Fabric) -> None:
    before = snap(0, f"{LEAF}|3|[PortXmitWait == 1000]")
    after = snap(HOUR, f"{LEAF}|3|[PortXmitWait == 5001000]")
    f = only(check_counter_deltas(lab, fabric, before, after))
    assert (f.check, f.severity) == ("link.congestion", "info")
    assert f.observed == "at su1-leaf-r0 port 3: PortXmitWait +5000000"
    strict = lab.model_copy(deep=True)
    strict.thresholds.health.ib_xmit_wait_warn_per_hour = 1_000_000
    f = only(check_counter_deltas(strict, fabric, before, after))
    assert (f.check, f.severity) == ("link.congestion", "warning")


def test_ports_one_read_could_not_answer_for_are_not_judged(lab: Cluster, fabric: Fabric) -> None:
    # A PMA query failed in the second read: a port it does not list may not be zero.
    before = snap(0, f"{LEAF}|3|[SymbolErrorCounter == 100]")
    after = snapshot(ibqueryerrors(pma_failures=1), HOUR)
    assert not after.complete
    assert check_counter_deltas(lab, fabric, before, after) == []


def test_the_snapshot_survives_the_run_record(lab: Cluster, fabric: Fabric) -> None:
    before = snap(1700000000.5, f"{LEAF}|3|[LinkDownedCounter == 2] [PortXmitWait == 7]")
    assert CounterSnapshot.from_json(before.to_json()) == before
    with pytest.raises(ValueError, match="not a port counter snapshot"):
        CounterSnapshot.from_json({"taken_at": "soon", "ports": []})


def test_absolute_link_downs_of_a_rebooted_node_are_set_aside_only_for_it(
    lab: Cluster, fabric: Fabric
) -> None:
    counters = ibqueryerrors(
        f"{LEAF}|3|[LinkDownedCounter == 2]",  # gpu003 mlx5_0's leaf end
        f"{LEAF}|2|[LinkDownedCounter == 1]",  # gpu002 mlx5_0's leaf end
    )
    kept, notes = drop_reboot_link_downs(lab, fabric, counters, rebooted={"gpu003"})
    # gpu002 was not rebooted in this run: its count is history, still not an error.
    judged = fabric_findings(lab, fabric, counters, host="sm", rebooted={"gpu003"})
    assert sorted((f.check, f.node, f.severity) for f in judged) == [
        ("link.downed-history", "gpu002", "info"),
        ("link.downed-reboot", "gpu003", "info"),
    ]
    note = only(notes)
    assert (note.check, note.severity, note.node, note.component) == (
        "link.downed-reboot",
        "info",
        "gpu003",
        "mlx5_0",
    )
    # Another counter on the rebooted node's cable is still judged.
    dirty = ibqueryerrors(f"{LEAF}|3|[SymbolErrorCounter == 60] [LinkDownedCounter == 2]")
    kept, _ = drop_reboot_link_downs(lab, fabric, dirty, rebooted={"gpu003"})
    f = only(check_fabric(lab, fabric, counters=kept))
    assert (f.check, f.node, f.observed) == ("fabric.errors", "gpu003", "SymbolErrorCounter 60")


def test_a_port_that_goes_down_again_and_again_in_the_kernel_log_is_a_flap() -> None:
    # Node health over the kernel-log probe: gpu001's mlx5_0 (0000:18:00.0 ibp24s0 in the HGX
    # profile) went down twice after boot, the second time seen late (a Link up after a Link up).
    one_su = load_spec(REPO / "examples" / "h100-1su.yml")
    row = next(r for r in cabling_plan(one_su) if (r.node, r.hca) == ("gpu001", "mlx5_0"))
    log = (
        "[   20.5] mlx5_core 0000:18:00.0 ibp24s0: Link up\n"
        "[ 3600.1] mlx5_core 0000:18:00.0 ibp24s0: Link down\n"
        "[ 3601.9] mlx5_core 0000:18:00.0 ibp24s0: Link up\n"
        "[ 7200.0] mlx5_core 0000:18:00.0 ibp24s0: Link up\n"
        "[ 7300.0] mlx5_core 0000:29:00.0 enp41s0f0np0: Link down\n"  # storage NIC: not judged
        "[ 7301.0] mlx5_core 0000:29:00.0 enp41s0f0np0: Link down\n"
    )
    expect = expectations_for(one_su, "gpu001", nccl_conf="")

    def flaps(text: str) -> list[Finding]:
        findings = check_node(expect, {"kernel-log": ProbeOutput(0, text)})
        return [f for f in findings if f.check.startswith(("link.", "os.kernel-log"))]

    f = only(flaps(log))
    assert (f.check, f.severity, f.node, f.component, f.observed) == (
        "link.flap",
        "error",
        "gpu001",
        "mlx5_0",
        "down 2 times",
    )
    assert f.message.startswith(f"gpu001 mlx5_0 ↔ {row.leaf} port {row.leaf_port}: ")
    assert "it is up now" in f.message
    # One down and back (a reboot, a re-seat) is not a flap.
    assert flaps("".join(log.splitlines(keepends=True)[:3])) == []
    # A line that looks like a link change and is not one: the kernel log is unreadable.
    f = only(flaps("[ 1.0] mlx5_core 0000:18:00.0 ibp24s0: Link flapped\n"))
    assert (f.check, f.component) == ("os.kernel-log", "kernel-log")


def test_the_fabric_check_judges_deltas_when_the_run_has_a_snapshot(
    lab: Cluster, fabric: Fabric
) -> None:
    # What validate's fabric check reads on the SM host: gpu003 power-cycled in the
    # maintenance, its leaf end counted the link going down twice.
    reading = f"{LEAF}|3|[LinkDownedCounter == 2]"
    counters = ibqueryerrors(reading)

    def judged(**kwargs: object) -> list[tuple[str, str | None, str]]:
        findings = fabric_findings(lab, fabric, counters, host="sm", **kwargs)  # type: ignore[arg-type]
        return [(f.check, f.node, f.severity) for f in findings]

    assert judged() == [("link.downed-history", "gpu003", "info")]  # absolute: history
    assert judged(counters_before=snap(0, reading), read_at=HOUR / 4) == []
    assert judged(rebooted={"gpu003"}) == [("link.downed-reboot", "gpu003", "info")]
    # A link down during the traffic is still found, named as a flap.
    climbed = snap(0, f"{LEAF}|3|[LinkDownedCounter == 1]")
    assert judged(counters_before=climbed, read_at=HOUR / 4) == [("link.flap", "gpu003", "error")]


def test_an_absolute_link_down_count_is_history_naming_the_cable_never_an_error(
    lab: Cluster, fabric: Fabric
) -> None:
    # A plain validate --fabric after gpu003 was power-cycled once: both ends of its mlx5_0
    # cable (su1-leaf-r0 port 3 in the lab's plan) counted the link going down.
    both_ends = (f"{LEAF}|3|[LinkDownedCounter == 1]", "gpu003 mlx5_0|1|[LinkDownedCounter == 1]")
    f = only(fabric_findings(lab, fabric, ibqueryerrors(*both_ends), host="sm"))
    assert (f.check, f.severity, f.node, f.component) == (
        "link.downed-history",
        "info",
        "gpu003",
        "mlx5_0",
    )
    assert not f.fails
    assert f.observed == (
        "su1-leaf-r0 port 3: LinkDownedCounter 1; gpu003 mlx5_0: LinkDownedCounter 1"
    )
    assert f.message.startswith(
        "gpu003 mlx5_0 ↔ su1-leaf-r0 port 3: the link went down at some time since the "
        "counters were last cleared (a reboot, reseat or switch reload does that)"
    )
    assert "`validate --after-maintenance`" in f.message  # how to judge it: a window

    # The other counters of the same port are judged as before: SymbolError 60 > 10 fails.
    dirty = ibqueryerrors(f"{LEAF}|3|[SymbolErrorCounter == 60] [LinkDownedCounter == 1]")
    judged = fabric_findings(lab, fabric, dirty, host="sm")
    assert sorted((f.check, f.severity, f.observed) for f in judged) == [
        ("fabric.errors", "error", "SymbolErrorCounter 60"),
        ("link.downed-history", "info", "su1-leaf-r0 port 3: LinkDownedCounter 1"),
    ]

    # At its maximum no delta can show it going down again: a warning, still not an error.
    pinned = ibqueryerrors(f"{LEAF}|3|[LinkDownedCounter == 255]")
    f = only(fabric_findings(lab, fabric, pinned, host="sm"))
    assert (f.check, f.severity) == ("link.downed-history", "warning")
    assert "stopped at its maximum 255" in f.message and "perfquery -R" in f.message

    # At or below the spec's ib_link_downed_max nothing is said.
    relaxed = lab.model_copy(deep=True)
    relaxed.thresholds.health.ib_link_downed_max = 1
    assert fabric_findings(relaxed, fabric, ibqueryerrors(*both_ends), host="sm") == []


def test_perfquery_link_downs_are_history_too(lab: Cluster, fabric: Fabric) -> None:
    # fabric check --counters with perfquery output: ports named by LID through the fabric.
    lid = next(p.lid for n in fabric.cas if n.description == "gpu004 mlx5_11" for p in n.ports)
    blocks = parse_perfquery(
        f"# Port counters: Lid {lid} port 1 (CapMask: 0x1400)\n"
        "PortSelect:......................1\nSymbolErrorCounter:..............0\n"
        "LinkDownedCounter:...............3\n"
    )
    f = only(fabric_findings(lab, fabric, blocks, host="sm"))
    assert (f.check, f.severity, f.node, f.component) == (
        "link.downed-history",
        "info",
        "gpu004",
        "mlx5_11",
    )
    assert f.observed == "gpu004 mlx5_11: LinkDownedCounter 3"
