"""GPU Xid and NVSwitch SXid events from the kernel log (`dmesg` in its time formats,
`journalctl -k`, syslog), as records a health check can count by GPU and code."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cluster_tool.parsers.base import ParseError, noise_recorder, parser
from cluster_tool.parsers.pci import normalize_pci_bus_id

__all__ = ["XidEvent", "log_prefix", "parse_xids"]

# Any line carrying one of these is an Xid/SXid line and must parse in full; every other
# kernel line is not ours and is skipped.
_TRIGGER = re.compile(r"NVRM: Xid\b|nvidia-nvswitch\d*: SXid\b")
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): "
    r"(?P<code>\d{1,20})(?:, (?P<rest>.*))?$"
)
_SXID = re.compile(
    r"(?P<device>nvidia-nvswitch\d*): SXid "
    r"\((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): "
    r"(?P<code>\d{1,20})(?:, (?P<rest>.*))?$"
)
# R470+ drivers name the process: pid=1234, name=python3, ... ('<unknown>' when none).
_PROCESS = re.compile(
    r"^pid=(?P<pid>\d{1,20}|'<unknown>'|<unknown>)(?:, name=(?P<name>[^,]*))?(?:, (?P<msg>.*))?$"
)
_SXID_SEVERITY = re.compile(r"^(?P<severity>Fatal|Non-fatal|Nonfatal), (?P<msg>.*)$")
_SXID_LINK = re.compile(r"\bLink (\d{1,20})\b")
# Follow-up lines of one SXid: "Severity 1 Engine instance 60 ..." and "Data {0x...}".
_SXID_DETAIL = re.compile(r"^(Severity \d+ Engine instance|Data \{)")

_UPTIME = r"\[\s*(?P<uptime>\d+\.\d+)\]"
_HUMAN = r"\[(?P<human>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]"
_ISO = r"(?P<iso>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
_SYSLOG_TIME = (
    r"(?P<jts>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d+)?"  # short, short-precise
    r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"  # short-iso
    r"|[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?: [A-Z]{2,5})?"  # short-full
    r"|\[\s*\d+\.\d+\])"  # short-monotonic
)
_PREFIXES = [
    re.compile(p)
    for p in (
        r"^$",
        rf"^{_UPTIME} ?$",
        rf"^{_HUMAN} ?$",
        rf"^{_ISO} $",
        # dmesg -x: "kern  :warn  : [ 1234.5] "
        rf"^kern\s*:\s*[a-z]+\s*: (?:{_UPTIME} |{_HUMAN} |{_ISO} )?$",
        # journalctl -k / syslog: "<time> <host> kernel: [ 1234.5] "
        rf"^{_SYSLOG_TIME} (?P<host>\S+) kernel: (?:{_UPTIME} )?$",
    )
]


@dataclass(frozen=True)
class XidEvent:
    """One Xid (GPU) or SXid (NVSwitch) kernel line.

    `pci` is the bus id normalised to `0000:18:00.0` to join with nvidia-smi records.
    SXid events are printed as a headline (`Fatal`/`Non-fatal`, with the NVLink) and
    follow-up lines (`Severity ...`, `Data {...}`); those have `detail=True`."""

    kind: str  # "xid" or "sxid"
    code: int
    pci_bus_id: str
    pci: str | None
    device: str | None  # nvidia-nvswitchN for SXid
    pid: int | None
    process_name: str | None
    severity: str | None  # SXid: Fatal / Non-fatal
    link: int | None  # SXid: the NVSwitch port (NVLink) named
    detail: bool
    message: str
    timestamp: str | None  # wall clock as printed (dmesg -T, journal, syslog)
    uptime_s: float | None  # seconds since boot (dmesg default)
    host: str | None  # journal / syslog host field
    line_no: int


def log_prefix(
    prefix: str, line_no: int, line: str, *, before: str
) -> tuple[str | None, float | None, str | None]:
    """The time and host a kernel-log line starts with, in any of dmesg's, journalctl -k's or
    syslog's formats: (wall clock as printed, seconds since boot, host); `before` names what
    follows the prefix, for the error on a prefix none of them matches."""
    for pattern in _PREFIXES:
        match = pattern.match(prefix)
        if match is None:
            continue
        groups = match.groupdict()
        stamp = groups.get("human") or groups.get("iso") or groups.get("jts")
        if stamp is not None and stamp.startswith("["):
            # journalctl -o short-monotonic puts uptime where the wall clock goes
            return None, float(stamp.strip("[] ")), groups.get("host")
        uptime = groups.get("uptime")
        return stamp, float(uptime) if uptime else None, groups.get("host")
    raise ParseError(
        f"expected a dmesg, dmesg -T, journalctl -k or syslog prefix before {before}",
        line_no=line_no,
        line=line,
    )


def _events_of_hosts(results: Sequence[tuple[str | None, Any]]) -> list[XidEvent]:
    """A fleet sweep (`pdsh -w gpu[001-512] dmesg`): every host's events, each naming the
    host the collector named unless its syslog prefix already did."""
    return [
        event if event.host is not None or host is None else dataclasses.replace(event, host=host)
        for host, events in results
        for event in events
    ]


@parser(
    "xid",
    "GPU Xid / NVSwitch SXid events from dmesg, journalctl -k or syslog",
    merge=_events_of_hosts,
)
def parse_xids(text: str) -> list[XidEvent]:
    """Every Xid and SXid line of a kernel log, in log order; other lines are skipped."""
    events: list[XidEvent] = []
    note = noise_recorder()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        trigger = _TRIGGER.search(line)
        if trigger is None:
            if note is not None and line:
                note(line_no)
            continue
        xid = _XID.match(line, trigger.start())
        sxid = None if xid else _SXID.match(line, trigger.start())
        match = xid or sxid
        if match is None:
            raise ParseError(
                "expected 'NVRM: Xid (PCI:<bus>): <code>, ...' or "
                "'nvidia-nvswitchN: SXid (PCI:<bus>): <code>, ...'",
                line_no=line_no,
                line=raw,
            )
        timestamp, uptime, host = log_prefix(
            line[: trigger.start()], line_no, raw, before="the Xid"
        )
        rest = match["rest"] or ""
        pid = name = severity = None
        link = None
        detail = False
        message = rest
        if xid is not None:
            process = _PROCESS.match(rest)
            if process is not None:
                pid = int(process["pid"]) if process["pid"].isdigit() else None
                name = process["name"]
                if name in ("<unknown>", None):
                    name = None
                message = process["msg"] or ""
        else:
            sev = _SXID_SEVERITY.match(rest)
            if sev is not None:
                severity = "Non-fatal" if sev["severity"] != "Fatal" else "Fatal"
                message = sev["msg"]
                link_match = _SXID_LINK.search(message)
                link = int(link_match[1]) if link_match else None
            elif _SXID_DETAIL.match(rest):
                detail = True
        events.append(
            XidEvent(
                kind="xid" if xid is not None else "sxid",
                code=int(match["code"]),
                pci_bus_id=match["bus"],
                pci=normalize_pci_bus_id(match["bus"]),
                device=sxid["device"] if sxid is not None else None,
                pid=pid,
                process_name=name,
                severity=severity,
                link=link,
                detail=detail,
                message=message.strip(),
                timestamp=timestamp,
                uptime_s=uptime,
                host=host,
                line_no=line_no,
            )
        )
    return events
