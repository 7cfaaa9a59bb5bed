"""`nvidia-smi topo -m`: the real 12-NIC H100-class matrix (tabs), a spaces variant, the old
layout with mlx5 columns, and the look-ups checks use (distance, nics_at)."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError
from cluster_tool.parsers.nvidia_topo import parse_topo_matrix
from tests.unit.parsers._nvidia import fixture, real

REAL = "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt"


def test_real_12nic_legend_and_columns() -> None:
    topo = parse_topo_matrix(real(REAL))
    assert topo.nic_legend == {f"NIC{i}": f"mlx5_{i}" for i in range(12)}
    assert len(topo.gpus) == 8 and len(topo.nics) == 12
    assert topo.columns[:9] == (*[f"GPU{i}" for i in range(8)], "NIC0")


def test_real_gpu0_pix_nics_and_nv18_everywhere() -> None:
    topo = parse_topo_matrix(real(REAL))
    assert topo.nics_at(0, {"PIX"}) == ["mlx5_0"]
    # The eight NCCL NICs of that host (NCCL_IB_HCA mlx5_0,1,2,5,6,7,8,11), one PIX per GPU.
    assert [topo.nics_at(g, {"PIX", "PXB"}) for g in range(8)] == [
        ["mlx5_0"],
        ["mlx5_1"],
        ["mlx5_2"],
        ["mlx5_5"],
        ["mlx5_6"],
        ["mlx5_7"],
        ["mlx5_8"],
        ["mlx5_11"],
    ]
    assert topo.distance(0, "mlx5_0") == "PIX"
    assert topo.distance(3, "mlx5_5") == "PIX"
    assert all(topo.gpu_link(a, b) == "NV18" for a in range(8) for b in range(8) if a != b)


def test_real_numa_off_is_node_everywhere_and_affinity_typed() -> None:
    topo = parse_topo_matrix(real(REAL))
    codes = {code for row, links in topo.links.items() for col, code in links.items() if row != col}
    assert codes == {"NV18", "PIX", "NODE"}
    assert all(
        topo.links[f"GPU{g}"][f"NIC{n}"] in ("PIX", "NODE") for g in range(8) for n in range(12)
    )
    # NIC3/NIC4 and NIC9/NIC10 share a switch with each other, with no GPU.
    assert topo.links["NIC3"]["NIC4"] == "PIX" and topo.links["NIC9"]["NIC10"] == "PIX"
    for gpu in topo.gpus:
        assert gpu.cpu_affinity == "0-191" and gpu.cpus == tuple(range(192))
        assert gpu.numa_affinity == 0 and gpu.gpu_numa_id is None
    assert all(nic.cpus == () and nic.numa_affinity is None for nic in topo.nics)


def test_spaces_variant_with_numa_split() -> None:
    topo = parse_topo_matrix(fixture("nvidia-smi_topo-m_h100x4_nv6_spaces_nccl1617.txt"))
    assert [topo.nics_at(g) for g in range(4)] == [["mlx5_0"], ["mlx5_1"], ["mlx5_2"], ["mlx5_3"]]
    assert topo.distance(0, "mlx5_1") == "SYS"
    assert topo.gpu(0).cpus == (6, 14, 22, 30) and topo.gpu(0).numa_affinity == 3
    assert [g.numa_affinity for g in topo.gpus] == [3, 1, 7, 5]
    assert topo.gpu_link(2, 3) == "NV6"


def test_old_layout_names_nics_by_rdma_device() -> None:
    topo = parse_topo_matrix(fixture("nvidia-smi_topo-m_p100x4_old_mlx5_columns_soc.txt"))
    assert topo.nic_legend == {}
    assert [n.device for n in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert topo.distance(0, "mlx5_0") == "SOC"
    assert topo.nics_at(0, {"SOC", "SYS"}) == ["mlx5_0", "mlx5_1"]
    assert topo.gpu_link(0, 1) == "NV2" and topo.gpu_link(0, 2) == "SOC"
    assert topo.gpu(2).cpus[:3] == (80, 88, 96) and topo.gpu(2).numa_affinity is None


def test_lookups_name_what_is_missing() -> None:
    topo = parse_topo_matrix(real(REAL))
    with pytest.raises(KeyError, match="GPU9"):
        topo.distance(9, "mlx5_0")
    with pytest.raises(KeyError, match="mlx5_99"):
        topo.distance(0, "mlx5_99")


HEADER = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("Legend:\n", "expected GPUn/NICn"),
        ("\tNIC0\tNIC1\n", "GPU0, GPU1"),
        (HEADER + "GPU0\t X \tNV18\tPIX\t0-3\t0\t\tN/A\n", "missing GPU1, NIC0"),
        (HEADER + "GPU0\t X \tNV18\tPXX\t0-3\t0\t\tN/A\n", "distance code"),
        (HEADER + "GPU0\tNV18\tNV18\tPIX\t0-3\t0\t\tN/A\n", "diagonal"),
        (HEADER + "GPU0\t X \tNV18\t0-3\t0\t\tN/A\n", "distance code"),
        (HEADER + "GPU7\t X \tNV18\tPIX\t0-3\t0\t\tN/A\n", "GPU7"),
        (
            HEADER
            + "GPU0\t X \tNV18\tPIX\t0-3\t0\t\tN/A\nGPU1\tNV18\t X \tNODE\t0-3\t0\t\tN/A\n"
            + "NIC0\tPIX\tNODE\t X \n",
            "NIC legend",
        ),
        (
            HEADER
            + "GPU0\t X \tNV18\tPIX\t0-3\t0\t\tN/A\nGPU1\tNV12\t X \tNODE\t0-3\t0\t\tN/A\n"
            + "NIC0\tPIX\tNODE\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n",
            "symmetric",
        ),
        (
            HEADER
            + "GPU0\t X \tNV18\tPIX\t3-1\t0\t\tN/A\nGPU1\tNV18\t X \tNODE\t0-3\t0\t\tN/A\n"
            + "NIC0\tPIX\tNODE\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n",
            "rising range",
        ),
    ],
)
def test_not_a_topology_raises_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_topo_matrix(text)
