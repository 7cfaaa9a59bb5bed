"""ibstat, ibstat -p and ibstatus on real H100 captures: the CX-7 ports, Ethernet told apart."""

from __future__ import annotations

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers.ibstat import parse_ibstat, parse_ibstat_p, parse_ibstatus
from tests.conftest import FIXTURES, read_real_output

IB = FIXTURES / "parsers" / "ib"


def test_eight_cx7_ports_at_400_and_the_bluefield_ethernet_bond() -> None:
    cas = parse_ibstat(read_real_output("ibstat_h100_8xcx7_ndr_ib_all_active.txt"))
    assert [c.name for c in cas] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
        "mlx5_bond_0",
    ]  # fmt: skip
    ib = [c for c in cas if c.ports[0].is_infiniband]
    assert len(ib) == 8
    for ca in ib:
        port = ca.port(1)
        assert port is not None
        assert (ca.ca_type, port.rate_gbps, port.state, port.physical_state) == (
            "MT4129", 400.0, "Active", "LinkUp",
        )  # fmt: skip
        assert port.link_layer == "InfiniBand" and port.sm_lid == 1 and port.lmc == 0
    bond = cas[-1]
    assert bond.ca_type == "MT41692" and bond.firmware_version == "32.38.3056"
    assert bond.ports[0].link_layer == "Ethernet" and bond.ports[0].rate_gbps == 200.0
    assert not bond.ports[0].is_infiniband
    first = cas[0]
    assert first.node_guid == "0x58a2e10300a7820e" and first.system_image_guid == first.node_guid
    assert first.ports[0].base_lid == 128 and first.ports[0].capability_mask == 0xA751E848
    assert first.number_of_ports == 1 and first.hardware_version == "0"
    assert cas[7].ports[0].base_lid == 2015


def test_ib_ports_active_and_ethernet_ports_down_disabled() -> None:
    cas = parse_ibstat(read_real_output("ibstat_h100_ib_active_some_eth_down.txt"))
    assert len(cas) == 12
    by_layer: dict[str, list[str]] = {}
    for ca in cas:
        by_layer.setdefault(ca.ports[0].link_layer or "", []).append(ca.name)
    assert sorted(by_layer["InfiniBand"]) == sorted(
        ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"]
    )
    assert all(c.ports[0].is_active and c.ports[0].rate_gbps == 400 for c in cas
               if c.ports[0].is_infiniband)  # fmt: skip
    down = {c.name: c.ports[0] for c in cas if c.ports[0].state == "Down"}
    assert sorted(down) == ["mlx5_2", "mlx5_7", "mlx5_8"]
    assert {(p.physical_state, p.rate_gbps, p.link_layer) for p in down.values()} == {
        ("Disabled", 40.0, "Ethernet")
    }
    assert cas[0].firmware_version == "28.39.1002" and cas[0].ports[0].sm_lid == 334
    # Two functions of one dual-port CX-6 share a system image GUID.
    assert cas[4].system_image_guid == "0x946dae0300c2b690" != cas[4].node_guid


def test_roce_ports_down_polling_and_disabled() -> None:
    cas = parse_ibstat(read_real_output("ibstat_h100_roce_ports_down_polling_disabled.txt"))
    ports = {c.name: c.ports[0] for c in cas}
    assert all(p.link_layer == "Ethernet" for p in ports.values())
    assert (ports["mlx5_11"].state, ports["mlx5_11"].physical_state) == ("Down", "Polling")
    assert (ports["mlx5_5"].state, ports["mlx5_5"].physical_state) == ("Down", "Disabled")
    assert ports["mlx5_11"].rate_gbps == 40 and not ports["mlx5_11"].is_active
    assert ports["mlx5_1"].port_guid == "0x0000000000000000"
    assert sum(p.is_active for p in ports.values()) == 10


def test_ibstat_p_lists_port_guids() -> None:
    guids = parse_ibstat_p((IB / "ibstat_p_h100_8xcx7.txt").read_text())
    cas = parse_ibstat(read_real_output("ibstat_h100_8xcx7_ndr_ib_all_active.txt"))
    assert guids == [c.ports[0].port_guid for c in cas]
    assert guids[-1] == "0x201d97fffe0056cf"
    assert parse_ibstat_p("0x58A2E10300A7820E\n") == ["0x58a2e10300a7820e"]


def test_ibstatus_of_an_ndr200_port() -> None:
    text = read_real_output("ibnetdiscover_qm9700_ndr200_hostname_mlx5_redacted.txt")
    # The capture holds two excerpts; the second (after its own heading) is ibstatus.
    ibstatus = text.split("ibstatus on an NDR200 port ----\n", 1)[1]
    (port,) = parse_ibstatus(ibstatus)
    assert (port.device, port.port, port.base_lid, port.sm_lid) == ("mlx5_7", 1, 0x6C, 4)
    assert (port.state, port.physical_state) == ("ACTIVE", "LinkUp")
    assert (port.rate_gbps, port.width, port.speed) == (200.0, 2, "NDR")
    assert port.link_layer == "InfiniBand"
    assert port.default_gid == "fe80:0000:0000:0000:<redacted>"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("\tCA type: MT4129\n", 1),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tRate: 400\n", 2),  # no Physical state
        ("CA 'mlx5_0'\n\tNumber of ports: one\n", 2),
        (
            "CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n"
            "\t\tPhysical state: LinkUp\n\t\tRate: fast\n",
            5,
        ),
        ("CA 'mlx5_0'\nthis is not ibstat\n", 2),
    ],
)
def test_bad_ibstat_raises_parse_error_naming_the_line(text: str, where: int | None) -> None:
    with pytest.raises(ParseError) as err:
        parse_ibstat(text)
    assert err.value.line_no == where


def test_bad_ibstat_p_and_ibstatus() -> None:
    with pytest.raises(ParseError) as err:
        parse_ibstat_p("0x58a2e10300a7820e\nmlx5_0\n")
    assert err.value.line_no == 2
    with pytest.raises(ParseError):
        parse_ibstatus("\tstate: 4: ACTIVE\n")
