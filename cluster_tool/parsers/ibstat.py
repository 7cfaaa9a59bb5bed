"""`ibstat`, `ibstat -p` and `ibstatus`: a host's HCAs, their ports, state, rate and GUIDs."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers._ibcommon import normalize_guid, to_float, to_int
from cluster_tool.parsers.base import parser

__all__ = [
    "IbstatCa",
    "IbstatPort",
    "IbstatusPort",
    "parse_ibstat",
    "parse_ibstat_p",
    "parse_ibstatus",
]


@dataclass(frozen=True)
class IbstatPort:
    """One port of an HCA as `ibstat` shows it. Ethernet (RoCE) ports have lid 0."""

    number: int
    state: str  # Active, Down, Initializing, Armed
    physical_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float  # the aggregate rate: 400 for 4X NDR, 200 for 2X NDR
    base_lid: int | None
    sm_lid: int | None
    lmc: int | None
    capability_mask: int | None
    port_guid: str | None
    link_layer: str | None  # InfiniBand or Ethernet; absent in very old ibstat

    @property
    def is_infiniband(self) -> bool:
        return (self.link_layer or "InfiniBand").lower() == "infiniband"

    @property
    def is_active(self) -> bool:
        return self.state == "Active" and self.physical_state == "LinkUp"


@dataclass(frozen=True)
class IbstatCa:
    """One channel adapter (`CA 'mlx5_0'`) and its ports."""

    name: str
    ca_type: str | None  # MT4129 = ConnectX-7, MT41692 = BlueField-3
    number_of_ports: int | None
    firmware_version: str | None
    hardware_version: str | None
    node_guid: str | None
    system_image_guid: str | None
    ports: tuple[IbstatPort, ...]

    def port(self, number: int) -> IbstatPort | None:
        return next((p for p in self.ports if p.number == number), None)


_CA = re.compile(r"^CA '([^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (\d{1,20}):\s*$")
# Possessive quantifiers and the value stripped in code, not by `(.*?)\s*$`: that pair backtracks
# quadratically on a long run of blanks, and node output is untrusted (a 50 KB line took 27 s).
_FIELD = re.compile(r"^\s++([A-Za-z][A-Za-z ]*+):(.*)$")

_CA_FIELDS = {
    "CA type": "ca_type",
    "Number of ports": "number_of_ports",
    "Firmware version": "firmware_version",
    "Hardware version": "hardware_version",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_PORT_FIELDS = {
    "State": "state",
    "Physical state": "physical_state",
    "Rate": "rate_gbps",
    "Base lid": "base_lid",
    "SM lid": "sm_lid",
    "LMC": "lmc",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}
_PORT_REQUIRED = ("state", "physical_state", "rate_gbps")


@dataclass
class _PortDraft:
    number: int
    line_no: int
    line: str
    state: str | None = None
    physical_state: str | None = None
    rate_gbps: float | None = None
    base_lid: int | None = None
    sm_lid: int | None = None
    lmc: int | None = None
    capability_mask: int | None = None
    port_guid: str | None = None
    link_layer: str | None = None

    def build(self, ca: str) -> IbstatPort:
        if self.state is None or self.physical_state is None or self.rate_gbps is None:
            missing = [k for k in _PORT_REQUIRED if getattr(self, k) is None]
            raise ParseError(
                f"port of CA {ca!r} lacks {', '.join(missing)}",
                line_no=self.line_no,
                line=self.line,
            )
        return IbstatPort(
            number=self.number,
            state=self.state,
            physical_state=self.physical_state,
            rate_gbps=self.rate_gbps,
            base_lid=self.base_lid,
            sm_lid=self.sm_lid,
            lmc=self.lmc,
            capability_mask=self.capability_mask,
            port_guid=self.port_guid,
            link_layer=self.link_layer,
        )


@dataclass
class _CaDraft:
    name: str
    ca_type: str | None = None
    number_of_ports: int | None = None
    firmware_version: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_image_guid: str | None = None
    ports: list[IbstatPort] = dataclasses.field(default_factory=list)
    port: _PortDraft | None = None

    def close_port(self) -> None:
        if self.port is not None:
            self.ports.append(self.port.build(self.name))
            self.port = None

    def build(self) -> IbstatCa:
        self.close_port()
        return IbstatCa(
            name=self.name,
            ca_type=self.ca_type,
            number_of_ports=self.number_of_ports,
            firmware_version=self.firmware_version,
            hardware_version=self.hardware_version,
            node_guid=self.node_guid,
            system_image_guid=self.system_image_guid,
            ports=tuple(self.ports),
        )


def _ca_value(key: str, value: str, line_no: int, line: str) -> object:
    if key == "number_of_ports":
        return to_int(value, "Number of ports", line_no=line_no, line=line)
    if key in ("node_guid", "system_image_guid"):
        return normalize_guid(value)
    return value


def _port_value(key: str, value: str, line_no: int, line: str) -> object:
    if key == "rate_gbps":
        return to_float(value, "Rate", line_no=line_no, line=line)
    if key in ("base_lid", "sm_lid", "lmc", "capability_mask"):
        return to_int(value, key, line_no=line_no, line=line)
    if key == "port_guid":
        return normalize_guid(value)
    return value


@parser(
    "ibstat",
    "ibstat: HCAs with type, firmware, GUIDs and ports (state, rate, link layer)",
    start=r"^CA '",
)
def parse_ibstat(text: str) -> list[IbstatCa]:
    """Every CA in `ibstat` output, in the order printed."""
    cas: list[IbstatCa] = []
    current: _CaDraft | None = None
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _CA.match(line)
        if m:
            if current is not None:
                cas.append(current.build())
            current = _CaDraft(m.group(1))
            continue
        if current is None:
            raise ParseError("expected `CA 'NAME'` before any field", line_no=line_no, line=line)
        m = _PORT.match(line)
        if m:
            current.close_port()
            current.port = _PortDraft(int(m.group(1)), line_no, line)
            continue
        m = _FIELD.match(line)
        if not m:
            raise ParseError("expected `Key: value`", line_no=line_no, line=line)
        name, value = m.group(1).rstrip(), m.group(2).strip()
        if current.port is not None and name in _PORT_FIELDS:
            key = _PORT_FIELDS[name]
            setattr(current.port, key, _port_value(key, value, line_no, line))
        elif current.port is None and name in _CA_FIELDS:
            key = _CA_FIELDS[name]
            setattr(current, key, _ca_value(key, value, line_no, line))
        elif name in _CA_FIELDS or name in _PORT_FIELDS:
            where = "port" if current.port is not None else "CA"
            raise ParseError(
                f"{name!r} does not belong in a {where} section", line_no=line_no, line=line
            )
        # Other keys (newer ibstat adds some) are accepted and not kept.
    if current is not None:
        cas.append(current.build())
    if not cas:
        raise ParseError("no `CA 'NAME'` section: not ibstat output")
    return cas


_GUID_LINE = re.compile(r"^\s*(0x[0-9A-Fa-f]{1,16})\s*$")


@parser(
    "ibstat-p",
    "ibstat -p: the port GUIDs of this host, one a line",
    start=r"^\s*0x[0-9A-Fa-f]{16}\s*$",
)
def parse_ibstat_p(text: str) -> list[str]:
    """The port GUIDs `ibstat -p` lists, as `0x` + 16 hex digits."""
    guids: list[str] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _GUID_LINE.match(line)
        if not m:
            raise ParseError(
                "expected a port GUID such as 0x58a2e10300a7820e", line_no=line_no, line=line
            )
        guids.append(normalize_guid(m.group(1)))
    if not guids:
        raise ParseError("no port GUID: not `ibstat -p` output")
    return guids


@dataclass(frozen=True)
class IbstatusPort:
    """One port as `ibstatus` shows it: states with their numeric codes, rate with its name."""

    device: str
    port: int
    default_gid: str | None
    base_lid: int | None
    sm_lid: int | None
    state: str | None  # ACTIVE, DOWN, ...
    physical_state: str | None  # LinkUp, Polling, Disabled
    rate_gbps: float | None
    width: int | None  # 4 for "4X NDR", 2 for "2X NDR"
    speed: str | None  # NDR, HDR, ...
    link_layer: str | None


_IBSTATUS_HEAD = re.compile(r"^Infiniband device '([^']+)' port (\d{1,20}) status:\s*$")
_IBSTATUS_FIELD = re.compile(r"^\s++([a-z_ ]++):(.*)$")
_CODED = re.compile(r"^\d+:\s*(\S.*)$")
_RATE = re.compile(r"^([\d.]+) Gb/sec(?: \((\d{1,20})X(?: (\w+))?\))?$")


@dataclass
class _IbstatusDraft:
    device: str
    port: int
    default_gid: str | None = None
    base_lid: int | None = None
    sm_lid: int | None = None
    state: str | None = None
    physical_state: str | None = None
    rate_gbps: float | None = None
    width: int | None = None
    speed: str | None = None
    link_layer: str | None = None


@parser(
    "ibstatus",
    "ibstatus: per-port state, rate with width and speed name, link layer",
    start=r"^Infiniband device '",
)
def parse_ibstatus(text: str) -> list[IbstatusPort]:
    """Every port section of `ibstatus` output."""
    ports: list[IbstatusPort] = []
    draft: _IbstatusDraft | None = None

    def close() -> None:
        if draft is not None:
            ports.append(IbstatusPort(**dataclasses.asdict(draft)))

    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _IBSTATUS_HEAD.match(line)
        if m:
            close()
            draft = _IbstatusDraft(device=m.group(1), port=int(m.group(2)))
            continue
        m = _IBSTATUS_FIELD.match(line)
        if draft is None or not m:
            raise ParseError(
                "expected `Infiniband device 'X' port N status:` or a field",
                line_no=line_no,
                line=line,
            )
        key, value = m.group(1).strip(), m.group(2).strip()
        if key == "base lid":
            draft.base_lid = to_int(value, key, line_no=line_no, line=line)
        elif key == "sm lid":
            draft.sm_lid = to_int(value, key, line_no=line_no, line=line)
        elif key in ("state", "phys state"):
            coded = _CODED.match(value)  # "4: ACTIVE", "5: LinkUp"
            if key == "state":
                draft.state = coded.group(1) if coded else value
            else:
                draft.physical_state = coded.group(1) if coded else value
        elif key == "rate":
            r = _RATE.match(value)
            if not r:
                raise ParseError(
                    "expected a rate such as `200 Gb/sec (2X NDR)`", line_no=line_no, line=line
                )
            draft.rate_gbps = to_float(r.group(1), "rate", line_no=line_no, line=line)
            draft.width = int(r.group(2)) if r.group(2) else None
            draft.speed = r.group(3)
        elif key == "default gid":
            draft.default_gid = value
        elif key == "link_layer":
            draft.link_layer = value
        # Other fields (newer ibstatus versions add some) are accepted and not kept.
    close()
    if not ports:
        raise ParseError("no `Infiniband device` section: not ibstatus output")
    return ports
