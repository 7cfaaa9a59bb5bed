"""The simulated hardware of one lab node, as the device simulators read it from the lab model.

Stdlib only: this module is copied into the simulator packages and runs inside lab nodes,
where there is python3 and nothing else. The lab model (part 1) stores each node's
`hardware` as the plain dict `NodeHardware.to_dict()` writes; `node_hardware(model, name)`
reads it back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Where the lab bind-mounts its model inside every node (read-only, replaced atomically).
DEFAULT_MODEL_PATH = "/run/lab-model/model.json"

# The HGX/DGX H100 board layout the spec's built-in profiles describe: GPU PCI addresses,
# compute HCAs (device, PCI address, closest GPU, rail) and the storage/management NICs.
HGX_GPU_PCI = (
    "0000:1b:00.0",
    "0000:43:00.0",
    "0000:52:00.0",
    "0000:61:00.0",
    "0000:9d:00.0",
    "0000:c3:00.0",
    "0000:d1:00.0",
    "0000:df:00.0",
)
HGX_COMPUTE_HCAS = (
    ("mlx5_0", "0000:18:00.0", 0, 0),
    ("mlx5_3", "0000:40:00.0", 1, 1),
    ("mlx5_4", "0000:4f:00.0", 2, 2),
    ("mlx5_5", "0000:5e:00.0", 3, 3),
    ("mlx5_6", "0000:9a:00.0", 4, 4),
    ("mlx5_9", "0000:c0:00.0", 5, 5),
    ("mlx5_10", "0000:ce:00.0", 6, 6),
    ("mlx5_11", "0000:dc:00.0", 7, 7),
)
# The storage/in-band ports of the two dual-port ConnectX-7 cards (device, PCI, link layer), as
# the DGX BasePOD guide sets them: port 1 InfiniBand storage (uncabled in the lab, so Down and
# Polling), port 2 Ethernet, bonded for in-band management.
HGX_OTHER_NICS = (
    ("mlx5_1", "0000:29:00.0", "InfiniBand"),
    ("mlx5_2", "0000:29:00.1", "Ethernet"),
    ("mlx5_7", "0000:aa:00.0", "InfiniBand"),
    ("mlx5_8", "0000:aa:00.1", "Ethernet"),
)
# SXM module slot of each GPU (the board's "Module ID"), as on the real capture.
HGX_MODULE_IDS = (2, 4, 1, 3, 7, 5, 6, 8)

# The boost (maximum) SM clock of an H100/H200 SXM, `Max Clocks SM` in the real 8x H100
# `nvidia-smi -q` (shared/fixtures/real-outputs), also its default application clock.
SM_MAX_MHZ = 1980


def _numa_of(pci: str) -> int:
    # Two-socket HGX: buses below 0x80 hang off socket 0.
    return 0 if int(pci.split(":")[1], 16) < 0x80 else 1


@dataclass(frozen=True)
class GpuModel:
    """What differs between the GPU products the lab simulates."""

    name: str
    device_id: str  # PCI device id as nvidia-smi prints it (device+vendor)
    dcgm_device_id: str  # what `dcgmi diag` lists under "GPU Device IDs Detected"
    memory_mib: int
    reserved_mib: int
    power_limit_w: float
    nvlinks: int
    nvlink_gbps: float  # per-link rate `nvidia-smi nvlink -s` prints
    board_part: str
    gpu_part: str
    vbios: str


GPU_MODELS: dict[str, GpuModel] = {
    "H100": GpuModel(
        name="NVIDIA H100 80GB HBM3",
        device_id="0x233010DE",
        dcgm_device_id="2330",
        memory_mib=81559,
        reserved_mib=551,
        power_limit_w=700.0,
        nvlinks=18,
        nvlink_gbps=26.562,
        board_part="692-2G520-0200-000",
        gpu_part="2330-885-A1",
        vbios="96.00.74.00.0D",
    ),
    "H200": GpuModel(
        name="NVIDIA H200",
        device_id="0x233510DE",
        dcgm_device_id="2335",
        memory_mib=143771,
        reserved_mib=591,
        power_limit_w=700.0,
        nvlinks=18,
        nvlink_gbps=26.562,
        board_part="692-2G520-0280-000",
        gpu_part="2335-885-A1",
        vbios="96.00.A5.00.01",
    ),
}


# The ConnectX-7 firmware DOCA 3.1.0 (the lab's doca-ofed) bundles, per its General Support page
# (docs.nvidia.com/doca/archive/3-1-0/General+Support): a healthy lab runs the firmware its DOCA
# ships, so the compatibility matrix finds nothing; `version-skew NODE hca-fw` moves one off it.
CONNECTX7_FIRMWARE = "28.46.1006"


@dataclass
class EccCounts:
    """One set of ECC counters (volatile or aggregate) in nvidia-smi's categories."""

    sram_correctable: int = 0
    sram_uncorrectable_parity: int = 0
    sram_uncorrectable_secded: int = 0
    dram_correctable: int = 0
    dram_uncorrectable: int = 0

    @property
    def uncorrectable(self) -> int:
        return (
            self.sram_uncorrectable_parity
            + self.sram_uncorrectable_secded
            + self.dram_uncorrectable
        )

    @property
    def correctable(self) -> int:
        return self.sram_correctable + self.dram_correctable


@dataclass
class Gpu:
    """One GPU as the driver sees it. `minor` is fixed by the board; `present=False` is a GPU
    that fell off the bus (the driver no longer enumerates it)."""

    minor: int
    model: str
    bus_id: str  # "00000000:19:00.0"
    uuid: str
    serial: str
    module_id: int
    numa_node: int
    present: bool = True
    temperature_c: int = 31
    memory_temperature_c: int = 40
    power_draw_w: float = 69.5
    persistence_mode: bool = True
    ecc_enabled: bool = True
    ecc_volatile: EccCounts = field(default_factory=EccCounts)
    ecc_aggregate: EccCounts = field(default_factory=EccCounts)
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    pcie_gen_current: int = 5
    pcie_gen_max: int = 5
    pcie_width_current: int = 16
    pcie_width_max: int = 16
    # NVLink links that are down (by link number); the rest run at the model's rate.
    nvlinks_down: list[int] = field(default_factory=list)
    # NVLink error counters `nvidia-smi nvlink -e` prints, by link number (absent: all zero):
    # {"replay": n, "recovery": n, "crc": n}.
    nvlink_errors: dict[int, dict[str, int]] = field(default_factory=dict)
    fabric_state: str = "Completed"
    fabric_status: str = "Success"
    # Application graphics clock set below the default (`nvidia-smi -ac`, lab fault gpu-clock):
    # the SM clock never passes it; 0 is the default clock.
    sm_clock_cap_mhz: int = 0
    slowdown_temp_c: int = 87  # HW slowdown starts here; the simulator raises thermal events
    shutdown_temp_c: int = 92
    # Kernel-log Xid codes raised on this GPU, oldest first: (seconds since boot, code).
    xids: list[tuple[float, int]] = field(default_factory=list)

    @property
    def spec(self) -> GpuModel:
        return GPU_MODELS[self.model]

    @property
    def short_bus_id(self) -> str:
        """The bus id as the kernel and nccl-tests print it: "0000:19:00"."""
        return self.bus_id[4:14].lower()

    @property
    def thermal_slowdown(self) -> bool:
        return self.temperature_c >= self.slowdown_temp_c

    @property
    def clock_capped(self) -> bool:
        """An application clock below the board's maximum holds this GPU's SM clock."""
        return 0 < self.sm_clock_cap_mhz < SM_MAX_MHZ


@dataclass
class Hca:
    """One HCA port (ConnectX-7, port 1) and the state of the cable behind it."""

    device: str  # mlx5_N
    bus_id: str  # "0000:18:00.0"
    gpu_minor: int  # the GPU behind the same PCIe switch
    rail: int
    numa_node: int
    node_guid: str  # 16 hex digits, no 0x
    lid: int = 0
    sm_lid: int = 1
    state: str = "Active"  # Active | Down | Initializing
    width: str = "4X"  # 1X | 2X | 4X
    speed: str = "HDR"  # EDR | HDR | NDR
    leaf: str = ""
    leaf_port: int = 0
    symbol_errors: int = 0
    # What NCCL does when this port is down mid-run: "error" (completion error) or "hang".
    nccl_on_down: str = "error"
    fw_ver: str = CONNECTX7_FIRMWARE
    hca_type: str = "MT4129"
    port_guid: str = ""  # 16 hex digits; "" means the node GUID (ConnectX: port 1 = node)
    present: bool = True
    phys_state: str = ""  # "" derives it from the state (Down -> Disabled)
    # Raw (pre-FEC) bit error rate of the cable; 0 is a clean link (mlxlink prints 15E-255).
    raw_ber: float = 0.0
    pcie_gen_current: int = 5
    pcie_gen_max: int = 5
    pcie_width_current: int = 16
    pcie_width_max: int = 16
    # lab fault link-flap: the link goes down every `flap_period` s from `flap_since` (epoch s).
    flap_period: float = 0.0
    flap_since: float = 0.0
    # The port's IBTA PortCounters as the model keeps them (LinkDownedCounter, PortXmitData...).
    counters: dict[str, int] = field(default_factory=dict)
    netdev: str = ""  # the IPoIB interface ibdev2netdev names (ibp24s0)

    def link_downed(self, now: float) -> int:
        """The HCA end's LinkDownedCounter at `now`: the model's, plus every flap of lab fault
        link-flap so far; 8 bits, it stops at 255. The same count ibsim holds for the port
        (cluster_lab.fabric.link_downed, which the lab agent sets every second)."""
        flaps = 0
        if self.flap_period > 0 and now >= self.flap_since:
            flaps = int((now - self.flap_since) // self.flap_period) + 1
        return min(int(self.counters.get("LinkDownedCounter", 0)) + flaps, 255)

    def flaps(self, now: float) -> list[float]:
        """When the link went down (epoch s) up to `now`: one at the fault, then every
        period (the newest 1000)."""
        if self.flap_period <= 0 or now < self.flap_since:
            return []
        count = int((now - self.flap_since) // self.flap_period) + 1
        first = max(0, count - 1000)
        return [self.flap_since + k * self.flap_period for k in range(first, count)]


@dataclass
class Nic:
    """A storage or management port: present in `topo -m`, `ibstat`, `ibdev2netdev` and `lspci`,
    never on a rail."""

    device: str
    bus_id: str
    numa_node: int
    link_layer: str = "Ethernet"
    rate_gbps: int = 100
    state: str = "Active"  # Active | Down
    phys_state: str = "LinkUp"  # LinkUp | Polling | Disabled
    netdev: str = ""
    hca_type: str = "MT4129"  # ConnectX-7; MT41692 is a BlueField-3
    purpose: str = ""


@dataclass
class NodeHardware:
    """Everything the device simulators of one node show."""

    name: str
    gpus: list[Gpu]
    hcas: list[Hca]
    other_nics: list[Nic] = field(default_factory=list)
    driver_version: str = "535.161.08"
    cuda_version: str = "12.2"
    dcgm_version: str = "4.2.3"
    nccl_version: str = "2.26.2"
    mft_version: str = "4.33.0-169"  # what mlxlink prints as its MFT version (DOCA 3.1.0's)
    # What `nv-fabricmanager --version` prints; "" is the driver's own version (they ship together).
    fabricmanager_version: str = ""
    # Straggler factor: 1.0 is healthy; 0.5 moves data at half speed.
    slow_factor: float = 1.0
    # Kernel modules the simulated driver stack offers (a module-missing fault removes one).
    modules: list[str] = field(
        default_factory=lambda: ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem"]
    )
    dmabuf: bool = True
    # Silent data corruption: this node's ranks hand collectives wrong values (a bad GPU or
    # NVLink that ECC does not catch); nccl-tests' check counts them in `#wrong`.
    nccl_corrupt: bool = False
    cpu_affinity: list[str] = field(default_factory=lambda: ["0-47,96-143", "48-95,144-191"])
    boot_time: float = 1_700_000_000.0  # epoch seconds of the simulated boot (for dmesg -T)

    def present_gpus(self) -> list[Gpu]:
        """GPUs the driver enumerates, in PCI order: their index is their place in this list."""
        return sorted((g for g in self.gpus if g.present), key=lambda g: g.bus_id)

    def hca_for_gpu(self, gpu: Gpu) -> Hca | None:
        for hca in self.hcas:
            if hca.gpu_minor == gpu.minor:
                return hca
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeHardware:
        gpus = []
        for g in data.get("gpus", []):
            g = dict(g)
            g["ecc_volatile"] = EccCounts(**g.get("ecc_volatile", {}))
            g["ecc_aggregate"] = EccCounts(**g.get("ecc_aggregate", {}))
            g["xids"] = [(float(t), int(c)) for t, c in g.get("xids", [])]
            g["nvlink_errors"] = _nvlink_errors(g.get("nvlink_errors", {}))
            gpus.append(Gpu(**g))
        hcas = [Hca(**h) for h in data.get("hcas", [])]
        nics = [Nic(**n) for n in data.get("other_nics", [])]
        # Keys the model keeps beside the hardware (role, address, down, ...) are not ours.
        known = {f.name for f in dataclasses.fields(cls)} - {"gpus", "hcas", "other_nics"}
        rest = {k: v for k, v in data.items() if k in known}
        return cls(gpus=gpus, hcas=hcas, other_nics=nics, **rest)


def _nvlink_errors(data: dict[Any, Any]) -> dict[int, dict[str, int]]:
    # JSON keys are strings; links are numbers.
    return {int(link): {k: int(v) for k, v in counts.items()} for link, counts in data.items()}


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def default_hardware(
    name: str,
    *,
    gpu_model: str = "H100",
    gpu_pci: Sequence[str] = HGX_GPU_PCI,
    gpu_numa: Sequence[int] | None = None,
    hcas: Sequence[tuple[str, str, int, int]] = HGX_COMPUTE_HCAS,
    other_nics: Sequence[tuple[str, str, str]] = HGX_OTHER_NICS,
    speed: str = "HDR",
    width: str = "4X",
) -> NodeHardware:
    """A healthy HGX node laid out as the spec's profile says (GPU PCI addresses, compute HCAs
    as (device, PCI, closest GPU, rail), other NICs). Identities (UUIDs, serials, GUIDs)
    derive from the node name, so every rebuild of the lab gives a node the same GPUs."""
    if gpu_model.upper() not in GPU_MODELS:
        raise ValueError(f"unknown GPU model {gpu_model!r}; known: {', '.join(GPU_MODELS)}")
    gpus = []
    for minor, pci in enumerate(gpu_pci):
        d = _digest(name, "gpu", minor)
        uuid = f"GPU-{d[0:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"
        gpus.append(
            Gpu(
                minor=minor,
                model=gpu_model.upper(),
                bus_id="0000" + pci.upper()[:-1] + pci[-1],
                uuid=uuid,
                serial=f"1650124{int(d[32:40], 16) % 1_000_000:06d}",
                module_id=HGX_MODULE_IDS[minor % len(HGX_MODULE_IDS)],
                numa_node=gpu_numa[minor] if gpu_numa else _numa_of(pci),
                temperature_c=29 + int(d[40], 16) % 6,
                memory_temperature_c=38 + int(d[41], 16) % 4,
                power_draw_w=round(66.0 + int(d[42:44], 16) / 64, 2),
            )
        )
    compute = []
    for device, pci, gpu, rail in hcas:
        d = _digest(name, "hca", device)
        compute.append(
            Hca(
                device=device,
                bus_id=pci,
                gpu_minor=gpu,
                rail=rail,
                numa_node=_numa_of(pci),
                # Mellanox-style GUID: vendor prefix, "0300", then a per-device tail.
                node_guid=f"946dae0300{d[:6]}",
                speed=speed,
                width=width,
            )
        )
    nics = [
        Nic(
            device=dev,
            bus_id=pci,
            numa_node=_numa_of(pci),
            link_layer=layer,
            state="Active" if layer == "Ethernet" else "Down",
            phys_state="LinkUp" if layer == "Ethernet" else "Polling",
        )
        for dev, pci, layer in other_nics
    ]
    return NodeHardware(name=name, gpus=gpus, hcas=compute, other_nics=nics)


def netdev_name(pci: str, link_layer: str, multi_function: bool = False) -> str:
    """The interface name udev's predictable naming gives a port at `pci`: `ibp24s0` for an
    InfiniBand port at 0000:18:00.0, `enp41s0f1np1` for port 2 of a dual-port card in Ethernet
    mode (systemd.net-naming-scheme: `p<bus>s<slot>[f<function>]`, `np<port>` for a switchdev
    port name)."""
    _, bus, rest = pci.split(":")
    slot, function = rest.split(".")
    name = f"p{int(bus, 16)}s{int(slot, 16)}"
    if multi_function:
        name += f"f{int(function)}"
    if link_layer == "InfiniBand":
        return "ib" + name
    return "en" + name + (f"np{int(function)}" if multi_function else "np0")


def _model_nodes(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    nodes = model.get("nodes", {})
    if isinstance(nodes, list):
        return {n["name"]: n for n in nodes}
    return dict(nodes)


def node_names(model: dict[str, Any]) -> list[str]:
    return list(_model_nodes(model))


def _product_model(product: str) -> str:
    for key, spec in GPU_MODELS.items():
        if product == spec.name or key in product.upper():
            return key
    return "H100"


def _hex(guid: str) -> str:
    return guid.lower().removeprefix("0x").rjust(16, "0")


def from_lab_node(node: dict[str, Any]) -> NodeHardware:
    """The simulators' view of a node as the lab model (cluster_lab.model.Node, dumped to
    JSON) stores it. Fields the model does not carry (NVLink state, kernel modules, straggler
    factor, ...) are optional extra keys on the node, GPU and HCA records; absent means
    healthy."""
    name = node["name"]
    gpus = []
    for g in node.get("gpus", []):
        index = int(g["index"])
        pci = g["pci_bus_id"]
        ecc = g.get("ecc", {})
        # `xid_events` says when each Xid came (seconds since boot); bare `xids` codes get
        # stand-in times an hour after boot.
        if "xid_events" in g:
            xids = [(float(t), int(c)) for t, c in g["xid_events"]]
        else:
            xids = [(3600.0 + 60.0 * n + index, int(c)) for n, c in enumerate(g.get("xids", []))]
        gpus.append(
            Gpu(
                minor=index,
                model=_product_model(str(g.get("product", ""))),
                bus_id=pci,
                uuid=g["uuid"],
                serial=str(g["serial"]),
                module_id=HGX_MODULE_IDS[index % len(HGX_MODULE_IDS)],
                numa_node=int(g.get("numa_node", _numa_of(pci[4:]))),
                present=bool(g.get("present", True)),
                temperature_c=int(g.get("temperature_c", 35)),
                power_draw_w=float(g.get("power_w", 70.0)),
                persistence_mode=bool(g.get("persistence_mode", True)),
                ecc_volatile=EccCounts(
                    dram_correctable=int(ecc.get("volatile_sbe", 0)),
                    dram_uncorrectable=int(ecc.get("volatile_dbe", 0)),
                ),
                ecc_aggregate=EccCounts(
                    dram_correctable=int(ecc.get("aggregate_sbe", 0)),
                    dram_uncorrectable=int(ecc.get("aggregate_dbe", 0)),
                ),
                # Hopper remaps a row for every uncorrectable error; pending until a reset.
                remapped_correctable=int(ecc.get("retired_pages_sbe", 0)),
                remapped_uncorrectable=int(ecc.get("retired_pages_dbe", 0)),
                remap_pending=bool(g.get("remap_pending", False)),
                pcie_gen_current=int(g.get("pcie_gen_current", 5)),
                pcie_width_current=int(g.get("pcie_width_current", 16)),
                nvlinks_down=[int(x) for x in g.get("nvlinks_down", [])],
                nvlink_errors=_nvlink_errors(g.get("nvlink_errors", {})),
                sm_clock_cap_mhz=int(g.get("sm_clock_cap_mhz", 0)),
                xids=xids,
            )
        )
    hcas = []
    for h in node.get("hcas", []):
        port = h.get("port", {})
        counters = port.get("counters", {})
        hcas.append(
            Hca(
                device=h["device"],
                bus_id=h["pci"],
                gpu_minor=int(h["gpu"]),
                rail=int(h["rail"]),
                numa_node=_numa_of(h["pci"]),
                node_guid=_hex(h["node_guid"]),
                port_guid=_hex(h.get("port_guid", h["node_guid"])),
                lid=int(port.get("lid", 0)),
                sm_lid=int(port.get("sm_lid", 1)),
                state=str(port.get("state", "Active")),
                phys_state=str(port.get("phys_state", "")),
                width=str(port.get("width", "4X")),
                speed=str(port.get("speed", "HDR")),
                leaf=str(h.get("leaf", "")),
                leaf_port=int(h.get("leaf_port", 0)),
                symbol_errors=int(counters.get("SymbolErrorCounter", 0)),
                present=bool(h.get("present", True)),
                nccl_on_down=str(h.get("nccl_on_down", "error")),
                raw_ber=float(h.get("raw_ber", 0.0)),
                pcie_gen_current=int(h.get("pcie_gen_current", 5)),
                pcie_width_current=int(h.get("pcie_width_current", 16)),
                fw_ver=str(h.get("fw_ver", CONNECTX7_FIRMWARE)),
                flap_period=float(h.get("flap_period", 0.0)),
                flap_since=float(h.get("flap_since", 0.0)),
                counters={str(k): int(v) for k, v in counters.items()},
                netdev=str(h.get("netdev") or ""),
            )
        )
    known = (
        "driver_version",
        "cuda_version",
        "dcgm_version",
        "nccl_version",
        "fabricmanager_version",
        "slow_factor",
        "modules",
        "dmabuf",
        "nccl_corrupt",
        "boot_time",
    )
    extras = {k: node[k] for k in known if k in node}
    nics = [
        Nic(
            device=n["device"],
            bus_id=n["pci"],
            numa_node=_numa_of(n["pci"]),
            link_layer=str(n.get("link_layer", "Ethernet")),
            rate_gbps=int(n.get("rate_gbps", 100)),
            state=str(n.get("state", "Active")),
            phys_state=str(n.get("phys_state", "LinkUp")),
            netdev=str(n.get("netdev") or ""),
            hca_type=str(n.get("hca_type", "MT4129")),
            purpose=str(n.get("purpose", "")),
        )
        for n in node.get("other_nics", [])
    ]
    return NodeHardware(name=name, gpus=gpus, hcas=hcas, other_nics=nics, **extras)


def node_hardware(model: dict[str, Any], name: str) -> NodeHardware:
    """The hardware of node `name` in a lab model (raises KeyError naming the node). Reads the
    lab's model (cluster_lab.model) or a node carrying `NodeHardware.to_dict()` under
    `hardware`."""
    nodes = _model_nodes(model)
    if name not in nodes:
        raise KeyError(f"node {name!r} is not in the lab model (nodes: {', '.join(sorted(nodes))})")
    node = nodes[name]
    if "hardware" not in node:
        return from_lab_node(node)
    hw = node["hardware"]
    return NodeHardware.from_dict({"name": name, **{k: v for k, v in hw.items() if k != "name"}})


def load_model(path: str | None = None) -> dict[str, Any]:
    """The lab model as the node sees it (env LAB_MODEL overrides the bind-mount path)."""
    where = Path(path or os.environ.get("LAB_MODEL") or DEFAULT_MODEL_PATH)
    data: dict[str, Any] = json.loads(where.read_text(encoding="utf-8"))
    return data


def node_down(model: dict[str, Any], name: str) -> bool:
    """A node that is powered off or killed: its ranks never answer."""
    node = _model_nodes(model).get(name, {})
    return bool(node.get("down")) or node.get("power_state", "On") == "Off"
