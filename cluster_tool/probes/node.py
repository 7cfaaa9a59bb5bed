"""The probes of a node's health check (`HEALTH_PROBES`): what `validate --health` collects over
SSH and `node-check` runs on the node itself, each with the parser that reads it."""

from __future__ import annotations

from cluster_tool.parsers.dcgmi import DcgmDiag, parse_dcgmi_diag
from cluster_tool.parsers.ibstat import IbstatCa, parse_ibstat
from cluster_tool.parsers.kernel_events import KernelEvents, parse_kernel_events
from cluster_tool.parsers.lspci import PciFunction, parse_lspci
from cluster_tool.parsers.mlxlink import MlxlinkPort, parse_mlxlink
from cluster_tool.parsers.mounts import DF_MARKER, StorageReading, parse_storage
from cluster_tool.parsers.nvidia_smi import NvidiaSmiReport, parse_nvidia_smi_q
from cluster_tool.parsers.nvidia_topo import TopoMatrix, parse_topo_matrix
from cluster_tool.parsers.nvlink_errors import NvlinkErrorGpu, parse_nvlink_errors
from cluster_tool.probes import Probe
from cluster_tool.probes.host import HOST_PROBES
from cluster_tool.probes.versions import Versions

__all__ = [
    "HEALTH_PROBES",
    "DcgmiDiag",
    "Hostname",
    "Ibstat",
    "KernelLog",
    "KernelRelease",
    "Lspci",
    "Mlxlink",
    "Modules",
    "NcclConf",
    "NvidiaSmiQ",
    "NvidiaSmiTopo",
    "NvidiaVersion",
    "NvlinkErrorCounters",
    "Storage",
    "health_probes",
]


class Hostname(Probe):
    name = "hostname"

    def command(self) -> str:
        return "hostname"


class NvidiaSmiQ(Probe):
    name = "nvidia-smi-q"
    check = "gpu.driver"
    what = "nvidia-smi -q"

    def command(self) -> str:
        return "nvidia-smi -q"

    def process(self, output: list[str]) -> NvidiaSmiReport:
        return parse_nvidia_smi_q("\n".join(output))


class NvidiaSmiTopo(Probe):
    name = "nvidia-smi-topo"
    check = "ib.affinity"
    what = "nvidia-smi topo -m"

    def command(self) -> str:
        return "nvidia-smi topo -m"

    def process(self, output: list[str]) -> TopoMatrix:
        return parse_topo_matrix("\n".join(output))


class Ibstat(Probe):
    name = "ibstat"
    check = "ib.driver"
    what = "ibstat"

    def command(self) -> str:
        return "ibstat"

    def process(self, output: list[str]) -> list[IbstatCa]:
        # A node without any RDMA device prints nothing: no HCA, which check_ibstat reports.
        text = "\n".join(output)
        return parse_ibstat(text) if text.strip() else []


class KernelLog(Probe):
    """The kernel log; the journal where dmesg is restricted. One reading for every judge of
    it: the Xids and SXids, and the mlx5 link changes."""

    name = "kernel-log"
    check = "os.kernel-log"
    what = "the kernel log"

    def command(self) -> str:
        return "dmesg 2>/dev/null || journalctl -k -b --no-pager -q"

    def process(self, output: list[str]) -> KernelEvents:
        return parse_kernel_events("\n".join(output))


class Modules(Probe):
    """Loaded kernel modules: `/sys/module` on real nodes and in the lab (whose simulated
    driver mounts its own view there)."""

    name = "modules"

    def command(self) -> str:
        return "ls -1 /sys/module"

    def process(self, output: list[str]) -> set[str]:
        return set("\n".join(output).split())


class NvidiaVersion(Probe):
    name = "nvidia-version"

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version"


class KernelRelease(Probe):
    name = "kernel"

    def command(self) -> str:
        return "uname -r"

    def process(self, output: list[str]) -> str:
        return "\n".join(output).strip()


class NcclConf(Probe):
    name = "nccl-conf"

    def command(self) -> str:
        return "cat /etc/nccl.conf"


class DcgmiDiag(Probe):
    """DCGM's level-1 diagnostic; it exits non-zero when a test fails, its table still says
    which."""

    name = "dcgmi-diag"
    check = "gpu.dcgm"
    what = "dcgmi diag"
    timeout_s = 600
    reads_failed_runs = True
    level = 1

    def command(self) -> str:
        return f"dcgmi diag -r {self.level}"

    def process(self, output: list[str]) -> DcgmDiag:
        return parse_dcgmi_diag("\n".join(output))


class NvlinkErrorCounters(Probe):
    name = "nvlink-errors"
    check = "gpu.nvlink-errors"
    what = "nvidia-smi nvlink -e"

    def command(self) -> str:
        return "nvidia-smi nvlink -e"

    def process(self, output: list[str]) -> list[NvlinkErrorGpu]:
        text = "\n".join(output)
        return parse_nvlink_errors(text) if text.strip() else []


class Mlxlink(Probe):
    """Port 1 of every RDMA device, each run after its command line (the parser takes the
    device from `-d`); the exit status is the last failure's, its `-E-` line on stderr, and
    the devices that answered are read all the same."""

    name = "mlxlink"
    check = "link.fec"
    what = "mlxlink"
    timeout_s = 300
    reads_failed_runs = True

    def command(self) -> str:
        return (
            'rc=0; for d in /sys/class/infiniband/*; do [ -e "$d" ] || continue; '
            'echo "mlxlink -d ${d##*/} -m -c"; mlxlink -d "${d##*/}" -m -c || rc=$?; '
            "done; exit $rc"
        )

    def process(self, output: list[str]) -> list[MlxlinkPort]:
        text = "\n".join(output)
        return parse_mlxlink(text) if text.strip() else []


class Lspci(Probe):
    """NVIDIA and Mellanox functions only: a whole `lspci -vv` runs to megabytes."""

    name = "lspci"
    check = "ib.pcie"
    what = "lspci -vv"

    def command(self) -> str:
        return "lspci -vv -d 10de: && lspci -vv -d 15b3:"

    def process(self, output: list[str]) -> list[PciFunction]:
        text = "\n".join(output)
        return parse_lspci(text) if text.strip() else []


class Storage(Probe):
    """What is mounted, and the local filesystems' space: `df -l` never waits on a hung
    network filesystem (a dead NFS server would stall the whole node check)."""

    name = "storage"
    check = "storage.mount"
    what = "/proc/self/mounts and df"

    def command(self) -> str:
        return f"cat /proc/self/mounts && echo '{DF_MARKER}' && df -P -k -l"

    def process(self, output: list[str]) -> StorageReading:
        return parse_storage("\n".join(output))


HEALTH_PROBES: tuple[Probe, ...] = (
    Hostname(),
    NvidiaSmiQ(),
    NvidiaSmiTopo(),
    Ibstat(),
    KernelLog(),
    Modules(),
    NvidiaVersion(),
    KernelRelease(),
    NcclConf(),
    DcgmiDiag(),
    NvlinkErrorCounters(),
    Mlxlink(),
    Lspci(),
    Storage(),
    Versions(),  # read by `cluster-tool versions` (checks/versions.py), not by check_node
    # What the node is made of: `profile discover` reads a saved capture's, and check_node
    # matches HCAs by the PCI addresses ibdev2netdev / the sysfs listing give.
    *HOST_PROBES,
)


def health_probes(*, dcgm: bool) -> tuple[Probe, ...]:
    """The health probes, without DCGM's diag unless `dcgm` (it loads the GPUs for minutes on
    real hardware: the periodic node-check runs it only on request, validate by default)."""
    return tuple(p for p in HEALTH_PROBES if dcgm or p.name != DcgmiDiag.name)
