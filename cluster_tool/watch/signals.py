"""The cheap signals the watcher reads on every node each cycle, and where it reads them: the
node probes (`WATCH_PROBES`: nvidia-smi -q, the kernel log, the HCA port counters in sysfs),
the fabric's (ibnetdiscover and ibqueryerrors on the subnet-manager host), and Slurm's view.

`Sources` is the one door: `FanoutSources` runs the probes over SSH with the fan-out every
workflow uses; tests hand `run_cycle` one that answers with captured output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cluster_tool.probes import Probe
from cluster_tool.probes.fabric import FABRIC_PROBES
from cluster_tool.probes.node import KernelLog, NvidiaSmiQ
from cluster_tool.probes.signals import GpuClocks, PortCounters
from cluster_tool.remote.fanout import HostResult, Target, Transport, collect
from cluster_tool.spec.models import Cluster

__all__ = ["WATCH_PROBES", "FanoutSources", "Sources"]

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
