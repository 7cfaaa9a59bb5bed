"""How fast a collective runs on the simulated hardware: the large-message bus bandwidth of a
set of nodes (NVLink inside a node, the slowest rail link between nodes, stragglers) and the
time of each message size on the curve a real capture measured, or why the run fails.
Stdlib only."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .calibration import MANY_NODES_RING_NDR, SINGLE_NODE_NVLS, TWO_NODES_NDR, Curve, efficiency
from .hw import SM_MAX_MHZ, Gpu, Hca, NodeHardware

# Large-message busbw inside one 8-GPU H100 node, by collective and NCCL algorithm. NVLS
# (NVLink SHARP through the NVSwitches) is NCCL's default on Hopper; its all_reduce figure is
# the single-node capture's peak. The others have no capture among the shared fixtures: they
# are published figures (the gate's thresholds lean on the same ones), so the lab passing the
# gate's ring and non-all_reduce steps is no evidence of the gate's calibration.
NVLINK_BUSBW_GBS = {
    ("all_reduce", "NVLS"): SINGLE_NODE_NVLS.peak_busbw_gbs,
    ("all_reduce", "Ring"): 370.0,
    ("all_reduce", "Tree"): 360.0,
    ("all_gather", "NVLS"): 365.0,
    ("all_gather", "Ring"): 360.0,
    ("reduce_scatter", "NVLS"): 365.0,
    ("reduce_scatter", "Ring"): 360.0,
    ("alltoall", "Ring"): 330.0,
}
# Data rate of one lane, GB/s (IB signalling after encoding): a 4X HDR link is 200 Gb/s.
LANE_GBS = {"EDR": 3.125, "HDR": 6.25, "NDR": 12.5, "XDR": 25.0}
WIDTH_LANES = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}
# busbw across nodes over the line rate of one node's rails, from real captures: NVLSTree
# (NCCL's default for all_reduce on two 8-GPU nodes) reports more than the line rate (1.17 on
# the XE9680 pair), a ring a little less (0.97 on the CoreWeave run).
NVLSTREE_EFFICIENCY = efficiency(TWO_NODES_NDR)
RING_EFFICIENCY = efficiency(MANY_NODES_RING_NDR)
ALLTOALL_EFFICIENCY = 0.55
# Crossing the spines (a cable on the wrong leaf) costs the rail its locality.
CROSS_LEAF_FACTOR = 0.85
# A GPU in thermal slowdown drags every collective it is in.
THERMAL_FACTOR = 0.7
# With no IB device to use, NCCL falls back to TCP sockets on the management network.
SOCKET_GBS = 1.2


@dataclass(frozen=True)
class PathFailure:
    """Why a run across these nodes cannot complete: the HCA whose path is down and whether
    NCCL reports an error or hangs."""

    node: str
    hca: str
    mode: str  # "error" | "hang"
    reason: str


@dataclass(frozen=True)
class Bandwidth:
    """The large-message bus bandwidth the model allows and what limits it. `no_gdr` names the
    nodes whose ranks bounce network data through host memory; `nics` the HCAs each node's
    ranks send through (empty: NCCL fell back to sockets)."""

    busbw_gbs: float
    limited_by: str
    multi_node: bool
    gdr: bool
    no_gdr: tuple[str, ...] = ()
    nics: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def nics_of(self, node: str) -> tuple[str, ...]:
        return dict(self.nics).get(node, ())


def link_gbs(hca: Hca) -> float:
    return LANE_GBS.get(hca.speed, 6.25) * WIDTH_LANES.get(hca.width, 4)


def gdr_capable(hw: NodeHardware) -> bool:
    """GPUDirect RDMA works on a node with dma-buf support or the nvidia_peermem module."""
    return "nvidia_peermem" in hw.modules or hw.dmabuf


def ib_hca_filter(value: str | None) -> Callable[[str, int], bool]:
    """NCCL_IB_HCA as NCCL reads it: a comma list of HCA name prefixes (`mlx5` is every
    mlx5_N, `mlx5_1` also mlx5_10 and mlx5_11); `=` before the list makes the names exact,
    `^` uses every HCA but those listed (`^=mlx5_1`); `NAME:PORT` picks one port. Unset or
    empty: every HCA."""
    text = (value or "").strip()
    exclude = text.startswith("^")
    text = text.removeprefix("^")
    exact = text.startswith("=")
    text = text.removeprefix("=")
    items: list[tuple[str, int | None]] = []
    for item in text.split(","):
        name, _, port = item.strip().partition(":")
        if name:
            items.append((name, int(port) if port.isdigit() else None))

    def allowed(device: str, port: int = 1) -> bool:
        if not items:
            return True
        listed = any(
            (device == name if exact else device.startswith(name)) and want in (None, port)
            for name, want in items
        )
        return listed != exclude

    return allowed


def visible_gpus(hw: NodeHardware, cuda_visible_devices: str | None) -> list[Gpu]:
    """The GPUs a process sees, in CUDA's device order: all of them when CUDA_VISIBLE_DEVICES
    is unset; else the listed indices (PCI order, as with CUDA_DEVICE_ORDER=PCI_BUS_ID) or
    UUIDs (`GPU-…`, a unique prefix is enough), up to the first entry that names no GPU,
    as CUDA does."""
    gpus = hw.present_gpus()
    if cuda_visible_devices is None:
        return gpus
    seen: list[Gpu] = []
    for entry in cuda_visible_devices.split(","):
        e = entry.strip()
        found: Gpu | None = None
        if e.isdigit():
            found = gpus[int(e)] if int(e) < len(gpus) else None
        elif e.startswith("GPU-"):
            matches = [g for g in gpus if g.uuid.startswith(e)]
            found = matches[0] if len(matches) == 1 else None
        if found is None or found in seen:
            break
        seen.append(found)
    return seen


def nics_for(
    hw: NodeHardware, gpus: Sequence[Gpu], allowed: Callable[[str, int], bool]
) -> list[Hca]:
    """The HCAs a node's ranks send through, by rail: each GPU's own HCA (behind the same
    PCIe switch) when NCCL_IB_HCA allows it, else one of the allowed HCAs further away."""
    usable = [h for h in hw.hcas if allowed(h.device, 1)]
    chosen: list[Hca] = []
    for i, gpu in enumerate(gpus):
        own = hw.hca_for_gpu(gpu)
        pick = own if own is not None and own in usable else None
        if pick is None and usable:
            pick = usable[i % len(usable)]
        if pick is not None and pick not in chosen:
            chosen.append(pick)
    return sorted(chosen, key=lambda h: (h.rail, h.device))


def default_algo(collective: str, n_nodes: int, gpus_per_node: int, nvls: bool = True) -> str:
    """What NCCL picks on Hopper without NCCL_ALGO: NVLS in a full node, NVLSTree for
    all_reduce across full nodes (as the two-node capture ran), else Ring; NCCL_NVLS_ENABLE=0
    leaves Ring."""
    if collective == "alltoall" or not nvls or gpus_per_node < 8:
        return "Ring"
    if n_nodes == 1:
        return "NVLS"
    return "NVLSTree" if collective == "all_reduce" else "Ring"


def _spine_factor(model: dict[str, Any], leaf_a: str, leaf_b: str) -> float | None:
    """Share of a cross-leaf path's uplinks still up: None when no spine joins the leaves."""
    links = model.get("spine_links") or model.get("switch_links") or []
    if not links:
        return 1.0  # the model does not track uplinks: assume a healthy spine layer
    spines_up: dict[str, dict[str, int]] = {}
    total: dict[str, int] = {}
    for link in links:
        leaf = link["leaf"]
        total[leaf] = total.get(leaf, 0) + 1
        if link.get("up", True):
            per = spines_up.setdefault(leaf, {})
            per[link["spine"]] = per.get(link["spine"], 0) + 1
    common = set(spines_up.get(leaf_a, {})) & set(spines_up.get(leaf_b, {}))
    if not common:
        return None
    share = min(
        sum(spines_up[leaf].values()) / max(total.get(leaf, 1), 1) for leaf in (leaf_a, leaf_b)
    )
    return share


def peak_busbw(
    model: dict[str, Any],
    nodes: list[NodeHardware],
    collective: str,
    gpus_per_node: int,
    algo: str | None = None,
    *,
    gpus: Mapping[str, Sequence[Gpu]] | None = None,
    ib_hca: str | None = None,
    nvls: bool = True,
) -> Bandwidth | PathFailure:
    """Large-message busbw of `collective` over `nodes` (each with `gpus_per_node` ranks).

    `gpus` are the GPUs each node's ranks drive (default: its first `gpus_per_node`); across
    nodes every one of them sends through its own HCA when `ib_hca` (NCCL_IB_HCA) allows it,
    so a job on one GPU per node with one HCA runs on that rail alone. `nvls` is
    NCCL_NVLS_ENABLE (off: NCCL's default algorithm is Ring).
    """
    if not nodes:
        raise ValueError("a collective needs at least one node")
    multi = len(nodes) > 1
    algo = algo or default_algo(collective, len(nodes), gpus_per_node, nvls)
    # NVLSTree reduces inside each node through NVLS, then across nodes by a tree.
    inside = "NVLS" if algo == "NVLSTree" else algo
    key = (collective, inside) if (collective, inside) in NVLINK_BUSBW_GBS else (collective, "Ring")
    intra = NVLINK_BUSBW_GBS.get(key, 360.0)
    limited_by = f"NVLink ({algo})"
    used = {
        hw.name: list(gpus[hw.name])
        if gpus and hw.name in gpus
        else hw.present_gpus()[:gpus_per_node]
        for hw in nodes
    }
    for hw in nodes:
        for gpu in used[hw.name]:
            if gpu.nvlinks_down:
                share = 1 - len(gpu.nvlinks_down) / gpu.spec.nvlinks
                if intra * share < intra:
                    intra *= share
                    limited_by = f"{hw.name} GPU {gpu.minor} NVLinks down"
    busbw = intra if gpus_per_node > 1 else float("inf")
    no_gdr = tuple(hw.name for hw in nodes if not gdr_capable(hw))
    nics: dict[str, list[Hca]] = {}
    if multi:
        allowed = ib_hca_filter(ib_hca)
        nics = {hw.name: nics_for(hw, used[hw.name], allowed) for hw in nodes}
        # Every channel crosses the nodes on one HCA per node (the k-th of each, rail-aligned
        # when every node uses the same rails) and runs at the pace of its slowest hop.
        channels = min(len(n) for n in nics.values())
        if collective == "alltoall":
            eff = ALLTOALL_EFFICIENCY
        elif algo == "NVLSTree":
            eff = NVLSTREE_EFFICIENCY
        else:
            eff = RING_EFFICIENCY
        if channels == 0:
            # NCCL finds no IB device it may use and falls back to TCP sockets.
            inter = SOCKET_GBS * eff
            no_gdr = tuple(hw.name for hw in nodes)
            if inter < busbw:
                busbw = inter
                limited_by = f"NET/Socket: no IB device matches NCCL_IB_HCA={ib_hca or ''}"
            nics = {}
        else:
            slowest = float("inf")
            slow_where = ""
            for k in range(channels):
                ends = [(hw, nics[hw.name][k]) for hw in nodes]
                for hw, hca in ends:
                    if hca.state != "Active" or not hca.present:
                        mode = "hang" if hca.nccl_on_down == "hang" else "error"
                        return PathFailure(hw.name, hca.device, mode, f"{hca.device} port is down")
                for hw, hca in ends:
                    gbs = link_gbs(hca)
                    if gbs < slowest:
                        slowest = gbs
                        slow_where = f"{hw.name} {hca.device} {hca.width} {hca.speed}"
                leaves = {hca.leaf for _, hca in ends if hca.leaf}
                if len(leaves) > 1:
                    ordered = sorted(leaves)
                    factor = min(
                        (_spine_factor(model, a, b) for a in ordered for b in ordered if a < b),
                        key=lambda f: -1.0 if f is None else f,
                    )
                    if factor is None:
                        hw, hca = ends[0]
                        return PathFailure(
                            hw.name, hca.device, "error", "no spine joins the leaves"
                        )
                    if link_gbs(ends[0][1]) * CROSS_LEAF_FACTOR * factor < slowest:
                        slowest = link_gbs(ends[0][1]) * CROSS_LEAF_FACTOR * factor
                        rail = ends[0][1].rail
                        slow_where = f"rail {rail} crosses the spines ({', '.join(ordered)})"
            inter = channels * slowest * eff
            if no_gdr:
                # Without GPUDirect RDMA every byte bounces through host memory.
                inter *= 0.6
                slow_where += f" (no GPUDirect RDMA on {', '.join(no_gdr)})"
            if inter < busbw:
                busbw = inter
                limited_by = f"InfiniBand: {channels} rails, slowest {slow_where}"
    for hw in nodes:
        factor = hw.slow_factor
        if any(g.thermal_slowdown for g in used[hw.name]):
            factor = min(factor, THERMAL_FACTOR)
        # A GPU held at an application clock below the maximum (lab fault gpu-clock) computes
        # its share of each reduction that much slower, and every rank waits for it.
        capped = [g.sm_clock_cap_mhz / SM_MAX_MHZ for g in used[hw.name] if g.clock_capped]
        if capped:
            factor = min(factor, *capped)
        if factor < 1.0:
            busbw *= factor
            limited_by += f"; {hw.name} slowed x{factor:g}"
    if busbw == float("inf"):
        busbw, limited_by = 0.0, "one rank: no communication"
    return Bandwidth(
        busbw_gbs=busbw,
        limited_by=limited_by,
        multi_node=multi,
        gdr=not no_gdr if multi else all(gdr_capable(hw) for hw in nodes),
        no_gdr=no_gdr if multi else (),
        nics=tuple((name, tuple(h.device for h in hcas)) for name, hcas in nics.items()),
    )


def jitter(*key: object) -> float:
    """A deterministic 0-3% slowdown, the same on every rank and every rerun (runs only ever
    fall short of the peak, never beat it)."""
    d = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return 1.0 + int.from_bytes(d[:4], "big") / 2**32 * 0.03


def curve_for(bandwidth: Bandwidth) -> Curve:
    """The captured curve whose shape a run follows: the two-node NDR capture across nodes
    (its latency and protocol steps; a ring levels off at its own busbw), the single-node
    NVLS capture inside one."""
    return TWO_NODES_NDR if bandwidth.multi_node else SINGLE_NODE_NVLS


def time_us(size_bytes: int, bus_factor: float, bandwidth: Bandwidth) -> float:
    """Time of one collective of `size_bytes` with traffic factor `bus_factor`: the captured
    curve, its wire time at the busbw this hardware allows. On the lab's 4X HDR rails the NDR
    capture's wire time doubles (half the link rate) while its latency-bound small messages
    keep their captured time; a straggler or a degraded rail scale it the same way."""
    curve = curve_for(bandwidth)
    if size_bytes == 0:
        return curve.latency_us * 0.3
    return curve.time_us(size_bytes, bus_factor, bandwidth.busbw_gbs)
