"""mlx5 `Link up` / `Link down` lines from the kernel log: a real journal capture and the
dmesg time formats the Xid parser already reads."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError
from cluster_tool.parsers.link_events import parse_link_events
from tests.conftest import FIXTURES

REAL = FIXTURES / "parsers" / "real"


def _real(name: str) -> str:
    first, _, rest = (REAL / name).read_text(encoding="utf-8").partition("\n")
    assert first.startswith("# source: https://")
    return rest


def test_real_journal_repeated_link_up_after_prompt_line() -> None:
    # Hand-read from cubecos#733: four `Link up` of 0000:01:00.1 eth1 at 15:37:34, :39, :43 and
    # 15:38:19, journal lines 2, 4, 6 and 8 after the prompt line; the 8021q lines are not ours.
    events = parse_link_events(_real("journalctl_mlx5_link_up_repeated_eth1_prompt_line.txt"))
    assert [(e.pci, e.netdev, e.state) for e in events] == [("0000:01:00.1", "eth1", "up")] * 4
    assert [e.timestamp for e in events] == [
        "Mar 27 15:37:34",
        "Mar 27 15:37:39",
        "Mar 27 15:37:43",
        "Mar 27 15:38:19",
    ]
    assert {e.host for e in events} == {"cc1"} and [e.line_no for e in events] == [2, 4, 6, 8]


def test_dmesg_uptime_iso_and_human_stamps() -> None:
    text = (
        "[ 2929.428680] mlx5_core 0000:08:00.7 ens9f0v5: Link down\n"
        "[Sun Feb 23 16:24:18 2025] mlx5_core 0000:18:00.0 ibp24s0: Link up\n"
        "2025-02-23T16:24:18,123456+00:00 mlx5_core 0000:c0:00.0 ibp192s0: Link down\n"
        "[ 2930.0] mlx5_core 0000:08:00.7: firmware version: 28.39.1002\n"
    )
    down, up, iso = parse_link_events(text)
    assert (down.pci, down.netdev, down.state, down.uptime_s) == (
        "0000:08:00.7",
        "ens9f0v5",
        "down",
        pytest.approx(2929.42868),
    )
    assert (up.netdev, up.state, up.timestamp) == ("ibp24s0", "up", "Sun Feb 23 16:24:18 2025")
    assert (iso.pci, iso.state) == ("0000:c0:00.0", "down")


def test_half_recognised_line_is_an_error_naming_it() -> None:
    with pytest.raises(ParseError) as err:
        parse_link_events("[ 1.0] ok\n[ 2.0] mlx5_core 0000:18:00.0 ibp24s0: Link flapped\n")
    assert err.value.line_no == 2


def test_log_without_link_lines_is_empty() -> None:
    assert parse_link_events("[ 1.0] mlx5_core 0000:18:00.0: firmware version: 28.39\n") == []
