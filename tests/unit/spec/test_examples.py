"""The shipped example specs load and describe the clusters their comments promise."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.spec import BUILTIN_PROFILES, builtin_profile, load_spec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_h100_1su_is_31_gpu_nodes_in_one_su() -> None:
    cluster = load_spec(EXAMPLES / "h100-1su.yml")
    gpus = cluster.gpu_nodes()
    assert len(gpus) == 31
    assert {n.su for n in gpus} == {1}
    assert [n.index_in_su for n in gpus] == list(range(1, 32))
    assert gpus[0].name == "gpu001" and gpus[0].address == "10.10.1.1"
    assert gpus[0].bmc_address == "10.11.1.1"
    head = cluster.host("head01")
    assert {"slurm_controller", "slurmdbd", "subnet_manager"} <= set(head.roles)
    assert head.profile is None


def test_h200_4su_is_127_nodes_over_four_sus() -> None:
    cluster = load_spec(EXAMPLES / "h200-4su.yml")
    gpus = cluster.gpu_nodes()
    assert len(gpus) == 127
    assert cluster.su_count == 4
    assert [sum(1 for n in gpus if n.su == su) for su in (1, 2, 3, 4)] == [32, 32, 32, 31]
    assert gpus[32].name == "gpu033" and (gpus[32].su, gpus[32].index_in_su) == (2, 1)
    assert all(n.profile and n.profile.gpu_memory_gib == 141 for n in gpus)


def test_lab_is_head_and_four_hdr_gpu_nodes() -> None:
    cluster = load_spec(EXAMPLES / "lab.yml")
    assert cluster.name == "lab"
    assert [n.name for n in cluster.hosts()] == ["head", "gpu001", "gpu002", "gpu003", "gpu004"]
    assert cluster.host("head").address == "10.77.0.10"
    assert cluster.host("gpu001").address == "10.77.0.11"
    profile = cluster.gpu_nodes()[0].profile
    assert profile is not None
    assert (profile.expected_speed, profile.expected_width, profile.expected_rate_gbps) == (
        "HDR",
        "4X",
        200,
    )
    # `extends` keeps the H100 HCA layout.
    assert profile.hcas == builtin_profile("hgx-h100-8x-ndr").hcas
    assert cluster.spine_count == 2 and cluster.fabric.leaf_ports == 40


@pytest.mark.parametrize("name", sorted(BUILTIN_PROFILES))
def test_builtin_profiles_keep_compute_hcas_apart_from_storage(name: str) -> None:
    profile = builtin_profile(name)
    assert profile.gpu_count == 8
    assert sorted(h.rail for h in profile.hcas) == list(range(8))
    assert sorted(h.gpu for h in profile.hcas) == list(range(8))
    compute = {h.device for h in profile.hcas}
    assert compute == {f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)}
    assert not compute & {n.device for n in profile.nics}
    assert profile.cpus == 224


def test_gpu_memory_per_profile() -> None:
    assert builtin_profile("hgx-h100-8x-ndr").gpu_memory_gib == 80
    assert builtin_profile("hgx-h200-8x-ndr").gpu_memory_gib == 141


@pytest.mark.parametrize(
    ("description", "name"),
    [
        ("MF0;su1-leaf-r0:MQM9700/U1", "su1-leaf-r0"),
        ("su1-leaf-r0", "su1-leaf-r0"),
        # As captured from a real Quantum-2 fabric (fixtures/real-outputs, ibnetdiscover).
        ("MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1", "CNTSN-POD229-QM97-IB-02"),
        ("spine01", "spine01"),
        ("gpu001 mlx5_0", None),  # a host HCA, not a switch
    ],
)
def test_default_switch_name_pattern(description: str, name: str | None) -> None:
    fabric = load_spec(EXAMPLES / "h100-1su.yml").fabric
    assert fabric.switch_name(description) == name


def test_switch_names_from_patterns() -> None:
    fabric = load_spec(EXAMPLES / "h200-4su.yml").fabric
    assert fabric.leaf_name(3, 0) == "su3-leaf-r0"
    assert fabric.spine_name(7) == "spine07"
