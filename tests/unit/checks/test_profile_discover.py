"""`profile discover` on real captures: each compute HCA paired with the GPU on its PCIe switch
(figures read by hand from each capture), the other NICs listed apart, an ambiguous pairing
left to the operator, and `--diff` naming a node's differences from a profile."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster_tool.errors import UsageError
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.spec.models import NodeProfile, builtin_profile
from cluster_tool.workflows.discover import diff_node, discover_from_capture
from tests.conftest import FIXTURES, REPO, read_real_output

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]


def _fixture(path: Path) -> str:
    """A capture without its source line, and without the prompt line an operator's paste
    carries (a probe's output has none)."""
    lines = path.read_text(encoding="utf-8").split("\n")[1:]
    if lines and (lines[0].startswith(("$ ", "[")) or "@" in lines[0].split(" ", 1)[0]):
        lines = lines[1:]
    return "\n".join(lines).lstrip("\n")


def _capture(tmp_path: Path, node: str, outputs: dict[str, str]) -> Path:
    """A capture folder of one node, as `validate --save` writes one."""
    probes = {name: ProbeOutput(0, text) for name, text in outputs.items()}
    save_capture(tmp_path / "cap", {node: HostResult(node, outputs=probes, probes=tuple(probes))})
    return tmp_path / "cap"


TOPO_12NIC = "nvidia-smi_topo-m_nv18_12nic_tabs_numa_off.txt"
DELLA = (
    FIXTURES / "parsers/real/nvidia-smi_topo-m_h100_6nic_della_empty_cpu_affinity_prompt_line.txt"
)
HOST = FIXTURES / "parsers" / "host"
DGX_TOPO = FIXTURES / "discover" / "nvidia-smi_topo-m_dgx_h100_user_guide_hand_built.txt"


def test_twelve_nic_node_pairs_eight_rails_and_lists_four_nics_apart(tmp_path: Path) -> None:
    # Read by hand: each GPU's PIX column (GPU3 -> NIC5, GPU7 -> NIC11); the capture's own
    # issue pins NCCL_IB_HCA=mlx5_0,1,2,5,6,7,8,11. NIC3/NIC4 and NIC9/NIC10 are PIX only to
    # each other (dual-port cards with no GPU behind their switch).
    cap = _capture(tmp_path, "tpgds-aihub0007", {"nvidia-smi-topo": read_real_output(TOPO_12NIC)})
    found, _ = discover_from_capture(cap)
    assert [(h.gpu, h.rail, h.device, h.distance) for h in found.hcas] == [
        (0, 0, "mlx5_0", "PIX"),
        (1, 1, "mlx5_1", "PIX"),
        (2, 2, "mlx5_2", "PIX"),
        (3, 3, "mlx5_5", "PIX"),
        (4, 4, "mlx5_6", "PIX"),
        (5, 5, "mlx5_7", "PIX"),
        (6, 6, "mlx5_8", "PIX"),
        (7, 7, "mlx5_11", "PIX"),
    ]
    assert [(n.device, n.affinity) for n in found.nics] == [
        ("mlx5_3", "NODE from every GPU"),
        ("mlx5_4", "NODE from every GPU"),
        ("mlx5_9", "NODE from every GPU"),
        ("mlx5_10", "NODE from every GPU"),
    ]
    assert found.ambiguous == ()
    # Only topo -m is in this capture: the profile is refused, naming what was not read.
    with pytest.raises(UsageError, match=r"no GPU: nvidia-smi -q was not read.*no CPU topology"):
        found.profile()


def test_two_hcas_on_one_gpu_switch_are_left_to_the_operator(tmp_path: Path) -> None:
    # Della: GPU0 is PIX to NIC0 and NIC1 (mlx5_0, mlx5_1), GPU4 to NIC3 and NIC4; GPU3 to
    # mlx5_2 alone, GPU6 to mlx5_5 alone; GPU1, 2, 5, 7 to none.
    cap = _capture(tmp_path, "della-k17g3", {"nvidia-smi-topo": _fixture(DELLA)})
    found, _ = discover_from_capture(cap)
    assert [(h.gpu, h.device) for h in found.hcas] == [(3, "mlx5_2"), (6, "mlx5_5")]
    assert [(a.gpu, a.devices) for a in found.ambiguous] == [
        (0, ("mlx5_0", "mlx5_1")),
        (4, ("mlx5_3", "mlx5_4")),
    ]
    assert "--pair GPU0=DEVICE" in found.ambiguous[0].message
    chosen, _ = discover_from_capture(cap, pairs={0: "mlx5_1", 4: "mlx5_3"})
    assert [(h.gpu, h.rail, h.device) for h in chosen.hcas] == [
        (0, 0, "mlx5_1"),
        (3, 1, "mlx5_2"),
        (4, 2, "mlx5_3"),
        (6, 3, "mlx5_5"),
    ]
    assert [(n.device, n.affinity) for n in chosen.nics] == [
        ("mlx5_0", "PIX from GPU0"),
        ("mlx5_4", "PIX from GPU4"),
    ]


def test_oem_node_gpus_and_its_bluefield_bond_listed_apart(tmp_path: Path) -> None:
    # gpud's 8x H100 captures: GPUs at 19:00.0, 3B:00.0, ... DB:00.0 (81559 MiB each); eight
    # CX-7 (MT4129) InfiniBand at 400 and a BlueField-3 (MT41692) Ethernet bond at 200. No
    # topology in this capture: the eight are left unpaired, not guessed into rails.
    cap = _capture(
        tmp_path,
        "oem",
        {
            "nvidia-smi-q": read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt"),
            "ibstat": read_real_output("ibstat_h100_8xcx7_ndr_ib_all_active.txt"),
        },
    )
    found, _ = discover_from_capture(cap)
    assert [g.pci for g in found.gpus] == [
        "0000:19:00.0",
        "0000:3b:00.0",
        "0000:4c:00.0",
        "0000:5d:00.0",
        "0000:9b:00.0",
        "0000:bb:00.0",
        "0000:cb:00.0",
        "0000:db:00.0",
    ]
    assert {g.memory_mib for g in found.gpus} == {81559}
    (bond,) = found.nics
    assert (bond.device, bond.link_layer, bond.rate_gbps, bond.ca_type) == (
        "mlx5_bond_0",
        "Ethernet",
        200,
        "MT41692",
    )
    assert "link layer Ethernet" in bond.why
    assert [n.device for n in found.unpaired] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"
    ]  # fmt: skip
    assert found.hcas == () and found.rate_gbps is None


def _dgx_layout_capture(tmp_path: Path, rdma: str) -> Path:
    """A capture put together from parts, said so: the DGX H100 topology from NVIDIA's table,
    one real RDMA listing, and real lscpu and /proc/meminfo of other machines."""
    smi = read_real_output("nvidia-smi-q_h100x8_driver535.161.08_full.txt")
    return _capture(
        tmp_path,
        "gpu001",
        {
            "nvidia-smi-q": smi,
            "nvidia-smi-topo": _fixture(DGX_TOPO),
            "ibstat": read_real_output("ibstat_h100_ib_active_some_eth_down.txt"),
            "ibdev2netdev": rdma,
            "lscpu": _fixture(HOST / "lscpu_xeon8481c_2x44_kvm_wrapped_flags.txt"),
            "meminfo": _fixture(HOST / "meminfo_2tib_head_prompt_line.txt"),
        },
    )


def test_a_complete_capture_makes_a_profile_the_spec_accepts(tmp_path: Path) -> None:
    rdma = "\n".join(
        f"{line.split()[0]} port 1 ==> {line.split()[2]} (Up)"
        for line in _fixture(HOST / "rdma-devices_dgx_h100_user_guide_hand_built.txt").splitlines()
    )
    cap = _dgx_layout_capture(tmp_path, rdma)
    out = tmp_path / "profile.yml"
    proc = subprocess.run(
        [*CLI, "profile", "discover", "--from", str(cap), "--out", str(out),
         "--name", "dgx-h100-site", "--memory-reserve-pct", "2", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    profile = NodeProfile.model_validate(yaml.safe_load(out.read_text())["dgx-h100-site"])
    assert [(h.device, h.pci, h.gpu, h.rail) for h in profile.hcas][4:] == [
        ("mlx5_6", "0000:9a:00.0", 4, 4),
        ("mlx5_9", "0000:c0:00.0", 5, 5),
        ("mlx5_10", "0000:ce:00.0", 6, 6),
        ("mlx5_11", "0000:dc:00.0", 7, 7),
    ]
    assert [(n.device, n.pci) for n in profile.nics] == [
        ("mlx5_1", "0000:29:00.0"),
        ("mlx5_2", "0000:29:00.1"),
        ("mlx5_7", "0000:aa:00.0"),
        ("mlx5_8", "0000:aa:00.1"),
    ]
    # 2 x 44 x 2 from lscpu; MemTotal 2062457 MiB less 2% (41249.14, rounded up) = 2021207.
    assert (profile.cpu_sockets, profile.cpu_cores_per_socket, profile.cpu_threads_per_core) == (
        2,
        44,
        2,
    )
    assert profile.slurm_real_memory_mib == 2_021_207 and profile.memory_gib == 2015
    assert (profile.gpu_model, profile.gpu_memory_gib, profile.expected_rate_gbps) == (
        "h100",
        80,
        400,
    )
    record = json.loads(proc.stdout)
    assert record["mismatches"] == [] and record["profile"]["gpu_count"] == 8

    def diff(profile: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, "profile", "discover", "--from", str(cap), "--diff", profile, "--json"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    # The node against the profile made from it: nothing; against the built-in DGX H100
    # (GPUs at 1b:00.0 ..., 2 x 56 cores): each GPU's address and the CPUs, exit 1.
    same = diff(str(out))
    assert same.returncode == 0 and json.loads(same.stdout)["mismatches"] == []
    other = diff("hgx-h100-8x-ndr")
    assert other.returncode == 1, other.stderr
    found = json.loads(other.stdout)["mismatches"]
    assert [(f["component"], f["expected"], f["observed"]) for f in found][-2:] == [
        ("GPU7", "0000:df:00.0", "0000:db:00.0"),
        ("CPUs", "2x56x2", "2x44x2"),
    ]
    assert len(found) == 9 and all(f["check"] == "profile.mismatch" for f in found)


def test_diff_names_each_renamed_hca_at_its_pci_address(tmp_path: Path) -> None:
    # cnode3-011's real ibdev2netdev: the DGX buses c0, ce, dc carry mlx5_8, 9, 10 where the
    # DGX H100 layout (the built-in profile) names them mlx5_9, 10, 11. Its card at bus 170
    # has one port (enp170s0np0, at aa:00.0): nothing is at aa:00.1, where the DGX has its
    # in-band port mlx5_8.
    rdma = _fixture(HOST / "ibdev2netdev_h100_11dev_compute_renamed_prompt_line.txt")
    found, facts = discover_from_capture(_capture(tmp_path, "cnode3-011", {"ibdev2netdev": rdma}))
    mismatches = diff_node(builtin_profile("hgx-h100-8x-ndr"), facts, found)
    assert [(f.check, f.component, f.expected, f.observed) for f in mismatches] == [
        ("profile.mismatch", "mlx5_9", "mlx5_9 at 0000:c0:00.0", "mlx5_8 at 0000:c0:00.0"),
        ("profile.mismatch", "mlx5_10", "mlx5_10 at 0000:ce:00.0", "mlx5_9 at 0000:ce:00.0"),
        ("profile.mismatch", "mlx5_11", "mlx5_11 at 0000:dc:00.0", "mlx5_10 at 0000:dc:00.0"),
        ("profile.mismatch", "mlx5_8", "mlx5_8 at 0000:aa:00.1", "nothing at 0000:aa:00.1"),
    ]
    assert "cluster-tool profile discover --from CAPTURE --node cnode3-011" in mismatches[0].message


def test_ambiguous_pairing_refuses_to_write_a_profile(tmp_path: Path) -> None:
    cap = _capture(tmp_path, "della-k17g3", {"nvidia-smi-topo": _fixture(DELLA)})
    out = tmp_path / "p.yml"
    proc = subprocess.run(
        [*CLI, "profile", "discover", "--from", str(cap), "--out", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.count("\n") == 1 and "--pair GPU0=DEVICE" in proc.stderr


def test_live_discovery_reads_this_machine_over_the_fan_out() -> None:
    # The fan-out's local transport runs the same probe script a node runs over SSH: this
    # build host has CPUs and memory but no GPU, so those are read and the GPUs are not.
    import os

    from cluster_tool.remote.fanout import LocalTransport
    from cluster_tool.workflows.discover import discover_live

    found, _ = discover_live("build-host", None, LocalTransport())
    assert found.cpu is not None and found.cpu.cpus == os.cpu_count()
    assert found.mem_total_mib is not None and found.mem_total_mib > 1024
    assert "GPUs: no nvidia-smi -q output" in found.unread
    with pytest.raises(UsageError, match="no GPU"):
        found.profile()


def test_live_discovery_of_an_unreachable_node_is_exit_3() -> None:
    from cluster_tool.errors import UnreachableError
    from cluster_tool.remote.fanout import Target, TransportError
    from cluster_tool.workflows.discover import discover_live

    class Down:
        def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
            raise TransportError("ssh: connect to host 10.0.0.9 port 22: No route to host")

    with pytest.raises(UnreachableError, match="No route to host") as caught:
        discover_live("gpu009", "10.0.0.9", Down())
    assert caught.value.exit_code == 3


def test_a_diff_profile_file_that_is_not_yaml_is_bad_input(tmp_path: Path) -> None:
    # Read as the spec is read: a syntax error is a located UsageError (exit 2), not an
    # internal error (exit 1, which --diff also means for a mismatch).
    from cluster_tool.commands.profile import _profile_to_diff
    from cluster_tool.errors import UsageError

    bad = tmp_path / "mine.yml"
    bad.write_text("mine: {gpu_count: [8\n")
    with pytest.raises(UsageError, match=r"mine\.yml"):
        _profile_to_diff(str(bad), None)
