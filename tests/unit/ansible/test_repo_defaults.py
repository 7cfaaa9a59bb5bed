"""Per-OS repositories (issue 18, finding 3): the default spec renders no CUDA, DOCA or HPC-X URL,
so each node gets its own OS release's repository from the roles; a URL the spec sets (a mirror)
reaches every node. Evidence: NVIDIA's published repository layout, e.g.
https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ and
https://linux.mellanox.com/public/repo/doca/2.9.1/ubuntu24.04/x86_64/."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.ansible import run_playbook
from tests.unit.ansible.test_preflight import _inventory
from tests.unit.ansible.test_preflight_nodes import HOSTS, OS_FACTS, SEED

RESOLVE = Path(__file__).parent / "playbooks" / "repo_defaults.yml"
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/{}/x86_64/"
DOCA = "https://linux.mellanox.com/public/repo/doca/3.1.0/{}/x86_64/"
HPCX = "https://content.mellanox.com/hpc/hpc-x/v2.20/hpcx-v2.20-gcc-doca_ofed-{}-cuda12-x86_64.tbz"


def _resolve(
    tmp_path: Path, os_of: dict[str, str], expect: dict[str, dict[str, str]], **changes: object
) -> list[str]:
    inventory = _inventory(tmp_path, **changes)
    (inventory / "hosts.yml").write_text(HOSTS)
    facts = tmp_path / "facts"
    seeded = run_playbook(
        SEED,
        inventory,
        extravars={"seed_os": {host: OS_FACTS[name] for host, name in os_of.items()}},
        private_data_dir=tmp_path / "seed",
        fact_cache=facts,
    )
    assert seeded.rc == 0
    result = run_playbook(
        RESOLVE,
        inventory,
        extravars={"expect": expect},
        private_data_dir=tmp_path / "pdd",
        fact_cache=facts,
    )
    return [e.message or "" for e in result.events if e.failed] + ([] if result.rc == 0 else ["rc"])


def _expected(os_name: str) -> dict[str, str]:
    cuda, doca = {
        "Ubuntu_22": ("ubuntu2204", "ubuntu22.04"),
        "Ubuntu_24": ("ubuntu2404", "ubuntu24.04"),
    }[os_name]
    return {
        "cuda": CUDA.format(cuda),
        "nccl_cuda": CUDA.format(cuda),
        "doca": DOCA.format(doca),
        "hpcx": HPCX.format(doca),
    }


def test_an_ubuntu_2404_node_gets_the_2404_repositories_beside_a_2204_node(tmp_path: Path) -> None:
    problems = _resolve(
        tmp_path,
        {"*": "Ubuntu_22", "gpu007": "Ubuntu_24"},
        {"gpu001": _expected("Ubuntu_22"), "gpu007": _expected("Ubuntu_24")},
    )
    assert problems == []


def test_a_mirror_the_spec_sets_serves_every_node(tmp_path: Path) -> None:
    mirror = "https://mirror.example.net/cuda/"
    expect = {
        host: {**_expected(name), "cuda": mirror, "nccl_cuda": mirror}
        for host, name in (("gpu001", "Ubuntu_22"), ("gpu007", "Ubuntu_24"))
    }
    problems = _resolve(
        tmp_path, {"*": "Ubuntu_22", "gpu007": "Ubuntu_24"}, expect, cuda_repo_url=mirror
    )
    assert problems == []


def test_nvidia_driver_open_modules_picks_the_kernel_module_flavour(tmp_path: Path) -> None:
    # Issue 18, finding 12: the variable was read by nothing. NVIDIA's CUDA repositories name the
    # flavours nvidia-headless-<branch>-open / nvidia-headless-<branch> (Ubuntu) and
    # nvidia-open-kernel-dkms / nvidia-kernel-dkms (Debian).
    os_of = {"*": "Ubuntu_22", "gpu007": "Debian_12"}
    open_expect = {
        "gpu001": {
            "driver_packages": [
                "nvidia-headless-570-open",
                "nvidia-utils-570",
                "nvidia-compute-utils-570",
            ]
        },
        "gpu007": {
            "driver_packages": [
                "nvidia-open-kernel-dkms",
                "nvidia-driver-cuda",
                "nvidia-persistenced",
            ]
        },
    }
    assert _resolve(tmp_path / "open", os_of, open_expect) == []
    closed_expect = {
        "gpu001": {
            "driver_packages": [
                "nvidia-headless-570",
                "nvidia-utils-570",
                "nvidia-compute-utils-570",
            ]
        },
        "gpu007": {
            "driver_packages": ["nvidia-kernel-dkms", "nvidia-driver-cuda", "nvidia-persistenced"]
        },
    }
    problems = _resolve(tmp_path / "closed", os_of, closed_expect, nvidia_driver_open_modules=False)
    assert problems == []
