"""Expected bus bandwidth per rung, derived from the node profile and the fabric, and the floor.

busbw is nccl-tests' "bus bandwidth" (nccl-tests doc/PERFORMANCE.md): algbw scaled by the
collective's traffic factor (2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and alltoall) so that it can be compared with the hardware's link rate
whatever the rank count. The gate compares the peak busbw of the large messages with
`expected * min_fraction`; any `#wrong` or out-of-bounds value fails regardless of speed.

Where the defaults come from (measured busbw over the link rate they run on):

- single node, NVLS on: NVLink4 on HGX H100/H200 is 900 GB/s bidirectional per GPU,
  450 GB/s each way. all_reduce_perf on 8x H100 with NVLS peaks at 480 GB/s
  (NVIDIA dgxc-benchmarking nccl/README.md, fixture
  `all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt`: 480.16 GB/s at 8 GiB).
  NVLS reduces inside the NVSwitch, so each byte crosses a GPU's link once each way and
  busbw (which assumes ring traffic) can exceed 450: efficiency 480/450 = 1.067.
- single node, NVLS off (ring): ~370 GB/s on the same board, 370/450 = 0.822.
- across nodes, ring: every node sends through its rails, 8x NDR = 8 x 50 GB/s.
  NVIDIA quotes 370-396 GB/s busbw for 8x400G ring all_reduce across H100 nodes; the
  12-node SHARP-less-ring CoreWeave excerpt peaks at 386 GB/s. 370/400 = 0.925 is used,
  the low end, so a healthy fabric never fails on efficiency alone. Two nodes with
  NCCL's default algorithm pick NVLSTree and report more (469 GB/s on the Dell XE9680
  pair, fixture `all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt`), which is why
  the pairs rung forces `NCCL_ALGO=Ring`.
- per rail: one GPU per node over one HCA, the same ring efficiency on one rail's rate.
- all_gather, reduce_scatter, broadcast, reduce, sendrecv: ring pipelines like all_reduce's,
  held to the ring efficiency (their busbw already carries their own traffic factor).
- alltoall: every rank sends (n-1)/n of its buffer, (n-g)/n of it off the node through its
  own rail (g GPUs per node), so busbw is bounded by rail_rate x (n-1)/(n-g) across nodes
  (1.875 x the rail on two 8-GPU nodes, tending to one rail's rate at scale) and by the
  NVLink rate in one node. No public reference captured: 0.75 of the bound is a
  conservative default.

The floor is a fraction of expected, the spec's `thresholds.nccl_gate.busbw_fraction`
(`Thresholds` takes its default from the spec model, where it is written): at 0.9, 370 GB/s
expected on NDR gives a 333 GB/s floor.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from pydantic import ConfigDict

from cluster_tool.spec.thresholds import NcclGateThresholds


class _Defaults(NcclGateThresholds):
    """The same model, frozen: one shared instance that nothing may change under the others."""

    model_config = ConfigDict(frozen=True)


# The gate's tunables at the spec's defaults (`thresholds.nccl_gate`): each default is written in
# that model's field and nowhere else; what in the gate needs a default reads it from here.
SPEC_DEFAULTS: NcclGateThresholds = _Defaults.model_validate({})

# Per-direction NVLink bandwidth per GPU in GB/s, by GPU model (NVLink4 = 18 links x 25 GB/s).
NVLINK_GBS_PER_GPU: dict[str, float] = {"h100": 450.0, "h200": 450.0}

# IB line rate per port in GB/s (one rail per HCA port): NDR 400 Gb/s, HDR 200 Gb/s.
RAIL_GBS_BY_RATE_GBPS: dict[int, float] = {400: 50.0, 200: 25.0, 100: 12.5}

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
    "sendrecv",
)


class Rung(enum.StrEnum):
    """One step of the ladder; each is a set of Slurm jobs run in parallel."""

    SINGLE_NVLS = "single-nvls"
    SINGLE_RING = "single-ring"
    PAIRS = "pairs"
    FULL = "full"
    RAILS = "rails"

    @property
    def multi_node(self) -> bool:
        return self in (Rung.PAIRS, Rung.FULL, Rung.RAILS)


@dataclass(frozen=True)
class Efficiencies:
    """Measured busbw over the link rate it runs on; see the module docstring for sources."""

    nvls: float = 480.0 / 450.0
    nvlink_ring: float = 370.0 / 450.0
    net_ring: float = 370.0 / 400.0
    alltoall: float = 0.75


@dataclass(frozen=True)
class GateProfile:
    """What the gate needs to know about a node: GPUs, NVLink, rails and their HCAs."""

    gpus_per_node: int = 8
    nvlink_gbs_per_gpu: float = 450.0
    nvls: bool = True
    rail_gbs: float = 50.0
    # mlx5 device of each rail, index = rail; the GPU on that rail is `rail_gpus[rail]`.
    rail_hcas: tuple[str, ...] = tuple(f"mlx5_{i}" for i in range(8))
    rail_gpus: tuple[int, ...] = tuple(range(8))
    # The spec profile's expected all_reduce busbw, when it sets one (measured on the site's
    # own fabric, say): replaces the derived figure for all_reduce in one node and across nodes.
    allreduce_single_gbs: float | None = None
    allreduce_multi_gbs: float | None = None

    @property
    def rails(self) -> int:
        return len(self.rail_hcas)


@dataclass(frozen=True)
class Expectation:
    """Expected busbw of one job and the floor under which it fails, with how it was derived."""

    rung: Rung
    collective: str
    expected_gbs: float
    floor_gbs: float
    basis: str


@dataclass(frozen=True)
class Thresholds:
    """Derives expectations for every rung and collective from one profile."""

    profile: GateProfile
    min_fraction: float = SPEC_DEFAULTS.busbw_fraction
    efficiencies: Efficiencies = field(default_factory=Efficiencies)

    def expect(self, rung: Rung, collective: str = "all_reduce", nodes: int = 2) -> Expectation:
        """Expected busbw and floor for `collective` on `rung` over `nodes` nodes (multi-node)."""
        if collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r}; one of {', '.join(COLLECTIVES)}")
        p, eff = self.profile, self.efficiencies
        if rung is Rung.SINGLE_NVLS or rung is Rung.SINGLE_RING:
            link, link_text = p.nvlink_gbs_per_gpu, f"NVLink {p.nvlink_gbs_per_gpu:g} GB/s per GPU"
            if collective == "alltoall":
                factor, algo = eff.alltoall, "alltoall"
            elif rung is Rung.SINGLE_NVLS and p.nvls and collective == "all_reduce":
                factor, algo = eff.nvls, "NVLS"
            else:
                factor, algo = eff.nvlink_ring, "ring"
        elif collective == "alltoall" and rung is not Rung.RAILS:
            ranks, g = max(nodes, 2) * p.gpus_per_node, p.gpus_per_node
            link = p.rail_gbs * (ranks - 1) / (ranks - g)
            link_text = f"{p.rail_gbs:g} GB/s per rail x (n-1)/(n-g) with n={ranks}, g={g}"
            factor, algo = eff.alltoall, "alltoall"
        else:
            rails = 1 if rung is Rung.RAILS else p.rails
            link = rails * p.rail_gbs
            link_text = f"{rails} rail(s) x {p.rail_gbs:g} GB/s"
            factor, algo = eff.net_ring, "ring"
        expected = round(link * factor, 1)
        basis = f"{link_text} x {algo} efficiency {factor:.3f}"
        override = self._override(rung, collective)
        if override is not None:
            expected, basis = override
        floor = round(expected * self.min_fraction, 1)
        return Expectation(rung, collective, expected, floor, basis)

    def _override(self, rung: Rung, collective: str) -> tuple[float, str] | None:
        """The profile's own all_reduce figure for this rung, if it sets one."""
        p = self.profile
        if collective != "all_reduce":
            return None
        best_single = Rung.SINGLE_NVLS if p.nvls else Rung.SINGLE_RING
        if rung is best_single and p.allreduce_single_gbs is not None:
            return p.allreduce_single_gbs, "the profile's expected_busbw_single_node_gbs"
        if rung in (Rung.PAIRS, Rung.FULL) and p.allreduce_multi_gbs is not None:
            return p.allreduce_multi_gbs, "the profile's expected_busbw_multi_node_gbs"
        return None


def nvlink_gbs_for(gpu_model: str) -> float:
    """Per-direction NVLink bandwidth per GPU for a GPU model the gate knows."""
    try:
        return NVLINK_GBS_PER_GPU[gpu_model.lower()]
    except KeyError as exc:
        known = ", ".join(sorted(NVLINK_GBS_PER_GPU))
        raise ValueError(f"no NVLink figure for GPU model {gpu_model!r}; known: {known}") from exc


def rail_gbs_for(rate_gbps: int) -> float:
    """Per-rail GB/s for an IB port rate in Gb/s (NDR 400, HDR 200)."""
    try:
        return RAIL_GBS_BY_RATE_GBPS[int(rate_gbps)]
    except KeyError as exc:
        raise ValueError(f"no per-rail figure for {rate_gbps} Gb/s") from exc


def profile_from_node_profile(node_profile: Any) -> GateProfile:
    """Adapter from the spec's NodeProfile (gpu_model, gpu_count, hcas, expected_rate_gbps)."""
    hcas = sorted(node_profile.hcas, key=lambda h: int(h.rail))
    return GateProfile(
        gpus_per_node=int(node_profile.gpu_count),
        nvlink_gbs_per_gpu=nvlink_gbs_for(str(node_profile.gpu_model)),
        # NVLS needs third-generation NVSwitch: every HGX H100/H200 board has it.
        nvls=int(getattr(node_profile, "nvlink_domain_size", node_profile.gpu_count)) > 1,
        rail_gbs=rail_gbs_for(int(node_profile.expected_rate_gbps)),
        rail_hcas=tuple(str(h.device) for h in hcas),
        rail_gpus=tuple(int(h.gpu) for h in hcas),
        allreduce_single_gbs=getattr(node_profile, "expected_busbw_single_node_gbs", None),
        allreduce_multi_gbs=getattr(node_profile, "expected_busbw_multi_node_gbs", None),
    )
