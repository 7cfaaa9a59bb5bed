"""The node's cheap signals, read every watch cycle and around every job: the HCA port
counters straight from sysfs and each GPU's SM clock. Cheap enough to run on every node every
few minutes, unlike the health probes (probes/node.py)."""

from __future__ import annotations

from cluster_tool.parsers.nvidia_query import GPU_CLOCK_FIELDS, GpuClock, parse_gpu_clocks
from cluster_tool.parsers.port_counters import SYSFS_COUNTERS, parse_port_counters
from cluster_tool.probes import Probe

__all__ = ["GpuClocks", "PortCounters"]


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


class GpuClocks(Probe):
    """Each GPU's SM clock (MHz) and utilisation (%) now: a throttled GPU makes its node the
    slow one of its job."""

    name = "gpu-clocks"
    check = "watch.unread"
    what = "nvidia-smi --query-gpu clocks.sm"
    timeout_s = 30

    def command(self) -> str:
        return f"nvidia-smi --query-gpu={','.join(GPU_CLOCK_FIELDS)} --format=csv,noheader,nounits"

    def process(self, output: list[str]) -> list[GpuClock]:
        """(GPU index, SM clock MHz, utilisation %) per GPU; None where nvidia-smi said N/A."""
        return parse_gpu_clocks("\n".join(output))
