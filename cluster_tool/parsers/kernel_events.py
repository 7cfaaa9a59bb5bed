"""The kernel log as one reading: its GPU Xids and NVSwitch SXids (`kernel_log`) and its mlx5
port state changes (`link_events`), read once from the same text for every judge of it (the
node checks, the watcher, the job prolog and epilog)."""

from __future__ import annotations

from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers.kernel_log import XidEvent, parse_xids
from cluster_tool.parsers.link_events import LinkEvent, parse_link_events

__all__ = ["KernelEvents", "parse_kernel_events"]


@dataclass(frozen=True)
class KernelEvents:
    """What one kernel log says about the node's GPUs, NVSwitches and HCA ports.

    The Xids are the reading: a line that starts like an Xid and does not parse makes the
    whole log unreadable. A link line that does not parse leaves the Xids readable (a fatal
    Xid is still judged) and is kept in `links_error`: the flap check cannot run, and
    `checked_links()` raises it for the reader that needs the links."""

    xids: list[XidEvent]
    links: list[LinkEvent]
    links_error: ParseError | None = None

    def checked_links(self) -> list[LinkEvent]:
        """The link events; the ParseError of the line that could not be read, if one was not."""
        if self.links_error is not None:
            raise self.links_error
        return self.links


def parse_kernel_events(text: str) -> KernelEvents:
    """Xids, SXids and mlx5 link changes of a kernel log; ParseError naming the line when an Xid
    line cannot be read."""
    xids = parse_xids(text)
    try:
        return KernelEvents(xids, parse_link_events(text))
    except ParseError as exc:
        return KernelEvents(xids, [], exc)
