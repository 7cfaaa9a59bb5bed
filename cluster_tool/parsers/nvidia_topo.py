"""`nvidia-smi topo -m`: the GPU/NIC distance matrix, the NIC legend (`NIC3: mlx5_3`) and
each GPU's CPU/NUMA affinity, so checks can ask which HCAs sit on a GPU's PCIe switch."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, PartialParse, noise_recorder, parser

__all__ = ["TopoDevice", "TopoMatrix", "parse_topo_matrix"]

# X = self; PIX = at most one PCIe bridge; PXB = several bridges, no host bridge;
# PHB = through a host bridge (the CPU); NODE = between host bridges of one NUMA node;
# SYS = across NUMA nodes (SOC is the pre-2017 name of SYS); NV# = # bonded NVLinks.
_CODE = re.compile(r"^(X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d{1,20})$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_GPU = re.compile(r"^GPU(\d{1,20})$")
_NIC = re.compile(r"^NIC(\d{1,20})$")
# Older drivers print the RDMA device itself as the row/column name (mlx5_0, not NIC0).
_DEVICE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\d$")
_LEGEND_LINE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_CODE_LEGEND_LINE = re.compile(r"^\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#|NV\d+)\s*=\s*\S")
_CPU_LIST = re.compile(r"^\d{1,20}(-\d{1,20})?(,\d{1,20}(-\d{1,20})?)*+$")


@dataclass(frozen=True)
class TopoDevice:
    """One row of the matrix: a GPU, or a NIC with its RDMA device name."""

    name: str  # as printed: GPU0, NIC3 (or mlx5_3 on older drivers)
    kind: str  # "gpu" or "nic"
    index: int | None  # the GPU index for GPUs, the NIC number for NICn
    device: str | None  # RDMA device (mlx5_3) for NICs, None for GPUs
    cpu_affinity: str | None = None  # as printed, e.g. "0-47,96-143"
    cpus: tuple[int, ...] = ()
    numa_affinity: int | None = None  # the NUMA node when the GPU is local to exactly one
    numa_nodes: tuple[int, ...] = ()
    gpu_numa_id: int | None = None


@dataclass(frozen=True)
class TopoMatrix:
    """The matrix as printed: `links[row][column]` is the distance code between two devices."""

    columns: tuple[str, ...]
    devices: tuple[TopoDevice, ...]
    links: dict[str, dict[str, str]]
    nic_legend: dict[str, str]

    def gpu(self, index: int) -> TopoDevice:
        for device in self.devices:
            if device.kind == "gpu" and device.index == index:
                return device
        raise KeyError(f"GPU{index} not in the topology")

    def nic(self, device_name: str) -> TopoDevice:
        for device in self.devices:
            if device.kind == "nic" and device.device == device_name:
                return device
        raise KeyError(f"NIC {device_name} not in the topology")

    def distance(self, gpu_index: int, nic_device_name: str) -> str:
        """The code between GPU `gpu_index` and the NIC whose RDMA device is e.g. mlx5_3."""
        return self.links[self.gpu(gpu_index).name][self.nic(nic_device_name).name]

    def gpu_link(self, a: int, b: int) -> str:
        """The code between two GPUs (NV18, SYS, ...)."""
        return self.links[self.gpu(a).name][self.gpu(b).name]

    def nics_at(self, gpu_index: int, codes: Collection[str] = ("PIX", "PXB")) -> list[str]:
        """RDMA device names of the NICs at one of `codes` from the GPU, in NIC order."""
        row = self.links[self.gpu(gpu_index).name]
        return [
            d.device
            for d in self.devices
            if d.kind == "nic" and d.device is not None and row[d.name] in codes
        ]

    @property
    def gpus(self) -> list[TopoDevice]:
        return [d for d in self.devices if d.kind == "gpu"]

    @property
    def nics(self) -> list[TopoDevice]:
        return [d for d in self.devices if d.kind == "nic"]


def _ranges(text: str | None, what: str, line_no: int, line: str) -> tuple[int, ...]:
    """`0-3,8` -> (0, 1, 2, 3, 8); N/A or absent -> ()."""
    if not text or text == "N/A":
        return ()
    if not _CPU_LIST.match(text):
        raise ParseError(
            f"expected a list like 0-47,96-143 or N/A for {what}, found {text!r}",
            line_no=line_no,
            line=line,
        )
    numbers: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first or last - first > 65536:
            raise ParseError(
                f"expected a rising range for {what}, found {part!r}", line_no=line_no, line=line
            )
        numbers.extend(range(first, last + 1))
    return tuple(numbers)


@parser(
    "nvidia-smi-topo",
    "nvidia-smi topo -m: GPU/NIC distance matrix, NIC legend, affinity",
    start=r"^\s+GPU0\s",
)
def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m`, tab-separated as printed or with tabs turned to spaces."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise ParseError("expected the nvidia-smi topo -m header; the input is empty")
    header_line = lines[header_at]
    tokens = _HEADER_TOKEN.findall(header_line)
    columns: list[str] = []
    affinity: list[str] = []
    for token in tokens:
        if token in _AFFINITY_COLUMNS:
            affinity.append(token)
        elif affinity:
            raise ParseError(
                f"expected only affinity columns after {affinity[0]!r}, found {token!r}",
                line_no=header_at + 1,
                line=header_line,
            )
        elif _GPU.match(token) or _NIC.match(token) or _DEVICE.match(token):
            columns.append(token)
        else:
            raise ParseError(
                f"expected GPUn/NICn/device or affinity columns, found {token!r}",
                line_no=header_at + 1,
                line=header_line,
            )
    if not any(_GPU.match(c) for c in columns):
        raise ParseError(
            "expected a header listing GPU0, GPU1, ...", line_no=header_at + 1, line=header_line
        )
    if len(set(columns)) != len(columns):
        raise ParseError("a device is named twice in the header", line_no=header_at + 1)

    rows: dict[str, tuple[list[str], list[str], int]] = {}
    i = header_at + 1
    while i < len(lines) and lines[i].strip():
        line = lines[i]
        cells = line.split()
        name = cells[0]
        if name not in columns:
            raise ParseError(
                f"expected a row for one of the header's devices, found {name!r}",
                line_no=i + 1,
                line=line,
            )
        if name in rows:
            raise ParseError(f"row {name} printed twice", line_no=i + 1, line=line)
        codes = cells[1 : 1 + len(columns)]
        extra = cells[1 + len(columns) :]
        if len(codes) != len(columns):
            raise ParseError(
                f"expected {len(columns)} distance codes in row {name}, found {len(codes)}",
                line_no=i + 1,
                line=line,
            )
        for column, code in zip(columns, codes, strict=True):
            if not _CODE.match(code):
                raise ParseError(
                    f"expected a distance code (X, PIX, PXB, PHB, NODE, SYS, NV#) for "
                    f"{name}/{column}, found {code!r}",
                    line_no=i + 1,
                    line=line,
                )
            if (code == "X") != (column == name):
                raise ParseError(
                    f"expected 'X' exactly on the diagonal ({name}/{column} is {code!r})",
                    line_no=i + 1,
                    line=line,
                )
        if len(extra) == len(affinity) - 1 and affinity[:1] == ["CPU Affinity"] and "\t" in line:
            after_codes = line.split("\t")[1 + len(columns) :]
            if after_codes and not after_codes[0].strip():
                # Inside a Slurm job nvidia-smi prints only the job's CPUs near the GPU; a job
                # with none on that NUMA node gets an empty cell, which whitespace hides.
                extra = ["", *extra]
        if len(extra) not in (0, len(affinity)):
            raise ParseError(
                f"expected {len(affinity)} affinity values ({', '.join(affinity)}) "
                f"in row {name}, found {len(extra)}",
                line_no=i + 1,
                line=line,
            )
        rows[name] = (codes, extra, i + 1)
        i += 1
    missing = [c for c in columns if c not in rows]
    if missing:
        raise ParseError(f"expected a row for every device; missing {', '.join(missing)}")

    legend: dict[str, str] = {}
    note = noise_recorder()
    for j in range(i, len(lines)):
        line = lines[j]
        stripped = line.strip()
        if not stripped or stripped in ("Legend:", "NIC Legend:") or _CODE_LEGEND_LINE.match(line):
            if note is not None and stripped:
                note(j + 1)  # the titles and what X, SYS, NODE, ... mean: the same on every node
            continue
        match = _LEGEND_LINE.match(line)
        if match is None:
            raise ParseError(
                "expected the code legend or a NIC legend line 'NICn: <device>'",
                line_no=j + 1,
                line=line,
            )
        if match[1] in legend:
            raise ParseError(f"{match[1]} named twice in the NIC legend", line_no=j + 1, line=line)
        legend[match[1]] = match[2]

    devices: list[TopoDevice] = []
    links: dict[str, dict[str, str]] = {}
    unnamed: list[str] = []  # NICn columns the legend does not name (a capture cut short)
    for name in columns:
        codes, extra, line_no = rows[name]
        links[name] = dict(zip(columns, codes, strict=True))
        values = dict(zip(affinity, extra, strict=False))
        row_line = lines[line_no - 1]
        cpu_text = values.get("CPU Affinity")
        cpus = _ranges(cpu_text, f"CPU Affinity of {name}", line_no, row_line)
        numa_nodes = _ranges(
            values.get("NUMA Affinity"), f"NUMA Affinity of {name}", line_no, row_line
        )
        numa_id = values.get("GPU NUMA ID")
        if numa_id not in (None, "N/A") and not (
            numa_id.isascii() and numa_id.isdigit() and len(numa_id) <= 20
        ):
            raise ParseError(
                f"expected a GPU NUMA ID number or N/A for {name}, found {numa_id!r}",
                line_no=line_no,
                line=row_line,
            )
        gpu, nic = _GPU.match(name), _NIC.match(name)
        if nic and name not in legend:
            unnamed.append(name)
        if gpu:
            kind, index, device = "gpu", int(gpu[1]), None
        elif nic:
            kind, index, device = "nic", int(nic[1]), legend.get(name)
        else:
            kind, index, device = "nic", None, name
        devices.append(
            TopoDevice(
                name=name,
                kind=kind,
                index=index,
                device=device,
                cpu_affinity=None if cpu_text in (None, "N/A") else cpu_text,
                cpus=cpus,
                numa_affinity=numa_nodes[0] if len(numa_nodes) == 1 else None,
                numa_nodes=numa_nodes,
                gpu_numa_id=int(numa_id) if numa_id is not None and numa_id != "N/A" else None,
            )
        )
    unknown = [n for n in legend if n not in columns]
    if unknown:
        raise ParseError(f"NIC legend names {', '.join(unknown)}, absent from the matrix")
    for a in columns:
        for b in columns:
            if links[a][b] != links[b][a]:
                raise ParseError(
                    f"expected a symmetric matrix: {a}/{b} is {links[a][b]} but "
                    f"{b}/{a} is {links[b][a]}",
                    line_no=rows[b][2],
                    line=lines[rows[b][2] - 1],
                )
    matrix = TopoMatrix(
        columns=tuple(columns), devices=tuple(devices), links=links, nic_legend=legend
    )
    if unnamed:
        # The GPU/NIC matrix stands without the legend; only the NICs' RDMA names are lost.
        raise PartialParse(
            f"expected '{unnamed[0]}: <device>' in the NIC legend; "
            f"{', '.join(unnamed)} {'is' if len(unnamed) == 1 else 'are'} not named",
            records=matrix,
        )
    return matrix
