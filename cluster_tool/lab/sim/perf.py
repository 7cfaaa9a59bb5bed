"""How fast a collective runs on the simulated hardware: the peak bus bandwidth of a set of
nodes (NVLink inside a node, the slowest rail link between nodes, stragglers) and its
message-size curve, or why the run fails. Stdlib only."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .hw import Hca, NodeHardware

# Large-message busbw inside one 8-GPU H100 node, by collective and NCCL algorithm.
# NVLS (NVLink SHARP through the NVSwitches) is NCCL's default on Hopper for all_reduce.
NVLINK_BUSBW_GBS = {
    ("all_reduce", "NVLS"): 480.0,
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
# What a ring keeps of the wire rate across nodes (protocol, NVLink hop to the NIC's GPU).
RING_EFFICIENCY = 0.92
ALLTOALL_EFFICIENCY = 0.55
# Crossing the spines (a cable on the wrong leaf) costs the rail its locality.
CROSS_LEAF_FACTOR = 0.85
# A GPU in thermal slowdown drags every collective it is in.
THERMAL_FACTOR = 0.7


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
    """The large-message bus bandwidth the model allows and what limits it."""

    busbw_gbs: float
    limited_by: str
    multi_node: bool
    gdr: bool


def link_gbs(hca: Hca) -> float:
    return LANE_GBS.get(hca.speed, 6.25) * WIDTH_LANES.get(hca.width, 4)


def default_algo(collective: str, n_nodes: int, gpus_per_node: int) -> str:
    if collective == "alltoall":
        return "Ring"
    if gpus_per_node >= 8 and n_nodes == 1:
        return "NVLS"
    return "Ring"


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
) -> Bandwidth | PathFailure:
    """Large-message busbw of `collective` over `nodes` (each with `gpus_per_node` ranks)."""
    if not nodes:
        raise ValueError("a collective needs at least one node")
    multi = len(nodes) > 1
    algo = algo or default_algo(collective, len(nodes), gpus_per_node)
    key = (collective, algo) if (collective, algo) in NVLINK_BUSBW_GBS else (collective, "Ring")
    intra = NVLINK_BUSBW_GBS.get(key, 360.0)
    limited_by = f"NVLink ({algo})"
    for hw in nodes:
        for gpu in hw.present_gpus()[:gpus_per_node]:
            if gpu.nvlinks_down:
                share = 1 - len(gpu.nvlinks_down) / gpu.spec.nvlinks
                if intra * share < intra:
                    intra *= share
                    limited_by = f"{hw.name} GPU {gpu.minor} NVLinks down"
    busbw = intra if gpus_per_node > 1 else float("inf")
    gdr = all(("nvidia_peermem" in hw.modules) or hw.dmabuf for hw in nodes)
    if multi:
        # Every rail carries one ring's share; the ring runs at the pace of its slowest hop.
        rails = sorted({h.rail for h in nodes[0].hcas})
        slowest = float("inf")
        slow_where = ""
        for rail in rails:
            ends = []
            for hw in nodes:
                hca = next((h for h in hw.hcas if h.rail == rail), None)
                if hca is None:
                    continue
                if hca.state != "Active" or not hca.present:
                    mode = "hang" if hca.nccl_on_down == "hang" else "error"
                    return PathFailure(hw.name, hca.device, mode, f"{hca.device} port is down")
                ends.append((hw, hca))
            for hw, hca in ends:
                gbs = link_gbs(hca)
                if gbs < slowest:
                    slowest, slow_where = gbs, f"{hw.name} {hca.device} {hca.width} {hca.speed}"
            leaves = {hca.leaf for _, hca in ends if hca.leaf}
            if len(leaves) > 1:
                ordered = sorted(leaves)
                factor = min(
                    (_spine_factor(model, a, b) for a in ordered for b in ordered if a < b),
                    key=lambda f: -1.0 if f is None else f,
                )
                if factor is None:
                    hw, hca = ends[0]
                    return PathFailure(hw.name, hca.device, "error", "no spine joins the leaves")
                if link_gbs(ends[0][1]) * CROSS_LEAF_FACTOR * factor < slowest:
                    slowest = link_gbs(ends[0][1]) * CROSS_LEAF_FACTOR * factor
                    slow_where = f"rail {rail} crosses the spines ({', '.join(ordered)})"
        eff = ALLTOALL_EFFICIENCY if collective == "alltoall" else RING_EFFICIENCY
        inter = len(rails) * slowest * eff
        if not gdr:
            # Without GPUDirect RDMA every byte bounces through host memory.
            inter *= 0.6
            slow_where += " (no GPUDirect RDMA)"
        if inter < busbw:
            busbw, limited_by = inter, f"InfiniBand: {len(rails)} rails, slowest {slow_where}"
    for hw in nodes:
        factor = hw.slow_factor
        if any(g.thermal_slowdown for g in hw.present_gpus()[:gpus_per_node]):
            factor = min(factor, THERMAL_FACTOR)
        if factor < 1.0:
            busbw *= factor
            limited_by += f"; {hw.name} slowed x{factor:g}"
    if busbw == float("inf"):
        busbw, limited_by = 0.0, "one rank: no communication"
    return Bandwidth(busbw_gbs=busbw, limited_by=limited_by, multi_node=multi, gdr=gdr)


def jitter(*key: object) -> float:
    """A deterministic 0-3% slowdown, the same on every rank and every rerun (runs only ever
    fall short of the peak, never beat it)."""
    d = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return 1.0 + int.from_bytes(d[:4], "big") / 2**32 * 0.03


def time_us(size_bytes: int, bus_factor: float, peak_gbs: float, multi_node: bool) -> float:
    """Time of one collective of `size_bytes`: latency-bound for small messages, approaching
    the peak bus bandwidth for large ones (protocol switches make the middle sag)."""
    latency = 24.0 if multi_node else 13.0
    if peak_gbs <= 0 or bus_factor <= 0 or size_bytes == 0:
        return latency * 0.3 if size_bytes == 0 else latency
    knee = 48 * 2**20 if multi_node else 16 * 2**20
    effective = peak_gbs * (size_bytes / (size_bytes + knee)) ** 0.7
    return latency + size_bytes * bus_factor / (effective * 1e3)
