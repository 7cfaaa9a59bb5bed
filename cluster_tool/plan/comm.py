"""How long a collective takes on the cluster: NCCL's ring time model with bus bandwidth that
depends on the message size, as the gate measures it.

A curve is busbw (nccl-tests' bus bandwidth, GB/s) against message size. The gate's own runs
give the curve when the plan reads their results (`--gate-results`); otherwise its shape comes
from a real all_reduce_perf capture, scaled to the peak the gate expects of the profile:

- in a node (NVLink): 8× H100 with NVLS, dgxc-benchmarking nccl/README.md sample output
  (https://github.com/NVIDIA/dgxc-benchmarking/blob/841f5466cd86b66abd48049e839c563776f6d716/nccl/README.md),
  480 GB/s at 8 GiB, half of it near 32 MiB;
- across nodes (InfiniBand NDR, 8 rails): 2× Dell XE9680, NCCL 2.26
  (https://github.com/NVIDIA/nccl-tests/issues/309), 469 GB/s at 16 GiB, half near 64 MiB.

A ring collective on n ranks over N nodes moves `factor(n)·S` bytes per rank at the curve's busbw
for its size (which carries the latency of the ring it was measured on); a longer ring also
pays NCCL's latency for its extra hops: `baseLat + (n−N)·hwLat(NVLink) + (N−1)·hwLat(NET)` per
pass (NVIDIA/nccl src/graph/tuning.cc, Ring/Simple: baseLat 8.4 µs, hwLat 3.4 µs on NVLink,
14 µs on the network; all-reduce makes two passes).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property

# (message bytes, busbw GB/s), read from the two captures named in the module docstring.
NVLINK_CAPTURE = (
    (16384, 1.60),
    (65536, 5.87),
    (262144, 22.45),
    (1048576, 67.04),
    (4194304, 135.44),
    (16777216, 237.21),
    (33554432, 294.69),
    (67108864, 361.67),
    (134217728, 400.53),
    (268435456, 422.25),
    (536870912, 436.79),
    (1073741824, 466.33),
    (4294967296, 477.24),
    (8589934592, 480.16),
)
NETWORK_CAPTURE = (
    (16384, 0.94),
    (65536, 3.63),
    (262144, 10.10),
    (1048576, 27.33),
    (4194304, 83.33),
    (16777216, 169.67),
    (33554432, 234.81),
    (67108864, 269.98),
    (134217728, 336.29),
    (268435456, 392.35),
    (536870912, 426.97),
    (1073741824, 448.90),
    (4294967296, 466.52),
    (17179869184, 469.21),
)

# NCCL's ring latency model, Simple protocol (src/graph/tuning.cc), in seconds.
RING_BASE_LATENCY_S = 8.4e-6
RING_NVLINK_HOP_S = 3.4e-6
RING_NETWORK_HOP_S = 14e-6


@dataclass(frozen=True)
class BusbwCurve:
    """busbw against message size: measured points, or a capture's shape scaled to a peak."""

    points: tuple[tuple[float, float], ...]  # (bytes, GB/s), sizes ascending
    source: str
    # The all-reduce the curve was measured on: its latency is in the curve already.
    ranks: int = 16
    nodes: int = 2

    @classmethod
    def measured(
        cls, points: list[tuple[float, float]], source: str, ranks: int = 16, nodes: int = 2
    ) -> BusbwCurve:
        clean = sorted({(float(s), float(b)) for s, b in points if s > 0 and b > 0})
        if not clean:
            raise ValueError("a busbw curve needs at least one positive point")
        return cls(tuple(clean), source, ranks, nodes)

    @classmethod
    def shaped(
        cls,
        capture: tuple[tuple[int, float], ...],
        peak_gbs: float,
        source: str,
        ranks: int = 16,
        nodes: int = 2,
    ) -> BusbwCurve:
        top = max(b for _, b in capture)
        points = tuple((float(s), b / top * peak_gbs) for s, b in capture)
        return cls(points, source, ranks, nodes)

    @cached_property
    def peak(self) -> float:
        return max(b for _, b in self.points)

    @cached_property
    def _sizes(self) -> list[float]:
        return [s for s, _ in self.points]

    def fraction(self, size: float) -> float:
        """busbw at `size` as a fraction of the curve's peak: log-linear between points, the
        last point's beyond them, proportional to the size below the first (latency-bound)."""
        sizes = self._sizes
        peak = self.peak
        if size <= sizes[0]:
            return self.points[0][1] / peak * size / sizes[0]
        if size >= sizes[-1]:
            return self.points[-1][1] / peak
        i = bisect.bisect_right(sizes, size)
        (s0, b0), (s1, b1) = self.points[i - 1], self.points[i]
        w = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return (b0 + w * (b1 - b0)) / peak

    def scaled(self, peak_gbs: float) -> BusbwCurve:
        """The same shape at another peak (a group that reaches a fraction of what was measured)."""
        top = self.peak
        points = tuple((s, b / top * peak_gbs) for s, b in self.points)
        return BusbwCurve(points, self.source, self.ranks, self.nodes)


def ring_latency(ranks: int, nodes: int, passes: int = 1) -> float:
    """NCCL's ring latency for `ranks` over `nodes` (`passes` 2 for all-reduce)."""
    if ranks <= 1:
        return 0.0
    nodes = max(1, min(nodes, ranks))
    hops = (ranks - nodes) * RING_NVLINK_HOP_S + (nodes - 1) * RING_NETWORK_HOP_S
    return RING_BASE_LATENCY_S + passes * hops


@dataclass(frozen=True)
class Fabric:
    """The bandwidth a parallel group gets: NVLink inside a node, rails across nodes.

    `nvlink` is the ring curve of one node's GPUs (all-gather, reduce-scatter, all-reduce
    without NVLS); `network` is the curve across nodes with every GPU of each node in the
    group (one rail each), `rails` of them per node.
    """

    nvlink: BusbwCurve
    network: BusbwCurve
    rails: int

    def group_busbw(self, size: float, ranks: int, per_node: int) -> float:
        """busbw (bytes/s) of a ring over `ranks` GPUs, `per_node` of them in each node, for
        messages of `size` bytes in all."""
        if ranks <= per_node:
            return self.nvlink.peak * self.nvlink.fraction(size) * 1e9
        # Each GPU of the group sends through its own rail; a node's share of the ring
        # crosses the network on `per_node` rails at once.
        rails_used = max(1, min(per_node, self.rails))
        peak = min(self.network.peak * rails_used / self.rails, self.nvlink.peak)
        return peak * self.network.fraction(size) * 1e9

    def ring_time(self, kind: str, size: float, ranks: int, per_node: int) -> float:
        """Seconds for an all_gather / reduce_scatter (`size` = the whole gathered buffer) or an
        all_reduce (`size` = the buffer) over the group."""
        if ranks <= 1 or size <= 0:
            return 0.0
        if kind == "all_reduce":
            factor, passes = 2.0 * (ranks - 1) / ranks, 2
        elif kind in ("all_gather", "reduce_scatter"):
            factor, passes = (ranks - 1) / ranks, 1
        else:
            raise ValueError(f"unknown collective {kind!r}")
        nodes = max(1, -(-ranks // max(1, per_node)))
        busbw = self.group_busbw(size, ranks, per_node)
        # The curve's own latency is in its busbw; a longer ring pays NCCL's per-hop latency
        # for its extra hops.
        curve = self.nvlink if ranks <= per_node else self.network
        extra = ring_latency(ranks, nodes, passes) - ring_latency(curve.ranks, curve.nodes, passes)
        return size * factor / busbw + max(0.0, extra)

    def p2p_time(self, size: float, across_nodes: bool) -> float:
        """One point-to-point transfer (pipeline stages, context-parallel ring): one rail across
        nodes, NVLink inside a node; the collective's latency of a two-rank ring."""
        if size <= 0:
            return 0.0
        if across_nodes:
            busbw = self.network.peak / self.rails * self.network.fraction(size) * 1e9
            return size / busbw + RING_BASE_LATENCY_S + RING_NETWORK_HOP_S
        busbw = self.nvlink.peak * self.nvlink.fraction(size) * 1e9
        return size / busbw + RING_BASE_LATENCY_S + RING_NVLINK_HOP_S
