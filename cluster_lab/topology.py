"""From the cluster spec to the lab: hosts, the rendered cabling plan, and the first hardware model.

The fabric is wired from the rendered `cabling.csv` / `switch-links.csv` (the same files the
fabric check holds the real fabric to), so the lab and the check can never disagree about
what "cabled right" means.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cluster_lab import model as hw
from cluster_tool.errors import UsageError
from cluster_tool.fabric.plan import (
    CablingRow,
    SwitchLink,
    read_cabling_csv,
    read_switch_links_csv,
)
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Nic

# The in-band Ethernet ports' rate: the DGX BasePOD guide bonds them into its SN4600C switches,
# 100 GbE ports (docs.nvidia.com/dgx-basepod/deployment-guide-dgx-basepod/latest/
# network-overview.html).
INBAND_ETHERNET_GBPS = 100


@dataclass(frozen=True)
class LabHost:
    """One lab node: how the lab names, addresses and boots it."""

    name: str
    address: str
    role: str  # "head" or "gpu"
    roles: tuple[str, ...]
    bmc_address: str | None
    os: str | None = None  # its group's `os` in the spec (cluster_lab/flavours.py)


@dataclass(frozen=True)
class LabPlan:
    """Everything the lab builds, read from the spec and its rendered inventory."""

    cluster: Cluster
    spec_path: Path
    hosts: tuple[LabHost, ...]
    cabling: tuple[CablingRow, ...]
    switch_links: tuple[SwitchLink, ...]

    def host(self, name: str) -> LabHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise UsageError(f"no lab node {name!r}; nodes: {', '.join(h.name for h in self.hosts)}")


def load_plan(spec_path: Path, inventory_dir: Path) -> LabPlan:
    """Load the spec, render its inventory into `inventory_dir`, and read the cabling back."""
    cluster = load_spec(spec_path)
    from cluster_tool.render import render

    render(cluster, inventory_dir)
    cabling = read_cabling_csv(inventory_dir / "cabling.csv")
    links = read_switch_links_csv(inventory_dir / "switch-links.csv")
    hosts = tuple(
        LabHost(
            name=node.name,
            address=node.address,
            role="gpu" if node.is_gpu else "head",
            roles=tuple(node.roles),
            bmc_address=node.bmc_address,
            os=node.os,
        )
        for node in cluster.hosts()
    )
    if not hosts:
        raise UsageError(f"{spec_path}: the spec has no hosts")
    return LabPlan(cluster, spec_path, hosts, tuple(cabling), tuple(links))


def build_model(plan: LabPlan, lab_name: str) -> hw.HardwareModel:
    """The first hardware model of a lab: every device healthy, cabled as planned."""
    cluster = plan.cluster
    fabric = cluster.fabric
    speed, width = fabric.expected_speed, fabric.expected_width
    rate = fabric.expected_rate_gbps
    cabling = {(row.node, row.hca): row for row in plan.cabling}

    switches: list[hw.Switch] = []
    leaf_info: dict[str, tuple[int, int]] = {}
    for row in plan.cabling:
        leaf_info.setdefault(row.leaf, (row.su, row.rail))
    for link in plan.switch_links:
        leaf_info.setdefault(link.leaf, (0, -1))
    for name, (su, rail) in sorted(leaf_info.items()):
        switches.append(
            hw.Switch(
                name=name,
                description=f"MF0;{name}:{fabric.switch_model}/U1",
                guid=hw.guid_text(hw.switch_guid(lab_name, name)),
                ports=fabric.leaf_ports,
                tier="leaf",
                su=su or None,
                rail=rail if rail >= 0 else None,
            )
        )
    for name in sorted({link.spine for link in plan.switch_links}):
        switches.append(
            hw.Switch(
                name=name,
                description=f"MF0;{name}:{fabric.switch_model}/U1",
                guid=hw.guid_text(hw.switch_guid(lab_name, name)),
                ports=fabric.spine_port_count,
                tier="spine",
            )
        )
    # LIDs are fixed in the net file so every tool (ibnetdiscover, the fake sysfs) agrees.
    lid = 1
    for switch in switches:
        switch.lid = lid
        lid += 1

    nodes: list[hw.Node] = []
    for host in plan.hosts:
        spec_node = cluster.host(host.name)
        profile = spec_node.profile
        gpus: list[hw.Gpu] = []
        hcas: list[hw.Hca] = []
        if profile is not None:
            for index in range(profile.gpu_count):
                pci = profile.gpu_pci[index] if index < len(profile.gpu_pci) else "0000:00:00.0"
                gpus.append(
                    hw.Gpu(
                        index=index,
                        uuid=hw.gpu_uuid(lab_name, host.name, index),
                        serial=hw.gpu_serial(lab_name, host.name, index),
                        pci_bus_id="0000" + pci.upper(),
                        product=profile.gpu_product,
                        memory_mib=profile.gpu_memory_gib * 1024,
                    )
                )
            for spec_hca in profile.compute_hcas:
                planned = cabling.get((host.name, spec_hca.device))
                if planned is None:
                    continue
                guid = hw.hca_guid(lab_name, host.name, spec_hca.device)
                hcas.append(
                    hw.Hca(
                        device=spec_hca.device,
                        pci=spec_hca.pci,
                        gpu=spec_hca.gpu,
                        rail=spec_hca.rail,
                        node_guid=hw.guid_text(guid),
                        # ibsim gives a CA's port 1 the GUID after the node GUID.
                        port_guid=hw.guid_text(guid + 1),
                        node_description=f"{host.name} {spec_hca.device}",
                        leaf=planned.leaf,
                        leaf_port=planned.leaf_port,
                        port=hw.IbPort(speed=speed, width=width, rate_gbps=rate, lid=lid),
                        netdev=spec_hca.netdev,
                    )
                )
                lid += 1
            other_nics = [_other_nic(nic) for nic in profile.nics]
            cpu = hw.Cpu(
                sockets=profile.cpu_sockets,
                cores_per_socket=profile.cpu_cores_per_socket,
                threads_per_core=profile.cpu_threads_per_core,
            )
            mem_total_kib: int | None = mem_total_kib_of(profile.memory_gib)
        else:
            other_nics = []
            cpu, mem_total_kib = None, None
        nodes.append(
            hw.Node(
                name=host.name,
                role="gpu" if host.role == "gpu" else "head",
                roles=list(host.roles),
                address=host.address,
                bmc_address=host.bmc_address,
                profile=spec_node.profile_name,
                su=spec_node.su,
                gpus=gpus,
                hcas=hcas,
                other_nics=other_nics,
                cpu=cpu,
                mem_total_kib=mem_total_kib,
            )
        )
    sm_lid = switches[0].lid if switches else 0
    for lab_node in nodes:
        for lab_hca in lab_node.hcas:
            lab_hca.port.sm_lid = sm_lid
    return hw.HardwareModel(
        lab=lab_name,
        fabric_speed=speed,
        fabric_width=width,
        nodes=nodes,
        switches=switches,
        spine_links=[
            hw.SpineLink(
                leaf=link.leaf,
                leaf_port=link.leaf_port,
                spine=link.spine,
                spine_port=link.spine_port,
            )
            for link in plan.switch_links
        ],
    )


# What the kernel leaves of installed memory as MemTotal, measured on a real H100 SXM5 node with
# 2 TiB (github.com/project-codeflare/mlbatch, setup.KubeConEU25/README.md: the node's memory
# capacity, which the kubelet reads from MemTotal, 2113411288 KiB): 98.41 % of 2 TiB; the rest
# is firmware reservations and the kernel's own.
MEM_TOTAL_SHARE = 2113411288 / (2048 * 1024 * 1024)


def mem_total_kib_of(memory_gib: int) -> int:
    """The MemTotal a node with `memory_gib` installed shows, as a real one does."""
    return int(memory_gib * 1024 * 1024 * MEM_TOTAL_SHARE)


def _other_nic(nic: Nic) -> hw.OtherNic:
    """A profile's storage or management port as a lab node shows it. The lab has no storage
    fabric: an InfiniBand port is uncabled (Down, Polling, as unused ports read on a real node);
    an Ethernet port is up on the in-band network."""
    infiniband = nic.link_layer == "InfiniBand"
    return hw.OtherNic(
        device=nic.device,
        pci=nic.pci,
        purpose=nic.purpose or "",  # unstated in a profile discover made: its use is the site's
        link_layer="InfiniBand" if infiniband else "Ethernet",
        state="Down" if infiniband else "Active",
        phys_state="Polling" if infiniband else "LinkUp",
        rate_gbps=nic.rate_gbps or INBAND_ETHERNET_GBPS,
        netdev=nic.netdev,
    )
