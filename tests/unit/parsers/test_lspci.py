"""`lspci -vvv` on a real capture (issue 20); figures read by hand from the file."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError, read
from cluster_tool.parsers.lspci import parse_lspci
from tests.unit.parsers.test_captures_as_collected import capture

CX7 = "lspci-vvv_cx7x4_gen5_x16_libkmod_warnings_command_line.txt"
# A real LnkSta of a ConnectX-6 in a gen 4 x16 slot that trained to gen 3 (a public note on a
# CX-6 OCP3 card behind an adapter, search-index text id 20528609102).
DOWNGRADED = "\t\tLnkSta:\tSpeed 8GT/s (downgraded), Width x16 (ok)"


def test_two_connectx7_functions_at_gen5_x16_after_the_loops_command_line() -> None:
    reading = read("lspci-vv", capture(CX7))
    (host,) = reading.hosts
    first, second = host.records
    assert [f.address for f in host.records] == ["0000:03:00.0", "0000:23:00.0"]
    assert (
        first.description == "Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]"
    )
    for function in (first, second):
        assert (function.cap_gen, function.cap_width) == (5, 16)  # LnkCap: 32GT/s, x16
        assert (function.gen, function.width) == (5, 16)  # LnkSta: 32GT/s (ok), x16 (ok)
        assert not function.speed_downgraded and not function.width_downgraded
    # The loop's command line is skipped before the first function; lspci's libkmod warning
    # after each function is noise, not an error.
    assert host.errors == () and host.lines_unread == 0
    assert host.skipped_lines is not None and host.skipped_lines.count == 1


def test_a_downgraded_link_is_read_as_lspci_marks_it() -> None:
    text = capture(CX7).replace("\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)", DOWNGRADED, 1)
    first, second = parse_lspci(text)
    assert (first.gen, first.width, first.speed_downgraded) == (3, 16, True)
    assert not first.width_downgraded and (second.gen, second.width) == (5, 16)


def test_an_unknown_transfer_rate_names_its_line() -> None:
    text = capture(CX7).replace("Speed 32GT/s (ok)", "Speed 48GT/s (ok)", 1)
    with pytest.raises(ParseError, match="unknown PCIe transfer rate") as caught:
        parse_lspci(text)
    assert caught.value.line_no == 24


def test_a_line_that_is_neither_a_function_nor_indented_is_an_error() -> None:
    text = capture(CX7).replace("lspci: Unable to load libkmod", "Segmentation fault; libkmod", 1)
    with pytest.raises(ParseError, match="expected a function line"):
        parse_lspci(text)
