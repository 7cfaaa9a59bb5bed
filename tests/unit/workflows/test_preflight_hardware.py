"""The preflight holds each GPU node's hardware to the profile the spec assigns it, as far as a
node before bring-up shows it (issue 33): the PCI bus, the kernel's RDMA devices, CPUs and
memory, read in the same one SSH round. A difference is a mismatch naming both values, exit 2,
nodes with the same differences one line (a hostlist); what a bare node cannot show is listed
as not read, never a failure. And `validate-after` runs the same preflight first.

The nodes are a fake SSH answering each probe with real captures (line 1 of each fixture names
its source); the expected values are read by hand from those captures and the DGX H100 User
Guide's table that the built-in `hgx-h100-8x-ndr` profile states."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.remote import fanout
from cluster_tool.workflows import burnin, preflight
from tests.conftest import FIXTURES, REPO
from tests.unit.workflows.fakes import AnsweringTransport
from tests.unit.workflows.test_preflight import HostsOff, NoConverge

PASSWORD = "CLUSTER_TOOL_SLURMDBD_PASSWORD"
HOST = FIXTURES / "parsers" / "host"
GPU_NODES = [f"gpu{i:03d}" for i in range(1, 33)]


def _capture(name: str) -> str:
    """A host capture as the node prints it: no source line, no operator's prompt line."""
    text = (HOST / name).read_text(encoding="utf-8").split("\n", 1)[1]
    return "".join(
        line + "\n" for line in text.splitlines() if line.strip() and not line.startswith("$ ")
    )


LSCPU_2X44 = _capture("lscpu_xeon8481c_2x44_kvm_wrapped_flags.txt")
MEMINFO_2TIB = _capture("meminfo_2tib_head_prompt_line.txt").removeprefix(
    "[root@bogon server_lab]# cat /proc/meminfo | head\n"
)
DGX_RDMA = _capture("rdma-devices_dgx_h100_user_guide_hand_built.txt")
CNODE_IBDEV2NETDEV = _capture("ibdev2netdev_h100_11dev_compute_renamed_prompt_line.txt")
LSPCI_NVIDIA = _capture("lspci_d10de_h100x8_nvswitch_mlbatch.txt")


@pytest.fixture
def spec_32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The 1-SU example (profile hgx-h100-8x-ndr) with 32 GPU nodes, a head and two logins."""
    text = (REPO / "examples" / "h100-1su.yml").read_text()
    spec = tmp_path / "h100-32.yml"
    spec.write_text(text.replace("gpu[001-031]", "gpu[001-032]"))
    monkeypatch.setattr(burnin, "BurnInLive", NoConverge)
    monkeypatch.setenv(PASSWORD, "a-long-enough-password")
    monkeypatch.setenv("CLUSTER_BMC_USERNAME", "admin")
    monkeypatch.setenv("CLUSTER_BMC_PASSWORD", "a-bmc-password")
    return spec


def _preflight(spec: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["preflight", str(spec), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_31_nodes_alike_are_one_line_and_the_odd_node_names_each_difference(
    spec_32: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every node: a 2 x 44-core Xeon 8481C (a real lscpu) where the profile declares a DGX
    # H100's 2 x 56 x 2; 2 TiB (MemTotal 2111956928 kB = 2062458 MiB, above the profile's
    # RealMemory 2000000 MiB); the DGX's twelve RDMA devices at the User Guide's buses. No
    # lspci on a minimal install (exit 127). gpu017 shows cnode3-011's real ibdev2netdev
    # instead: the last three compute HCAs are mlx5_8/9/10 where a DGX names them mlx5_9/10/11,
    # and its slot-2 card has one port (aa:00.0), not the in-band port at aa:00.1.
    shows = {
        node: {
            "lscpu": (0, LSCPU_2X44),
            "meminfo": (0, MEMINFO_2TIB),
            "rdma-devices": (0, DGX_RDMA),
        }
        for node in GPU_NODES
    }
    shows["gpu017"]["ibdev2netdev"] = (0, CNODE_IBDEV2NETDEV)
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport(shows=shows))
    code, data = _preflight(spec_32, capsys)
    assert code == 2
    texts = [p["text"] for p in data["problems"]]
    assert len(texts) == 2, texts
    many, odd = texts
    cpus = "CPUs: sockets x cores x threads 2x44x2; the profile declares 2x56x2"
    assert many == (
        f"gpu[001-016,018-032] (profile hgx-h100-8x-ndr): {cpus} (a matching "
        "profile: `cluster-tool profile discover "
        f"{spec_32} --node gpu001 --out gpu001.yml`, once nvidia-smi can name the GPU model)"
    )
    assert odd.startswith("gpu017 (profile hgx-h100-8x-ndr): ")
    for said in (
        cpus,
        "rail-5 HCA mlx5_9: the node names the HCA at 0000:c0:00.0 mlx5_8",
        "rail-6 HCA mlx5_10: the node names the HCA at 0000:ce:00.0 mlx5_9",
        "rail-7 HCA mlx5_11: the node names the HCA at 0000:dc:00.0 mlx5_10",
        "the profile's inband NIC mlx5_8 is at 0000:aa:00.1; no RDMA device there",
    ):
        assert said in odd, said
    assert "--node gpu017 --out gpu017.yml" in odd
    assert all(p["kind"] == "input" for p in data["problems"])
    # A bare node's missing lspci is not read, and never a failure.
    assert data["not_read"] == ["GPU and HCA PCI addresses (lspci: not installed) on gpu[001-032]"]


def test_gpus_are_held_to_the_profile_by_their_pci_addresses_before_the_driver(
    spec_32: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # gpu001's PCI bus as `lspci -d 10de:` shows it on a real H100 SXM5 node (no driver
    # needed): GPUs at 18, 2a, 3a, 5d, 9a, ab, ba, db:00.0, the NVSwitches beside them. The
    # profile (a DGX H100) has them at 1b, 43, 52, 61, 9d, c3, d1, df:00.0.
    shows = {"gpu001": {"lspci": (0, LSPCI_NVIDIA)}}
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport(shows=shows))
    code, data = _preflight(spec_32, capsys)
    assert code == 2
    (line,) = [p["text"] for p in data["problems"]]
    assert line.startswith("gpu001 (profile hgx-h100-8x-ndr): ")
    pairs = [
        ("18", "1b"), ("2a", "43"), ("3a", "52"), ("5d", "61"),
        ("9a", "9d"), ("ab", "c3"), ("ba", "d1"), ("db", "df"),
    ]  # fmt: skip
    for index, (seen, profile) in enumerate(pairs):
        assert (
            f"GPU{index} is at 0000:{seen}:00.0, an address the profile does not "
            f"list (its GPU{index} is at 0000:{profile}:00.0)"
        ) in line
    assert "NVSwitch" not in line and "GPU8" not in line  # the bridges are not GPUs


def test_a_bare_node_that_shows_little_passes_and_says_what_it_could_not_read(
    spec_32: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A minimal install before bring-up: no lspci, no DOCA, no inbox mlx5_ib loaded (an empty
    # /sys/class/infiniband), and lscpu that does not answer; only /proc/meminfo.
    shows = {
        node: {"rdma-devices": (0, ""), "lscpu": (124, ""), "meminfo": (0, MEMINFO_2TIB)}
        for node in GPU_NODES
    }
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport(shows=shows))
    code, data = _preflight(spec_32, capsys)
    assert code == 0, data["problems"]
    assert data["checked"]["hardware"] == (
        "gpu[001-032] against profile hgx-h100-8x-ndr: matches as far as read"
    )
    assert data["not_read"] == [
        "GPU and HCA PCI addresses (lspci: not installed) on gpu[001-032]",
        "RDMA device names (no ibdev2netdev, /sys/class/infiniband empty) on gpu[001-032]",
        "CPUs (lscpu: no answer in 5 s) on gpu[001-032]",
    ]


def test_bringup_stops_on_a_node_unlike_its_profile_before_ansible(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shows = {"gpu009": {"lscpu": (0, LSCPU_2X44)}}
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport(shows=shows))
    runs = tmp_path / "runs"
    code = main(["bringup", str(spec_32), "--inventory", str(tmp_path), "--runs-dir", str(runs)])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert line.startswith(
        "cluster-tool: preflight: gpu009 (profile hgx-h100-8x-ndr): CPUs: sockets x "
        "cores x threads 2x44x2; the profile declares 2x56x2"
    )
    assert not runs.exists() or not any(runs.iterdir()), "a refused run records nothing"


# --- validate-after: the same preflight first ------------------------------------------------


def test_validate_after_names_the_hosts_that_do_not_answer_as_one_list_in_seconds(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """32 maintained nodes and the fabric's host all off: exit 3 in seconds naming them as one
    hostlist, before a run record, a probe or Slurm (each host takes the fake's 2 s connect
    timeout: one after another they would take 66 s)."""
    off = HostsOff()
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: off)
    # The run's own collection would meet the same hosts.
    monkeypatch.setattr(fanout, "transport_named", lambda *_, **__: off)
    runs = tmp_path / "runs"
    started = time.monotonic()
    code = main(
        [
            "validate-after",
            str(spec_32),
            "--nodes",
            "gpu[001-032]",
            "--no-gate",
            "--no-dcgm",
            "--runs-dir",
            str(runs),
        ]
    )
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 3, err
    assert took < 15, took
    assert err.strip().splitlines() == [
        "cluster-tool: preflight: unreachable over SSH: gpu[001-032],head01"
    ]
    assert sorted(off.asked) == [*GPU_NODES, "head01"], "each host asked once, at once"
    assert not runs.exists() or not any(runs.iterdir()), "a refused run records nothing"
