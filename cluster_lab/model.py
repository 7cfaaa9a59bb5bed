"""The lab's hardware model: one JSON file per lab, the single source of truth for devices.

The fabric simulator's net file, the fake sysfs trees and the simulated tools (part 2) are
all derived from it, so a fault written here shows up the same in every tool. Inside every
node the model directory is bind-mounted read-only at /run/lab-model/ (file model.json);
the file is replaced atomically (write + rename), so readers never see half a model.

Models allow extra keys: part 2 adds the fields its simulators need without a schema
migration, and a model written by a newer lab still loads.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster_tool.errors import UsageError
from cluster_tool.fileio import atomic_write

MODEL_FILE = "model.json"
SCHEMA_VERSION = 1

# Per-lane rate in Gb/s of each InfiniBand speed, which ibsim's `speed=`/`extspeed=` encode.
LANE_GBPS = {"SDR": 2.5, "DDR": 5, "QDR": 10, "FDR": 14, "EDR": 25, "HDR": 50}
WIDTH_LANES = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=True)


class EccCounters(_Open):
    """ECC error counts as nvidia-smi -q reports them (volatile = since driver load)."""

    volatile_sbe: int = 0
    volatile_dbe: int = 0
    aggregate_sbe: int = 0
    aggregate_dbe: int = 0
    retired_pages_sbe: int = 0
    retired_pages_dbe: int = 0


class Gpu(_Open):
    index: int
    uuid: str
    serial: str
    pci_bus_id: str  # nvidia-smi form: 00000000:18:00.0
    product: str
    memory_mib: int
    temperature_c: int = 35
    power_w: float = 70.0
    ecc: EccCounters = Field(default_factory=EccCounters)
    xids: list[int] = Field(default_factory=list)
    present: bool = True


class IbPort(_Open):
    """Port 1 of an HCA as /sys/class/infiniband and ibstat report it."""

    state: Literal["Active", "Down", "Initializing", "Armed"] = "Active"
    phys_state: Literal["LinkUp", "Polling", "Disabled"] = "LinkUp"
    speed: str = "HDR"
    width: str = "4X"
    rate_gbps: int = 200
    lid: int = 0
    sm_lid: int = 1
    counters: dict[str, int] = Field(default_factory=dict)


class Hca(_Open):
    device: str  # mlx5_0
    pci: str  # 0000:18:00.0
    gpu: int  # closest GPU index
    rail: int
    node_guid: str  # 0x... as ibstat prints it
    port_guid: str
    node_description: str  # "gpu001 mlx5_0" (rdma-ndd "%h %d")
    leaf: str  # the leaf switch and port this HCA is cabled to (the plan, then faults)
    leaf_port: int
    port: IbPort = Field(default_factory=IbPort)
    present: bool = True
    netdev: str | None = None  # ibp24s0 (ibdev2netdev)


class OtherNic(_Open):
    """A storage or in-band management port (the profile's `nics`): in /sys/class/infiniband,
    ibstat, ibdev2netdev, lspci and `topo -m` as on a real node, never cabled to a rail leaf."""

    device: str  # mlx5_1
    pci: str
    purpose: str  # storage | inband | management
    link_layer: Literal["InfiniBand", "Ethernet"] = "Ethernet"
    state: Literal["Active", "Down"] = "Active"
    phys_state: Literal["LinkUp", "Polling", "Disabled"] = "LinkUp"
    rate_gbps: int = 100
    netdev: str | None = None
    hca_type: str = "MT4129"  # ConnectX-7; a BlueField-3 is MT41692


class Cpu(_Open):
    """The node's CPUs as its profile declares them (what Slurm's node line says)."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int


class Node(_Open):
    name: str
    role: Literal["head", "gpu"]
    roles: list[str] = Field(default_factory=list)
    address: str
    bmc_address: str | None = None
    profile: str | None = None
    su: int | None = None
    power_state: Literal["On", "Off"] = "On"
    gpus: list[Gpu] = Field(default_factory=list)
    hcas: list[Hca] = Field(default_factory=list)
    other_nics: list[OtherNic] = Field(default_factory=list)
    # What `lscpu` and /proc/meminfo show on the node (cluster_lab/hostview.py); None: the lab
    # host's own (the head node).
    cpu: Cpu | None = None
    mem_total_kib: int | None = None


class Switch(_Open):
    name: str
    description: str  # node description ibnetdiscover shows: "MF0;su1-leaf-r0:MQM8700/U1"
    guid: str
    ports: int
    tier: Literal["leaf", "spine"]
    su: int | None = None
    rail: int | None = None
    lid: int = 0


class SpineLink(_Open):
    leaf: str
    leaf_port: int
    spine: str
    spine_port: int
    up: bool = True
    width: str | None = None  # None: the fabric's (a degraded link says e.g. "1X")
    speed: str | None = None


class Fault(_Open):
    """An active fault; `kind` and `target` are part 2's vocabulary (e.g. "link-down", "gpu003")."""

    id: str
    kind: str
    target: str
    params: dict[str, Any] = Field(default_factory=dict)


class HardwareModel(_Open):
    schema_version: int = SCHEMA_VERSION
    lab: str
    generation: int = 0  # bumped on every save, so readers can tell a change cheaply
    fabric_speed: str = "HDR"
    fabric_width: str = "4X"
    nodes: list[Node] = Field(default_factory=list)
    switches: list[Switch] = Field(default_factory=list)
    spine_links: list[SpineLink] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def switch(self, name: str) -> Switch:
        for switch in self.switches:
            if switch.name == name:
                return switch
        raise KeyError(name)

    def hca(self, node: str, device: str) -> Hca:
        for hca in self.node(node).hcas:
            if hca.device == device:
                return hca
        raise KeyError(f"{node} {device}")


# --- stable identities -------------------------------------------------------------------


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big")


def hca_guid(lab: str, node: str, device: str) -> int:
    # Mellanox OUI 0x946dae in the top bytes, as real ConnectX GUIDs carry; the rest is
    # stable per (lab, node, device) so a rebuilt lab shows the same GUIDs. Even, because
    # ibsim reserves the next GUID for the port.
    return (0x946DAE03 << 32) | (_digest(lab, node, device) & 0xFFFFFFFE)


def switch_guid(lab: str, name: str) -> int:
    return (0xFC6A1C03 << 32) | (_digest(lab, name) & 0xFFFFFFFF)


def gpu_uuid(lab: str, node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{lab}.{node}.gpu{index}"))


def gpu_serial(lab: str, node: str, index: int) -> str:
    return f"165{_digest(lab, node, index) % 10**10:010d}"


def guid_text(value: int) -> str:
    return f"0x{value:016x}"


# --- file I/O ---------------------------------------------------------------------------


def model_path(model_dir: Path) -> Path:
    return model_dir / MODEL_FILE


def load(model_dir: Path) -> HardwareModel:
    """The model of a lab (UsageError when the lab has none)."""
    path = model_path(model_dir)
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: no lab hardware model (is the lab up?)") from exc
    return HardwareModel.model_validate_json(text)


def save(model_dir: Path, model: HardwareModel) -> HardwareModel:
    """Write the model atomically (`fileio.atomic_write`); bumps `generation`."""
    model_dir.mkdir(parents=True, exist_ok=True)
    model.generation += 1
    path = model_path(model_dir)
    text = json.dumps(model.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
    atomic_write(path, text, mode=0o644)  # the nodes' simulators read it
    return model


@contextlib.contextmanager
def _locked(model_dir: Path) -> Iterator[None]:
    model_dir.mkdir(parents=True, exist_ok=True)
    # The lock lives beside the model directory: the directory itself is what nodes see.
    with open(model_dir.parent / ".model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update(model_dir: Path, change: Callable[[HardwareModel], None]) -> HardwareModel:
    """Read-modify-write under a lock: `change` edits the model in place; returns what was saved.

    Use this from every writer (lab, fault injection, BMC agent) so no change is lost.
    """
    with _locked(model_dir):
        model = load(model_dir)
        change(model)
        return save(model_dir, model)
