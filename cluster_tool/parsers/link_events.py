"""Port state changes of Mellanox/NVIDIA HCAs and NICs from the kernel log (`dmesg` in its time
formats, `journalctl -k`, syslog): the `Link down` / `Link up` lines of an mlx5 netdev, as
records a flap check can count per port."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, noise_recorder, parser
from cluster_tool.parsers.kernel_log import log_prefix
from cluster_tool.parsers.pci import normalize_pci_bus_id

__all__ = ["LinkEvent", "parse_link_events"]

# mlx5e_update_carrier(): netdev_info(netdev, "Link up") / "Link down", which the driver core
# prints as "mlx5_core 0000:01:00.1 eth1: Link up" (driver, PCI function, netdev). Any line of
# that shape must parse in full; every other kernel line is not ours and is skipped.
_TRIGGER = re.compile(r"\bmlx5_core (?=\S+ \S+: Link )")
_LINK = re.compile(
    r"mlx5_core (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]) "
    r"(?P<netdev>[\w.:-]{1,32}): Link (?P<state>up|down)\s*$"
)


@dataclass(frozen=True)
class LinkEvent:
    """One port state change of an mlx5 netdev (Ethernet, RoCE or IPoIB): `down` or `up`."""

    pci: str  # normalised 0000:18:00.0, to find the HCA in the node profile
    netdev: str
    state: str
    timestamp: str | None  # wall clock as printed (dmesg -T, journal, syslog)
    uptime_s: float | None  # seconds since boot (dmesg default)
    host: str | None  # journal / syslog host field
    line_no: int


@parser("link-events", "mlx5 port Link up / Link down lines from dmesg, journalctl -k or syslog")
def parse_link_events(text: str) -> list[LinkEvent]:
    """Every mlx5 link state change of a kernel log, in log order; other lines are skipped.
    A line that starts like one (`mlx5_core BUS IF: Link ...`) and does not parse is an error."""
    events: list[LinkEvent] = []
    note = noise_recorder()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        trigger = _TRIGGER.search(line)
        if trigger is None:
            if note is not None and line:
                note(line_no)
            continue
        link = _LINK.match(line, trigger.start())
        pci = normalize_pci_bus_id(link["bus"]) if link else None
        if link is None or pci is None:
            raise ParseError(
                "expected 'mlx5_core <pci> <netdev>: Link up' or '... Link down'",
                line_no=line_no,
                line=raw,
            )
        timestamp, uptime, host = log_prefix(
            line[: trigger.start()], line_no, raw, before="mlx5_core"
        )
        events.append(
            LinkEvent(
                pci=pci,
                netdev=link["netdev"],
                state=link["state"],
                timestamp=timestamp,
                uptime_s=uptime,
                host=host,
                line_no=line_no,
            )
        )
    return events
