"""The cabling plan the wiring check holds the fabric to (`cabling.csv`, `switch-links.csv`).

SuperPOD rule: in SU s, node i's rail-r HCA goes to leaf (s, r), down-port i; a leaf's
up-ports (those after the SU's down-ports) go round-robin over the spines, so each spine
gets the same number of links from every leaf. `FabricPlan` holds both tables as the one
value the wiring check, the gate's topology and the run record's link matrix are read from.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from cluster_tool.errors import ParseError
from cluster_tool.fileio import atomic_write, read_input_text
from cluster_tool.spec.models import Cluster

CABLING_HEADER = ("node", "hca", "gpu", "rail", "su", "leaf", "leaf_port")
SWITCH_LINKS_HEADER = ("leaf", "leaf_port", "spine", "spine_port")


@dataclass(frozen=True, order=True)
class CablingRow:
    """One HCA port and the leaf port it must be cabled to."""

    node: str
    hca: str
    gpu: int
    rail: int
    su: int
    leaf: str
    leaf_port: int


@dataclass(frozen=True, order=True)
class SwitchLink:
    """One leaf up-port and the spine port it must be cabled to."""

    leaf: str
    leaf_port: int
    spine: str
    spine_port: int


@dataclass(frozen=True)
class Leaf:
    """A leaf switch of the plan: its SU and the one rail it carries."""

    name: str
    su: int
    rail: int


def leaves(cluster: Cluster) -> list[Leaf]:
    """Every leaf, SU by SU, rail by rail (one leaf per rail per SU); a spec's explicit
    switch map as it lists them (an adopted fabric may split a rail over two leaves)."""
    fabric = cluster.fabric
    if fabric.leaves:
        return [Leaf(name, leaf.su, leaf.rail) for name, leaf in fabric.leaves.items()]
    return [
        Leaf(fabric.leaf_name(su, rail), su, rail)
        for su in range(1, cluster.su_count + 1)
        for rail in range(fabric.rails)
    ]


def spines(cluster: Cluster) -> list[str]:
    """Every spine name, spine01 first; an adopted fabric's as it names them (none, when its
    leaves have no uplink)."""
    if cluster.fabric.placement and not cluster.fabric.spine_switches:
        return []
    return [cluster.fabric.spine_name(n) for n in range(1, cluster.spine_count + 1)]


def cabling_plan(cluster: Cluster) -> list[CablingRow]:
    """One row per compute HCA of every GPU node, in node then rail order.

    A node's HCAs go to its SU's leaf of their rail at its down-port (`fabric.placement`, or
    the rule); `fabric.cables` names the HCAs cabled elsewhere, or not at all, as they are."""
    fabric = cluster.fabric
    elsewhere = {(c.node, c.hca): c for c in fabric.cables}
    # The switch map's first leaf per (SU, rail), as `Fabric.leaf_name` takes it, looked up once.
    mapped: dict[tuple[int, int], str] = {}
    for name, place in fabric.leaves.items():
        mapped.setdefault((place.su, place.rail), name)
    rows: list[CablingRow] = []
    leaf_names: dict[tuple[int, int], str] = {}  # formatted once per leaf, not once per HCA
    for node in cluster.gpu_nodes():
        assert node.profile is not None and node.su is not None and node.index_in_su is not None
        for hca in node.profile.compute_hcas:
            leaf, port = None, node.index_in_su
            cable = elsewhere.get((node.name, hca.device))
            if cable is not None:
                if cable.leaf is None or cable.port is None:
                    continue  # not cabled: no row, so the plan is what is cabled
                leaf, port = cable.leaf, cable.port
            if leaf is None:
                leaf = leaf_names.get((node.su, hca.rail))
            if leaf is None:
                leaf = leaf_names[(node.su, hca.rail)] = mapped.get(
                    (node.su, hca.rail)
                ) or fabric.leaf_name(node.su, hca.rail)
            rows.append(
                CablingRow(
                    node=node.name,
                    hca=hca.device,
                    gpu=hca.gpu,
                    rail=hca.rail,
                    su=node.su,
                    leaf=leaf,
                    leaf_port=port,
                )
            )
    return rows


def switch_links(cluster: Cluster) -> list[SwitchLink]:
    """Leaf-to-spine links: leaf up-port k goes to spine k mod S.

    Leaf up-ports are numbered after the SU's down-ports (`su_size + 1` ...). Spine ports
    are handed out leaf by leaf, so spine port p belongs to leaf (p-1) // (uplinks/S).
    """
    fabric = cluster.fabric
    if fabric.uplinks or fabric.placement:  # as cabled (an adopted fabric): none is none
        return [SwitchLink(*link) for link in fabric.uplinks]
    spine_names = spines(cluster)
    if not spine_names:
        return []
    per_spine = fabric.uplink_count // len(spine_names)
    links: list[SwitchLink] = []
    for leaf_index, leaf in enumerate(leaves(cluster)):
        for k in range(fabric.uplink_count):
            spine = k % len(spine_names)
            links.append(
                SwitchLink(
                    leaf=leaf.name,
                    leaf_port=fabric.su_size + 1 + k,
                    spine=spine_names[spine],
                    spine_port=leaf_index * per_spine + k // len(spine_names) + 1,
                )
            )
    return links


# --- the plan as one value --------------------------------------------------------------


@dataclass(frozen=True)
class FabricPlan:
    """What the fabric should be: HCA rows, leaf-spine links, and the switches they name."""

    rows: tuple[CablingRow, ...]
    links: tuple[SwitchLink, ...]
    leaf_of: dict[str, tuple[int, int]]  # leaf name -> (su, rail)
    spines: frozenset[str]


def plan_for(
    cluster: Cluster,
    rows: Sequence[CablingRow] | None = None,
    links: Sequence[SwitchLink] | None = None,
) -> FabricPlan:
    """The plan from the spec, or from rendered `cabling.csv` / `switch-links.csv` rows."""
    rows = list(rows) if rows is not None else cabling_plan(cluster)
    links = list(links) if links is not None else switch_links(cluster)
    leaf_of = {leaf.name: (leaf.su, leaf.rail) for leaf in leaves(cluster)}
    for row in rows:  # a hand-edited cabling.csv may name leaves the spec does not derive
        leaf_of.setdefault(row.leaf, (row.su, row.rail))
    return FabricPlan(tuple(rows), tuple(links), leaf_of, frozenset(link.spine for link in links))


def nodes_on_switch(plan: FabricPlan, switch: str) -> list[str]:
    """GPU nodes with a cable on `switch` (a leaf: its SU's nodes on that rail; a spine:
    every node whose leaf uplinks to it), in plan order; [] for a switch not in the plan."""
    cabled = {switch} | {link.leaf for link in plan.links if link.spine == switch}
    seen: dict[str, None] = {}
    for row in plan.rows:
        if row.leaf in cabled:
            seen.setdefault(row.node)
    return list(seen)


# --- CSV -------------------------------------------------------------------------------


def cabling_csv(rows: list[CablingRow]) -> str:
    """`cabling.csv` text (header + one line per HCA, `\\n` line ends)."""
    return _to_csv(
        CABLING_HEADER,
        [(r.node, r.hca, r.gpu, r.rail, r.su, r.leaf, r.leaf_port) for r in rows],
    )


def switch_links_csv(links: list[SwitchLink]) -> str:
    """`switch-links.csv` text."""
    return _to_csv(
        SWITCH_LINKS_HEADER,
        [(link.leaf, link.leaf_port, link.spine, link.spine_port) for link in links],
    )


def write_cabling_csv(path: Path, rows: list[CablingRow]) -> None:
    """Write `cabling.csv`."""
    atomic_write(path, cabling_csv(rows))


def write_switch_links_csv(path: Path, links: list[SwitchLink]) -> None:
    """Write `switch-links.csv`."""
    atomic_write(path, switch_links_csv(links))


def read_cabling_csv(path: Path) -> list[CablingRow]:
    """Read `cabling.csv`; raises ParseError naming the line on anything malformed."""
    return parse_cabling_csv(read_input_text(path), source=str(path))


def read_switch_links_csv(path: Path) -> list[SwitchLink]:
    """Read `switch-links.csv`; raises ParseError naming the line on anything malformed."""
    return parse_switch_links_csv(read_input_text(path), source=str(path))


def parse_cabling_csv(text: str, source: str = "cabling.csv") -> list[CablingRow]:
    """`cabling.csv` text to rows."""
    return [CablingRow(*values) for values in _from_csv(text, CablingRow, source)]  # type: ignore[arg-type]


def parse_switch_links_csv(text: str, source: str = "switch-links.csv") -> list[SwitchLink]:
    """`switch-links.csv` text to links."""
    return [SwitchLink(*values) for values in _from_csv(text, SwitchLink, source)]  # type: ignore[arg-type]


def _to_csv(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _from_csv(text: str, record: type, source: str) -> list[list[object]]:
    kinds = [(f.name, f.type) for f in fields(record)]
    header = tuple(name for name, _ in kinds)
    lines = text.splitlines()
    try:
        rows = list(csv.reader(lines))
    except csv.Error as exc:  # a field past the csv module's size limit, a NUL in old Pythons
        raise ParseError(f"not CSV: {exc}", source=source) from None
    out: list[list[object]] = []
    for line_no, values in enumerate(rows, start=1):
        raw = lines[line_no - 1] if line_no <= len(lines) else ""
        if line_no == 1:
            if tuple(v.strip() for v in values) != header:
                raise ParseError(
                    f"expected header {','.join(header)}", line_no=1, line=raw, source=source
                )
            continue
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(header):
            raise ParseError(
                f"expected {len(header)} fields, got {len(values)}",
                line_no=line_no,
                line=raw,
                source=source,
            )
        row: list[object] = []
        for (name, kind), value in zip(kinds, values, strict=True):
            value = value.strip()
            if kind in (int, "int"):
                try:
                    row.append(int(value))
                except ValueError:
                    raise ParseError(
                        f"{name} must be a whole number, got {value!r}",
                        line_no=line_no,
                        line=raw,
                        source=source,
                    ) from None
            else:
                if not value:
                    raise ParseError(f"{name} is empty", line_no=line_no, line=raw, source=source)
                row.append(value)
        out.append(row)
    if not lines:
        raise ParseError(f"empty file; expected header {','.join(header)}", source=source)
    return out
