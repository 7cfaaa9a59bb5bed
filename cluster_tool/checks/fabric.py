"""The wiring check: the fabric `ibnetdiscover` saw against the cabling plan.

Every finding names both cable ends in the operator's words ("gpu017 mlx5_3 is cabled to
su1-leaf-r2 port 17; expected su1-leaf-r3 port 17"). Only planned ports are judged: an unused
switch port that is Down or Polling is not a fault, so nothing here ever greps for "Down".
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cluster_tool.checks.counters import CounterSnapshot, judge_counters
from cluster_tool.errors import ParseError
from cluster_tool.fabric.departures import departures
from cluster_tool.fabric.plan import CablingRow, FabricPlan, plan_for
from cluster_tool.findings import Finding, Severity
from cluster_tool.parsers.base import collector_paused
from cluster_tool.parsers.ibcounters import (
    IbQueryErrors,
    PerfCounters,
    parse_ibqueryerrors,
    parse_perfquery,
)
from cluster_tool.parsers.ibnetdiscover import CA, SWITCH, Fabric, parse_ibnetdiscover
from cluster_tool.spec.models import LANE_RATE_GBPS, WIDTH_LANES, Cluster

__all__ = [
    "PortLocation",
    "check_counters",
    "check_fabric",
    "fabric_findings",
    "parse_counters",
]


@dataclass(frozen=True)
class PortLocation:
    """Where a cable end lands: a switch (by plan name) and its port, with the link's shape."""

    switch: str
    port: int
    width: int | None = None
    speed: str | None = None

    def __str__(self) -> str:
        return f"{self.switch} port {self.port}"


def _expected_links(cluster: Cluster) -> dict[str | None, tuple[int, str]]:
    """(lanes, generation) each node's links should train at: its profile's; the fabric's
    for switch links (key None) and hosts without a profile."""
    fabric = (WIDTH_LANES[cluster.fabric.expected_width], cluster.fabric.expected_speed)
    out: dict[str | None, tuple[int, str]] = {None: fabric}
    for host in cluster.hosts():
        p = host.profile
        out[host.name] = (WIDTH_LANES[p.expected_width], p.expected_speed) if p else fabric
    return out


def _link_findings(
    expected: dict[str | None, tuple[int, str]],
    node: str | None,
    component: str | None,
    ends: Callable[[], str],
    width: int | None,
    speed: str | None,
) -> list[Finding]:
    """fabric.width / fabric.speed for a link that trained below the plan. `ends` names the
    cable; it is worded only for a finding (65,000 links at 4,096 nodes, nearly all fine)."""
    lanes, generation = expected.get(node, expected[None])
    narrow = width is not None and width < lanes
    slow = speed is not None and speed != generation and _slower(speed, generation)
    if not narrow and not slow:
        return []
    out: list[Finding] = []
    if narrow:
        out.append(
            Finding(
                check="fabric.width",
                node=node,
                component=component,
                expected=f"{lanes}X",
                observed=f"{width}X",
                message=f"{ends()} trained at {width}X; expected {lanes}X",
            )
        )
    if slow:
        out.append(
            Finding(
                check="fabric.speed",
                node=node,
                component=component,
                expected=generation,
                observed=speed,
                message=f"{ends()} runs at {speed}; expected {generation}",
            )
        )
    return out


# Per-lane rate of every generation ibnetdiscover names, to tell slower from faster.
_LANE_GBPS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    **{k: float(v) for k, v in LANE_RATE_GBPS.items()},
}


def _slower(observed: str, expected: str) -> bool:
    seen, want = _LANE_GBPS.get(observed), _LANE_GBPS.get(expected)
    if seen is None or want is None:
        return observed != expected
    return seen < want


def _split_description(description: str) -> tuple[str, str | None]:
    """rdma-ndd `"%h %d"`: ("gpu001", "mlx5_0"); a description without a device keeps None."""
    host, sep, device = description.rpartition(" ")
    if not sep:
        return description, None
    return host, device


@collector_paused()
def check_fabric(
    cluster: Cluster,
    fabric: Fabric,
    *,
    plan: FabricPlan | None = None,
    counters: IbQueryErrors | Sequence[PerfCounters] | None = None,
    nodes: Iterable[str] | None = None,
) -> list[Finding]:
    """Every way the discovered fabric differs from the plan; empty when it is as planned.

    `nodes` narrows the host-cable findings to those nodes (a maintenance window on a few
    nodes); the switch-to-switch links are always judged in full.
    """
    plan = plan or plan_for(cluster)
    name_of = cluster.fabric.switch_name
    only = set(nodes) if nodes is not None else None
    expected = _expected_links(cluster)
    findings: list[Finding] = []

    # The switches, by plan name. A switch whose description does not match the pattern
    # keeps its raw description, so it still shows up (as unexpected) in the operator's words.
    switch_name: dict[str, str] = {}
    seen_switches: set[str] = set()
    for record in fabric.nodes:
        if record.kind == SWITCH:
            name = name_of(record.description) or record.description
            switch_name[record.description] = name
            seen_switches.add(name)

    def sw(description: str | None) -> str:
        if description is None:
            return "an unnamed switch"
        return switch_name.get(description) or name_of(description) or description

    # --- switches -------------------------------------------------------------------------
    missing_switches: set[str] = set()
    used = {row.leaf for row in plan.rows}
    used |= {link.spine for link in plan.links} | {link.leaf for link in plan.links}
    for name in sorted(set(plan.leaf_of) | plan.spines):
        if name in seen_switches or name not in used:
            continue
        missing_switches.add(name)
        findings.append(
            Finding(
                check="fabric.missing",
                component=name,
                expected=f"{name} in the fabric",
                observed="not discovered",
                message=f"switch {name} is not in the fabric: every cable planned on it is "
                "unreachable (switch down, or its name does not match the switch-name pattern)",
            )
        )
    for name in sorted(seen_switches - set(plan.leaf_of) - plan.spines):
        findings.append(
            Finding(
                check="fabric.unexpected",
                severity="warning",
                component=name,
                expected="only the plan's leaves and spines",
                observed=name,
                message=f"switch {name} is in the fabric but not in the plan",
            )
        )

    # --- host cables ------------------------------------------------------------------------
    observed: dict[tuple[str, str], PortLocation] = {}
    extra: list[tuple[str, str | None, PortLocation]] = []
    planned = {(row.node, row.hca): row for row in plan.rows}
    for ca_description, where in _ca_cables(fabric, sw):
        host, device = _split_description(ca_description)
        if device is not None and (host, device) in planned:
            observed[(host, device)] = where
        else:
            extra.append((host, device, where))

    rows_by_node: dict[str, list[CablingRow]] = defaultdict(list)
    for row in plan.rows:
        rows_by_node[row.node].append(row)

    for node, rows in rows_by_node.items():
        if only is not None and node not in only:
            continue
        findings.extend(_node_cables(expected, plan, node, rows, observed, missing_switches))

    known_hosts = {h.name: h for h in cluster.hosts()}
    for host, device, where in extra:
        if only is not None and host not in only:
            continue
        label = f"{host} {device}" if device else host
        known = known_hosts.get(host)
        severity: Severity
        if known is not None and not known.is_gpu:
            severity = "info"  # a head or SM host with an HCA on the fabric
            why = f"{host} is not a GPU node"
        elif known is not None:
            severity = "error"  # a storage/management NIC on a compute rail
            why = f"{device} is not one of {host}'s compute HCAs"
        else:
            severity = "warning"
            why = f"{host} is not a host of the spec"
        findings.append(
            Finding(
                check="fabric.unexpected",
                severity=severity,
                node=host,
                component=device,
                expected="not on the compute fabric",
                observed=str(where),
                message=f"{label} is cabled to {where}, which the plan does not have ({why})",
            )
        )

    # --- leaf-spine links ---------------------------------------------------------------------
    findings.extend(_spine_links(expected, plan, fabric, sw, missing_switches))

    # --- the plan's own departures from the rail-optimized rule (an adopted fabric) ----------
    findings.extend(
        f for f in departures(plan, cluster) if only is None or f.node is None or f.node in only
    )

    # --- counters -------------------------------------------------------------------------------
    if counters is not None:
        findings.extend(check_counters(cluster, fabric, counters, nodes=only))
    return findings


def _node_cables(
    expected: dict[str | None, tuple[int, str]],
    plan: FabricPlan,
    node: str,
    rows: list[CablingRow],
    observed: dict[tuple[str, str], PortLocation],
    missing_switches: set[str],
) -> list[Finding]:
    out: list[Finding] = []
    wrong: dict[str, tuple[CablingRow, PortLocation]] = {}
    absent: list[CablingRow] = []
    for row in rows:
        where = observed.get((node, row.hca))
        if where is None:
            if row.leaf not in missing_switches:
                absent.append(row)
            continue
        if where.switch == row.leaf and where.port == row.leaf_port:
            out.extend(
                _link_findings(
                    expected,
                    node,
                    row.hca,
                    functools.partial("{} {} ↔ {}".format, node, row.hca, where),
                    where.width,
                    where.speed,
                )
            )
        else:
            wrong[row.hca] = (row, where)

    # Two HCAs on each other's leaves: one swap, not two wrong rails.
    paired: set[str] = set()
    for a, (row_a, at_a) in sorted(wrong.items(), key=lambda kv: kv[1][0].rail):
        if a in paired:
            continue
        for b, (row_b, at_b) in sorted(wrong.items(), key=lambda kv: kv[1][0].rail):
            if b == a or b in paired:
                continue
            if at_a.switch == row_b.leaf and at_b.switch == row_a.leaf:
                paired |= {a, b}
                out.append(
                    Finding(
                        check="fabric.swapped",
                        node=node,
                        component=f"{a},{b}",
                        swapped=(a, b),
                        expected=f"{a} on {row_a.leaf} port {row_a.leaf_port}, "
                        f"{b} on {row_b.leaf} port {row_b.leaf_port}",
                        observed=f"{a} on {at_a}, {b} on {at_b}",
                        message=f"{node} {b} is cabled to {at_b}; expected {row_b.leaf} port "
                        f"{row_b.leaf_port} ({a} and {b} swapped: {a} is on {at_a})",
                    )
                )
                break

    for hca, (row, where) in wrong.items():
        if hca in paired:
            continue
        ends = f"{node} {hca} is cabled to {where}; expected {row.leaf} port {row.leaf_port}"
        placed = plan.leaf_of.get(where.switch)
        if where.switch == row.leaf:
            check, why = "fabric.wrong-port", "right leaf, wrong port"
        elif placed is None:
            check, why = "fabric.wrong-rail", f"{where.switch} is not a leaf of the plan"
        elif placed[0] != row.su:
            check, why = "fabric.wrong-su", f"a leaf of SU {placed[0]}, not SU {row.su}"
        else:
            check, why = "fabric.wrong-rail", f"the rail-{placed[1]} leaf, not rail {row.rail}"
        out.append(
            Finding(
                check=check,
                node=node,
                component=hca,
                expected=f"{row.leaf} port {row.leaf_port}",
                observed=str(where),
                message=f"{ends} ({why})",
            )
        )

    if absent and len(absent) == len(rows):
        out.append(
            Finding(
                check="fabric.missing",
                node=node,
                component=None,
                expected=f"{len(rows)} HCAs in the fabric",
                observed="none discovered",
                message=f"{node}: none of its {len(rows)} HCAs is in the fabric "
                f"(expected on {rows[0].leaf} port {rows[0].leaf_port} and the other rails' "
                "leaves): node down, HCAs down, or rdma-ndd not naming them",
            )
        )
    else:
        for row in absent:
            out.append(
                Finding(
                    check="fabric.link-down",
                    node=node,
                    component=row.hca,
                    expected=f"{node} {row.hca} ↔ {row.leaf} port {row.leaf_port}",
                    observed="no link",
                    message=f"{node} {row.hca} is not in the fabric; expected on {row.leaf} "
                    f"port {row.leaf_port} (link down or cable unplugged)",
                )
            )
    return out


def _peer_kind(peer_id: str, kinds: dict[str, str]) -> str | None:
    # ibnetdiscover ids say the kind: S-<guid> switch, H-<guid> CA; ibsim ids are names.
    kind = kinds.get(peer_id)
    if kind is not None:
        return kind
    return {"S-": SWITCH, "H-": CA}.get(peer_id[:2])


def _ca_cables(fabric: Fabric, name: Callable[[str | None], str]) -> list[tuple[str, PortLocation]]:
    """Every CA port's cable and the switch port it lands on (the parser's `ca_uplinks`
    without the GUID work this check does not need, which is most of its time)."""
    kinds = {n.node_id: n.kind for n in fabric.nodes}
    out: list[tuple[str, PortLocation]] = []
    seen: set[tuple[str, int]] = set()
    for node in fabric.nodes:
        if node.kind != CA:
            continue
        for p in node.ports:
            seen.add((node.description, p.port))
            out.append(
                (
                    node.description,
                    PortLocation(name(p.peer_description), p.peer_port, p.width, p.speed),
                )
            )
    for node in fabric.nodes:  # a CA seen only from its switch (an excerpt of a fabric)
        if node.kind != SWITCH:
            continue
        for p in node.ports:
            if p.peer_description is None or (p.peer_description, p.peer_port) in seen:
                continue
            if _peer_kind(p.peer_id, kinds) != CA:
                continue
            seen.add((p.peer_description, p.peer_port))
            out.append(
                (p.peer_description, PortLocation(name(node.description), p.port, p.width, p.speed))
            )
    return out


def _spine_links(
    expected: dict[str | None, tuple[int, str]],
    plan: FabricPlan,
    fabric: Fabric,
    name: Callable[[str | None], str],
    missing_switches: set[str],
) -> list[Finding]:
    peers: dict[tuple[str, int], tuple[str, int, int | None, str | None]] = {}
    kinds = {n.node_id: n.kind for n in fabric.nodes}
    names: dict[str | None, str] = {}  # a peer switch is named once, not once per cable
    for node in fabric.nodes:
        if node.kind != SWITCH:
            continue
        here = name(node.description)
        for p in node.ports:
            if _peer_kind(p.peer_id, kinds) == CA:
                continue
            peer = names.get(p.peer_description)
            if peer is None:
                peer = names[p.peer_description] = name(p.peer_description)
            peers[(here, p.port)] = (peer, p.peer_port, p.width, p.speed)
    out: list[Finding] = []
    planned_ports = set()
    for link in plan.links:
        planned_ports.add((link.leaf, link.leaf_port))
        planned_ports.add((link.spine, link.spine_port))
        if link.leaf in missing_switches or link.spine in missing_switches:
            continue
        got = peers.get((link.leaf, link.leaf_port))
        if got is not None and got[:2] == (link.spine, link.spine_port):
            width, speed = got[2], got[3]
            out.extend(
                _link_findings(
                    expected,
                    None,
                    link.leaf,
                    functools.partial(
                        "{} port {} ↔ {} port {}".format,
                        link.leaf,
                        link.leaf_port,
                        link.spine,
                        link.spine_port,
                    ),
                    width,
                    speed,
                )
            )
            continue
        want = f"{link.spine} port {link.spine_port}"
        ends = f"{link.leaf} port {link.leaf_port}"
        if got is None:
            back = peers.get((link.spine, link.spine_port))
            extra = f"; {want} goes to {back[0]} port {back[1]}" if back else ""
            out.append(
                Finding(
                    check="fabric.spine",
                    component=link.leaf,
                    expected=f"{ends} ↔ {want}",
                    observed="no link",
                    message=f"{ends} has no link; expected {want} (uplink down or unplugged)"
                    + extra,
                )
            )
            continue
        peer, peer_port = got[0], got[1]
        out.append(
            Finding(
                check="fabric.spine",
                component=link.leaf,
                expected=f"{ends} ↔ {want}",
                observed=f"{ends} ↔ {peer} port {peer_port}",
                message=f"{ends} is cabled to {peer} port {peer_port}; expected {want}",
            )
        )
    # Uplinks the plan does not have (a leaf cabled to another leaf, a stray spine cable).
    reported: set[tuple[str, int]] = set()
    unplanned = sorted(item for item in peers.items() if item[0] not in planned_ports)
    for (switch, port), (peer, peer_port, _w, _s) in unplanned:
        if (switch, port) in reported:
            continue
        if switch not in plan.leaf_of and switch not in plan.spines:
            continue
        reported |= {(switch, port), (peer, peer_port)}
        if (peer, peer_port) in planned_ports:
            continue  # the planned end reports it as miswired
        out.append(
            Finding(
                check="fabric.spine",
                severity="warning",
                component=switch,
                expected="no link",
                observed=f"{switch} port {port} ↔ {peer} port {peer_port}",
                message=f"{switch} port {port} is cabled to {peer} port {peer_port}, "
                "a switch link the plan does not have",
            )
        )
    return out


# --- counters ----------------------------------------------------------------------------


def _thresholds(cluster: Cluster) -> dict[str, int]:
    # LinkDownedCounter is not among them: an absolute count of link downs is every reboot,
    # reseat or switch reload since the counters were cleared, judged in checks/counters.py
    # (link.downed-history without a snapshot, link.flap as a delta over the run's traffic).
    h = cluster.thresholds.health
    return {
        "SymbolErrorCounter": h.ib_symbol_errors_max,
        "PortRcvErrors": h.ib_rcv_errors_max,
        "LinkErrorRecoveryCounter": h.ib_link_error_recovery_max,
    }


def check_counters(
    cluster: Cluster,
    fabric: Fabric,
    counters: IbQueryErrors | Sequence[PerfCounters],
    *,
    nodes: Iterable[str] | None = None,
) -> list[Finding]:
    """`fabric.errors` for each port whose error counters pass the spec's thresholds, naming
    the cable (both ends) from the discovered fabric."""
    limits = _thresholds(cluster)
    only = set(nodes) if nodes is not None else None
    name_of = cluster.fabric.switch_name

    def label(description: str) -> str:
        return name_of(description) or description if _is_switch(description) else description

    kinds = {n.description: n.kind for n in fabric.nodes}

    def _is_switch(description: str) -> bool:
        kind = kinds.get(description)
        if kind is not None:
            return kind == SWITCH
        # Not in this discovery: rdma-ndd host descriptions have a space, switch names none.
        return " " not in description.strip() and name_of(description) is not None

    # (description, port) -> the far end, as words.
    far: dict[tuple[str, int], str] = {}
    far_end: dict[tuple[str, int], tuple[str, int]] = {}
    for n in fabric.nodes:
        for p in n.ports:
            if p.peer_description is not None:
                far[(n.description, p.port)] = f"{label(p.peer_description)} port {p.peer_port}"
                far_end[(n.description, p.port)] = (p.peer_description, p.peer_port)
    # perfquery names ports by LID: map LIDs back to the fabric's nodes.
    by_lid: dict[int, str] = {}
    for n in fabric.nodes:
        if n.kind == SWITCH and n.lid is not None:
            by_lid[n.lid] = n.description
        for p in n.ports:
            if p.lid is not None:
                by_lid[p.lid] = n.description

    entries: list[tuple[str, int, dict[str, int]]] = []
    if isinstance(counters, IbQueryErrors):
        for pe in counters.error_ports:
            assert pe.port is not None
            entries.append((pe.node_description, pe.port, pe.counters))
    else:
        for block in counters:
            if block.port == 255 or block.lid not in by_lid:
                continue
            entries.append((by_lid[block.lid], block.port, block.counters))

    host_names = {h.name for h in cluster.hosts()}
    out: list[Finding] = []
    # Errors counted at both ends of one cable are one finding about that cable.
    by_cable: dict[frozenset[tuple[str, int]], int] = {}
    for description, port, values in entries:
        over = {k: v for k, v in values.items() if k in limits and v > limits[k]}
        if not over:
            continue
        if _is_switch(description):
            here = f"{label(description)} port {port}"
            peer = far.get((description, port))
            host, device = _split_description(peer.rsplit(" port ", 1)[0]) if peer else ("", None)
            node = host if device is not None and host in host_names else None
            component = device if node else label(description)
        else:
            host, device = _split_description(description)
            here = description if port == 1 else f"{description} port {port}"
            peer = far.get((description, port))
            node, component = host, device
        if only is not None and node not in only:
            continue
        ends = f"{here} ↔ {peer}" if peer else here
        what = ", ".join(f"{k} {v} > {limits[k]}" for k, v in sorted(over.items()))
        cable = frozenset({(description, port), far_end.get((description, port), ("", 0))})
        if cable in by_cable:
            first = out[by_cable[cable]]
            out[by_cable[cable]] = first.model_copy(
                update={"message": f"{first.message}; at {here}: {what}"}
            )
            continue
        by_cable[cable] = len(out)
        out.append(
            Finding(
                check="fabric.errors",
                node=node,
                component=component,
                expected=", ".join(f"{k} <= {limits[k]}" for k in sorted(over)),
                observed=", ".join(f"{k} {v}" for k, v in sorted(over.items())),
                message=f"{ends}: {what} (dirty or failing cable, optic or port)",
            )
        )
    return out


# --- what the subnet-manager host showed ---------------------------------------------------

Counters = IbQueryErrors | Sequence[PerfCounters]


class ToolOutput(Protocol):
    """A tool's output as collected from a host (a probe's `ProbeOutput`)."""

    @property
    def rc(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...
    @property
    def not_installed(self) -> bool: ...


def parse_counters(text: str) -> Counters:
    """Port error counters from `ibqueryerrors` or `perfquery` output, told apart by
    perfquery's block headers; ParseError when it is neither."""
    if "# Port counters" in text or "# Port extended counters" in text:
        return parse_perfquery(text)
    return parse_ibqueryerrors(text)


def fabric_findings(
    cluster: Cluster,
    ibnetdiscover: ToolOutput | Fabric | None,
    counters: ToolOutput | Counters | None,
    *,
    host: str | None = None,
    plan: FabricPlan | None = None,
    nodes: Iterable[str] | None = None,
    counters_required: bool = True,
    counters_before: CounterSnapshot | None = None,
    read_at: float | None = None,
    rebooted: Collection[str] = (),
) -> list[Finding]:
    """The fabric judged from what `host` (the subnet manager) showed, worst first: what
    `validate --fabric`, the workflows and `fabric check` report.

    `ibnetdiscover` and `counters` are the tools' outputs as collected (a tool missing, failed,
    silent or unreadable is `fabric.discover` / `ib.counters-unread`: nothing, or no counter,
    was judged), or records already parsed from an operator's files. Without
    `counters_required` (`fabric check` with no `--counters`) missing counters are not a finding.
    With `counters_before` (this run's snapshot from before its traffic) and `read_at`, the
    counters are judged as deltas (checks/counters.py); without, as absolute values, except
    LinkDowned: an absolute count of link downs is history (`link.downed-history`, or
    `link.downed-reboot` on the cables of `rebooted` nodes), never `fabric.errors`.
    """
    if ibnetdiscover is None or not isinstance(ibnetdiscover, Fabric):
        discovered = _discovered(host, ibnetdiscover)
        if isinstance(discovered, Finding):
            return [discovered]
    else:
        discovered = ibnetdiscover
    findings: list[Finding] = []
    read: Counters | None = None
    if isinstance(counters, IbQueryErrors | Sequence):
        read = counters
    elif counters is not None or counters_required:
        got = _counters(host, counters)
        if isinstance(got, Finding):
            findings.append(got)
        else:
            read = got
    if read is not None:
        judged, read = judge_counters(
            cluster,
            discovered,
            read,
            before=counters_before,
            read_at=read_at,
            rebooted=rebooted,
            nodes=nodes,
        )
        findings += judged
    findings += check_fabric(cluster, discovered, plan=plan, counters=read, nodes=nodes)
    return sorted(findings, key=lambda f: _RANK[f.severity])


_RANK = {"error": 0, "warning": 1, "info": 2}


def _discovered(host: str | None, out: ToolOutput | None) -> Fabric | Finding:
    where = f"{host}: " if host else ""
    if out is None or out.rc != 0:
        why = (out.stderr or out.stdout).strip().splitlines() if out else []
        return Finding(
            check="fabric.discover",
            node=host,
            component="ibnetdiscover",
            expected="runs",
            observed="not installed" if out and out.not_installed else "failed",
            message=f"{where}ibnetdiscover "
            + ("is not installed" if out and out.not_installed else "failed")
            + (f": {why[-1]}" if why else ""),
        )
    try:
        return parse_ibnetdiscover(out.stdout)
    except ParseError as exc:
        return Finding(
            check="fabric.discover",
            node=host,
            component="ibnetdiscover",
            expected="ibnetdiscover output",
            observed="unreadable",
            message=f"{where}ibnetdiscover output not understood: {exc}",
        )


def _counters(host: str | None, out: ToolOutput | None) -> Counters | Finding:
    where = f"{host}: " if host else ""
    if out is None or not out.stdout.strip():
        observed = "not collected" if out is None else f"printed nothing (exit {out.rc})"
        return Finding(
            check="ib.counters-unread",
            node=host,
            component="ibqueryerrors",
            expected="port error counters read",
            observed=observed,
            message=f"{where}ibqueryerrors {observed}; no port error counter was checked",
        )
    try:
        return parse_counters(out.stdout)
    except ParseError as exc:
        return Finding(
            check="ib.counters-unread",
            node=host,
            component="ibqueryerrors",
            expected="port error counters read",
            observed="unreadable",
            message=f"{where}ibqueryerrors output not understood, no port error "
            f"counter was checked: {exc}",
        )
