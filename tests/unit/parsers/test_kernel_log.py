"""Xid / SXid lines from dmesg (every time format), journalctl -k and syslog."""

from __future__ import annotations

import pytest

from cluster_tool.parsers import ParseError
from cluster_tool.parsers.kernel_log import parse_xids
from tests.unit.parsers._nvidia import fixture


def test_real_xid79_and_sxid20034() -> None:
    events = parse_xids(fixture("dmesg_xid79_sxid20034_hgx.txt"))
    xid = events[0]
    assert (xid.kind, xid.code, xid.pci_bus_id, xid.pci) == (
        "xid",
        79,
        "0000:91:00",
        "0000:91:00.0",
    )
    assert xid.pid is None and xid.process_name is None
    assert xid.message == "GPU has fallen off the bus."
    assert xid.uptime_s == pytest.approx(6781741.548779)
    assert xid.line_no == 3
    sxids = [e for e in events if e.kind == "sxid"]
    assert len(sxids) == 8 and {e.code for e in sxids} == {20034}
    headlines = [(e.device, e.link, e.severity) for e in sxids if not e.detail]
    assert headlines == [
        ("nvidia-nvswitch1", 48, "Fatal"),
        ("nvidia-nvswitch0", 63, "Fatal"),
        ("nvidia-nvswitch2", 37, "Fatal"),
        ("nvidia-nvswitch0", 62, "Fatal"),
    ]
    details = [e for e in sxids if e.detail]
    assert len(details) == 4 and details[1].message.startswith("Data {0x10000000")
    assert sxids[0].pci == "0000:06:00.0"
    # The other NVRM lines about the same GPU are not Xids.
    assert len(events) == 9


def test_every_timestamp_style() -> None:
    events = parse_xids(fixture("kernel_log_xid_variants_hand_built.txt"))
    got = [
        (e.kind, e.code, e.pci, e.pid, e.process_name, e.timestamp, e.uptime_s, e.host)
        for e in events
    ]
    assert got == [
        ("xid", 79, "0000:18:00.0", 1234, None, None, None, None),
        ("xid", 31, "0000:3b:00.0", 2718, "python3", None, pytest.approx(1234.56789), None),
        ("xid", 48, "0000:4c:00.0", 9, "kworker/u256:3", "Tue Jul 30 10:11:12 2024", None, None),
        ("xid", 63, "0000:4c:00.0", None, None, "2024-07-30T10:11:13,512345+00:00", None, None),
        (
            "xid",
            94,
            "0000:5d:00.0",
            31337,
            "pt_main_thread",
            None,
            pytest.approx(1300.000001),
            None,
        ),
        ("xid", 119, "0000:9b:00.0", 4411, "nvidia-smi", "Jul 30 10:12:01", None, "gpu001"),
        ("xid", 119, "0000:9b:00.0", 4411, "nvidia-smi", "Jul 30 10:12:02.118233", None, "gpu001"),
        ("sxid", 12028, "0000:05:00.0", None, None, "2024-07-30T10:12:03+0000", None, "gpu001"),
        ("sxid", 12028, "0000:05:00.0", None, None, None, pytest.approx(1311.25), "gpu001"),
        (
            "xid",
            13,
            "0000:bb:00.0",
            5120,
            "python",
            "Jul 30 10:12:04",
            pytest.approx(1312.0),
            "gpu001",
        ),
    ]
    assert events[1].message.startswith("Ch 0000000a, intr 00000000. MMU Fault")
    assert events[3].message.startswith("Row Remapper: New row")
    assert (events[7].severity, events[7].link, events[7].detail) == ("Non-fatal", 32, False)
    assert events[8].detail is True


def test_a_log_without_xids_is_empty() -> None:
    assert parse_xids("[    1.0] usb 1-1: new high-speed USB device\n\x00\x01garbage\n") == []


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:18:00): seventy-nine, GPU has fallen off the bus.",
        "NVRM: Xid (somewhere): 79, GPU has fallen off the bus.",
        "<<garbage>> NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0) 12028 Non-fatal",
    ],
)
def test_malformed_xid_line_raises_parse_error(line: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_xids(f"[    1.0] ok\n{line}\n")
    assert err.value.line_no == 2
