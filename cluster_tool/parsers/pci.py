"""PCI bus ids as the NVIDIA tools print them, brought to one form so records from
different tools (nvidia-smi, kernel log, dcgmi) can be joined on the same GPU."""

from __future__ import annotations

import re

__all__ = ["normalize_pci_bus_id"]

# nvidia-smi -q prints 00000000:19:00.0 (32-bit domain); the kernel's NVRM Xid lines
# print PCI:0000:18:00 (no function); lspci and NVSwitch SXid lines print 0000:05:00.0.
_BUS_ID = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):"
    r"(?P<device>[0-9a-fA-F]{2})(?:\.(?P<function>[0-7]))?$"
)


def normalize_pci_bus_id(text: str) -> str | None:
    """`0000:19:00.0` (4-digit domain, lower case, function 0 when absent), or None if
    `text` is not a PCI bus id."""
    match = _BUS_ID.match(text.strip())
    if match is None:
        return None
    domain = int(match["domain"] or "0", 16)
    if domain > 0xFFFF:
        return None
    function = match["function"] or "0"
    return f"{domain:04x}:{match['bus'].lower()}:{match['device'].lower()}.{function}"
