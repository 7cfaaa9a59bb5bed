"""An HCA's port counters as sysfs keeps them (`/sys/class/infiniband/HCA/ports/1/counters/FILE`,
Documentation/ABI/stable/sysfs-class-infiniband), one `PATH VALUE` line per file, read by their
IBTA names: what the watcher and the job epilog compare between two reads."""

from __future__ import annotations

import re

from cluster_tool.errors import ParseError

__all__ = ["DATA_COUNTERS", "SYSFS_COUNTERS", "parse_port_counters"]

# The sysfs counter files and the names the IBTA and ibqueryerrors give them.
SYSFS_COUNTERS = {
    "port_xmit_data": "PortXmitData",
    "port_rcv_data": "PortRcvData",
    "port_xmit_wait": "PortXmitWait",
    "link_downed": "LinkDownedCounter",
    "symbol_error": "SymbolErrorCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "port_rcv_errors": "PortRcvErrors",
    "port_xmit_discards": "PortXmitDiscards",
}
# PortXmitData / PortRcvData count 4-octet words (IBTA PortCounters): x 4 for bytes.
DATA_COUNTERS = frozenset({"PortXmitData", "PortRcvData"})

_LINE = re.compile(
    r"^/sys/class/infiniband/(?P<hca>[\w.-]{1,32})/ports/1/counters/(?P<file>[a-z_]{1,40}) "
    r"(?P<value>\d{1,20})\s*$"
)


def parse_port_counters(text: str) -> dict[str, dict[str, int]]:
    """`PATH VALUE` lines of the port-counters probe -> {HCA: {IBTA counter name: value}};
    ParseError naming the first line that is neither that nor empty."""
    out: dict[str, dict[str, int]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None or m["file"] not in SYSFS_COUNTERS:
            raise ParseError(
                "expected /sys/class/infiniband/HCA/ports/1/counters/FILE N", line_no=no, line=line
            )
        out.setdefault(m["hca"], {})[SYSFS_COUNTERS[m["file"]]] = int(m["value"])
    return out
