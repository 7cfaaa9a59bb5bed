"""The host parsers (lscpu, /proc/meminfo, ibdev2netdev, the sysfs RDMA listing) on real
captures: figures read by hand from each file, and what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers import KINDS
from cluster_tool.parsers.host import (
    RdmaDevice,
    parse_ibdev2netdev,
    parse_lscpu,
    parse_meminfo,
    parse_rdma_devices,
    pci_from_netdev,
)
from tests.conftest import FIXTURES

HOST = FIXTURES / "parsers" / "host"


def _capture(name: str) -> str:
    """The capture as collected (prompt line and all), without the line naming its source."""
    return (HOST / name).read_text(encoding="utf-8").split("\n", 1)[1]


def _records(kind: str, name: str) -> object:
    reading = KINDS[kind].read(_capture(name))
    (host,) = reading.hosts
    assert host.errors == ()
    return host.records


def test_lscpu_of_a_two_socket_xeon_with_its_flags_wrapped() -> None:
    cpu = _records("lscpu", "lscpu_xeon8481c_2x44_kvm_wrapped_flags.txt")
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core, cpu.cpus) == (2, 44, 2, 176)
    assert cpu.model_name == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"


def test_lscpu_refuses_a_localised_lscpu_and_an_endless_number() -> None:
    # A localised lscpu (as a Chinese-locale Kunpeng server prints it) names no key it knows.
    with pytest.raises(ParseError, match=r":1: expected lscpu.s `Key: value` .in the C locale"):
        parse_lscpu("架构：             aarch64\nCPU:               256\n座：               2\n")
    with pytest.raises(ParseError, match=":1: Socket"):
        parse_lscpu("Socket(s): " + "9" * 50_000 + "\n")


def test_meminfo_of_a_2tib_server_after_its_prompt() -> None:
    # MemTotal 2111956928 kB = 2062457.9 MiB.
    assert _records("meminfo", "meminfo_2tib_head_prompt_line.txt") == 2_062_457


def test_meminfo_refuses_a_line_it_does_not_know() -> None:
    text = "MemTotal:       2111956928 kB\n# 2111956928 / 1024 / 1024 = 2 TB\n"
    with pytest.raises(ParseError, match=":2: "):
        parse_meminfo(text)


def test_plain_ibdev2netdev_reads_each_pci_address_from_the_interface_name() -> None:
    devices = _records("ibdev2netdev", "ibdev2netdev_h100_11dev_compute_renamed_prompt_line.txt")
    assert isinstance(devices, list) and len(devices) == 11
    by_name = {d.device: d for d in devices}
    # ibp192s0: bus 192 = 0xc0; enp41s0f1np1: bus 41 = 0x29, function 1.
    assert by_name["mlx5_8"] == RdmaDevice("mlx5_8", "0000:c0:00.0", "ibp192s0", True)
    assert by_name["mlx5_10"].pci == "0000:dc:00.0"
    assert by_name["mlx5_2"] == RdmaDevice("mlx5_2", "0000:29:00.1", "enp41s0f1np1", False)
    assert by_name["mlx5_7"].pci == "0000:aa:00.0"


def test_ibdev2netdev_v_reads_the_pci_address_it_prints() -> None:
    devices = _records("ibdev2netdev", "ibdev2netdev-v_igx_cx7_two_ports_prompt_line.txt")
    assert devices == [
        RdmaDevice("mlx5_0", "0005:03:00.0", "eth2", False),
        RdmaDevice("mlx5_1", "0005:03:00.1", "eth2", False),
    ]


def test_a_name_that_does_not_carry_its_path_gives_no_address() -> None:
    assert pci_from_netdev("eth2") is None and pci_from_netdev("ib0") is None
    assert pci_from_netdev("enP2p1s0f1np1") == "0002:01:00.1"
    assert parse_ibdev2netdev("mlx5_0 port 1 ==> ib0 (Up)\n")[0].pci is None


def test_ibdev2netdev_refuses_a_line_without_an_interface() -> None:
    with pytest.raises(ParseError, match=":2: "):
        parse_ibdev2netdev("mlx5_0 port 1 ==> ibp24s0 (Up)\nmlx5_1 port 1 ==>\n")


def test_the_sysfs_listing() -> None:
    devices = parse_rdma_devices(_capture("rdma-devices_dgx_h100_user_guide_hand_built.txt"))
    assert len(devices) == 12
    assert devices[8] == RdmaDevice("mlx5_8", "0000:aa:00.1", "enp170s0f1np1")
    with pytest.raises(ParseError, match=":1: "):
        parse_rdma_devices("mlx5_0 not-an-address\n")


def test_every_host_capture_is_named_here() -> None:
    named = {
        "lscpu_xeon8481c_2x44_kvm_wrapped_flags.txt",
        "meminfo_2tib_head_prompt_line.txt",
        "ibdev2netdev_h100_11dev_compute_renamed_prompt_line.txt",
        "ibdev2netdev-v_igx_cx7_two_ports_prompt_line.txt",
        "rdma-devices_dgx_h100_user_guide_hand_built.txt",
        # Read by tests/unit/workflows/test_preflight_hardware.py (the lspci parser's).
        "lspci_d10de_h100x8_nvswitch_mlbatch.txt",
    }
    assert {p.name for p in Path(HOST).glob("*.txt")} == named
