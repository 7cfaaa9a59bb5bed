"""ibnetdiscover: the real QM9700 NDR200 capture (redacted GUIDs), real output from ibsim,
ibsim's own net file, and the accessors the fabric check reads."""

from __future__ import annotations

import importlib.util

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers.ibnetdiscover import CA, SWITCH, parse_ibnetdiscover
from tests.conftest import FIXTURES, REPO, read_real_output

IB = FIXTURES / "parsers" / "ib"


def _qm9700_excerpt() -> str:
    text = read_real_output("ibnetdiscover_qm9700_ndr200_hostname_mlx5_redacted.txt")
    # The author cut the output short with "...omitted"; what precedes it is ibnetdiscover.
    return text.split("...omitted", 1)[0]


def test_qm9700_switch_with_ndr200_ports_and_redacted_guids() -> None:
    fabric = parse_ibnetdiscover(_qm9700_excerpt())
    assert fabric.generated_on == "Fri Jul 19 02:49:25 2024"
    (switch,) = fabric.nodes
    assert switch.kind == SWITCH
    assert switch.description == "MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1"
    assert (switch.number_of_ports, switch.lid, switch.lmc, switch.port0) == (
        129, 1, 0, "enhanced",
    )  # fmt: skip
    assert (switch.vendor_id, switch.device_id) == (0x2C9, 0xD2F2)
    # Redacted GUIDs are kept as written, so they still compare and print.
    assert switch.guid == "0x9c05<redacted>" and switch.system_image_guid == "0x9c05<redacted>"
    assert [p.port for p in switch.ports] == [1, 2, 3, 4, 6]
    assert {p.link for p in switch.ports} == {"2xNDR"}
    assert {p.rate_gbps for p in switch.ports} == {200.0}  # NDR200: what ibstatus shows
    assert [p.peer_lid for p in switch.ports] == [22, 27, 10, 12, 11]
    assert switch.ports[0].peer_description == "tj01-4090-node005 mlx5_2"
    assert switch.ports[0].peer_id == "H-b83f<redacted>" and switch.ports[0].peer_port == 1
    assert switch.ports[0].peer_port_guid == "0xb83f<redacted>"


def test_qm9700_ca_uplinks_come_from_the_switch_side() -> None:
    fabric = parse_ibnetdiscover(_qm9700_excerpt())
    uplinks = {u.ca_description: u for u in fabric.ca_uplinks()}
    assert sorted(uplinks) == [f"tj01-4090-node00{n} mlx5_2" for n in (4, 5, 6, 7, 9)]
    node9 = uplinks["tj01-4090-node009 mlx5_2"]
    assert (node9.switch_description, node9.switch_port, node9.width, node9.speed) == (
        "MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1", 6, 2, "NDR",
    )  # fmt: skip
    assert node9.switch_guid == "0x9c05<redacted>" and node9.ca_port == 1
    # Three CAs share the redacted id "H-946d<redacted>": they stay three uplinks.
    assert sum(u.ca_guid == "0x946d<redacted>" for u in uplinks.values()) == 3


def test_real_ibnetdiscover_against_ibsim() -> None:
    fabric = parse_ibnetdiscover((IB / "ibnetdiscover_ibsim_hdr.txt").read_text())
    assert [n.kind for n in fabric.nodes].count(SWITCH) == 3
    assert len(fabric.cas) == 7  # gpu004 mlx5_1 is not cabled: ibnetdiscover never sees it
    assert fabric.node("gpu004 mlx5_1") is None
    index = fabric.by_description()
    assert len(index) == 10 and index["gpu001 mlx5_0"] is fabric.node("gpu001 mlx5_0")
    assert fabric.initiated_from == "node 0000000000200000 port 0000000000200000"

    leaf = fabric.node("MF0;su1-leaf-r0:MQM8700/U1")
    assert leaf is not None
    assert (leaf.guid, leaf.lid, leaf.port0, leaf.number_of_ports) == (
        "0x0000000000200001", 3, "base", 40,
    )  # fmt: skip
    port4 = leaf.port(4)
    assert port4 is not None and port4.peer_description == "gpu004 mlx5_0"
    assert (port4.width, port4.speed, port4.peer_port_guid) == (1, "HDR", "0x000000000010000d")

    uplinks = {u.ca_description: u for u in fabric.ca_uplinks()}
    assert len(uplinks) == 7
    slow = uplinks["gpu003 mlx5_1"]
    assert (slow.switch_description, slow.switch_port, slow.width, slow.speed) == (
        "MF0;su1-leaf-r1:MQM8700/U1", 3, 4, "QDR",
    )  # fmt: skip
    assert slow.ca_guid == "0x000000000010000a" and slow.ca_port_guid == "0x000000000010000b"
    assert slow.switch_guid == "0x0000000000200002"
    ca = fabric.node("gpu003 mlx5_1")
    assert ca is not None and ca.kind == CA and ca.ports[0].lid == 9 and ca.ports[0].lmc == 0

    spine_links = [
        s for s in fabric.switch_ports() if s.switch_description == "MF0;lab-spine-1:MQM8700/U1"
    ]
    assert [(s.port, s.peer_description, s.peer_port, s.peer_kind) for s in spine_links] == [
        (1, "MF0;su1-leaf-r0:MQM8700/U1", 33, SWITCH),
        (2, "MF0;su1-leaf-r1:MQM8700/U1", 33, SWITCH),
        (3, "MF0;su1-leaf-r0:MQM8700/U1", 34, SWITCH),
        (4, "MF0;su1-leaf-r1:MQM8700/U1", 34, SWITCH),
    ]
    assert all(s.width == 4 and s.speed == "HDR" for s in spine_links)
    leaf_ports = [s for s in fabric.switch_ports() if s.peer_kind == CA]
    assert len(leaf_ports) == 7
    assert (slow.host, slow.hca) == ("gpu003", "mlx5_1")

    # Every cable is listed from both ends; links() counts each once.
    links = fabric.links()
    assert len(links) == 7 + 4
    assert {(lk.width, lk.speed) for lk in links} == {
        (4, "HDR"),
        (2, "HDR"),
        (1, "HDR"),
        (4, "QDR"),
    }
    two_x = next(lk for lk in links if "gpu002 mlx5_0" in (lk.a_description, lk.b_description))
    assert (two_x.width, two_x.speed, two_x.rate_gbps) == (2, "HDR", 100.0)
    narrow = next(lk for lk in links if "gpu004 mlx5_0" in (lk.a_description, lk.b_description))
    assert (narrow.width, narrow.speed) == (1, "HDR")
    assert slow.rate_gbps == 40.0 and uplinks["gpu001 mlx5_0"].rate_gbps == 200.0


def test_ibsim_net_file_reads_as_a_fabric() -> None:
    fabric = parse_ibnetdiscover((IB / "ibsim_net_lab_hdr.net").read_text())
    assert len(fabric.switches) == 3 and len(fabric.cas) == 8
    leaf = fabric.node("MF0;su1-leaf-r0:MQM8700/U1")
    assert leaf is not None and leaf.guid is None
    port1 = leaf.port(1)
    assert port1 is not None and port1.peer_description == "gpu001 mlx5_0"
    uplinks = {u.ca_description for u in fabric.ca_uplinks()}
    assert "gpu004 mlx5_0" in uplinks and "gpu004 mlx5_1" not in uplinks


def test_port_line_variants() -> None:
    text = "\n".join(
        [
            "switchguid=0x1(1)",
            'Switch\t36 "S-0000000000000001"\t\t# "leaf one" base port 0 lid 5 lmc 0',
            '[1]\t"H-0000000000000002"[1](e09d730300000003) \t\t# "gpu001 mlx5_0" lid 7 4xEDR',
            '[2][ext 1]\t"S-0000000000000009"[2]\t\t# "spine" lid 9 4xFDR10',
            '[3]\t"S-0000000000000009"[3]',
            "caguid=0x2",
            'Ca\t2 "H-0000000000000002"\t\t# "gpu001 mlx5_0"',
            '[1](e09d730300000003) \t"S-0000000000000001"[1]\t\t'
            '# lid 7 lmc 0 "leaf one" lid 5 4xEDR',
            '[2](e09d730300000004) \t"S-0000000000000001"[4]\t\t# "leaf one" lid 5 4xEDR',
        ]
    )
    fabric = parse_ibnetdiscover(text)
    sw, ca = fabric.nodes
    assert [p.link for p in sw.ports] == ["4xEDR", "4xFDR10", None]
    assert sw.ports[1].ext_port == "1" and sw.ports[2].peer_description is None
    assert sw.ports[0].peer_port_guid == "0xe09d730300000003"
    assert [(p.port_guid, p.lid) for p in ca.ports] == [
        ("0xe09d730300000003", 7), ("0xe09d730300000004", None),
    ]  # fmt: skip
    assert ca.guid == "0x0000000000000002"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("# only comments\n", None),
        ('[1]\t"S-01"[1]\n', 1),
        ('Switch\t36 "S-01"\n[x]\t"S-02"[1]\n', 2),
        ('Switch\t36 "S-01"\n[1]\t"S-02"[1]\t# lid 4 4xHDR\n', 2),
        ('Switch\t36 "S-01"\t# no quotes here\n', 1),
        ("vendid=0x2c9\nSwitchy things\n", 2),
        ('devid=zz\nCa\t1 "H-01"\n', 2),
    ],
)
def test_bad_ibnetdiscover_raises_parse_error_naming_the_line(text: str, where: int | None) -> None:
    with pytest.raises(ParseError) as err:
        parse_ibnetdiscover(text)
    assert err.value.line_no == where


def _generator() -> object:
    path = REPO / "benchmarks" / "parsers.py"
    spec = importlib.util.spec_from_file_location("bench_parsers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_fabric_of_the_benchmark_parses_whole() -> None:
    gen = _generator()
    fabric = parse_ibnetdiscover(gen.generate_ibnetdiscover(64))  # type: ignore[attr-defined]
    assert len(fabric.cas) == 64 * 8
    uplinks = fabric.ca_uplinks()
    assert len(uplinks) == 64 * 8 and {u.width for u in uplinks} == {4}
    rail3 = [u for u in uplinks if u.ca_description.endswith("mlx5_3")]
    assert {u.switch_description for u in rail3} == {
        "MF0;su1-leaf-r3:MQM9700/U1", "MF0;su2-leaf-r3:MQM9700/U1",
    }  # fmt: skip
