"""What a node is made of, for its profile (`profile discover`, and `validate` holding the node
to its profile): CPUs, memory, RDMA devices by PCI address, the system's product name. Part of
the health probes (probes/node.py), so that every saved capture can be discovered."""

from __future__ import annotations

from cluster_tool.parsers.host import (
    CpuTopology,
    RdmaDevice,
    parse_ibdev2netdev,
    parse_lscpu,
    parse_meminfo,
    parse_rdma_devices,
)
from cluster_tool.probes import Probe

__all__ = ["HOST_PROBES", "DmiProduct", "Ibdev2netdev", "Lscpu", "Meminfo", "RdmaDevices"]


class Lscpu(Probe):
    name = "lscpu"
    what = "lscpu"

    def command(self) -> str:
        # A localised lscpu names its keys in the site's language.
        return "LC_ALL=C lscpu"

    def process(self, output: list[str]) -> CpuTopology:
        return parse_lscpu("\n".join(output))


class Meminfo(Probe):
    name = "meminfo"
    what = "/proc/meminfo"

    def command(self) -> str:
        return "cat /proc/meminfo"

    def process(self, output: list[str]) -> int:
        return parse_meminfo("\n".join(output))


class Ibdev2netdev(Probe):
    """DOCA's own map of RDMA devices to PCI functions and interfaces."""

    name = "ibdev2netdev"
    what = "ibdev2netdev -v"

    def command(self) -> str:
        return "ibdev2netdev -v"

    def process(self, output: list[str]) -> list[RdmaDevice]:
        return parse_ibdev2netdev("\n".join(output))


class RdmaDevices(Probe):
    """The same map from sysfs, for a node without DOCA's scripts (a bare install with the
    kernel's inbox mlx5 driver): each /sys/class/infiniband entry, its PCI function (the last
    component of its `device` link, which is always a link) and its interfaces."""

    name = "rdma-devices"
    what = "the RDMA devices in /sys/class/infiniband"

    def command(self) -> str:
        return (
            'for d in /sys/class/infiniband/*; do [ -L "$d/device" ] || continue; '
            'p=$(readlink -f "$d/device"); printf "%s %s" "${d##*/}" "${p##*/}"; '
            'for n in "$d"/device/net/*; do [ -e "$n" ] && printf " %s" "${n##*/}"; done; '
            "echo; done"
        )

    def process(self, output: list[str]) -> list[RdmaDevice]:
        return parse_rdma_devices("\n".join(output))


class DmiProduct(Probe):
    name = "dmi-product"
    what = "/sys/class/dmi/id/product_name"

    def command(self) -> str:
        return "cat /sys/class/dmi/id/product_name"

    def process(self, output: list[str]) -> str | None:
        text = " ".join("\n".join(output).split())
        return text[:128] or None


HOST_PROBES: tuple[Probe, ...] = (Lscpu(), Meminfo(), Ibdev2netdev(), RdmaDevices(), DmiProduct())
