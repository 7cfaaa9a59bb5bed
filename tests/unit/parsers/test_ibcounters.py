"""perfquery and ibqueryerrors: real output against ibsim, and the extended NDR-era forms."""

from __future__ import annotations

import pytest

from cluster_tool.errors import ParseError
from cluster_tool.parsers.ibcounters import parse_ibqueryerrors, parse_perfquery
from tests.conftest import FIXTURES

IB = FIXTURES / "parsers" / "ib"


def test_perfquery_basic_counters() -> None:
    (block,) = parse_perfquery((IB / "perfquery_ibsim.txt").read_text())
    assert (block.extended, block.lid, block.port, block.capability_mask) == (False, 1, 0, 0x1300)
    assert len(block.counters) == 21
    assert block.get("SymbolErrorCounter") == 0 and block.get("PortXmitWait") == 0
    assert block.get("CounterSelect") == 0 and block.errors == {}


def test_perfquery_switch_port_with_errors() -> None:
    (block,) = parse_perfquery((IB / "perfquery_ibsim_switch_port_errors.txt").read_text())
    assert (block.lid, block.port) == (3, 3)
    assert block.errors == {"SymbolErrorCounter": 1234, "LinkDownedCounter": 7}
    assert block.get("PortXmitData") == 1728 and block.get("PortRcvPkts") == 24


def test_perfquery_extended() -> None:
    (block,) = parse_perfquery((IB / "perfquery_x_ibsim_switch_port.txt").read_text())
    assert block.extended and (block.lid, block.port, block.capability_mask) == (3, 3, 0x1300)
    assert block.get("PortXmitData") == 1728
    assert block.get("PortMulticastRcvPkts") == 0
    assert "SymbolErrorCounter" not in block.counters


def test_perfquery_several_blocks() -> None:
    one = (IB / "perfquery_ibsim.txt").read_text()
    ext = (IB / "perfquery_x_ibsim_switch_port.txt").read_text()
    blocks = parse_perfquery(one + ext)
    assert [(b.extended, b.port) for b in blocks] == [(False, 0), (True, 3)]


def test_ibqueryerrors_from_ibsim() -> None:
    report = parse_ibqueryerrors((IB / "ibqueryerrors_ibsim.txt").read_text())
    assert report.complete
    assert (report.nodes_checked, report.bad_nodes, report.ports_checked, report.bad_ports) == (
        10, 2, 127, 2,
    )  # fmt: skip
    assert report.thresholds == "" and report.suppressed == ()
    assert [(p.node_description, p.port, p.counters) for p in report.error_ports] == [
        ("gpu002 mlx5_1", 1, {"PortRcvErrors": 42}),
        ("MF0;su1-leaf-r0:MQM8700/U1", 3, {"SymbolErrorCounter": 1234, "LinkDownedCounter": 7}),
    ]
    leaf = report.for_node("MF0;su1-leaf-r0:MQM8700/U1")
    assert leaf[0].port is None and leaf[0].node_guid == "0x0000000000200001"
    assert report.ports[0].node_guid is None and report.ports[0].guid == "0x0000000000100007"


def test_ibqueryerrors_extended_link_info_thresholds() -> None:
    report = parse_ibqueryerrors((IB / "ibqueryerrors_ndr_hand.txt").read_text())
    assert (report.bad_nodes, report.bad_ports, report.pma_query_failures) == (2, 3, 1)
    assert report.thresholds == "SymbolErrorCounter=10 LinkDownedCounter=2"
    assert report.suppressed == ("PortRcvSwitchRelayErrors",)
    port2 = report.error_ports[0]
    assert port2.port == 2 and port2.counters == {
        "SymbolErrorCounter": 1832,
        "LinkDownedCounter": 3,
    }
    assert port2.link_info is not None and '"gpu002 mlx5_0"' in port2.link_info
    assert report.error_ports[1].counters == {"PortXmitWait": 4404542}
    assert [p.port for p in report.error_ports] == [2, 33, 1]


def test_clean_fabric_is_a_summary_only() -> None:
    report = parse_ibqueryerrors(
        "\n## Summary: 10 nodes checked, 0 bad nodes found\n"
        "##          127 ports checked, 0 ports have errors beyond threshold\n"
        "## Thresholds: \n## Suppressed:\n"
    )
    assert report.ports == () and report.bad_ports == 0 and report.complete


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("PortSelect:......................0\n", 1),
        ("# Port counters: Lid 1 port 0 (CapMask: 0x1300)\nSymbolErrorCounter:....many\n", 2),
        ("# Port counters: Lid 1 port 0 (CapMask: 0x1300)\nnot a counter\n", 2),
    ],
)
def test_bad_perfquery(text: str, where: int | None) -> None:
    with pytest.raises(ParseError) as err:
        parse_perfquery(text)
    assert err.value.line_no == where


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("   GUID 0x1 port 1: [PortRcvErrors == 42]\n", 1),
        ('Errors for "h"\n   GUID 0x1 port 1: [PortRcvErrors == lots]\n', 2),
        ('Errors for "h"\n   GUID 0x1 port 1: [PortRcvErrors == 4] garbage\n', 2),
        ("## Summary: ten nodes\n", 1),
        ("what is this\n", 1),
    ],
)
def test_bad_ibqueryerrors(text: str, where: int | None) -> None:
    with pytest.raises(ParseError) as err:
        parse_ibqueryerrors(text)
    assert err.value.line_no == where
