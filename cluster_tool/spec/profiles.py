"""Built-in node profiles: what an HGX H100/H200 8-GPU server with 8 NDR HCAs looks like.

The layout follows the DGX H100/H200 system (the HGX reference board): eight ConnectX-7
compute HCAs, one per GPU behind the same PCIe switch, and the storage/in-band NICs kept
apart so they never end up in `NCCL_IB_HCA`.
"""

from __future__ import annotations

from typing import Any

# (mlx5 device, PCI address, closest GPU, netdev), as the DGX H100/H200 User Guide's table of
# the two network modules pairs each OSFP port's ConnectX-7 with its GPU, netdev and RDMA name
# (the BasePOD guide's mlxconfig loop names the same eight buses). The rail is the closest GPU's
# index: on a rail-optimised fabric GPU k of every node talks over rail k.
_HGX_COMPUTE_HCAS: tuple[tuple[str, str, int, str], ...] = (
    ("mlx5_0", "0000:18:00.0", 0, "ibp24s0"),
    ("mlx5_3", "0000:40:00.0", 1, "ibp64s0"),
    ("mlx5_4", "0000:4f:00.0", 2, "ibp79s0"),
    ("mlx5_5", "0000:5e:00.0", 3, "ibp94s0"),
    ("mlx5_6", "0000:9a:00.0", 4, "ibp154s0"),
    ("mlx5_9", "0000:c0:00.0", 5, "ibp192s0"),
    ("mlx5_10", "0000:ce:00.0", 6, "ibp206s0"),
    ("mlx5_11", "0000:dc:00.0", 7, "ibp220s0"),
)

# The two dual-port ConnectX-7 cards in slots 1 and 2 (buses 0x29 and 0xaa), never on a
# compute rail. The DGX BasePOD deployment guide (docs.nvidia.com/dgx-basepod/deployment-guide-
# dgx-basepod/latest/network-overview.html) bonds port 2 of both cards as one Ethernet interface
# for in-band management and storage, and uses port 1 of both as InfiniBand storage where the
# site has an InfiniBand storage fabric: (device, PCI address, purpose, netdev, link layer).
# A DGX H100/H200 so shows twelve RDMA devices; a node whose cards are set otherwise is made
# into a profile of its own.
_HGX_OTHER_NICS: tuple[tuple[str, str, str, str, str], ...] = (
    ("mlx5_1", "0000:29:00.0", "storage", "ibp41s0f0", "InfiniBand"),
    ("mlx5_2", "0000:29:00.1", "inband", "enp41s0f1np1", "Ethernet"),
    ("mlx5_7", "0000:aa:00.0", "storage", "ibp170s0f0", "InfiniBand"),
    ("mlx5_8", "0000:aa:00.1", "inband", "enp170s0f1np1", "Ethernet"),
)

_HGX_GPU_PCI = (
    "0000:1b:00.0",
    "0000:43:00.0",
    "0000:52:00.0",
    "0000:61:00.0",
    "0000:9d:00.0",
    "0000:c3:00.0",
    "0000:d1:00.0",
    "0000:df:00.0",
)


def _hgx(
    *,
    description: str,
    gpu_model: str,
    gpu_product: str,
    gpu_memory_gib: int,
    gpu_power_limit_w: float,
    gpu_max_sm_clock_mhz: int | None,
) -> dict[str, Any]:
    return {
        "description": description,
        "gpu_model": gpu_model,
        "gpu_product": gpu_product,
        "gpu_count": 8,
        "gpu_memory_gib": gpu_memory_gib,
        "gpu_power_limit_w": gpu_power_limit_w,
        "gpu_max_sm_clock_mhz": gpu_max_sm_clock_mhz,
        "gpu_pci": list(_HGX_GPU_PCI),
        "gpu_sockets": [0, 0, 0, 0, 1, 1, 1, 1],
        "nvlink_domain_size": 8,
        "cpu_sockets": 2,
        "cpu_cores_per_socket": 56,
        "cpu_threads_per_core": 2,
        "memory_gib": 2048,
        # Slurm drains a node whose RealMemory exceeds what the kernel reports; leave
        # room for the kernel and firmware reservations.
        "slurm_real_memory_mib": 2_000_000,
        "hcas": [
            {"device": dev, "pci": pci, "gpu": gpu, "rail": gpu, "netdev": netdev}
            for dev, pci, gpu, netdev in _HGX_COMPUTE_HCAS
        ],
        "nics": [
            {
                "device": dev,
                "pci": pci,
                "purpose": purpose,
                "netdev": netdev,
                "link_layer": link_layer,
            }
            for dev, pci, purpose, netdev, link_layer in _HGX_OTHER_NICS
        ],
        "expected_speed": "NDR",
        "expected_width": "4X",
        "expected_rate_gbps": 400,
        # The expected all_reduce busbw is left to the gate's derivation (~480 GB/s in one
        # node with NVLS, ~370 GB/s across nodes over 8x NDR; cluster_tool/gate/thresholds.py).
    }


BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "hgx-h100-8x-ndr": _hgx(
        description="HGX H100 8-GPU (80 GB HBM3), 8x ConnectX-7 NDR compute HCAs, 2x Xeon",
        gpu_model="h100",
        gpu_product="NVIDIA H100 80GB HBM3",
        gpu_memory_gib=80,
        # NVIDIA H100 Tensor Core GPU datasheet: H100 SXM "Max thermal design power (TDP) up
        # to 700W (configurable)"; the real 8x H100 SXM5 `nvidia-smi -q` (driver 535.161.08,
        # shared/fixtures/real-outputs) shows Default and Max Power Limit 700.00 W and
        # Max Clocks SM 1980 MHz on every GPU.
        gpu_power_limit_w=700.0,
        gpu_max_sm_clock_mhz=1980,
    ),
    "hgx-h200-8x-ndr": _hgx(
        description="HGX H200 8-GPU (141 GB HBM3e), 8x ConnectX-7 NDR compute HCAs, 2x Xeon",
        gpu_model="h200",
        gpu_product="NVIDIA H200",
        gpu_memory_gib=141,
        # NVIDIA H200 Tensor Core GPU datasheet: H200 SXM "Max thermal design power (TDP) up
        # to 700W (configurable)". It publishes no SM clock and no real H200 capture with
        # Max Clocks was found: the maximum clock is left unchecked.
        gpu_power_limit_w=700.0,
        gpu_max_sm_clock_mhz=None,
    ),
}
