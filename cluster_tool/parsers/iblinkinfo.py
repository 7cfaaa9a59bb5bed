"""`iblinkinfo` (grouped or `-l` one-line): each port's width, per-lane speed, state and peer.

iblinkinfo prints the per-lane rate, not the link rate: `4X 106.25 Gbps` is a 400 Gb/s NDR link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers._ibcommon import (
    LANE_SPEED_NAMES,
    link_rate_gbps,
    normalize_guid,
    to_float,
)
from cluster_tool.parsers.base import parser

__all__ = ["IbLinkInfoPort", "parse_iblinkinfo"]


@dataclass(frozen=True)
class IbLinkInfoPort:
    """One port line: the local end, the link as negotiated, and the peer (if any)."""

    node_kind: str | None  # "switch" or "ca"; None in `-l` mode, whose lines do not say
    node_guid: str | None  # switches; in `-l` mode the GUID the line starts with
    node_description: str
    port_guid: str | None  # CA lines start with the port GUID
    lid: int
    port: int
    ext_port: str | None  # the `[  ]` after the port number: split-port index, if printed
    width: int | None  # lanes (4 for 4X); None when the port is down
    lane_speed_gbps: float | None  # per lane, as printed: 106.25 (NDR), 53.125 (HDR), 25.78125
    state: str  # Active, Down, Initialize, Armed
    physical_state: str  # LinkUp, Polling, Disabled, ...
    peer_guid: str | None  # printed in -l mode only
    peer_lid: int | None
    peer_port: int | None
    peer_ext_port: str | None
    peer_description: str | None
    annotation: str  # the trailing `( ... )`: "Could be 12X", "Could be 106.25 Gbps", ""
    line_no: int

    @property
    def speed(self) -> str | None:
        """The generation the per-lane rate stands for: NDR, HDR, EDR, ..."""
        if self.lane_speed_gbps is None:
            return None
        return LANE_SPEED_NAMES.get(self.lane_speed_gbps)

    @property
    def rate_gbps(self) -> float | None:
        """The link rate as ibstat counts it: `4X 106.25 Gbps` is 400."""
        return link_rate_gbps(self.width, self.speed)

    @property
    def is_up(self) -> bool:
        return self.state == "Active" and self.physical_state == "LinkUp"


_SWITCH_HEAD = re.compile(r"^Switch:\s++(0x[0-9A-Fa-f]++)\s++(.*):\s*+$")
_CA_HEAD = re.compile(r"^CA:\s++(.*):\s*+$")
# `[guid "desc"] lid port[ext] ==( link )==> [guid] [lid port][ext] "peer" ( annotation )`
# Linear on any line (node descriptions are set by whoever runs the node): the repeats are
# possessive, the link text ends at the first `)==>` (atomic: never retried at a later one), the
# annotation holds no quote, and the fields are stripped in code rather than by `\s*(.*?)\s*`.
_PORT = re.compile(
    r'^\s*+(?:(0x[0-9A-Fa-f]++)\s++)?(?:"([^"]*+)"\s++)?(\d{1,20})\s++(\d{1,20})\[([^\]]*+)\]\s++'
    r"==\((?>(.*?)\)==>)\s*+"
    r"(?:(0x[0-9A-Fa-f]++)\s++)?(?:(\d{1,20})\s++(\d{1,20}))?\s*+\[([^\]]*+)\]\s*+"
    r'"(.*)"\s*+\(([^"]*)\)\s*+$'
)
_LINK = re.compile(
    r"^(?:(\d{1,20})X\s++([\d.]++)\s*+Gbps(?:\s++\(\w++\))?\s++)?([A-Za-z]++)/\s*+(\w++)$"
)


@parser(
    "iblinkinfo",
    "iblinkinfo: per-port width, per-lane speed, state and peer",
    start=r'^(?:Switch:\s+0x|CA:\s|0x[0-9A-Fa-f]+\s+")',
)
def parse_iblinkinfo(text: str) -> list[IbLinkInfoPort]:
    """Every port line of `iblinkinfo` (grouped by node, or `-l`)."""
    ports: list[IbLinkInfoPort] = []
    kind: str | None = None
    node_guid: str | None = None
    node_desc: str | None = None
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _SWITCH_HEAD.match(line)
        if m:
            kind, node_guid, node_desc = "switch", normalize_guid(m.group(1)), m.group(2).strip()
            continue
        m = _CA_HEAD.match(line)
        if m:
            kind, node_guid, node_desc = "ca", None, m.group(1).strip()
            continue
        m = _PORT.match(line)
        if not m:
            raise ParseError(
                "expected `Switch:`/`CA:` or a port line `LID PORT[ ] ==( ... )==> ...`",
                line_no=line_no,
                line=line,
            )
        (guid, desc, lid, port, ext, link, peer_guid, peer_lid, peer_port, peer_ext, peer_desc,
         note) = m.groups()  # fmt: skip
        link, ext, peer_ext, note = link.strip(), ext.strip(), peer_ext.strip(), note.strip()
        lk = _LINK.match(link)
        if not lk:
            raise ParseError(
                "expected a link such as `4X 106.25 Gbps Active/  LinkUp` or `Down/ Polling`",
                line_no=line_no,
                line=line,
            )
        width, lane, state, phys = lk.groups()
        port_guid = None
        if desc is not None:
            # `-l`: every line names its node and starts with a GUID (a switch's node GUID, a
            # CA's port GUID) but not with the node's kind.
            line_kind = kind
            line_node_guid = normalize_guid(guid) if guid else None
            line_desc = desc.strip()
        else:
            if node_desc is None or kind is None:
                raise ParseError(
                    "port line before any `Switch:` or `CA:`", line_no=line_no, line=line
                )
            line_kind, line_node_guid, line_desc = kind, node_guid, node_desc
            port_guid = normalize_guid(guid) if guid else None
        ports.append(
            IbLinkInfoPort(
                node_kind=line_kind,
                node_guid=line_node_guid,
                node_description=line_desc,
                port_guid=port_guid,
                lid=int(lid),
                port=int(port),
                ext_port=ext or None,
                width=int(width) if width else None,
                lane_speed_gbps=to_float(lane, "lane speed", line_no, line) if lane else None,
                state=state,
                physical_state=phys,
                peer_guid=normalize_guid(peer_guid) if peer_guid else None,
                peer_lid=int(peer_lid) if peer_lid else None,
                peer_port=int(peer_port) if peer_port else None,
                peer_ext_port=peer_ext or None,
                peer_description=peer_desc or None,
                annotation=note,
                line_no=line_no,
            )
        )
    if not ports:
        raise ParseError("no port line: not iblinkinfo output")
    return ports
