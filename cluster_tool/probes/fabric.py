"""The fabric's probes (`FABRIC_PROBES`), run on the subnet-manager host. Their parsers load
when first used, so `node-check` starts without them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster_tool.probes import Probe

if TYPE_CHECKING:
    from cluster_tool.parsers.ibcounters import IbQueryErrors
    from cluster_tool.parsers.ibnetdiscover import Fabric

__all__ = ["FABRIC_PROBES", "Ibnetdiscover", "Ibqueryerrors"]


class Ibnetdiscover(Probe):
    name = "ibnetdiscover"
    check = "fabric.discover"
    what = "ibnetdiscover"
    timeout_s = 300

    def command(self) -> str:
        return "ibnetdiscover"

    def process(self, output: list[str]) -> Fabric:
        from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover

        return parse_ibnetdiscover("\n".join(output))


class Ibqueryerrors(Probe):
    name = "ibqueryerrors"
    check = "ib.counters-unread"
    what = "ibqueryerrors"
    timeout_s = 300
    # It exits 1 whenever it lists a port over threshold (infiniband-diags:
    # `rc = print_summary(); if (rc) rc = 1;`): what it printed is the reading.
    reads_failed_runs = True

    def command(self) -> str:
        return "ibqueryerrors"

    def process(self, output: list[str]) -> IbQueryErrors:
        from cluster_tool.parsers.ibcounters import parse_ibqueryerrors

        return parse_ibqueryerrors("\n".join(output))


FABRIC_PROBES: tuple[Probe, ...] = (Ibnetdiscover(), Ibqueryerrors())
