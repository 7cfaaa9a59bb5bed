"""Real nccl-tests captures the simulated busbw curves are calibrated from, and the time a
collective of any size takes on them. Stdlib only (vendored into the nccl-tests package).

Each curve keeps a capture's rows as (message size in bytes, time in µs), the faster of the
out-of-place and in-place columns: a hiccup on the machine only ever slows one side (the 32 B
and 4 KiB out-of-place rows of the single-node capture). The figures are copied from the files
in the project's shared fixtures (`real-outputs/`, first line of each names its public source);
tests/unit/lab_sim/test_calibration.py reads those files again and holds the simulator to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Curve:
    """One captured all_reduce run: its conditions and its (size, time) rows."""

    source: str
    ranks: int
    nodes: int
    algo: str
    rails: int  # compute HCAs per node (0: one node, NVLink only)
    rail_gbs: float  # line rate of each, GB/s
    points: tuple[tuple[int, float], ...]

    @property
    def bus_factor(self) -> float:
        """all_reduce's busbw over algbw: 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
        return 2 * (self.ranks - 1) / self.ranks

    @property
    def latency_us(self) -> float:
        """The fastest any message went: the floor of the latency-bound region."""
        return min(t for _, t in self.points)

    @property
    def peak_busbw_gbs(self) -> float:
        """The best busbw of any row (where the curve levels off at the bus limit)."""
        return max(size * self.bus_factor / (t * 1e3) for size, t in self.points)

    def captured_time_us(self, size: int) -> float:
        """The time the capture took for `size` bytes, interpolated in log size and log time
        between its rows; below the smallest row as the smallest, above the largest at the
        largest row's rate."""
        first, last = self.points[0], self.points[-1]
        if size <= first[0]:
            return first[1]
        if size >= last[0]:
            return last[1] * size / last[0]
        for (s0, t0), (s1, t1) in zip(self.points, self.points[1:], strict=False):
            if s0 <= size <= s1:
                f = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
                return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
        raise AssertionError("sizes of a curve ascend")  # pragma: no cover

    def time_us(self, size: int, bus_factor: float, busbw_gbs: float) -> float:
        """Time of a collective of `size` bytes with traffic factor `bus_factor` on hardware
        whose large-message busbw is `busbw_gbs`: the captured time with the capture's wire
        time (size x factor / its peak) swapped for this one's. Small messages are
        latency-bound and keep the captured time (the wire time of a few KiB is a hundredth of
        a µs at either rate); large ones approach `busbw_gbs` as the capture approached its
        peak. So a link at half the rate, a straggler or a degraded rail scale the curve only
        above the latency-bound region."""
        if busbw_gbs <= 0 or bus_factor <= 0:
            return self.latency_us
        overhead = self.captured_time_us(size) - size * self.bus_factor / (
            self.peak_busbw_gbs * 1e3
        )
        return max(self.latency_us, overhead + size * bus_factor / (busbw_gbs * 1e3))


# One node: 8x H100 80GB HBM3 (pool0-01806), one GPU per process, NVLS on by default.
SINGLE_NODE_NVLS = Curve(
    source=(
        "github.com/NVIDIA/dgxc-benchmarking commit 841f5466cd86b66abd48049e839c563776f6d716 "
        "nccl/README.md (fixture all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt)"
    ),
    ranks=8,
    nodes=1,
    algo="NVLS",
    rails=0,
    rail_gbs=0.0,
    points=(
        (8, 13.03), (16, 13.0), (32, 13.52), (64, 14.72), (128, 15.79), (256, 15.77),
        (512, 16.01), (1024, 16.17), (2048, 16.43), (4096, 16.46), (8192, 16.83),
        (16384, 17.24), (32768, 18.68), (65536, 18.85), (131072, 19.19), (262144, 19.5),
        (524288, 19.7), (1048576, 26.93), (2097152, 42.09), (4194304, 53.82),
        (8388608, 82.03), (16777216, 123.0), (33554432, 198.9), (67108864, 324.7),
        (134217728, 586.0), (268435456, 1112.5), (536870912, 2149.3), (1073741824, 4016.4),
        (2147483648, 7938.0), (4294967296, 15749.0), (8589934592, 31307.0),
        (17179869184, 62636.0),
    ),
)  # fmt: skip

# Two nodes: Dell XE9680, 8x H100 + 8x ConnectX-7 at NDR (400 Gb/s) each, NCCL 2.26.2, 16
# ranks, NCCL's default algorithm (NVLSTree on two nodes).
TWO_NODES_NDR = Curve(
    source=(
        "https://github.com/NVIDIA/nccl-tests/issues/309 "
        "(fixture all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt)"
    ),
    ranks=16,
    nodes=2,
    algo="NVLSTree",
    rails=8,
    rail_gbs=50.0,
    points=(
        (8, 24.7), (16, 24.93), (32, 24.93), (64, 25.21), (128, 25.62), (256, 25.9),
        (512, 26.31), (1024, 26.65), (2048, 28.19), (4096, 29.72), (8192, 31.67),
        (16384, 32.24), (32768, 33.47), (65536, 33.08), (131072, 38.12), (262144, 46.79),
        (524288, 70.33), (1048576, 71.47), (2097152, 76.24), (4194304, 94.22),
        (8388608, 131.4), (16777216, 183.8), (33554432, 267.7), (67108864, 466.1),
        (134217728, 748.3), (268435456, 1276.0), (536870912, 2355.1), (1073741824, 4470.2),
        (2147483648, 8717.2), (4294967296, 17262.0), (8589934592, 34365.0),
        (17179869184, 68652.0),
    ),
)  # fmt: skip

# Many nodes, ring: the only multi-node capture that is not NVLSTree. 96 ranks (busbw/algbw =
# 1.979 in every row, though the manifest says 64), H100 over 8 NDR rails, 512 MiB and up only.
# Its manifest mentions SHARP, yet 387 GB/s is below the 400 GB/s a ring may reach on 8 NDR
# rails and far below what in-network reduction gives, so it is read as a ring (unverified).
MANY_NODES_RING_NDR = Curve(
    source=(
        "github.com/coreweave/nccl-tests commit 0120901ac7a1e6425640a57540e142070452f8a2 "
        "README.md (fixture all_reduce_perf_h100_96gpu_claimed64_sharp_coreweave_readme_excerpt"
        ".txt)"
    ),
    ranks=96,
    nodes=12,
    algo="Ring",
    rails=8,
    rail_gbs=50.0,
    points=(
        (536870912, 2979.7), (1073741824, 5808.0), (2147483648, 11163.0),
        (4294967296, 22181.0), (8589934592, 43980.0),
    ),
)  # fmt: skip


def efficiency(curve: Curve) -> float:
    """A multi-node capture's peak busbw over the line rate of its rails (one node's)."""
    return curve.peak_busbw_gbs / (curve.rails * curve.rail_gbs)
