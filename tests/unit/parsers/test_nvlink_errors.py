"""`nvidia-smi nvlink -e` on real captures (issue 20); figures read by hand from the files."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError, read
from cluster_tool.parsers.nvlink_errors import parse_nvlink_errors
from tests.unit.parsers.test_captures_as_collected import capture, pdsh

H100_ELIDED = "nvidia-smi_nvlink-e_h100_elided_links_prompt_line.txt"
GB300 = "nvidia-smi_nvlink-e_gb300_no_uuid_command_line.txt"


def test_h100_links_are_read_up_to_the_authors_elision_which_is_not_guessed() -> None:
    # stas00/ml-engineering: links 0 and 1, then '[...]' where the author cut links 2-16.
    reading = read("nvidia-smi-nvlink-errors", capture(H100_ELIDED))
    (host,) = reading.hosts
    (gpu,) = host.records
    assert (gpu.index, gpu.name) == (0, "NVIDIA H100 80GB HBM3")
    assert gpu.uuid == "GPU-abcdefab-cdef-abdc-abcd-abababababab"
    assert [link.link for link in gpu.links] == [0, 1]
    for link in gpu.links:
        assert link.counters == {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}
        assert (link.replay, link.recovery, link.crc) == (0, 0, 0)
    (error,) = host.errors
    assert error.line_no == 11 and error.line is not None and error.line.strip() == "[...]"
    with pytest.raises(ParseError) as caught:
        parse_nvlink_errors(capture(H100_ELIDED))
    assert caught.value.line_no == 11


def test_h100_links_around_a_gap_are_read_in_order() -> None:
    text = capture(H100_ELIDED).replace("\n         [...]\n", "\n")
    (gpu,) = parse_nvlink_errors(text)
    assert [link.link for link in gpu.links] == [0, 1, 17]
    assert gpu.links[-1].counters["CRC Errors"] == 0


def test_gb300_without_uuid_after_its_command_line() -> None:
    (gpu,) = parse_nvlink_errors(capture(GB300))
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA GB300", None)
    (link,) = gpu.links
    assert link.link == 0 and (link.replay, link.recovery, link.crc) == (0, 0, 0)
    assert read("nvidia-smi-nvlink-errors", capture(GB300)).hosts[0].lines_unread == 0


def test_a_pdsh_sweep_reads_each_host() -> None:
    text = capture(GB300).split("\n", 1)[1]  # without the command line, as pdsh runs it
    reading = read("nvidia-smi-nvlink-errors", pdsh({"gpu001": text, "gpu002": text}))
    assert [(h.host, h.records[0].name) for h in reading.hosts] == [
        ("gpu001", "NVIDIA GB300"),
        ("gpu002", "NVIDIA GB300"),
    ]


def test_a_count_that_is_not_a_number_names_its_line() -> None:
    text = capture(GB300).replace("CRC Errors: 0", "CRC Errors: many")
    with pytest.raises(ParseError, match="CRC Errors is not a count") as caught:
        parse_nvlink_errors(text)
    assert caught.value.line_no == 5
