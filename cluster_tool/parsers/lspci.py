"""`lspci -vv` / `-vvv`: each PCI function's PCIe link, what it can do (`LnkCap`) against what
it trained to (`LnkSta`), so a GPU or HCA running narrower or slower than its slot is seen."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from cluster_tool.parsers.base import ParseError, noise_recorder, parser
from cluster_tool.parsers.pci import normalize_pci_bus_id

__all__ = ["PCIE_GENERATIONS", "PciFunction", "parse_lspci"]

# Transfer rate per lane (GT/s, as lspci prints it) -> PCIe generation.
PCIE_GENERATIONS: dict[str, int] = {
    "2.5": 1,
    "5": 2,
    "8": 3,
    "16": 4,
    "32": 5,
    "64": 6,
}

_HEADER = re.compile(
    r"^(?P<address>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>\S.*)$"
)
_LNKCAP = re.compile(
    r"^LnkCap:\s+.*?Speed (?P<speed>[\d.]+GT/s|unknown), Width x(?P<width>\d{1,20})"
)
_LNKSTA = re.compile(
    r"^LnkSta:\s+Speed (?P<speed>[\d.]+GT/s|unknown)(?: \((?P<speed_note>[^)]*)\))?,"
    r" Width x(?P<width>\d{1,20})(?: \((?P<width_note>[^)]*)\))?"
)
# lspci's own complaints on stderr, captured with 2>&1 (no libkmod in a container, ...).
_LSPCI_WARNING = re.compile(r"^lspci: ")


@dataclass(frozen=True)
class PciFunction:
    """One PCI function with its PCIe link; the link fields are None for a function that
    prints no Express capability (or whose link lspci cannot read without root)."""

    address: str  # 0000:03:00.0
    description: str  # 'Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]'
    line_no: int
    cap_gen: int | None = None
    cap_width: int | None = None
    gen: int | None = None  # what the link trained to (LnkSta)
    width: int | None = None
    speed_downgraded: bool = False  # lspci's own '(downgraded)' against LnkCap
    width_downgraded: bool = False


def _generation(speed: str, line_no: int, line: str) -> int | None:
    if speed == "unknown":
        return None
    gen = PCIE_GENERATIONS.get(speed.removesuffix("GT/s"))
    if gen is None:
        raise ParseError(f"unknown PCIe transfer rate {speed!r}", line_no=line_no, line=line)
    return gen


@parser(
    "lspci-vv",
    "lspci -vv: each PCI function's PCIe link capability (LnkCap) and trained link (LnkSta)",
    start=r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\s",
)
def parse_lspci(text: str) -> list[PciFunction]:
    """Parse `lspci -vv` or `-vvv` (all functions, or some with `-s`/`-d`)."""
    note = noise_recorder()
    functions: list[PciFunction] = []
    current: PciFunction | None = None

    def flush() -> None:
        if current is not None:
            functions.append(current)

    for line_no, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if not raw[0].isspace():
            header = _HEADER.match(raw.rstrip())
            if header is not None:
                flush()
                address = normalize_pci_bus_id(header["address"])
                if address is None:
                    raise ParseError("not a PCI address", line_no=line_no, line=raw)
                if any(f.address == address for f in functions):
                    raise ParseError(f"{address} printed twice", line_no=line_no, line=raw)
                current = PciFunction(address, header["desc"], line_no)
                continue
            if _LSPCI_WARNING.match(raw):
                if note is not None:
                    note(line_no)
                continue
            raise ParseError(
                "expected a function line such as '03:00.0 Ethernet controller: ...'",
                line_no=line_no,
                line=raw,
            )
        if current is None:
            raise ParseError("an indented line before any function line", line_no=line_no, line=raw)
        line = raw.strip()
        cap = _LNKCAP.match(line)
        if cap is not None:
            current = replace(
                current,
                cap_gen=_generation(cap["speed"], line_no, raw),
                cap_width=int(cap["width"]),
            )
            continue
        sta = _LNKSTA.match(line)
        if sta is not None:
            current = replace(
                current,
                gen=_generation(sta["speed"], line_no, raw),
                width=int(sta["width"]),
                speed_downgraded=sta["speed_note"] == "downgraded",
                width_downgraded=sta["width_note"] == "downgraded",
            )
            continue
        if line.startswith(("LnkCap:", "LnkSta:")):
            raise ParseError(
                "expected 'Speed <n>GT/s ..., Width x<n> ...'", line_no=line_no, line=raw
            )
        # Every other field of the function (capabilities, BARs, VPD) is not read here.
    flush()
    if not functions:
        raise ParseError("expected lspci function lines such as '03:00.0 ...'; found none")
    return functions
