"""InfiniBand port error counters: `perfquery` (basic and `-x` extended) and `ibqueryerrors`."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers._ibcommon import normalize_guid, to_int
from cluster_tool.parsers.base import parser

__all__ = [
    "ERROR_COUNTERS",
    "IbQueryErrors",
    "PerfCounters",
    "PortErrors",
    "parse_ibqueryerrors",
    "parse_perfquery",
]

# The counters that mean a bad cable, optic or port (PortXmitWait is congestion, not an error).
ERROR_COUNTERS = (
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortXmitDiscards",
    "PortXmitConstraintErrors",
    "PortRcvConstraintErrors",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
    "VL15Dropped",
)


@dataclass(frozen=True)
class PerfCounters:
    """One `# Port counters:` block of perfquery: which port, and every counter it printed."""

    extended: bool  # `# Port extended counters` (perfquery -x): 64-bit data/packet counters
    lid: int
    port: int  # 255 (0xFF) is perfquery's "all ports" aggregate
    capability_mask: int | None
    counters: dict[str, int]
    line_no: int

    def get(self, name: str) -> int | None:
        return self.counters.get(name)

    @property
    def errors(self) -> dict[str, int]:
        """The error counters that are not zero."""
        return {k: v for k, v in self.counters.items() if k in ERROR_COUNTERS and v}


_PQ_HEAD = re.compile(
    r"^#\s*+Port (extended )?counters:\s*+Lid (\d{1,20}) port (\d{1,20})"
    r"(?:\s*+\(CapMask:\s*+(0x[0-9A-Fa-f]++)[^)]*+\))?\s*+$"
)
_PQ_FIELD = re.compile(r"^(\w++):\.*+(\S++)\s*+$")


@parser(
    "perfquery",
    "perfquery [-x]: port counters (PortXmitData, SymbolErrorCounter, ...)",
    start=r"^#\s*Port (?:extended )?counters:",
)
def parse_perfquery(text: str) -> list[PerfCounters]:
    """Every counter block of `perfquery` output (one per port queried)."""
    blocks: list[PerfCounters] = []
    head: tuple[bool, int, int, int | None, int] | None = None
    counters: dict[str, int] = {}

    def close() -> None:
        if head is not None:
            extended, lid, port, cap, at = head
            blocks.append(PerfCounters(extended, lid, port, cap, counters, at))

    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _PQ_HEAD.match(line)
        if m:
            close()
            cap = to_int(m.group(4), "CapMask", line_no, line) if m.group(4) else None
            head = (bool(m.group(1)), int(m.group(2)), int(m.group(3)), cap, line_no)
            counters = {}
            continue
        m = _PQ_FIELD.match(line.strip())
        if not m or head is None:
            raise ParseError(
                "expected `# Port counters: Lid N port N` or `Counter:....value`",
                line_no=line_no,
                line=line,
            )
        counters[m.group(1)] = to_int(m.group(2), m.group(1), line_no, line)
    close()
    if not blocks:
        raise ParseError("no `# Port counters:` block: not perfquery output")
    return blocks


@dataclass(frozen=True)
class PortErrors:
    """One `GUID 0x.. port N: [Counter == value] ...` line of ibqueryerrors."""

    section: str  # "errors" (`Errors for ...`) or "data" (`Data Counters for ...`, with -d)
    node_description: str
    node_guid: str | None  # printed for switches (`Errors for 0x.. "desc"`)
    guid: str  # the GUID on the port line (a CA's port GUID, a switch's node GUID)
    port: int | None  # None for the switch's `port ALL` aggregate
    counters: dict[str, int]
    link_info: str | None  # the `Link info: ...` line that follows with -r/--report-port
    line_no: int


@dataclass(frozen=True)
class IbQueryErrors:
    """ibqueryerrors: the ports over threshold and the summary lines."""

    ports: tuple[PortErrors, ...]
    nodes_checked: int | None
    bad_nodes: int | None
    ports_checked: int | None
    bad_ports: int | None
    pma_query_failures: int | None
    thresholds: str | None
    suppressed: tuple[str, ...]
    complete: bool  # the summary was printed

    def for_node(self, description: str) -> list[PortErrors]:
        return [p for p in self.ports if p.node_description == description]

    @property
    def error_ports(self) -> tuple[PortErrors, ...]:
        """Ports over threshold (not the `port ALL` aggregate, not data counters)."""
        return tuple(p for p in self.ports if p.section == "errors" and p.port is not None)


# Possessive repeats, and values stripped in code rather than by `\s*(.*?)\s*$`, which
# backtracks quadratically on a long run of blanks in one untrusted line.
_IQE_NODE = re.compile(r'^(Errors|Data Counters) for\s++(?:(0x[0-9A-Fa-f]++)\s++)?"(.*)"\s*+$')
_IQE_PORT = re.compile(r"^\s++GUID\s++(0x[0-9A-Fa-f]++)\s++port\s++(\d{1,20}|ALL):(.*)$")
# `[SymbolErrorCounter == 1234]`; with extended counters a human-readable copy follows:
# `[PortXmitWait == 3404542 (3.405M)]`, `[PortXmitData == 2448 (9.562KB)]`.
_IQE_COUNTER = re.compile(r"\[(\w++) == (\d{1,20})(?:\s*+\(\s*+[\d.]++\s*+[A-Za-z]*+\))?\]")
_IQE_LINK_INFO = re.compile(r"^\s++Link info:(.*)$")
_IQE_SUMMARY = re.compile(
    r"^## Summary:\s*(\d{1,20}) nodes checked,\s*(\d{1,20}) bad nodes found\s*$"
)
_IQE_PORTS = re.compile(
    r"^##\s+(\d{1,20}) ports checked,\s*(\d{1,20}) ports have errors beyond threshold\s*$"
)
_IQE_PMA = re.compile(r"^##\s+(\d{1,20}) PMA query failures\s*$")


@parser(
    "ibqueryerrors",
    "ibqueryerrors: ports with error counters over threshold, and the summary",
    start=r"^(?:(?:Errors|Data Counters) for\s|## Summary:|Suppressing:)",
)
def parse_ibqueryerrors(text: str) -> IbQueryErrors:
    """The per-port error lines and the `## Summary` of `ibqueryerrors`."""
    ports: list[PortErrors] = []
    node: tuple[str, str | None, str] | None = None
    summary: dict[str, int] = {}
    thresholds: str | None = None
    suppressed: tuple[str, ...] = ()
    seen_summary = False
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _IQE_NODE.match(line)
        if m:
            section = "errors" if m.group(1) == "Errors" else "data"
            node = (section, normalize_guid(m.group(2)) if m.group(2) else None, m.group(3))
            continue
        m = _IQE_LINK_INFO.match(line)
        if m:
            if not ports:
                raise ParseError("`Link info:` before any port line", line_no=line_no, line=line)
            ports[-1] = dataclasses.replace(ports[-1], link_info=m.group(1).strip())
            continue
        m = _IQE_PORT.match(line)
        if m:
            if node is None:
                raise ParseError("port line before any `Errors for`", line_no=line_no, line=line)
            rest = m.group(3).strip()
            counters = {name: int(value) for name, value in _IQE_COUNTER.findall(rest)}
            leftover = _IQE_COUNTER.sub("", rest).strip()
            if leftover:
                raise ParseError(
                    f"expected `[Counter == value]` items, found {leftover!r}",
                    line_no=line_no,
                    line=line,
                )
            ports.append(
                PortErrors(
                    section=node[0],
                    node_description=node[2],
                    node_guid=node[1],
                    guid=normalize_guid(m.group(1)),
                    port=None if m.group(2) == "ALL" else int(m.group(2)),
                    counters=counters,
                    link_info=None,
                    line_no=line_no,
                )
            )
            continue
        if line.startswith("##"):
            if m := _IQE_SUMMARY.match(line):
                summary["nodes_checked"], summary["bad_nodes"] = int(m[1]), int(m[2])
                seen_summary = True
            elif m := _IQE_PORTS.match(line):
                summary["ports_checked"], summary["bad_ports"] = int(m[1]), int(m[2])
            elif m := _IQE_PMA.match(line):
                summary["pma_query_failures"] = int(m[1])
            elif line.startswith("## Suppressed:"):
                suppressed = tuple(line[len("## Suppressed:") :].split())
            elif line.startswith("## Thresholds:"):
                # Empty when the defaults apply; else the thresholds given on the command line.
                thresholds = line[len("## Thresholds:") :].strip()
            else:
                raise ParseError("unexpected `##` summary line", line_no=line_no, line=line)
            continue
        raise ParseError(
            "expected `Errors for ...`, a `GUID ... port N:` line or the `## Summary`",
            line_no=line_no,
            line=line,
        )
    if not ports and not seen_summary:
        raise ParseError("no error line and no `## Summary`: not ibqueryerrors output")
    return IbQueryErrors(
        ports=tuple(ports),
        nodes_checked=summary.get("nodes_checked"),
        bad_nodes=summary.get("bad_nodes"),
        ports_checked=summary.get("ports_checked"),
        bad_ports=summary.get("bad_ports"),
        pma_query_failures=summary.get("pma_query_failures"),
        thresholds=thresholds,
        suppressed=suppressed,
        complete=seen_summary,
    )
