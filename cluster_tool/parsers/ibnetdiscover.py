"""`ibnetdiscover` (and ibsim net files): every switch and CA of a fabric, and each port's peer.

One pass over the lines with precompiled patterns: a 1,024-node x 8-HCA fabric is ~84,000 lines.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers._ibcommon import link_rate_gbps, normalize_guid
from cluster_tool.parsers.base import collector_paused, noise_recorder, parser

__all__ = [
    "CaUplink",
    "Fabric",
    "FabricLink",
    "FabricNode",
    "FabricPort",
    "SwitchPortPeer",
    "parse_ibnetdiscover",
]

SWITCH = "switch"
CA = "ca"
ROUTER = "router"

_KINDS = {"Switch": SWITCH, "Ca": CA, "Hca": CA, "Rt": ROUTER}
# ibnetdiscover names a node "S-<guid>" / "H-<guid>" / "R-<guid>"; the prefix tells the kind
# of a peer whose own record is not in the text (an excerpt, or a fabric cut short).
_ID_PREFIX_KINDS = {"S-": SWITCH, "H-": CA, "R-": ROUTER}


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and the 15 fields
# of ~330,000 ports (4,096 nodes x 8 HCAs, both cable ends) cost 0.6 s of a 1.25 s parse.
# Equality and the hash are a frozen record's (unsafe_hash); nothing assigns to a port.
@dataclass(slots=True, unsafe_hash=True)
class FabricPort:
    """One connected port of a node and its peer, from a `[N] "peer"[M] # ...` line."""

    port: int
    ext_port: str | None  # `[1][ext 3]` on switches with split (twin) ports
    port_guid: str | None  # the local port GUID, printed as `[1](guid)` on CA lines
    lid: int | None  # the local port's LID, on CA lines (`# lid 9 lmc 0 ...`)
    lmc: int | None
    peer_id: str  # "S-9c05..." as ibnetdiscover names the peer node
    peer_port: int
    peer_port_guid: str | None  # `"H-..."[1](guid)`: the peer CA port's GUID
    peer_description: str | None
    peer_lid: int | None
    width: int | None  # lanes: 4 for 4xNDR, 2 for 2xNDR (NDR200 split ports)
    speed: str | None  # NDR, HDR, EDR, QDR, FDR10, ...
    line_no: int
    # ibdiagnet's own ibnetdiscover file (ibdiagnet2.ibnetdiscover) puts the port's label
    # where ibnetdiscover puts its GUID: `[1](1)`, `[1](B9D0F0/0/0/1)` on adapter ports.
    port_label: str | None = None
    peer_port_label: str | None = None

    @property
    def peer_guid(self) -> str | None:
        """The peer node's GUID, taken from its ibnetdiscover id; None for ibsim names."""
        if self.peer_id[:2] in _ID_PREFIX_KINDS:
            return normalize_guid(self.peer_id[2:])
        return None

    @property
    def link(self) -> str | None:
        """Width and speed as ibnetdiscover prints them, e.g. `4xNDR`."""
        if self.width is None or self.speed is None:
            return None
        return f"{self.width}x{self.speed}"

    @property
    def rate_gbps(self) -> float | None:
        """The link rate as ibstat counts it: 400 for 4xNDR, 200 for 2xNDR."""
        return link_rate_gbps(self.width, self.speed)


# Not frozen, as FabricPort: 34,000 records of 13 fields at 4,096 nodes.
@dataclass(slots=True, unsafe_hash=True)
class FabricNode:
    """A switch, CA or router record: its header, its identifiers and its connected ports."""

    kind: str  # "switch", "ca" or "router"
    node_id: str  # "S-9c05..." (or the node name in an ibsim net file)
    description: str  # node description: "gpu001 mlx5_0", "MF0;su1-leaf-r0:MQM9700/U1"
    number_of_ports: int
    guid: str | None  # switchguid= / caguid= / routerguid= (or from the node id)
    system_image_guid: str | None
    vendor_id: int | None
    device_id: int | None
    lid: int | None  # switches: the LID of port 0
    lmc: int | None
    port0: str | None  # switches: "base" or "enhanced" port 0
    ports: tuple[FabricPort, ...]
    line_no: int

    def port(self, number: int) -> FabricPort | None:
        return next((p for p in self.ports if p.port == number), None)


@dataclass(frozen=True, slots=True)
class CaUplink:
    """Where one HCA port is cabled: the switch, its port, and the link's width and speed."""

    ca_description: str
    ca_guid: str | None
    ca_port: int
    ca_port_guid: str | None
    switch_description: str | None
    switch_guid: str | None
    switch_port: int
    width: int | None
    speed: str | None

    @property
    def rate_gbps(self) -> float | None:
        """The link rate as ibstat counts it: 400 for 4xNDR, 200 for 2xNDR."""
        return link_rate_gbps(self.width, self.speed)

    @property
    def host(self) -> str:
        """The host part of an rdma-ndd `"%h %d"` description: "gpu001" of "gpu001 mlx5_0"."""
        return self.ca_description.rsplit(" ", 1)[0]

    @property
    def hca(self) -> str | None:
        """The device part of an rdma-ndd `"%h %d"` description: "mlx5_0" of "gpu001 mlx5_0"."""
        parts = self.ca_description.rsplit(" ", 1)
        return parts[1] if len(parts) == 2 else None


@dataclass(frozen=True, slots=True)
class FabricLink:
    """One cable, listed once however many of its ends the text shows; `a` sorts first."""

    a_description: str
    a_port: int
    b_description: str
    b_port: int
    width: int | None
    speed: str | None

    @property
    def rate_gbps(self) -> float | None:
        """The link rate as ibstat counts it: 400 for 4xNDR, 200 for 2xNDR."""
        return link_rate_gbps(self.width, self.speed)


@dataclass(frozen=True, slots=True)
class SwitchPortPeer:
    """What one switch port is cabled to (a CA, another switch or a router)."""

    switch_description: str
    switch_guid: str | None
    port: int
    peer_kind: str | None
    peer_description: str | None
    peer_guid: str | None
    peer_port: int
    width: int | None
    speed: str | None


@dataclass(frozen=True, slots=True)
class Fabric:
    """Everything one `ibnetdiscover` run saw."""

    nodes: tuple[FabricNode, ...]
    generated_on: str | None
    initiated_from: str | None

    @property
    def switches(self) -> tuple[FabricNode, ...]:
        return tuple(n for n in self.nodes if n.kind == SWITCH)

    @property
    def cas(self) -> tuple[FabricNode, ...]:
        return tuple(n for n in self.nodes if n.kind == CA)

    def node(self, description: str) -> FabricNode | None:
        """The first node with this description (`"gpu001 mlx5_0"`); for many look-ups,
        build `by_description()` once instead."""
        return next((n for n in self.nodes if n.description == description), None)

    def by_description(self) -> dict[str, FabricNode]:
        """Nodes by description (the first of duplicates wins, as in `node()`)."""
        index: dict[str, FabricNode] = {}
        for n in self.nodes:
            index.setdefault(n.description, n)
        return index

    def _peer_kind(self, port: FabricPort, kinds: dict[str, str]) -> str | None:
        return kinds.get(port.peer_id) or _ID_PREFIX_KINDS.get(port.peer_id[:2])

    def switch_ports(self) -> list[SwitchPortPeer]:
        """Every connected switch port and its peer, in the order printed."""
        kinds = {n.node_id: n.kind for n in self.nodes}
        return [
            SwitchPortPeer(
                switch_description=sw.description,
                switch_guid=sw.guid,
                port=p.port,
                peer_kind=self._peer_kind(p, kinds),
                peer_description=p.peer_description,
                peer_guid=p.peer_guid,
                peer_port=p.peer_port,
                width=p.width,
                speed=p.speed,
            )
            for sw in self.nodes
            if sw.kind == SWITCH
            for p in sw.ports
        ]

    def links(self) -> list[FabricLink]:
        """Every cable once, from whichever end (or both) the text lists, in the order seen."""
        seen: set[tuple[str, int, str, int]] = set()
        links: list[FabricLink] = []
        for node in self.nodes:
            for p in node.ports:
                if p.peer_description is None:
                    continue
                a, b = (node.description, p.port), (p.peer_description, p.peer_port)
                if b < a:
                    a, b = b, a
                key = (a[0], a[1], b[0], b[1])
                if key in seen:
                    continue
                seen.add(key)
                links.append(FabricLink(a[0], a[1], b[0], b[1], p.width, p.speed))
        return links

    def ca_uplinks(self) -> list[CaUplink]:
        """Every cabled CA port and its switch. Taken from the CA records; a CA port seen only
        from its switch's side (an excerpt that lists switches first) is taken from there."""
        kinds = {n.node_id: n.kind for n in self.nodes}
        uplinks: list[CaUplink] = []
        seen: set[tuple[str, int]] = set()
        for ca in self.nodes:
            if ca.kind != CA:
                continue
            for p in ca.ports:
                seen.add((ca.description, p.port))
                uplinks.append(
                    CaUplink(
                        ca_description=ca.description,
                        ca_guid=ca.guid,
                        ca_port=p.port,
                        ca_port_guid=p.port_guid,
                        switch_description=p.peer_description,
                        switch_guid=p.peer_guid,
                        switch_port=p.peer_port,
                        width=p.width,
                        speed=p.speed,
                    )
                )
        for sw in self.nodes:
            if sw.kind != SWITCH:
                continue
            for p in sw.ports:
                if self._peer_kind(p, kinds) != CA or p.peer_description is None:
                    continue
                if (p.peer_description, p.peer_port) in seen:
                    continue
                seen.add((p.peer_description, p.peer_port))
                uplinks.append(
                    CaUplink(
                        ca_description=p.peer_description,
                        ca_guid=p.peer_guid,
                        ca_port=p.peer_port,
                        ca_port_guid=p.peer_port_guid,
                        switch_description=sw.description,
                        switch_guid=sw.guid,
                        switch_port=p.port,
                        width=p.width,
                        speed=p.speed,
                    )
                )
        return uplinks


# `Switch  129 "S-9c05..."  # "MF0;...:MQM9700/U1" enhanced port 0 lid 1 lmc 0`
# Every pattern here meets untrusted fabric text (node descriptions are set by whoever runs the
# node): no two neighbouring repeats may match the same characters, so the quantifiers are
# possessive and the lines arrive stripped; `\s*(.*?)\s*$` took seconds on one long line.
_NODE = re.compile(r'^(Switch|Ca|Hca|Rt)\s++(\d{1,20})\s++"([^"]*+)"\s*+(?:#\s*+(.*))?$')
_NODE_COMMENT = re.compile(
    r'^"(.*)"(?:\s+(base|enhanced) port (\d{1,20}) lid (\d{1,20}) lmc (\d{1,20}))?$'
)
# `[1](10000b)  "S-..."[3](guid)  # lid 9 lmc 0 "desc" lid 4 4xQDR`; ibsim adds ` w=1 s=4 e=0`
# One pattern for the whole port line (two matches per line cost twice as much at 84,000 lines):
# `[1](10000b)  "S-..."[3](guid)  # lid 9 lmc 0 "desc" lid 4 4xQDR`; ibsim adds ` w=1 s=4 e=0`.
_PORT = re.compile(
    r"^\[(\d{1,20})\](?:\[ext ([^\]]*+)\])?(?:\(([^)]*+)\))?\s*+"
    r'"([^"]*+)"\[(\d{1,20})\](?:\[ext [^\]]*+\])?(?:\(([^)]*+)\))?'
    r"(?:\s++[wse]=\d++)*+\s*+"
    r'(?:#\s*+(?:(?:lid (\d{1,20}) lmc (\d{1,20}) )?"(.*)"'
    r"(?: lid (\d{1,20}))?(?: (\d{1,20})x([A-Za-z0-9]++))?)?)?$"
)
# `switchguid=0x...(port 0 GUID)`: the value, then a parenthesised suffix cut off in code.
_ATTR = re.compile(r"^(\w++)=(\S++)$")
# A port label, not a GUID: a path (`B9D0F0/0/0/1`, `1/2`) or a port number of up to three
# digits (`1`); ibnetdiscover's GUIDs are hex numbers of five digits and more.
_PORT_LABEL = re.compile(r"^(?:[^/]*/.*|\d{1,3})$")


def _without_suffix(value: str) -> str:
    """`0x2c9030000(0x2c9030001)` -> `0x2c9030000`: the value without its last `(...)`."""
    if value.endswith(")"):
        at = value.rfind("(")
        if at > 0 and ")" not in value[at:-1]:
            return value[:at]
    return value


def _guid_or_label(value: str, guids: dict[str, str]) -> tuple[str | None, str | None]:
    """A GUID not met before (then kept in `guids`), or a port label."""
    if _PORT_LABEL.match(value):
        return None, value
    guid = guids[value] = normalize_guid(value)
    return guid, None


def _guid(value: str, guids: dict[str, str]) -> str:
    """`normalize_guid`, once per spelling: a CA's GUID is printed at both ends of its cable
    and again in its record's header (caguid=, sysimgguid=, the "H-" id)."""
    guid = guids.get(value)
    if guid is None:
        guid = guids[value] = normalize_guid(value)
    return guid


def _lines(text: str, chunk: int = 1 << 20) -> Iterator[str]:
    """`text.splitlines()`, a megabyte at a time: the whole list of a 4,096-node fabric's
    lines is 30 MB more at once. Each piece ends just after a `\n`, where splitlines breaks
    too (a `\r\n` stays in one piece), so the lines and their numbers are the same."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + chunk)
        end = len(text) if end < 0 else end + 1
        yield from text[start:end].splitlines()
        start = end


class _NodeBuilder:
    __slots__ = ("attrs", "comment", "kind", "line_no", "node_id", "nports", "ports")

    def __init__(
        self, kind: str, nports: int, node_id: str, comment: str | None, attrs: dict[str, str]
    ) -> None:
        self.kind = kind
        self.nports = nports
        self.node_id = node_id
        self.comment = comment
        self.attrs = attrs
        self.ports: list[FabricPort] = []
        self.line_no = 0


def _attr_int(attrs: dict[str, str], key: str, line_no: int) -> int | None:
    value = attrs.get(key)
    if value is None:
        return None
    try:
        return int(value, 16) if value[:2] in ("0x", "0X") else int(value)
    except ValueError:
        raise ParseError(f"{key} is not a number: {value!r}", line_no=line_no) from None


def _build(b: _NodeBuilder, line: str, guids: dict[str, str]) -> FabricNode:
    description = b.node_id
    lid = lmc = None
    port0 = None
    if b.comment:
        m = _NODE_COMMENT.match(b.comment)
        if not m:
            raise ParseError(
                'expected `# "description" [base|enhanced port 0 lid N lmc N]`',
                line_no=b.line_no,
                line=line,
            )
        description = m.group(1)
        if m.group(2):
            port0 = m.group(2)
            lid, lmc = int(m.group(4)), int(m.group(5))
    guid_key = {SWITCH: "switchguid", CA: "caguid", ROUTER: "routerguid"}[b.kind]
    guid = b.attrs.get(guid_key)
    if guid is None and b.node_id[:2] in _ID_PREFIX_KINDS:
        guid = b.node_id[2:]
    sysimg = b.attrs.get("sysimgguid")
    return FabricNode(
        kind=b.kind,
        node_id=b.node_id,
        description=description,
        number_of_ports=b.nports,
        guid=_guid(guid, guids) if guid is not None else None,
        system_image_guid=_guid(sysimg, guids) if sysimg is not None else None,
        vendor_id=_attr_int(b.attrs, "vendid", b.line_no),
        device_id=_attr_int(b.attrs, "devid", b.line_no),
        lid=lid,
        lmc=lmc,
        port0=port0,
        ports=tuple(b.ports),
        line_no=b.line_no,
    )


@parser(
    "ibnetdiscover",
    "ibnetdiscover: switches, CAs, every cabled port and its peer",
    start=(
        r"^(?:#\s*$|#\s*Topology file|vendid=|devid=|sysimgguid=|switchguid=|caguid="
        r"|(?:Switch|Ca|Hca|Rt)\s+\d)"
    ),
)
@collector_paused()
def parse_ibnetdiscover(text: str) -> Fabric:
    """A fabric from `ibnetdiscover` output (also reads ibsim net files, which share the format)."""
    nodes: list[FabricNode] = []
    current: _NodeBuilder | None = None
    current_line = ""
    attrs: dict[str, str] = {}
    generated_on = initiated_from = None
    port_match = _PORT.match
    # GUIDs normalised once per spelling; repeated words (the peer's id and description,
    # the speed) kept once, not once per port: 330,000 ports held 195 MB at 4,096 nodes.
    guids: dict[str, str] = {}  # port GUIDs (a port label is never kept here)
    node_guids: dict[str, str] = {}  # caguid=, sysimgguid=, the ids: "1" is a GUID there
    intern = sys.intern
    note = noise_recorder()
    for line_no, raw in enumerate(_lines(text), 1):
        line = raw.strip()
        if not line:
            continue
        first = line[0]
        if first == "[":
            m = port_match(line)
            if m is None:
                raise ParseError(
                    'expected a port line `[N] "peer"[M] # [lid N lmc N] "peer description" '
                    "lid N WIDTHxSPEED`",
                    line_no=line_no,
                    line=raw,
                )
            if current is None:
                raise ParseError("port line before any node header", line_no=line_no, line=raw)
            (
                local_port,
                ext_port,
                local_guid,
                peer_id,
                peer_port,
                peer_guid,
                c_lid,
                c_lmc,
                peer_desc,
                c_peer_lid,
                c_width,
                speed,
            ) = m.groups()
            port_lid = int(c_lid) if c_lid is not None else None
            port_lmc = int(c_lmc) if c_lmc is not None else None
            peer_lid = int(c_peer_lid) if c_peer_lid is not None else None
            width = int(c_width) if c_width is not None else None
            if peer_desc is None and peer_id[:2] not in _ID_PREFIX_KINDS:
                # ibsim net files name nodes by their description and carry no comments.
                peer_desc = peer_id
            # Inline: a call per GUID was a tenth of the parse.
            local_label = peer_label = None
            if local_guid:
                known = guids.get(local_guid)
                if known is None:
                    local_guid, local_label = _guid_or_label(local_guid, guids)
                else:
                    local_guid = known
            else:
                local_guid = None
            if peer_guid:
                known = guids.get(peer_guid)
                if known is None:
                    peer_guid, peer_label = _guid_or_label(peer_guid, guids)
                else:
                    peer_guid = known
            else:
                peer_guid = None
            # Positional: keyword calls cost measurably at ~33,000 ports (field order above).
            current.ports.append(
                FabricPort(
                    int(local_port),
                    ext_port,
                    local_guid,
                    port_lid,
                    port_lmc,
                    intern(peer_id),
                    int(peer_port),
                    peer_guid,
                    intern(peer_desc) if peer_desc is not None else None,
                    peer_lid,
                    width,
                    intern(speed) if speed is not None else None,
                    line_no,
                    local_label,
                    peer_label,
                )
            )
            continue
        if first == "#":
            if line.startswith("# Topology file: generated on "):
                generated_on = line[len("# Topology file: generated on ") :].strip()
            elif line.startswith("# Initiated from node "):
                initiated_from = line[len("# Initiated from ") :].strip()
            elif note is not None:
                note(line_no)  # the '#' lines around the title
            continue
        # key=value lines (lowercase keys) outnumber node headers (capitalised) four to one.
        m = _ATTR.match(line) if first.islower() else None
        if m is not None:
            # vendid=, devid=, sysimgguid=, switchguid=0x..(port0 guid), caguid=: they open
            # the next node record. ibsim's global `width=` lines land here too, unused.
            if current is not None:
                nodes.append(_build(current, current_line, node_guids))
                current = None
            attrs[m.group(1)] = _without_suffix(m.group(2))
            continue
        m = _NODE.match(line)
        if m is not None:
            if current is not None:
                nodes.append(_build(current, current_line, node_guids))
            current = _NodeBuilder(
                _KINDS[m.group(1)], int(m.group(2)), m.group(3), m.group(4), attrs
            )
            current.line_no = line_no
            current_line = raw
            attrs = {}
            continue
        raise ParseError(
            "expected a node header (Switch/Ca/Rt), a port line, key=value or a comment",
            line_no=line_no,
            line=raw,
        )
    if current is not None:
        nodes.append(_build(current, current_line, node_guids))
    if not nodes:
        raise ParseError("no Switch or Ca record: not ibnetdiscover output")
    return Fabric(nodes=tuple(nodes), generated_on=generated_on, initiated_from=initiated_from)
