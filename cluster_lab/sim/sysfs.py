"""A fake `/sys/class/infiniband` tree for one node, so the real `ibstat` (libibumad reads sysfs)
reports the node's HCAs, their state and rate as the lab model has them.

The lab mounts the tree over `/sys/class` as an overlay lower layer at node boot (sysfs is
read-only in the node: nothing can be created in it directly). Stdlib only."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from .hw import CONNECTX7_FIRMWARE, Hca, Nic, NodeHardware, node_hardware, node_names
from .perf import LANE_GBS, WIDTH_LANES

# sysfs text of each port state, as the mlx5 driver writes it.
_STATE = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED"}
_PHYS = {"Active": "5: LinkUp", "Armed": "5: LinkUp", "Initializing": "5: LinkUp"}
# Capability masks a ConnectX-7 port reports (IB) and in Ethernet/RoCE mode.
_PHYS_CODE = {"LinkUp": "5: LinkUp", "Polling": "2: Polling", "Disabled": "3: Disabled"}
_CAP_MASK_IB = "0xa751e848"
_CAP_MASK_ETH = "0x00010000"
# ports/1/counters/: the file the kernel's ib core writes for each IBTA PortCounters field
# (Documentation/ABI/stable/sysfs-class-infiniband); each reads the model's counter of that
# name, 0 when the model has none.
PORT_COUNTER_FILES = {
    "symbol_error": "SymbolErrorCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "link_downed": "LinkDownedCounter",
    "port_rcv_errors": "PortRcvErrors",
    "port_rcv_remote_physical_errors": "PortRcvRemotePhysicalErrors",
    "port_rcv_switch_relay_errors": "PortRcvSwitchRelayErrors",
    "port_xmit_discards": "PortXmitDiscards",
    "port_xmit_constraint_errors": "PortXmitConstraintErrors",
    "port_rcv_constraint_errors": "PortRcvConstraintErrors",
    "local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
    "VL15_dropped": "VL15Dropped",
    "port_xmit_data": "PortXmitData",
    "port_rcv_data": "PortRcvData",
    "port_xmit_packets": "PortXmitPkts",
    "port_rcv_packets": "PortRcvPkts",
    "port_xmit_wait": "PortXmitWait",
    "unicast_xmit_packets": "PortUnicastXmitPkts",
    "unicast_rcv_packets": "PortUnicastRcvPkts",
    "multicast_xmit_packets": "PortMulticastXmitPkts",
    "multicast_rcv_packets": "PortMulticastRcvPkts",
}
# ports/1/hw_counters/: the mlx5 driver's own counters on an InfiniBand port (all quiet in
# the lab; `lifespan` is the driver's refresh period in ms).
HW_COUNTER_FILES = (
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_read_requests",
    "rx_write_requests",
)


def _guid_sysfs(guid_hex: str) -> str:
    g = guid_hex.lower().removeprefix("0x").rjust(16, "0")
    return ":".join(g[i : i + 4] for i in range(0, 16, 4))


def hca_rate(hca: Hca) -> str:
    """The port's `rate` file: "200 Gb/sec (4X HDR)"; a down port falls back to SDR."""
    if hca.state == "Down":
        return "10 Gb/sec (4X SDR)"
    gbps = LANE_GBS.get(hca.speed, 6.25) * WIDTH_LANES.get(hca.width, 4) * 8
    return f"{gbps:g} Gb/sec ({hca.width} {hca.speed})"


def _write(path: Path, text: str) -> None:
    # In place (same inode): the tree is an overlay's lower layer while the node runs, and
    # the overlay keeps reading the inodes it looked up first.
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (text + "\n").encode("ascii")
    if path.is_file() and path.read_bytes() == data:
        return
    with open(path, "r+b" if path.exists() else "wb") as f:
        f.write(data)
        f.truncate()


def _link(path: Path, target: str) -> None:
    """A symlink as sysfs has it (`device` -> `../../../0000:18:00.0`): tools read the PCI address
    as the link's last component, so it may point at nothing inside the node."""
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _write_device(
    root: Path,
    device: str,
    *,
    host: str,
    pci: str,
    hca_type: str,
    fw_ver: str,
    guid: str,
    port_guid: str,
    state: str,
    phys_state: str,
    rate: str,
    lid: int,
    sm_lid: int,
    cap_mask: str,
    link_layer: str,
) -> None:
    dev = root / "infiniband" / device
    # The PCI function the device belongs to, as the kernel links it (what ibdev2netdev, rdma
    # tools and the doca_ofed role read to tell devices apart by slot, not by name).
    _link(dev / "device", f"../../../{pci}")
    _write(dev / "node_type", "1: CA")
    _write(dev / "fw_ver", fw_ver)
    _write(dev / "hca_type", hca_type)
    _write(dev / "hw_rev", "0")
    _write(dev / "board_id", "MT_0000000838")
    _write(dev / "node_guid", _guid_sysfs(guid))
    _write(dev / "sys_image_guid", _guid_sysfs(guid))
    # What rdma-ndd writes with the "%h %d" format the fabric check relies on.
    _write(dev / "node_desc", f"{host} {device}")
    port = dev / "ports" / "1"
    _write(port / "state", state)
    _write(port / "phys_state", phys_state)
    _write(port / "rate", rate)
    _write(port / "lid", f"0x{lid:x}")
    _write(port / "lid_mask_count", "0")
    _write(port / "sm_lid", f"0x{sm_lid:x}")
    _write(port / "sm_sl", "0")
    _write(port / "cap_mask", cap_mask)
    _write(port / "link_layer", link_layer)
    _write(port / "gids" / "0", "fe80:0000:0000:0000:" + _guid_sysfs(port_guid))
    _write(port / "pkeys" / "0", "0xffff")


def write_port_counters(dest: Path, hca: Hca, now: float) -> None:
    """`infiniband/<hca>/ports/1/counters/*` and `hw_counters/*` as they stand at `now`: the
    model's port counters, LinkDowned with the flaps of lab fault link-flap so far (the count
    ibsim's port holds, so both ends of the cable agree with the node's own view)."""
    port = dest / "infiniband" / hca.device / "ports" / "1"
    for name, counter in PORT_COUNTER_FILES.items():
        value = hca.link_downed(now) if name == "link_downed" else hca.counters.get(counter, 0)
        _write(port / "counters" / name, str(int(value)))
    for name in HW_COUNTER_FILES:
        _write(port / "hw_counters" / name, "0")
    _write(port / "hw_counters" / "lifespan", "10")


def write_sysfs_tree(node: NodeHardware, dest: Path, now: float | None = None) -> Path:
    """Write `dest/infiniband/…` and `dest/infiniband_mad/abi_version` for `node` (the port
    counters as they stand at `now`, default the clock), updating what an earlier call wrote
    there in place. Returns `dest` (the overlay's lower layer)."""
    dest = Path(dest)
    now = time.time() if now is None else now
    _write(dest / "infiniband_mad" / "abi_version", "5")
    wanted = {h.device for h in node.hcas if h.present} | {n.device for n in node.other_nics}
    if (dest / "infiniband").is_dir():
        for stale in (dest / "infiniband").iterdir():
            if stale.name not in wanted:
                shutil.rmtree(stale)
    for n, hca in enumerate(node.hcas):
        if not hca.present:
            continue  # an HCA that fell off the PCIe bus has no sysfs entry at all
        up = hca.state != "Down"
        _write_device(
            dest,
            hca.device,
            host=node.name,
            pci=hca.bus_id,
            hca_type=hca.hca_type,
            fw_ver=hca.fw_ver,
            guid=hca.node_guid,
            port_guid=hca.port_guid or hca.node_guid,
            state=_STATE.get(hca.state, "1: DOWN"),
            phys_state=_PHYS_CODE.get(hca.phys_state) or _PHYS.get(hca.state, "3: Disabled"),
            rate=hca_rate(hca),
            # A port the SM never saw keeps no LID; lab LIDs follow the HCA's place otherwise.
            lid=(hca.lid or 2 + n) if up else 0,
            sm_lid=hca.sm_lid if up else 0,
            cap_mask=_CAP_MASK_IB,
            link_layer="InfiniBand",
        )
        write_port_counters(dest, hca, now)
    for nic in node.other_nics:
        _write_nic(dest, node, nic)
    # The overlay layer must be readable by unprivileged tools in the node.
    for dirpath, _, files in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for f in files:
            path = os.path.join(dirpath, f)
            if not os.path.islink(path):
                os.chmod(path, 0o644)
    return dest


def write_all_sysfs_trees(model: dict[str, Any], nodes_dir: Path) -> list[Path]:
    """The tree of every node with HCAs, at `nodes_dir/<node>/sysfs-class/` (where the lab
    mounts it from at node boot). Call after every change of the model."""
    written = []
    for name in node_names(model):
        hw = node_hardware(model, name)
        if hw.hcas or hw.other_nics:
            written.append(write_sysfs_tree(hw, Path(nodes_dir) / name / "sysfs-class"))
    return written


def _write_nic(dest: Path, node: NodeHardware, nic: Nic) -> None:
    import hashlib

    d = hashlib.sha256(f"{node.name}/nic/{nic.device}".encode()).hexdigest()
    up = nic.state == "Active"
    # An Ethernet port's rate file names the InfiniBand speed of the same lane rate, as the mlx5
    # driver maps it (100 GbE reads "100 Gb/sec (4X EDR)"); a port with no link reads SDR.
    speed = {400: "NDR", 200: "HDR", 100: "EDR", 56: "FDR", 40: "QDR"}.get(nic.rate_gbps, "EDR")
    rate = f"{nic.rate_gbps} Gb/sec (4X {speed})" if up else "10 Gb/sec (4X SDR)"
    infiniband = nic.link_layer == "InfiniBand"
    _write_device(
        dest,
        nic.device,
        host=node.name,
        pci=nic.bus_id,
        hca_type=nic.hca_type,
        fw_ver=CONNECTX7_FIRMWARE,
        guid=f"a088c20300{d[:6]}",
        port_guid=f"a088c20300{d[:6]}",
        state=_STATE.get(nic.state, "1: DOWN"),
        phys_state=_PHYS_CODE.get(nic.phys_state, "3: Disabled"),
        rate=rate,
        lid=0,
        sm_lid=0,
        cap_mask=_CAP_MASK_IB if infiniband else _CAP_MASK_ETH,
        link_layer=nic.link_layer,
    )
