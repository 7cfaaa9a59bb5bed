"""The cheap signals the watcher reads on every node each cycle, and where it reads them: the
node probes (`WATCH_PROBES`: nvidia-smi -q, the kernel log, the HCA port counters in sysfs),
the fabric's (ibnetdiscover and ibqueryerrors on the subnet-manager host), and Slurm's view.

`Sources` is the one door: `FanoutSources` runs the probes over SSH with the fan-out every
workflow uses; tests hand `run_cycle` one that answers with captured output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cluster_tool.errors import ParseError
from cluster_tool.parsers.nvidia_query import parse_query_csv
from cluster_tool.probes import Probe
from cluster_tool.probes.fabric import FABRIC_PROBES
from cluster_tool.probes.node import KernelLog, NvidiaSmiQ
from cluster_tool.remote.fanout import HostResult, Target, Transport, collect
from cluster_tool.spec.models import Cluster

__all__ = [
    "DATA_COUNTERS",
    "WATCH_PROBES",
    "FanoutSources",
    "GpuClocks",
    "PortCounters",
    "Sources",
    "parse_port_counters",
]

# The sysfs counter files (Documentation/ABI/stable/sysfs-class-infiniband) and the names the
# IBTA and ibqueryerrors give them.
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


class PortCounters(Probe):
    """Port 1 of every RDMA device, straight from sysfs (no MAD traffic on the fabric)."""

    name = "port-counters"
    check = "watch.unread"
    what = "the HCA port counters (sysfs)"
    timeout_s = 30

    def command(self) -> str:
        files = " ".join(SYSFS_COUNTERS)
        return (
            "for d in /sys/class/infiniband/*/ports/1/counters; do "
            f'for f in {files}; do [ -r "$d/$f" ] && echo "$d/$f $(cat "$d/$f")"; done; '
            "done; true"
        )

    def process(self, output: list[str]) -> dict[str, dict[str, int]]:
        return parse_port_counters("\n".join(output))


GPU_CLOCK_FIELDS = ("index", "clocks.sm", "utilization.gpu")


class GpuClocks(Probe):
    """Each GPU's SM clock (MHz) and utilisation (%) now: a throttled GPU makes its node the
    slow one of its job."""

    name = "gpu-clocks"
    check = "watch.unread"
    what = "nvidia-smi --query-gpu clocks.sm"
    timeout_s = 30

    def command(self) -> str:
        return f"nvidia-smi --query-gpu={','.join(GPU_CLOCK_FIELDS)} --format=csv,noheader,nounits"

    def process(self, output: list[str]) -> list[tuple[int, float | None, float | None]]:
        """(GPU index, SM clock MHz, utilisation %) per GPU; None where nvidia-smi said N/A."""
        # @parser types its wrapper as text -> records; it hands the field list through.
        result = parse_query_csv("\n".join(output), GPU_CLOCK_FIELDS)  # type: ignore[call-arg]
        out = []
        for row in result.rows:
            index, clock, util = (row.get(f) for f in GPU_CLOCK_FIELDS)
            if not isinstance(index, int):
                raise ParseError("expected a GPU index", line_no=row.line_no)
            out.append(
                (
                    index,
                    float(clock) if isinstance(clock, int | float) else None,
                    float(util) if isinstance(util, int | float) else None,
                )
            )
        return out


WATCH_PROBES: tuple[Probe, ...] = (NvidiaSmiQ(), KernelLog(), PortCounters(), GpuClocks())


class Sources(Protocol):
    """Where a cycle reads its signals."""

    def node_outputs(self, nodes: Sequence[str]) -> Mapping[str, HostResult]: ...
    def fabric_outputs(self) -> HostResult | None: ...


@dataclass
class FanoutSources:
    """The signals over SSH: `WATCH_PROBES` on the nodes, ibnetdiscover and ibqueryerrors on
    the subnet-manager host, one session per host."""

    cluster: Cluster
    transport: Transport
    concurrency: int = 32

    def node_outputs(self, nodes: Sequence[str]) -> Mapping[str, HostResult]:
        address = {h.name: h.address for h in self.cluster.hosts()}
        jobs = [(Target(n, address.get(n)), WATCH_PROBES) for n in nodes]
        return collect(jobs, self.transport, concurrency=self.concurrency, timeout=300)

    def fabric_outputs(self) -> HostResult | None:
        host = self.cluster.fabric.subnet_manager
        address = {h.name: h.address for h in self.cluster.hosts()}
        jobs = [(Target(host, address.get(host)), FABRIC_PROBES)]
        return collect(jobs, self.transport, timeout=600).get(host)
