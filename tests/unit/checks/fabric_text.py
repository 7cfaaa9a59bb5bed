"""Build `ibnetdiscover` text (the real tool's format, both cable ends listed) from a cabling plan,
with any cable moved, cut or degraded: the input of the wiring-check tests and benchmark."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from cluster_tool.fabric.plan import CablingRow, SwitchLink


@dataclass(frozen=True)
class Cable:
    """One discovered cable from a CA port (or a switch port) to a switch port."""

    a: str  # "gpu001 mlx5_0" for a CA, a switch name otherwise
    a_port: int
    b: str  # switch name
    b_port: int
    width: int = 4
    speed: str = "NDR"


@dataclass
class FabricText:
    """A fabric to print: cables by CA description and switch links, editable before `text()`."""

    hosts: dict[tuple[str, str], Cable] = field(default_factory=dict)
    links: list[Cable] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    switch_ports: int = 65
    model: str = "MQM9700"

    @classmethod
    def from_plan(
        cls,
        rows: Iterable[CablingRow],
        links: Iterable[SwitchLink],
        *,
        width: int = 4,
        speed: str = "NDR",
    ) -> FabricText:
        fabric = cls()
        names: dict[str, None] = {}
        for row in rows:
            fabric.hosts[(row.node, row.hca)] = Cable(
                f"{row.node} {row.hca}", 1, row.leaf, row.leaf_port, width, speed
            )
            names[row.leaf] = None
        for link in links:
            fabric.links.append(
                Cable(link.leaf, link.leaf_port, link.spine, link.spine_port, width, speed)
            )
            names[link.leaf] = None
            names[link.spine] = None
        fabric.switches = list(names)
        return fabric

    # -- faults -----------------------------------------------------------------------------

    def move(self, node: str, hca: str, leaf: str, port: int) -> None:
        cable = self.hosts[(node, hca)]
        self.hosts[(node, hca)] = replace(cable, b=leaf, b_port=port)

    def swap(self, node: str, hca_a: str, hca_b: str) -> None:
        a, b = self.hosts[(node, hca_a)], self.hosts[(node, hca_b)]
        self.hosts[(node, hca_a)] = replace(a, b=b.b, b_port=b.b_port)
        self.hosts[(node, hca_b)] = replace(b, b=a.b, b_port=a.b_port)

    def cut(self, node: str, hca: str) -> None:
        del self.hosts[(node, hca)]

    def degrade(
        self, node: str, hca: str, *, width: int | None = None, speed: str | None = None
    ) -> None:
        cable = self.hosts[(node, hca)]
        self.hosts[(node, hca)] = replace(
            cable, width=width or cable.width, speed=speed or cable.speed
        )

    def add_host(self, description: str, leaf: str, port: int) -> None:
        host, _, device = description.rpartition(" ")
        self.hosts[(host, device)] = Cable(description, 1, leaf, port)

    # -- text ---------------------------------------------------------------------------------

    def text(self) -> str:
        switch_guid = {name: 0x9C05910300000000 + i for i, name in enumerate(self.switches)}
        ca_guid = {key: 0xA088C20300000000 + 2 * i for i, key in enumerate(self.hosts)}
        lid = iter(range(1, 1 << 24))
        switch_lid = {name: next(lid) for name in self.switches}
        ca_lid = {key: next(lid) for key in self.hosts}

        def desc(name: str) -> str:
            return f"MF0;{name}:{self.model}/U1"

        per_switch: dict[str, list[tuple[int, str]]] = {name: [] for name in self.switches}
        for key, c in self.hosts.items():
            g = ca_guid[key]
            per_switch[c.b].append(
                (
                    c.b_port,
                    f'[{c.b_port}]\t"H-{g:016x}"[1]({g + 1:x}) \t\t# "{c.a}" lid {ca_lid[key]} '
                    f"{c.width}x{c.speed}",
                )
            )
        for c in self.links:
            for here, here_port, there, there_port in (
                (c.a, c.a_port, c.b, c.b_port),
                (c.b, c.b_port, c.a, c.a_port),
            ):
                per_switch[here].append(
                    (
                        here_port,
                        f'[{here_port}]\t"S-{switch_guid[there]:016x}"[{there_port}]\t\t'
                        f'# "{desc(there)}" lid {switch_lid[there]} {c.width}x{c.speed}',
                    )
                )
        out = [
            "#",
            "# Topology file: generated on Mon Jan  1 00:00:00 2024",
            "#",
            "# Initiated from node a088c20300000000 port a088c20300000001",
            "",
        ]
        for name in self.switches:
            g = switch_guid[name]
            out += [
                "vendid=0x2c9",
                "devid=0xd2f2",
                f"sysimgguid={g:#x}",
                f"switchguid={g:#x}({g:x})",
                f'Switch\t{self.switch_ports} "S-{g:016x}"\t\t# "{desc(name)}" enhanced port 0 '
                f"lid {switch_lid[name]} lmc 0",
            ]
            out += [line for _, line in sorted(per_switch[name])]
            out.append("")
        for key, c in self.hosts.items():
            g = ca_guid[key]
            out += [
                "vendid=0x2c9",
                "devid=0x1021",
                f"sysimgguid={g:#x}",
                f"caguid={g:#x}",
                f'Ca\t1 "H-{g:016x}"\t\t# "{c.a}"',
                f'[1]({g + 1:x}) \t"S-{switch_guid[c.b]:016x}"[{c.b_port}]\t\t# lid {ca_lid[key]} '
                f'lmc 0 "{desc(c.b)}" lid {switch_lid[c.b]} {c.width}x{c.speed}',
                "",
            ]
        return "\n".join(out) + "\n"


def real_style(
    rows: Iterable[CablingRow], links: Iterable[SwitchLink], *, racks_per_su: int = 2
) -> tuple[list[CablingRow], list[SwitchLink]]:
    """The plan with switches named as sites name them: leaves `A09-P1-IBLEAF-SS-RR` (SU, then
    the 1-based rail, zero-padded; the first half of the rails in rack row A, the rest in B,
    a rack per 8 SUs), spines `C10-P1-IBSPINE-NN`. No format string fits both rack rows."""
    rows, links = list(rows), list(links)
    rails = max(r.rail for r in rows) + 1
    leaf_place = {r.leaf: (r.su, r.rail) for r in rows}

    def leaf(name: str) -> str:
        su, rail = leaf_place[name]
        row = "A" if rail < rails // racks_per_su else "B"
        return f"{row}{9 + (su - 1) // 8:02d}-P1-IBLEAF-{su:02d}-{rail + 1:02d}"

    def spine(name: str) -> str:
        return f"C10-P1-IBSPINE-{int(name.removeprefix('spine')):02d}"

    return (
        [replace(r, leaf=leaf(r.leaf)) for r in rows],
        [replace(s, leaf=leaf(s.leaf), spine=spine(s.spine)) for s in links],
    )
