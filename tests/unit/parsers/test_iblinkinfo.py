"""iblinkinfo: real output against ibsim (grouped and -l) and the NDR per-lane speeds."""

from __future__ import annotations

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers.iblinkinfo import parse_iblinkinfo
from tests.conftest import FIXTURES

IB = FIXTURES / "parsers" / "ib"


def test_ibsim_grouped_output() -> None:
    ports = parse_iblinkinfo((IB / "iblinkinfo_ibsim_hdr.txt").read_text())
    assert len(ports) == 7 + 3 * 40  # 7 cabled CA ports, 3 switches x 40 ports
    cas = [p for p in ports if p.node_kind == "ca"]
    assert len(cas) == 7
    slow = next(p for p in cas if p.node_description == "gpu003 mlx5_1")
    assert (slow.port_guid, slow.lid, slow.port, slow.width, slow.lane_speed_gbps) == (
        "0x000000000010000b", 9, 1, 4, 10.0,
    )  # fmt: skip
    assert slow.speed == "QDR" and slow.is_up
    assert (slow.peer_lid, slow.peer_port, slow.peer_description) == (
        4, 3, "MF0;su1-leaf-r1:MQM8700/U1",
    )  # fmt: skip
    assert slow.annotation == "Could be 12X"
    two_x = next(p for p in cas if p.node_description == "gpu002 mlx5_0")
    assert (two_x.width, two_x.lane_speed_gbps, two_x.rate_gbps) == (2, 53.125, 100.0)
    narrow = next(p for p in cas if p.node_description == "gpu004 mlx5_0")
    assert (narrow.width, narrow.lane_speed_gbps, narrow.speed) == (1, 53.125, "HDR")

    leaf = [p for p in ports if p.node_description == "MF0;su1-leaf-r1:MQM8700/U1"]
    assert len(leaf) == 40 and {p.node_guid for p in leaf} == {"0x0000000000200002"}
    down = [p for p in leaf if not p.is_up]
    assert len(down) == 35  # 3 hosts + 2 spine uplinks cabled
    assert {(p.state, p.physical_state) for p in down} == {("Down", "Polling")}
    assert all(p.peer_lid is None and p.peer_description is None for p in down)
    uplink = next(p for p in leaf if p.port == 33)
    assert (uplink.peer_lid, uplink.peer_port, uplink.peer_description) == (
        1, 2, "MF0;lab-spine-1:MQM8700/U1",
    )  # fmt: skip


def test_ibsim_line_mode_matches_grouped_mode() -> None:
    grouped = parse_iblinkinfo((IB / "iblinkinfo_ibsim_hdr.txt").read_text())
    lines = parse_iblinkinfo((IB / "iblinkinfo_l_ibsim_hdr.txt").read_text())

    def key(p: object) -> tuple:
        return tuple(
            getattr(p, f)
            for f in ("node_description", "lid", "port", "width", "lane_speed_gbps", "state",
                      "physical_state", "peer_lid", "peer_port", "peer_description")
        )  # fmt: skip

    assert [key(p) for p in lines] == [key(p) for p in grouped]
    assert all(p.node_kind is None for p in lines)
    assert lines[0].node_guid == "0x000000000010000b"
    assert lines[0].peer_guid == "0x0000000000200002"


def test_ndr_lane_speeds_states_and_annotations() -> None:
    ports = parse_iblinkinfo((IB / "iblinkinfo_ndr_quantum2_hand.txt").read_text())
    by = {(p.node_description, p.port): p for p in ports}
    ca = by[("gpu001 mlx5_0", 1)]
    assert (ca.width, ca.lane_speed_gbps, ca.speed, ca.annotation) == (4, 106.25, "NDR", "")
    ndr200 = by[("gpu001 mlx5_3", 1)]
    assert (ndr200.width, ndr200.speed, ndr200.annotation) == (2, "NDR", "Could be 4X")
    assert (ca.rate_gbps, ndr200.rate_gbps) == (400.0, 200.0)
    assert by[("MF0;su1-leaf-r0:MQM9700/U1", 3)].rate_gbps is None  # down: no width
    leaf = "MF0;su1-leaf-r0:MQM9700/U1"
    assert by[(leaf, 2)].speed == "HDR" and by[(leaf, 2)].annotation == "Could be 106.25 Gbps"
    assert by[(leaf, 5)].lane_speed_gbps == 25.78125 and by[(leaf, 5)].speed == "EDR"
    assert (by[(leaf, 3)].state, by[(leaf, 3)].physical_state) == ("Down", "Disabled")
    assert (by[(leaf, 4)].state, by[(leaf, 4)].physical_state) == ("Down", "Polling")
    assert by[(leaf, 34)].state == "Initialize" and not by[(leaf, 34)].is_up
    assert by[(leaf, 33)].peer_description == "MF0;spine01:MQM9700/U1"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("Switch: 0x01 leaf:\n  bogus\n", 2),
        ('   4    1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>   5    1[  ] "h" ( )\n', 1),
        ('CA: h:\n  0x1  9  1[  ] ==( 4X fast Gbps Active/  LinkUp)==>  4  3[  ] "s" ( )\n', 2),
    ],
)
def test_bad_iblinkinfo_raises_parse_error(text: str, where: int | None) -> None:
    with pytest.raises(ParseError) as err:
        parse_iblinkinfo(text)
    assert err.value.line_no == where
