"""A host's own description: `lscpu` (sockets, cores, threads), `/proc/meminfo` (what the kernel
can hand out) and the RDMA devices with their PCI functions (`ibdev2netdev`, or the sysfs
listing the `rdma-devices` probe prints), the facts a node profile is discovered from."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, parser
from cluster_tool.parsers.pci import normalize_pci_bus_id

__all__ = [
    "CpuTopology",
    "RdmaDevice",
    "parse_ibdev2netdev",
    "parse_lscpu",
    "parse_meminfo",
    "parse_rdma_devices",
    "pci_from_netdev",
]


@dataclass(frozen=True)
class CpuTopology:
    """What Slurm's node line declares: `Sockets`, `CoresPerSocket`, `ThreadsPerCore`."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cpus: int
    model_name: str | None = None


_LSCPU_KEYS = {
    "CPU(s)": "cpus",
    "Socket(s)": "sockets",
    "Core(s) per socket": "cores_per_socket",
    "Thread(s) per core": "threads_per_core",
}


_NOT_LSCPU = "expected lscpu's `Key: value` (in the C locale: LC_ALL=C lscpu)"


@parser("lscpu", "lscpu: sockets, cores per socket, threads per core", start=r"^Architecture:")
def parse_lscpu(text: str) -> CpuTopology:
    """`lscpu` in its default `Key: value` layout (util-linux 2.3x) under the C locale: the probe
    runs `LC_ALL=C lscpu`, since a localised lscpu names its keys in the site's language.
    Nested sections of newer versions (`Caches (sum of all):`) carry no value and are skipped."""
    found: dict[str, int] = {}
    model = None
    key: str | None = None
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, colon, rest = line.partition(":")
        if not colon:
            # A value wrapped onto the next line (`Flags:` pasted from a narrow terminal)
            # belongs to the key above it.
            if key is not None and line[:1].isspace():
                continue
            raise ParseError(_NOT_LSCPU, line_no=line_no, line=line)
        key, value = name.strip(), rest.strip()
        if not key:
            raise ParseError(_NOT_LSCPU, line_no=line_no, line=line)
        if key == "Model name":
            model = value
        field = _LSCPU_KEYS.get(key)
        # "On-line CPU(s) list" is not "CPU(s)"; only the exact keys count.
        if field is None:
            continue
        # Nine digits hold any CPU count; a longer run is not lscpu's.
        if not (value.isascii() and value.isdigit() and len(value) <= 9):
            raise ParseError(f"{key} is not a number", line_no=line_no, line=line)
        found[field] = int(value)
    missing = [name for name, field in _LSCPU_KEYS.items() if field not in found]
    if missing:
        raise ParseError(f"no {', '.join(missing)}: not lscpu output")
    return CpuTopology(model_name=model, **found)


# Bounded: the largest value /proc/meminfo prints fits in 20 digits (a 64-bit count of kB).
_MEMINFO_LINE = re.compile(r"^(\w[\w()]*):\s+(\d{1,20})(?:\s+kB)?\s*$")


@parser("meminfo", "/proc/meminfo: MemTotal in MiB", start=r"^MemTotal:")
def parse_meminfo(text: str) -> int:
    """MemTotal of `/proc/meminfo`, in MiB (the kernel prints kB = KiB): what `slurmd -C`
    reports as RealMemory, the most a node line may declare. Every line is read: a line that
    is not `Name: N [kB]` is an error, not skipped."""
    total: int | None = None
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _MEMINFO_LINE.match(line)
        if not m:
            raise ParseError("expected `Name: N kB`", line_no=line_no, line=line)
        if m.group(1) == "MemTotal" and total is None:
            total = int(m.group(2)) // 1024
    if total is None:
        raise ParseError("no MemTotal line: not /proc/meminfo")
    return total


@dataclass(frozen=True)
class RdmaDevice:
    """An RDMA device with the PCI function it belongs to and its interface."""

    device: str  # mlx5_0, mlx5_bond_0
    pci: str | None  # 0000:18:00.0; None where the tool does not say
    netdev: str | None = None
    up: bool | None = None  # carrier, where the tool says


_DEVICE = r"(?P<device>[A-Za-z][\w.-]{0,31})"
_PCI = r"(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
# `ibdev2netdev -v` (DOCA/MLNX_OFED ofed-scripts): "PCI DEV (CHIP - PART) [DESC] fw FW port P
# (STATE) ==> NETDEV (Up|Down)"; the plain form "DEV port P ==> NETDEV (Up|Down)" names no PCI
# address, which is then read from the interface's name where udev named it by its PCI path.
# Each piece is matched on its own side of the arrow, so that no pattern backtracks over a line.
_ARROW = re.compile(r"\s==>\s")
_NETDEV_CARRIER = re.compile(r"^\s*(?P<netdev>\S+)\s+\((?P<carrier>Up|Down|NA)\)\s*$")
_PLAIN_LEFT = re.compile(rf"^{_DEVICE}\s+port\s+\d{{1,3}}\s*$")
_VERBOSE_HEAD = re.compile(rf"^{_PCI}\s+{_DEVICE}\s+\(")
_VERBOSE_TAIL = re.compile(r"\sport\s+\d{1,3}\s+\([^()]{0,40}\)\s*$")

# systemd's path-based interface names (systemd.net-naming-scheme(7), "PCI geographical
# location"): a prefix (`en` Ethernet, `ib` InfiniBand), then `[P<domain>]p<bus>s<slot>
# [f<function>]` in decimal, then an optional `n<port name>` or `d<dev port>`. `f` is left out
# for function 0 of a single-function device.
_PATH_NAME = re.compile(
    r"^(?:en|ib)(?:P(?P<domain>\d{1,5}))?p(?P<bus>\d{1,3})s(?P<slot>\d{1,2})"
    r"(?:f(?P<function>\d))?(?:n\w+|d\d+)?$"
)


def pci_from_netdev(netdev: str) -> str | None:
    """The PCI function a path-named interface sits on (`ibp24s0` -> 0000:18:00.0), or None
    for a name that does not carry its path (`eth2`, `ib0`, a name set by a udev rule)."""
    m = _PATH_NAME.match(netdev)
    if m is None:
        return None
    domain, bus, slot = int(m["domain"] or 0), int(m["bus"]), int(m["slot"])
    function = int(m["function"] or 0)
    if domain > 0xFFFF or bus > 0xFF or slot > 0x1F or function > 7:
        return None
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"


@parser(
    "ibdev2netdev",
    "ibdev2netdev [-v]: each RDMA device's interface, carrier and PCI address",
    start=r"^(?:[0-9A-Fa-f]{4}:|[A-Za-z][\w.-]*\s+port\s)",
)
def parse_ibdev2netdev(text: str) -> list[RdmaDevice]:
    """`ibdev2netdev` or `ibdev2netdev -v`: one device per line (a dual-port device appears
    once per port). The plain form's PCI address is the interface name's (None where the name
    does not carry it)."""
    seen: dict[str, RdmaDevice] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        arrow = _ARROW.search(line)
        left, right = (line[: arrow.start()], line[arrow.end() :]) if arrow else (line, "")
        head = _VERBOSE_HEAD.match(left)
        plain = None if head else _PLAIN_LEFT.match(left)
        end = _NETDEV_CARRIER.match(right)
        found = head if head is not None else plain
        if end is None or found is None or (head is not None and not _VERBOSE_TAIL.search(left)):
            raise ParseError(
                "expected `DEV port N ==> NETDEV (Up|Down)` or ibdev2netdev -v's "
                "`PCI DEV (...) fw FW port N (STATE) ==> NETDEV (Up|Down)`",
                line_no=line_no,
                line=line,
            )
        device, netdev, carrier = found["device"], end["netdev"], end["carrier"]
        pci = head["pci"] if head else None
        seen.setdefault(
            device,
            RdmaDevice(
                device=device,
                pci=(normalize_pci_bus_id(pci) or pci.lower()) if pci else pci_from_netdev(netdev),
                netdev=netdev,
                up=None if carrier == "NA" else carrier == "Up",
            ),
        )
    if not seen:
        raise ParseError("no device line: not ibdev2netdev output")
    return list(seen.values())


# What the `rdma-devices` probe prints per /sys/class/infiniband entry: "DEV PCI [NETDEV ...]".
_SYSFS_LINE = re.compile(rf"^{_DEVICE}\s+{_PCI}(?P<netdevs>\s.*)?$")


@parser(
    "rdma-devices",
    "RDMA devices from sysfs: `DEV PCI [NETDEV...]` per /sys/class/infiniband entry",
    start=r"^[A-Za-z]",
)
def parse_rdma_devices(text: str) -> list[RdmaDevice]:
    """The sysfs listing: each RDMA device, its PCI function (the `device` link) and its
    network interfaces (`device/net/*`), for nodes without DOCA's ibdev2netdev."""
    out: list[RdmaDevice] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _SYSFS_LINE.match(line)
        if not m:
            raise ParseError(
                "expected `DEVICE PCI-ADDRESS [NETDEV ...]`", line_no=line_no, line=line
            )
        netdevs = (m.group("netdevs") or "").split()
        out.append(
            RdmaDevice(
                device=m.group("device"),
                pci=normalize_pci_bus_id(m.group("pci")) or m.group("pci").lower(),
                netdev=netdevs[0] if netdevs else None,
            )
        )
    if not out:
        raise ParseError("no device line: not an RDMA device listing")
    return out
