"""A lab GPU node shows its profile's CPUs and memory (`lscpu`, /proc/meminfo), as it shows its
profile's GPUs and HCAs, so the preflight holds the lab to its profile the way it holds real
hardware: the lab's nodes pass it with no lab-only option, and a node altered to differ fails it.

The figures: the lab's profile extends the DGX H100's (2 x 56 cores x 2 threads, 2 TiB); a real
H100 SXM5 node with 2 TiB shows MemTotal 2113411288 kB (project-codeflare/mlbatch's KubeCon EU
2025 README: the node's memory capacity, which the kubelet reads from MemTotal)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cluster_lab import model as hw
from cluster_lab.hostview import lscpu_script, meminfo_text, write_host_views
from cluster_lab.sim.sysfs import write_all_sysfs_trees
from cluster_lab.topology import build_model, load_plan
from cluster_tool.checks.profile import NodeFacts, diff_profile, discover
from cluster_tool.parsers.host import parse_lscpu, parse_meminfo, parse_rdma_devices
from cluster_tool.probes.host import RdmaDevices
from cluster_tool.spec import load_spec
from tests.conftest import REPO

LAB = REPO / "examples" / "lab.yml"


def _model(tmp: Path) -> hw.HardwareModel:
    return build_model(load_plan(LAB, tmp / "inventory"), "lab")


def test_the_lab_nodes_cpus_and_memory_are_the_profiles_as_a_real_node_shows_them(
    tmp_path: Path,
) -> None:
    model = _model(tmp_path)
    gpu001 = model.node("gpu001")
    assert gpu001.mem_total_kib == 2113411288
    assert model.node("head").cpu is None, "the head shows the lab host's own"
    write_host_views(model, tmp_path)
    script = tmp_path / "gpu001" / "hw" / "lscpu"
    assert os.access(script, os.X_OK)
    shown = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True)
    cpu = parse_lscpu(shown.stdout)
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core, cpu.cpus) == (2, 56, 2, 224)
    meminfo = (tmp_path / "gpu001" / "hw" / "meminfo").read_text()
    assert parse_meminfo(meminfo) == 2113411288 // 1024
    assert not (tmp_path / "head").exists()
    # Other options than the default layout are not simulated, and say so.
    other = subprocess.run(["sh", str(script), "-p"], capture_output=True, text=True)
    assert other.returncode == 1 and "only the default layout" in other.stderr
    assert meminfo_text(1024).startswith("MemTotal:")
    assert gpu001.cpu is not None
    assert lscpu_script(gpu001.cpu).startswith("#!/bin/sh\n")


def _rdma_listing(tree: Path) -> str:
    """The preflight's sysfs RDMA probe, run over the lab's fake /sys/class as a node sees it
    (an overlay in a private mount namespace, as the node's boot mounts it)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a private mount namespace)")
    script = (
        f"mount -t overlay overlay -o ro,lowerdir={tree}:/sys/class /sys/class && "
        + RdmaDevices().command()
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_preflight_reads_the_lab_node_as_its_profile_and_names_a_renamed_hca(
    tmp_path: Path,
) -> None:
    cluster = load_spec(LAB)
    profile = cluster.host("gpu002").profile
    assert profile is not None
    model = _model(tmp_path)
    write_all_sysfs_trees(model.model_dump(mode="json"), tmp_path)
    write_host_views(model, tmp_path)
    cpu = parse_lscpu(
        subprocess.run(
            ["sh", str(tmp_path / "gpu002" / "hw" / "lscpu")], capture_output=True, text=True
        ).stdout
    )
    memory = parse_meminfo((tmp_path / "gpu002" / "hw" / "meminfo").read_text())

    def diff() -> list[tuple[str | None, str | None, str | None]]:
        listing = _rdma_listing(tmp_path / "gpu002" / "sysfs-class")
        facts = NodeFacts("gpu002", rdma=parse_rdma_devices(listing), cpu=cpu, mem_total_mib=memory)
        return [
            (f.component, f.expected, f.observed)
            for f in diff_profile(profile, facts, discover(facts))
        ]

    # The DGX H100 layout's twelve RDMA devices at their buses, the profile's CPUs and memory.
    assert diff() == []
    # gpu002's rail-1 HCA (0000:40:00.0) named mlx5_12 by the node.
    data = model.model_dump(mode="json")
    node = next(n for n in data["nodes"] if n["name"] == "gpu002")
    hca = next(h for h in node["hcas"] if h["device"] == "mlx5_3")
    hca["device"] = "mlx5_12"
    shutil.rmtree(tmp_path / "gpu002" / "sysfs-class")
    write_all_sysfs_trees(data, tmp_path)
    assert diff() == [("mlx5_3", "mlx5_3 at 0000:40:00.0", "mlx5_12 at 0000:40:00.0")]


def test_a_gpu_off_the_bus_is_named_by_its_address_from_lspci(tmp_path: Path) -> None:
    # The lab's gpu-missing fault (a GPU off the bus) on gpu004's GPU5, seen through the lab's
    # lspci as the preflight reads it: the profile (a DGX H100: GPU5 at c3:00.0, the User
    # Guide's table) has eight GPUs, the bus shows seven.
    from cluster_lab.faults import inject
    from cluster_lab.sim.hw import node_hardware
    from cluster_lab.sim.render_link import render_lspci
    from cluster_tool.parsers.lspci import parse_lspci

    cluster = load_spec(LAB)
    profile = cluster.host("gpu004").profile
    assert profile is not None
    data = _model(tmp_path).model_dump(mode="json")
    inject(data, "gpu-missing", "gpu004", 5)
    lspci = parse_lspci(render_lspci(node_hardware(data, "gpu004"), {"10de", "15b3"}))
    facts = NodeFacts("gpu004", lspci=lspci)
    found = [
        (f.component, f.expected, f.observed) for f in diff_profile(profile, facts, discover(facts))
    ]
    assert found == [("GPUs", "8", "7")]
    (finding,) = diff_profile(profile, facts, discover(facts))
    assert "7 GPUs; the profile has 8 (none at 0000:c3:00.0)" in finding.message
