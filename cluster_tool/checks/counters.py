"""Port error counters judged as deltas, and link flaps.

A counter's absolute value says little: the switch end of a node's cable counts every reboot
of that node, and nobody knows when the counters were last cleared. So the run reads them
before its traffic (a snapshot kept in the run record), reads them again after, and judges
what changed, per port per hour, on both ends of every cable. Nothing is cleared: clearing
(`perfquery -R`, `ibclearerrors`) would destroy the evidence other people's tools keep.

Without a snapshot (a plain `validate --fabric`) a LinkDownedCounter above zero says only that
the link went down at some time since the counters were last cleared: every reboot, reseat or
switch reload does that. It is `link.downed-history` (info; a warning once it sits at its
maximum and no delta can be read from it), naming the cable and how to judge it, never an error.
The other counters are still judged as absolute values (`fabric.errors`).

Link flaps: a LinkDownedCounter that climbed while the traffic ran, or an HCA port that went
down more than once in the node's kernel log, named with its cable (node, HCA, leaf, port)
even when the link is up now.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cluster_tool.fabric.plan import CablingRow, cabling_plan
from cluster_tool.findings import Finding
from cluster_tool.parsers.ibcounters import IbQueryErrors, PerfCounters
from cluster_tool.parsers.link_events import LinkEvent
from cluster_tool.parsers.pci import normalize_pci_bus_id
from cluster_tool.spec.models import Cluster, Hca
from cluster_tool.spec.thresholds import HealthThresholds

if TYPE_CHECKING:  # node-check imports this module for the kernel-log flaps: no fabric parser
    from cluster_tool.parsers.ibnetdiscover import Fabric

__all__ = [
    "COUNTER_MAX",
    "CounterSnapshot",
    "LinkWait",
    "PortDelta",
    "check_counter_deltas",
    "check_kernel_link_flaps",
    "drop_reboot_link_downs",
    "judge_counters",
    "link_downs_since_cleared",
    "link_waits",
    "port_deltas",
    "snapshot",
]

# PortCounters widths (IBTA vol. 1, PortCounters attribute): a counter stops at its maximum
# instead of wrapping, so a reading at the maximum says "at least this many".
COUNTER_MAX = {
    "SymbolErrorCounter": 0xFFFF,
    "LinkErrorRecoveryCounter": 0xFF,
    "LinkDownedCounter": 0xFF,
    "PortRcvErrors": 0xFFFF,
    "PortRcvRemotePhysicalErrors": 0xFFFF,
    "PortRcvSwitchRelayErrors": 0xFFFF,
    "PortXmitDiscards": 0xFFFF,
    "PortXmitConstraintErrors": 0xFF,
    "PortRcvConstraintErrors": 0xFF,
    "LocalLinkIntegrityErrors": 0xF,
    "ExcessiveBufferOverrunErrors": 0xF,
    "VL15Dropped": 0xFFFF,
    "PortXmitWait": 0xFFFFFFFF,
}
LINK_DOWNED = "LinkDownedCounter"
_RESET = "cleared or reset between the reads"
XMIT_WAIT = "PortXmitWait"  # congestion: the port had data and no credits; never an error


def _limits(t: HealthThresholds) -> dict[str, float]:
    """Increase per port per hour that a judged counter may show (spec, documented defaults)."""
    return {
        "SymbolErrorCounter": t.ib_symbol_errors_per_hour,
        "LinkErrorRecoveryCounter": t.ib_link_error_recovery_per_hour,
        LINK_DOWNED: t.ib_link_downed_per_hour,
        "PortRcvErrors": t.ib_rcv_errors_per_hour,
        "PortXmitDiscards": t.ib_xmit_discards_per_hour,
        "ExcessiveBufferOverrunErrors": t.ib_buffer_overrun_per_hour,
    }


# --- snapshots -------------------------------------------------------------------------


Port = tuple[str, int]  # (node description as the fabric shows it, port number)


@dataclass(frozen=True)
class CounterSnapshot:
    """Every port's counters at one moment. With `complete` (ibqueryerrors printed its summary
    and every PMA query answered), a port the snapshot lacks read zero: ibqueryerrors lists
    only ports with a counter above zero."""

    taken_at: float  # seconds since the epoch
    ports: Mapping[Port, Mapping[str, int]]
    complete: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at,
            "complete": self.complete,
            "ports": [
                {"node": d, "port": p, "counters": dict(c)}
                for (d, p), c in sorted(self.ports.items())
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> CounterSnapshot:
        """The snapshot a run record kept; ValueError naming what is wrong with it."""
        try:
            ports: dict[Port, dict[str, int]] = {}
            for entry in data["ports"]:
                counters = {str(k): int(v) for k, v in entry["counters"].items()}
                ports[(str(entry["node"]), int(entry["port"]))] = counters
            return cls(float(data["taken_at"]), ports, bool(data["complete"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a port counter snapshot: {exc!r}") from None


def snapshot(
    counters: IbQueryErrors | Sequence[PerfCounters],
    taken_at: float,
    *,
    fabric: Fabric | None = None,
) -> CounterSnapshot:
    """A snapshot from ibqueryerrors, or from perfquery blocks (LIDs named through `fabric`)."""
    from cluster_tool.parsers.ibnetdiscover import SWITCH

    ports: dict[Port, dict[str, int]] = {}
    if isinstance(counters, IbQueryErrors):
        for pe in counters.error_ports:
            assert pe.port is not None
            ports.setdefault((pe.node_description, pe.port), {}).update(pe.counters)
        complete = counters.complete and not counters.pma_query_failures
        return CounterSnapshot(taken_at, ports, complete)
    by_lid: dict[int, str] = {}
    for n in fabric.nodes if fabric is not None else ():
        if n.kind == SWITCH and n.lid is not None:
            by_lid[n.lid] = n.description
        for p in n.ports:
            if p.lid is not None:
                by_lid[p.lid] = n.description
    for block in counters:
        if block.port == 255 or block.lid not in by_lid:
            continue
        ports.setdefault((by_lid[block.lid], block.port), {}).update(block.counters)
    # perfquery reads the ports it was asked for: the others are unknown, not zero.
    return CounterSnapshot(taken_at, ports, complete=False)


@dataclass(frozen=True)
class PortDelta:
    """What one port's counters did between two snapshots. `unknown` holds the counters no
    delta can be given for, and why (reset between the reads, or stopped at the maximum)."""

    port: Port
    delta: dict[str, int] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    at_least: dict[str, int] = field(default_factory=dict)  # saturated: increase >= this


def port_deltas(before: CounterSnapshot, after: CounterSnapshot) -> list[PortDelta]:
    """Per port and counter: after - before; a reading below the earlier one (the counters
    were cleared, or the HCA was reset, between the reads) or a port only one snapshot could
    answer for is unknown, never negative; a counter at its maximum is at least max - before."""
    out: list[PortDelta] = []
    for key in sorted(set(before.ports) | set(after.ports)):
        was, now = before.ports.get(key), after.ports.get(key)
        if (was is None and not before.complete) or (now is None and not after.complete):
            continue  # one side was not read: nothing to say about this port
        was, now = was or {}, now or {}
        result = PortDelta(key)
        for name in sorted(set(was) | set(now)):
            a, b = was.get(name, 0), now.get(name, 0)
            top = COUNTER_MAX.get(name)
            if b < a:
                result.unknown[name] = f"read {b} after {a}: {_RESET}"
            elif top is not None and b >= top and a < top:
                result.at_least[name] = b - a
                result.unknown[name] = f"stopped at its maximum {top}"
            elif top is not None and b >= top:
                result.unknown[name] = f"at its maximum {top} before and after"
            elif b > a:
                result.delta[name] = b - a
        if result.delta or result.unknown:
            out.append(result)
    return out


# --- cables ----------------------------------------------------------------------------


class _Cables:
    """Both ends of every cable in the operator's words: a host end is `gpu001 mlx5_0` (node,
    HCA) on `su1-leaf-r0 port 3` (leaf and port from the cabling plan, else as discovered)."""

    def __init__(self, cluster: Cluster, fabric: Fabric, rows: Sequence[CablingRow]) -> None:
        from cluster_tool.parsers.ibnetdiscover import SWITCH

        self.switch_kind = SWITCH
        self.name_of = cluster.fabric.switch_name
        self.kind = {n.description: n.kind for n in fabric.nodes}
        self.hosts = {h.name for h in cluster.hosts()}
        self.peer: dict[Port, Port] = {}
        for n in fabric.nodes:
            for p in n.ports:
                if p.peer_description is not None:
                    self.peer[(n.description, p.port)] = (p.peer_description, p.peer_port)
        self.row = {(r.node, r.hca): r for r in rows}

    def is_switch(self, description: str) -> bool:
        kind = self.kind.get(description)
        if kind is not None:
            return kind == self.switch_kind
        return " " not in description.strip() and self.name_of(description) is not None

    def label(self, end: Port) -> str:
        description, port = end
        if self.is_switch(description):
            return f"{self.name_of(description) or description} port {port}"
        return description if port == 1 else f"{description} port {port}"

    def host_end(self, end: Port) -> tuple[str, str] | None:
        """(node, HCA) of the cable's host end, from either end."""
        for description, _ in (end, self.peer.get(end, ("", 0))):
            if description and not self.is_switch(description):
                host, _, device = description.rpartition(" ")
                if host in self.hosts and device:
                    return host, device
        return None

    def cable(self, end: Port) -> frozenset[Port]:
        return frozenset({end, self.peer.get(end, end)})

    def words(self, end: Port) -> str:
        """`gpu001 mlx5_0 ↔ su1-leaf-r0 port 3` (plan's leaf and port for a host cable)."""
        host = self.host_end(end)
        row = self.row.get(host) if host else None
        if host is not None and row is not None:
            return f"{host[0]} {host[1]} ↔ {row.leaf} port {row.leaf_port}"
        peer = self.peer.get(end)
        return f"{self.label(end)} ↔ {self.label(peer)}" if peer else self.label(end)


# --- credit waits, per direction of a host cable ------------------------------------------


@dataclass(frozen=True)
class LinkWait:
    """PortXmitWait per second on the two ends of one host cable between two reads. The port
    that waits had data to send and no credits from the other end: `from_host` (at the node's
    HCA) says the traffic the node sends is held up beyond the leaf, by its receivers or the
    fabric, not by the node; `to_host` (at the leaf port) says the node's HCA did not take what
    was sent to it fast enough. None where a read cannot give the delta."""

    node: str
    hca: str
    cable: str  # `gpu003 mlx5_0 ↔ su1-leaf-r0 port 3`
    leaf_port: str  # `su1-leaf-r0 port 3`
    from_host: float | None
    to_host: float | None


def _wait_delta(before: CounterSnapshot, after: CounterSnapshot, port: Port) -> int | None:
    """PortXmitWait's climb on one port; a port a complete snapshot lacks read zero."""
    was = before.ports.get(port, {} if before.complete else None)
    now = after.ports.get(port, {} if after.complete else None)
    if was is None or now is None:
        return None
    a, b = was.get(XMIT_WAIT, 0), now.get(XMIT_WAIT, 0)
    if b < a or b >= COUNTER_MAX[XMIT_WAIT]:
        return None  # cleared, reset or saturated between the reads
    return b - a


def link_waits(
    cluster: Cluster,
    fabric: Fabric,
    before: CounterSnapshot,
    after: CounterSnapshot,
    *,
    rows: Sequence[CablingRow] | None = None,
) -> list[LinkWait]:
    """Both directions' credit waits of every planned host cable the fabric shows cabled."""
    seconds = after.taken_at - before.taken_at
    if seconds <= 0:
        return []
    plan = rows if rows is not None else cabling_plan(cluster)
    cables = _Cables(cluster, fabric, plan)
    out: list[LinkWait] = []
    for row in plan:
        host: Port = (f"{row.node} {row.hca}", 1)
        leaf = cables.peer.get(host)
        if leaf is None:
            continue  # not cabled now: fabric.link-down says so
        sent, received = _wait_delta(before, after, host), _wait_delta(before, after, leaf)
        out.append(
            LinkWait(
                node=row.node,
                hca=row.hca,
                cable=cables.words(host),
                leaf_port=cables.label(leaf),
                from_host=None if sent is None else sent / seconds,
                to_host=None if received is None else received / seconds,
            )
        )
    return out


# --- judging deltas ----------------------------------------------------------------------


def _allowed(per_hour: float, hours: float) -> int:
    """Count a window of `hours` may show at `per_hour`, rounded up: a non-zero limit allows
    one in a short window (one symbol error in a 5-minute gate is noise, not a rate)."""
    return math.ceil(per_hour * hours - 1e-9)


def check_counter_deltas(
    cluster: Cluster,
    fabric: Fabric,
    before: CounterSnapshot,
    after: CounterSnapshot,
    *,
    nodes: Iterable[str] | None = None,
    rows: Sequence[CablingRow] | None = None,
    rebooted: Mapping[str, str] | None = None,
) -> list[Finding]:
    """`link.flap` (LinkDowned climbed), `link.errors` (an error counter climbed faster than
    the spec allows per hour), `link.congestion` (PortXmitWait climbed: info, or a warning
    above `ib_xmit_wait_warn_per_hour`) and `link.counters-unknown` (a counter that was reset
    or saturated between the reads): one finding per cable, both ends' figures in it.

    `rebooted` names the nodes rebooted between the reads, with how that is known (Slurm's
    reboot): a reboot takes every link of the node down and resets its HCAs' counters, so on
    those cables a LinkDowned climb is `link.downed-reboot` (info), never a flap, and the
    node's own port reading lower than before is no mystery."""
    rebooted = rebooted or {}
    t = cluster.thresholds.health
    limits = _limits(t)
    hours = max(after.taken_at - before.taken_at, 1.0) / 3600
    window = _duration(hours)
    cables = _Cables(cluster, fabric, rows if rows is not None else cabling_plan(cluster))
    only = set(nodes) if nodes is not None else None

    # (id, cable) -> what each end of the cable counted; and the worst severity seen.
    found: dict[tuple[str, frozenset[Port]], list[tuple[Port, str]]] = defaultdict(list)
    severity: dict[tuple[str, frozenset[Port]], str] = {}

    def note(*, check: str, level: str, end: Port, what: str) -> None:
        key = (check, cables.cable(end))
        found[key].append((end, what))
        if severity.get(key) not in ("error", "warning") or level == "error":
            severity[key] = level

    for d in port_deltas(before, after):
        end = d.port
        host = cables.host_end(end)
        if only is not None and (host is None or host[0] not in only):
            continue
        grew = {**d.delta, **d.at_least}
        more = {name: "at least " if name in d.at_least else "" for name in grew}
        downs = grew.get(LINK_DOWNED, 0)
        reboot = rebooted.get(host[0]) if host is not None else None
        if downs and reboot is not None:
            what = f"LinkDownedCounter +{more[LINK_DOWNED]}{downs}"
            note(check="link.downed-reboot", level="info", end=end, what=what)
        elif downs > _allowed(limits[LINK_DOWNED], hours):
            what = f"LinkDownedCounter +{more[LINK_DOWNED]}{downs}"
            note(check="link.flap", level="error", end=end, what=what)
        over = [
            f"{name} +{more[name]}{grew[name]} (limit {limit:g}/h)"
            for name, limit in limits.items()
            if name != LINK_DOWNED and grew.get(name, 0) > _allowed(limit, hours)
        ]
        if over:
            note(check="link.errors", level="error", end=end, what=", ".join(over))
        wait = grew.get(XMIT_WAIT, 0)
        if wait:
            warn = t.ib_xmit_wait_warn_per_hour
            level = "warning" if warn is not None and wait > _allowed(warn, hours) else "info"
            what = f"PortXmitWait +{more[XMIT_WAIT]}{wait}"
            note(check="link.congestion", level=level, end=end, what=what)
        # The rebooted node's own HCA port starts its counters again from zero.
        reset_by_reboot = reboot is not None and not cables.is_switch(end[0])
        unknown = {
            k: v
            for k, v in d.unknown.items()
            if (k in limits or k == XMIT_WAIT)
            and k not in d.at_least
            and not (reset_by_reboot and v.endswith(_RESET))
        }
        if unknown:
            why = ", ".join(f"{k} {v}" for k, v in sorted(unknown.items()))
            note(check="link.counters-unknown", level="warning", end=end, what=why)

    out: list[Finding] = []
    for (check, cable), figures in found.items():
        end = figures[0][0]
        host = cables.host_end(end)
        node, component = host if host else (None, cables.label(end))
        at = "; ".join(f"at {cables.label(e)}: {what}" for e, what in figures)
        what = _MEANING[check]
        if check == "link.downed-reboot" and node is not None:
            what += f": {node} was rebooted ({rebooted[node]}), which does that; not a flap"
        if check == "link.flap":
            # The discovery is the second read's: a cable in it is up now, which hides nothing.
            what += ", and is up again now" if end in cables.peer else ", and is down now"
        out.append(
            Finding(
                check=check,
                severity=severity[(check, cable)],  # type: ignore[arg-type]
                node=node,
                component=component,
                expected=_EXPECTED[check],
                observed=at,
                message=f"{cables.words(end)}: {what} ({at}, {window} of traffic)",
            )
        )
    return out


_EXPECTED = {
    "link.flap": "the link stays up while traffic runs",
    "link.downed-reboot": "LinkDownedCounter judged as a delta",
    "link.errors": "error counters within the per-hour limits",
    "link.congestion": "no transmit wait",
    "link.counters-unknown": "counters readable as deltas",
}
_MEANING = {
    "link.flap": "the link went down while the run's traffic ran",
    "link.downed-reboot": "the link went down while its node rebooted",
    "link.errors": "error counters climbed faster than the spec allows (dirty or failing "
    "cable, optic or port)",
    "link.congestion": "the port waited for credits (congestion, not a fault of the cable)",
    "link.counters-unknown": "no delta for some counters",
}


def _duration(hours: float) -> str:
    minutes = hours * 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{hours:.1f} h"


# --- absolute counters: what a reboot explains --------------------------------------------


def drop_reboot_link_downs(
    cluster: Cluster,
    fabric: Fabric,
    counters: IbQueryErrors,
    rebooted: Collection[str],
) -> tuple[IbQueryErrors, list[Finding]]:
    """Absolute counters (no snapshot before): a node that was rebooted or power-cycled during
    the maintenance took its links down, so the LinkDownedCounter of its cables, at both ends,
    is not held against it. Returns the counters without those LinkDowned figures (so every
    other counter is judged as before) and an info finding per cable saying what was set aside."""
    if not rebooted:
        return counters, []
    cables = _Cables(cluster, fabric, cabling_plan(cluster))
    ports = []
    notes: dict[frozenset[Port], tuple[str, str, list[str]]] = {}
    for pe in counters.ports:
        end = (pe.node_description, pe.port) if pe.port is not None else None
        host = cables.host_end(end) if end is not None else None
        if end is None or host is None or host[0] not in rebooted or LINK_DOWNED not in pe.counters:
            ports.append(pe)
            continue
        kept = {k: v for k, v in pe.counters.items() if k != LINK_DOWNED}
        ports.append(dataclasses.replace(pe, counters=kept))
        cable = cables.cable(end)
        note = notes.setdefault(cable, (host[0], host[1], []))
        note[2].append(f"{cables.label(end)}: LinkDownedCounter {pe.counters[LINK_DOWNED]}")
    findings = [
        Finding(
            check="link.downed-reboot",
            severity="info",
            node=node,
            component=hca,
            expected="LinkDownedCounter judged as a delta",
            observed="; ".join(figures),
            message=f"{cables.words(next(iter(cable)))}: link went down "
            f"({'; '.join(figures)}); {node} was rebooted during the maintenance, which does "
            "that, and no counter snapshot was taken before it: not held against the node",
        )
        for cable, (node, hca, figures) in notes.items()
    ]
    return dataclasses.replace(counters, ports=tuple(ports)), findings


def link_downs_since_cleared(
    cluster: Cluster,
    fabric: Fabric,
    counters: IbQueryErrors | Sequence[PerfCounters],
) -> list[Finding]:
    """Absolute counters (no snapshot before): `link.downed-history` per cable whose
    LinkDownedCounter is above `ib_link_downed_max` at either end. The count is every time the
    link went down since the counters were last cleared (a reboot, reseat or switch reload
    each adds one), so it is info naming the cable and how to judge it: a warning only at its
    maximum (255), where even deltas cannot see it climb until someone clears it."""
    limit = cluster.thresholds.health.ib_link_downed_max
    top = COUNTER_MAX[LINK_DOWNED]
    cables = _Cables(cluster, fabric, cabling_plan(cluster))
    read = snapshot(counters, 0.0, fabric=fabric)
    found: dict[frozenset[Port], list[tuple[Port, int]]] = defaultdict(list)
    for end, values in sorted(read.ports.items()):
        downs = values.get(LINK_DOWNED, 0)
        if downs > limit:
            found[cables.cable(end)].append((end, downs))
    out: list[Finding] = []
    for figures in found.values():
        end = figures[0][0]
        host = cables.host_end(end)
        node, component = host if host else (None, cables.label(end))
        at = "; ".join(f"{cables.label(e)}: LinkDownedCounter {n}" for e, n in figures)
        saturated = any(n >= top for _, n in figures)
        if saturated:
            what = (
                f"LinkDownedCounter stopped at its maximum {top}: the link went down at least "
                f"that often since the counters were last cleared, and no delta can show it "
                f"going down again; clear it (`perfquery -R` on the port) and judge it over a "
                f"window"
            )
        else:
            what = (
                "the link went down at some time since the counters were last cleared (a "
                "reboot, reseat or switch reload does that), which says nothing about now"
            )
        out.append(
            Finding(
                check="link.downed-history",
                severity="warning" if saturated else "info",
                node=node,
                component=component,
                expected=f"LinkDownedCounter <= {limit}, or judged as a delta",
                observed=at,
                message=f"{cables.words(end)}: {what} ({at}). To judge the cable: "
                "`validate --after-maintenance` reads the counters before and after its "
                "traffic and fails a link that went down meanwhile (link.flap); `watch` does "
                "the same between its cycles",
            )
        )
    return out


# --- kernel log ----------------------------------------------------------------------------


def check_kernel_link_flaps(
    node: str,
    events: Sequence[LinkEvent],
    hcas: Sequence[Hca],
    thresholds: HealthThresholds,
    *,
    cables: Mapping[str, tuple[str, int]] | None = None,
) -> list[Finding]:
    """`link.flap` for a compute HCA whose port went down more than `ib_link_flaps_max` times
    in the node's kernel log (a `Link down`, or a `Link up` after a `Link up`: the driver saw
    the port change and come back before it looked), named with its cable: `cables` gives
    each HCA's (leaf, leaf port) from the plan."""
    by_pci = {normalize_pci_bus_id(h.pci) or h.pci: h for h in hcas}
    downs: dict[str, int] = defaultdict(int)
    last: dict[str, str] = {}
    lines: dict[str, list[int]] = defaultdict(list)
    for e in events:
        if e.pci not in by_pci:
            continue
        if e.state == "down" or last.get(e.pci) == "up":
            downs[e.pci] += 1
            lines[e.pci].append(e.line_no)
        last[e.pci] = e.state
    out: list[Finding] = []
    for pci, count in downs.items():
        if count <= thresholds.ib_link_flaps_max:
            continue
        hca = by_pci[pci]
        leaf = (cables or {}).get(hca.device)
        cable = f" ↔ {leaf[0]} port {leaf[1]}" if leaf else ""
        now = "up" if last[pci] == "up" else "down"
        out.append(
            Finding(
                check="link.flap",
                node=node,
                component=hca.device,
                expected=f"down at most {thresholds.ib_link_flaps_max} time(s) in the kernel log",
                observed=f"down {count} times",
                message=f"{node} {hca.device}{cable}: the link went down {count} times in the "
                f"kernel log (lines {', '.join(map(str, lines[pci][:5]))}); it is {now} now: "
                "reseat or replace the cable or optic",
            )
        )
    return out


# --- what the fabric check calls ------------------------------------------------------------


def judge_counters(
    cluster: Cluster,
    fabric: Fabric,
    counters: IbQueryErrors | Sequence[PerfCounters],
    *,
    before: CounterSnapshot | None = None,
    read_at: float | None = None,
    rebooted: Collection[str] = (),
    nodes: Iterable[str] | None = None,
) -> tuple[list[Finding], IbQueryErrors | Sequence[PerfCounters] | None]:
    """The counters of one read, judged as deltas against `before` when the run took a
    snapshot before its traffic; else the LinkDowned counts as history (`link.downed-history`,
    or `link.downed-reboot` for the cables of `rebooted` nodes) and what the absolute check
    (`fabric.errors`, which leaves LinkDowned alone) should still judge. Returns (findings,
    counters left for the absolute check, None when the deltas said it all)."""
    if before is not None and read_at is not None:
        after = snapshot(counters, read_at, fabric=fabric)
        return check_counter_deltas(cluster, fabric, before, after, nodes=nodes), None
    notes: list[Finding] = []
    if rebooted and isinstance(counters, IbQueryErrors):
        counters, notes = drop_reboot_link_downs(cluster, fabric, counters, rebooted)
    # LinkDowned as an absolute count is history, never an error (the absolute check leaves it).
    notes += link_downs_since_cleared(cluster, fabric, counters)
    only = set(nodes) if nodes is not None else None
    return [f for f in notes if only is None or f.node in only], counters
