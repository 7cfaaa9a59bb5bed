"""A node profile read from the node itself (`cluster-tool profile discover`): its GPUs, the
compute HCA each GPU shares a PCIe switch with, the NICs that are not compute, CPUs and the
memory Slurm may declare. Pure: parsed probe outputs in, a `Discovery` out."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.findings import Finding, Severity
from cluster_tool.parsers.host import CpuTopology, RdmaDevice
from cluster_tool.parsers.ibstat import IbstatCa
from cluster_tool.parsers.lspci import PciFunction
from cluster_tool.parsers.nvidia_smi import NvidiaSmiReport
from cluster_tool.parsers.nvidia_topo import TopoMatrix
from cluster_tool.spec.models import Hca, Nic, NodeProfile

__all__ = [
    "DEFAULT_MEMORY_RESERVE_PCT",
    "Ambiguity",
    "DiscoveredGpu",
    "DiscoveredHca",
    "Discovery",
    "HcaNames",
    "NodeFacts",
    "OtherNic",
    "diff_profile",
    "discover",
    "gpu_mismatches",
    "lspci_gpus",
    "match_hcas",
    "remake_hint",
]

# What RealMemory leaves below the kernel's MemTotal. slurmd drains a node whose memory is
# below its configured RealMemory at registration, and MemTotal moves between kernels and
# firmware updates by a few hundred MiB to a few GiB on a 2 TiB node; 2% of 2 TiB is ~40 GiB.
DEFAULT_MEMORY_RESERVE_PCT = 2.0

# `nvidia-smi topo -m`'s codes, nearest first: a compute HCA shares a PCIe switch with its GPU
# (PIX: one bridge between them, PXB: several, never the host bridge).
_CLOSE = ("PIX", "PXB")
_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class NodeFacts:
    """What the node's probes printed, parsed; None where a probe was not in the capture."""

    node: str
    smi: NvidiaSmiReport | None = None
    topo: TopoMatrix | None = None
    cas: Sequence[IbstatCa] | None = None
    rdma: Sequence[RdmaDevice] | None = None
    lspci: Sequence[PciFunction] | None = None
    cpu: CpuTopology | None = None
    mem_total_mib: int | None = None
    system: str | None = None  # DMI product name


@dataclass(frozen=True)
class DiscoveredGpu:
    index: int
    pci: str | None
    product: str | None
    memory_mib: int | None


@dataclass(frozen=True)
class DiscoveredHca:
    """A compute HCA: on the PCIe switch of exactly one GPU, that GPU's rail."""

    device: str
    gpu: int
    rail: int
    distance: str  # PIX or PXB
    pci: str | None = None
    netdev: str | None = None
    link_layer: str | None = None
    state: str | None = None
    rate_gbps: float | None = None
    ca_type: str | None = None


@dataclass(frozen=True)
class OtherNic:
    """An RDMA device that is not a compute HCA, with what it is and why it is not compute."""

    device: str
    affinity: str  # "PIX from GPU3", "NODE from every GPU", "not in the topology"
    why: str
    pci: str | None = None
    netdev: str | None = None
    link_layer: str | None = None
    state: str | None = None
    rate_gbps: float | None = None
    ca_type: str | None = None
    card: str | None = None  # lspci's description of its PCI function


@dataclass(frozen=True)
class Ambiguity:
    """A pairing the topology does not decide: the operator says which (`--pair`)."""

    gpu: int | None
    devices: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Discovery:
    node: str
    system: str | None
    gpus: tuple[DiscoveredGpu, ...]
    hcas: tuple[DiscoveredHca, ...]
    nics: tuple[OtherNic, ...]
    cpu: CpuTopology | None
    mem_total_mib: int | None
    slurm_real_memory_mib: int | None
    memory_reserve_pct: float
    rate_gbps: float | None
    ambiguous: tuple[Ambiguity, ...] = ()
    unread: tuple[str, ...] = field(default_factory=tuple)
    # RDMA devices that could be compute HCAs but no topology pairs them with a GPU.
    unpaired: tuple[OtherNic, ...] = ()
    # Whether the GPUs were read at all (nvidia-smi, or lspci on a node without the driver):
    # no GPU read is then a reading, not a probe that did not run.
    gpus_read: bool = False

    def profile(self, description: str | None = None) -> dict[str, Any]:
        """The discovered node as a spec profile (the keys of `profiles.NAME`). Raises
        UsageError naming every value a profile needs that the capture did not give, and every
        pairing left to the operator: a profile is never completed by guessing."""
        missing = [a.message for a in self.ambiguous]
        if not self.gpus:
            missing.append("no GPU: nvidia-smi -q was not read")
        if not self.hcas:
            missing.append("no compute HCA paired with a GPU")
        if self.unpaired:
            names = ", ".join(n.device for n in self.unpaired)
            missing.append(f"{names}: not paired with a GPU (no nvidia-smi topo -m)")
        missing += [
            f"{h.device} (GPU{h.gpu}): no PCI address (needs ibdev2netdev or rdma-devices)"
            for h in self.hcas
            if h.pci is None
        ]
        missing += [
            f"{n.device}: no PCI address (needs ibdev2netdev or rdma-devices)"
            for n in self.nics
            if n.pci is None
        ]
        missing += [f"GPU{g.index}: no PCI address" for g in self.gpus if g.pci is None]
        if self.cpu is None:
            missing.append("no CPU topology: lscpu was not read")
        if self.slurm_real_memory_mib is None or self.mem_total_mib is None:
            missing.append("no memory: /proc/meminfo was not read")
        products = {g.product for g in self.gpus}
        if products == {None}:
            missing.append("GPU model: nvidia-smi -q was not read (lspci gave the addresses)")
            products = set()
        if len(products) > 1:
            missing.append(f"GPUs of more than one model: {', '.join(sorted(map(str, products)))}")
        product = next(iter(products), None)
        model = _gpu_model(product)
        if products and model is None:
            missing.append(f"GPU model not recognised in {product!r}")
        if self.rate_gbps is None:
            missing.append("compute HCA rate: ibstat was not read, or the rates differ")
        cpu, total, real, rate = (
            self.cpu,
            self.mem_total_mib,
            self.slurm_real_memory_mib,
            self.rate_gbps,
        )
        if missing or cpu is None or total is None or real is None or rate is None:
            raise UsageError(f"{self.node}: cannot make a profile: " + "; ".join(missing))
        gpu0 = self.gpus[0]
        memory = [g.memory_mib for g in self.gpus if g.memory_mib is not None]
        return {
            "description": description
            or f"{self.system or 'node'}: {len(self.gpus)}x {gpu0.product}, "
            f"{len(self.hcas)} compute HCAs (discovered from {self.node})",
            "gpu_model": model,
            "gpu_product": gpu0.product,
            "gpu_count": len(self.gpus),
            # nvidia-smi's FB total is below the marketed size (81559 MiB on an H100 80GB):
            # rounded up to whole GiB it is the marketed figure.
            "gpu_memory_gib": math.ceil(min(memory) / 1024) if memory else None,
            "gpu_pci": [g.pci for g in self.gpus],
            "cpu_sockets": cpu.sockets,
            "cpu_cores_per_socket": cpu.cores_per_socket,
            "cpu_threads_per_core": cpu.threads_per_core,
            "memory_gib": math.ceil(total / 1024),
            "slurm_real_memory_mib": real,
            "hcas": [
                {"device": h.device, "pci": h.pci, "gpu": h.gpu, "rail": h.rail}
                | ({"netdev": h.netdev} if h.netdev else {})
                for h in self.hcas
            ],
            "nics": [
                {"device": n.device, "pci": n.pci}
                | ({"netdev": n.netdev} if n.netdev else {})
                | ({"link_layer": n.link_layer} if n.link_layer in _LINK_LAYERS else {})
                | ({"rate_gbps": int(n.rate_gbps)} if n.rate_gbps else {})
                for n in self.nics
            ],
            "expected_rate_gbps": int(rate),
        }


_LINK_LAYERS = ("InfiniBand", "Ethernet")
# "NVIDIA H100 80GB HBM3" -> h100, "NVIDIA H200" -> h200, "NVIDIA H100 NVL" -> h100.
_GPU_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,3})\b")


def _gpu_model(product: str | None) -> str | None:
    m = _GPU_MODEL.search(product or "")
    return m.group(1).lower() if m else None


# lspci's class names for a GPU: an H100/H200 SXM is a "3D controller" (class 0302); a card
# with a display engine is a "VGA compatible controller" (0300). An NVSwitch is a "Bridge".
_GPU_CLASSES = ("3D controller:", "VGA compatible controller:")


def lspci_gpus(functions: Sequence[PciFunction]) -> list[str]:
    """The NVIDIA GPUs among lspci's functions, by PCI address in bus order."""
    return sorted(
        f.address
        for f in functions
        if f.description.startswith(_GPU_CLASSES) and "NVIDIA" in f.description
    )


def _nearest(codes: Mapping[str, str]) -> str | None:
    """The nearest of several topology codes (NV# between GPUs never occurs here)."""
    known = [c for c in codes.values() if c in _ORDER]
    return min(known, key=_ORDER.index) if known else None


def discover(
    facts: NodeFacts,
    *,
    pairs: Mapping[int, str | None] | None = None,
    memory_reserve_pct: float = DEFAULT_MEMORY_RESERVE_PCT,
) -> Discovery:
    """Read the node. `pairs` are the operator's choices where the topology is ambiguous:
    GPU index -> its compute HCA, or None for a GPU without one."""
    pairs = dict(pairs or {})
    unread: list[str] = []
    node = facts.node

    gpus: list[DiscoveredGpu] = []
    if facts.smi is not None:
        gpus = [
            DiscoveredGpu(i, g.pci, g.product_name, g.memory_total_mib)
            for i, g in enumerate(facts.smi.gpus)
        ]
    elif facts.lspci is not None:
        # A node before its driver (a bare install): the PCI bus still lists the GPUs. The
        # driver numbers them in PCI bus order, as nvidia-smi lists them.
        gpus = [DiscoveredGpu(i, pci, None, None) for i, pci in enumerate(lspci_gpus(facts.lspci))]
        unread.append("GPU model and memory: no nvidia-smi -q output (lspci gave the addresses)")
    else:
        unread.append("GPUs: no nvidia-smi -q output")

    cas = {ca.name: ca for ca in facts.cas or ()}
    if facts.cas is None:
        unread.append("HCA link layer, state and rate: no ibstat output")
    rdma = {d.device: d for d in facts.rdma or ()}
    if facts.rdma is None:
        unread.append("RDMA device PCI addresses: no ibdev2netdev or rdma-devices output")
    cards = {f.address: f.description for f in facts.lspci or ()}

    devices: list[str] = []
    for name in [
        *(d.device for d in (facts.topo.nics if facts.topo else ()) if d.device),
        *cas,
        *rdma,
    ]:
        if name not in devices:
            devices.append(name)

    def port_of(device: str) -> tuple[str | None, str | None, float | None, str | None]:
        ca = cas.get(device)
        if ca is None:
            return None, None, None, None
        port = ca.port(1) or (ca.ports[0] if ca.ports else None)
        if port is None:
            return None, None, None, ca.ca_type
        return port.link_layer, port.state, port.rate_gbps, ca.ca_type

    paired: dict[int, tuple[str, str]] = {}  # GPU index -> (device, code)
    ambiguous: list[Ambiguity] = []
    excluded: dict[str, str] = {}  # device -> why it is not compute
    for device in devices:
        link_layer = port_of(device)[0]
        if link_layer is not None and link_layer != "InfiniBand":
            excluded[device] = f"link layer {link_layer}: compute rails run InfiniBand"

    topo = facts.topo
    if topo is None:
        unread.append("GPU-HCA pairing: no nvidia-smi topo -m output")
    else:
        in_topo = {d.device for d in topo.nics if d.device}
        gpu_ids = [g.index for g in topo.gpus if g.index is not None]
        # Each GPU's nearest candidates, and each candidate's nearest GPUs, at PIX/PXB.
        near_of_gpu: dict[int, list[str]] = {}
        near_of_nic: dict[str, list[int]] = {}
        for g in gpu_ids:
            row = {d: topo.distance(g, d) for d in in_topo if d not in excluded}
            best = _nearest({d: c for d, c in row.items() if c in _CLOSE})
            near_of_gpu[g] = sorted((d for d, c in row.items() if c == best), key=_device_order)
        for d in in_topo:
            if d in excluded:
                continue
            col = {str(g): topo.distance(g, d) for g in gpu_ids}
            best = _nearest({k: c for k, c in col.items() if c in _CLOSE})
            near_of_nic[d] = [g for g in gpu_ids if best and col[str(g)] == best]
        for g in gpu_ids:
            if g in pairs:
                choice = pairs[g]
                if choice is None:
                    continue
                if choice not in in_topo:
                    raise UsageError(f"--pair GPU{g}={choice}: {choice} is not in topo -m")
                paired[g] = (choice, topo.distance(g, choice))
                continue
            near = near_of_gpu.get(g, [])
            if not near:
                continue
            if len(near) > 1:
                codes = ", ".join(f"{d} {topo.distance(g, d)}" for d in near)
                ambiguous.append(
                    Ambiguity(
                        g,
                        tuple(near),
                        f"GPU{g} shares its PCIe switch with {len(near)} HCAs ({codes}): "
                        f"say which is its rail with --pair GPU{g}=DEVICE (or GPU{g}=none)",
                    )
                )
                continue
            (d,) = near
            others = [o for o in near_of_nic.get(d, []) if o != g and o not in pairs]
            if others:
                gpus_named = ", ".join(f"GPU{o}" for o in [g, *others])
                ambiguous.append(
                    Ambiguity(
                        g,
                        (d,),
                        f"{d} is as near to {gpus_named} ({topo.distance(g, d)}): say which "
                        f"GPU it serves with --pair GPU{g}={d} or GPU{g}=none",
                    )
                )
                continue
            paired[g] = (d, topo.distance(g, d))
        chosen = [d for d, _ in paired.values()]
        twice = sorted({d for d in chosen if chosen.count(d) > 1})
        if twice:
            raise UsageError(f"{', '.join(twice)} paired with more than one GPU")

    hcas: list[DiscoveredHca] = []
    for rail, g in enumerate(sorted(paired)):
        device, code = paired[g]
        link_layer, state, rate, ca_type = port_of(device)
        dev = rdma.get(device)
        hcas.append(
            DiscoveredHca(
                device=device,
                gpu=g,
                rail=rail,
                distance=code,
                pci=dev.pci if dev else None,
                netdev=dev.netdev if dev else None,
                link_layer=link_layer,
                state=state,
                rate_gbps=rate,
                ca_type=ca_type,
            )
        )

    compute = {h.device for h in hcas}
    undecided = {d for a in ambiguous for d in a.devices}
    nics: list[OtherNic] = []
    unpaired: list[OtherNic] = []
    for device in devices:
        if device in compute or device in undecided:
            continue
        link_layer, state, rate, ca_type = port_of(device)
        dev = rdma.get(device)
        affinity, why = _affinity(topo, device)
        bucket = unpaired if topo is None and device not in excluded else nics
        bucket.append(
            OtherNic(
                device=device,
                affinity=affinity,
                why=excluded.get(device, why),
                pci=dev.pci if dev else None,
                netdev=dev.netdev if dev else None,
                link_layer=link_layer,
                state=state,
                rate_gbps=rate,
                ca_type=ca_type,
                card=cards.get(dev.pci) if dev and dev.pci else None,
            )
        )

    rates = {h.rate_gbps for h in hcas if h.rate_gbps is not None}
    rate = rates.pop() if len(rates) == 1 and all(h.rate_gbps for h in hcas) else None
    if len({h.rate_gbps for h in hcas}) > 1:
        unread.append(
            "compute HCA rate: the HCAs differ ("
            + ", ".join(f"{h.device} {h.rate_gbps}" for h in hcas)
            + ")"
        )
    # ibstat prints the rate only; the lane width and generation are not in it.
    unread.append("link width and generation: ibstat prints the rate alone")

    real_memory = None
    if facts.mem_total_mib is not None:
        reserve = math.ceil(facts.mem_total_mib * memory_reserve_pct / 100)
        real_memory = facts.mem_total_mib - reserve
    else:
        unread.append("memory: no /proc/meminfo output")
    if facts.cpu is None:
        unread.append("CPUs: no lscpu output")
    if facts.system is None:
        unread.append("system product name: no DMI output")

    return Discovery(
        node=node,
        system=facts.system,
        gpus=tuple(gpus),
        gpus_read=facts.smi is not None or facts.lspci is not None,
        hcas=tuple(hcas),
        nics=tuple(nics),
        cpu=facts.cpu,
        mem_total_mib=facts.mem_total_mib,
        slurm_real_memory_mib=real_memory,
        memory_reserve_pct=memory_reserve_pct,
        rate_gbps=rate,
        ambiguous=tuple(ambiguous),
        unread=tuple(unread),
        unpaired=tuple(unpaired),
    )


def _device_order(device: str) -> tuple[str, int]:
    """mlx5_2 before mlx5_10."""
    stem, _, number = device.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (device, -1)


def _affinity(topo: TopoMatrix | None, device: str) -> tuple[str, str]:
    """Where a non-compute device sits from the GPUs, and why that is not a rail."""
    if topo is None:
        return "unknown (no topo -m)", "not paired: no topology was read"
    try:
        codes = {
            f"GPU{g.index}": topo.distance(g.index, device)
            for g in topo.gpus
            if g.index is not None
        }
    except KeyError:
        return "not in the topology", "not in nvidia-smi topo -m"
    best = _nearest(codes)
    if best is None:
        return "no GPU", "no GPU in the topology"
    near = [g for g, c in codes.items() if c == best]
    where = "every GPU" if len(near) == len(codes) else ", ".join(near)
    if best in _CLOSE:
        return f"{best} from {where}", f"shares a PCIe switch with {where}, which has its rail"
    return f"{best} from {where}", f"no GPU on its PCIe switch (nearest {best})"


# How an operator makes a profile that matches the node, named in every mismatch.
def remake_hint(node: str) -> str:
    return f"a profile of this node: `cluster-tool profile discover --from CAPTURE --node {node}`"


def _mismatch(
    node: str,
    component: str,
    message: str,
    *,
    expected: object,
    observed: object,
    severity: Severity = "error",
) -> Finding:
    return Finding(
        check="profile.mismatch",
        severity=severity,
        node=node,
        component=component,
        expected=str(expected),
        observed=str(observed),
        message=f"{node} {component}: {message}; {remake_hint(node)}",
    )


@dataclass(frozen=True)
class HcaNames:
    """How the profile's compute HCAs are found on the node: `names` maps a profile device to
    the node's device where the node names it otherwise (same PCI address, or the same GPU's
    HCA); `accounted` are profile devices absent by name that a mismatch already names."""

    names: dict[str, str]
    accounted: frozenset[str]
    findings: tuple[Finding, ...]


def match_hcas(profile: NodeProfile, facts: NodeFacts, found: Discovery) -> HcaNames:
    """The node's RDMA devices held to the profile's compute HCAs: one `profile.mismatch` per
    difference (an HCA at the profile's PCI address under another name, the HCA on a GPU's
    PCIe switch under another name, an active InfiniBand HCA the profile does not name). A
    renamed HCA is never reported absent."""
    node = facts.node
    on_node = {ca.name for ca in facts.cas or ()} | {d.device for d in facts.rdma or ()}
    at_pci = {d.pci: d.device for d in facts.rdma or () if d.pci}
    pci_of = {d.device: d.pci for d in facts.rdma or () if d.pci}
    by_gpu = {h.gpu: h for h in found.hcas}
    named = {h.device for h in profile.hcas} | {n.device for n in profile.nics}
    out: list[Finding] = []
    names: dict[str, str] = {}
    unresolved: list[Hca] = []
    for hca in profile.compute_hcas:
        label = f"rail-{hca.rail} HCA {hca.device}"
        if at_pci:
            # The node says where each device sits: the rail is its PCI address, whatever
            # the device is called there.
            other = at_pci.get(hca.pci)
            if other == hca.device:
                continue
            if other is not None:
                names[hca.device] = other
                out.append(
                    _mismatch(
                        node,
                        hca.device,
                        f"{label}: the node names the HCA at {hca.pci} {other}",
                        expected=f"{hca.device} at {hca.pci}",
                        observed=f"{other} at {hca.pci}",
                    )
                )
                continue
            if hca.device in on_node:
                names[hca.device] = hca.device
                seen_at = pci_of.get(hca.device, "an address not read")
                out.append(
                    _mismatch(
                        node,
                        hca.device,
                        f"{label} is at {seen_at}; the profile has it at {hca.pci}",
                        expected=f"{hca.device} at {hca.pci}",
                        observed=f"{hca.device} at {seen_at}",
                    )
                )
                continue
        elif hca.device in on_node:
            continue
        paired = by_gpu.get(hca.gpu)
        if paired is None or paired.device in named or paired.device in names.values():
            unresolved.append(hca)
            continue
        how = f"on GPU{hca.gpu}'s PCIe switch ({paired.distance})"
        names[hca.device] = paired.device
        out.append(
            _mismatch(
                node,
                hca.device,
                f"{label}: the node names the HCA {how} {paired.device}",
                expected=f"{hca.device} {how}",
                observed=f"{paired.device} {how}",
            )
        )
    taken = set(names.values())
    compute = {h.device for h in profile.hcas}
    nics = {n.device: n for n in profile.nics}
    # Active InfiniBand ports outside the profile's layout: not its compute HCAs, and not one
    # of its NICs as the profile has it (an InfiniBand storage port is where it should be).
    outside: list[tuple[str, Nic | None]] = []
    for ca in facts.cas or ():
        if ca.name in compute or ca.name in taken:
            continue
        if not any(p.is_infiniband and p.is_active for p in ca.ports):
            continue
        nic = nics.get(ca.name)
        if nic is None or nic.link_layer == "Ethernet":
            outside.append((ca.name, nic))
    accounted: set[str] = set()
    if unresolved and outside:
        # The node's names do not follow the profile's layout, and nothing read says which
        # device is which (no PCI address, no topology): each absent name is a mismatch that
        # lists what the node has instead, never a missing HCA.
        listed = ", ".join(name for name, _ in outside)
        for hca in unresolved:
            accounted.add(hca.device)
            out.append(
                _mismatch(
                    node,
                    hca.device,
                    f"rail-{hca.rail} HCA {hca.device} is not on the node, whose active "
                    f"InfiniBand HCAs outside the profile's layout are {listed}",
                    expected=f"{hca.device} at {hca.pci}",
                    observed=f"absent; outside the layout: {listed}",
                )
            )
    for name, nic in outside:
        if nic is None:
            message = (
                f"active InfiniBand HCA {name} is not in the profile (neither a compute HCA "
                "nor one of its other NICs)"
            )
            expected = "not on the node"
        else:
            use = f" {nic.purpose}" if nic.purpose else ""
            message = (
                f"the profile has {name} as an Ethernet{use} NIC; the node's {name} is an "
                "active InfiniBand port"
            )
            expected = f"{name} Ethernet"
        out.append(
            _mismatch(node, name, message, expected=expected, observed=f"{name} InfiniBand Active")
        )
    return HcaNames(names, frozenset(accounted), tuple(out))


def gpu_mismatches(node: str, profile: NodeProfile, found: Discovery) -> list[Finding]:
    """A GPU at an address the profile does not list (a GPU that is gone is gpu.count's)."""
    if not profile.gpu_pci:
        return []
    out: list[Finding] = []
    for gpu in found.gpus:
        if gpu.pci is None or gpu.pci in profile.gpu_pci:
            continue
        want = (
            profile.gpu_pci[gpu.index] if gpu.index < len(profile.gpu_pci) else f"no GPU{gpu.index}"
        )
        out.append(
            _mismatch(
                node,
                f"GPU{gpu.index}",
                f"GPU{gpu.index} is at {gpu.pci}, an address the profile does not list "
                f"(its GPU{gpu.index} is at {want})",
                expected=want,
                observed=gpu.pci,
            )
        )
    return out


def diff_profile(profile: NodeProfile, facts: NodeFacts, found: Discovery) -> list[Finding]:
    """`profile discover --diff`: every way the node differs from the profile."""
    node = facts.node
    out = gpu_mismatches(node, profile, found)
    if found.gpus_read and len(found.gpus) != profile.gpu_count:
        # Which of the profile's GPUs the bus does not show (a GPU off the bus, a riser).
        seen = {g.pci for g in found.gpus}
        gone = [pci for pci in profile.gpu_pci if pci not in seen]
        where = f" (none at {', '.join(gone)})" if gone else ""
        out.append(
            _mismatch(
                node,
                "GPUs",
                f"{len(found.gpus)} GPUs; the profile has {profile.gpu_count}{where}",
                expected=profile.gpu_count,
                observed=len(found.gpus),
            )
        )
    products = sorted({g.product for g in found.gpus if g.product})
    if products and products != [profile.gpu_product]:
        out.append(
            _mismatch(
                node,
                "GPUs",
                f"GPU model {', '.join(products)}; the profile has {profile.gpu_product}",
                expected=profile.gpu_product,
                observed=", ".join(products),
            )
        )
    names = match_hcas(profile, facts, found)
    out += names.findings
    out += _absent_functions(profile, facts, names)
    if found.rate_gbps is not None and found.rate_gbps != profile.expected_rate_gbps:
        out.append(
            _mismatch(
                node,
                "HCAs",
                f"compute HCAs at {found.rate_gbps:g} Gb/s; the profile expects "
                f"{profile.expected_rate_gbps}",
                expected=profile.expected_rate_gbps,
                observed=f"{found.rate_gbps:g}",
            )
        )
    cpu = found.cpu
    if cpu is not None:
        have = (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core)
        want = (profile.cpu_sockets, profile.cpu_cores_per_socket, profile.cpu_threads_per_core)
        if have != want:
            # Fewer than declared: slurmd registers low and Slurm drains the node.
            fewer = (
                cpu.sockets * cpu.cores_per_socket < want[0] * want[1] or cpu.cpus < profile.cpus
            )
            out.append(
                _mismatch(
                    node,
                    "CPUs",
                    "sockets x cores x threads {}x{}x{}; the profile declares {}x{}x{}".format(
                        *have, *want
                    ),
                    expected="x".join(map(str, want)),
                    observed="x".join(map(str, have)),
                    severity="error" if fewer else "warning",
                )
            )
    if found.mem_total_mib is not None and found.mem_total_mib < profile.slurm_real_memory_mib:
        out.append(
            _mismatch(
                node,
                "memory",
                f"MemTotal {found.mem_total_mib} MiB is below the RealMemory the profile "
                f"declares ({profile.slurm_real_memory_mib} MiB): slurmd would drain the node",
                expected=f">= {profile.slurm_real_memory_mib} MiB",
                observed=f"{found.mem_total_mib} MiB",
            )
        )
    return out


def _absent_functions(profile: NodeProfile, facts: NodeFacts, names: HcaNames) -> list[Finding]:
    """The profile's HCAs and NICs at a PCI address where the node has none of them: no PCI
    function there in lspci, or (lspci not read) no RDMA device there. One `match_hcas` names
    under another name, or already accounts for, is not repeated."""
    node = facts.node
    pci_bus = {f.address: f.description for f in facts.lspci or ()}
    rdma_at = {d.pci: d.device for d in facts.rdma or () if d.pci}
    if not pci_bus and not rdma_at:
        return []  # neither read: nothing says where the node's devices are
    out: list[Finding] = []
    devices = [(f"rail-{h.rail} HCA", h.device, h.pci) for h in profile.compute_hcas]
    # An RDMA NIC only: lspci is asked for NVIDIA and Mellanox functions alone (an `eno1` on
    # the board is not among them).
    devices += [
        (f"{n.purpose or 'other'} NIC", n.device, n.pci)
        for n in profile.nics
        if n.device.startswith("mlx5_")
    ]
    for what, device, pci in devices:
        if not pci or device in names.names or device in names.accounted:
            continue
        if pci_bus:
            if pci in pci_bus:
                continue
            seen = "lspci lists no function there"
        else:
            if pci in rdma_at:
                continue
            seen = "no RDMA device there"
        out.append(
            _mismatch(
                node,
                device,
                f"the profile's {what} {device} is at {pci}; {seen}",
                expected=f"{device} at {pci}",
                observed=f"nothing at {pci}",
            )
        )
    return out
