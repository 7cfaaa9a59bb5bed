"""`nvidia-smi nvlink -s`: per GPU, the speed of every NVLink and which links are down."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, parser

__all__ = ["NvlinkGpu", "NvlinkLink", "parse_nvlink_status"]

_GPU_LINE = re.compile(r"^GPU (?P<index>\d{1,20}): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)$")
_LINK_LINE = re.compile(
    r"^Link (?P<link>\d{1,20}): (?:(?P<speed>\d+(?:\.\d+)?) GB/s|(?P<inactive><inactive>))$"
)
# Printed under a GPU instead of link lines when the GPU has no active link at all.
_ALL_INACTIVE = re.compile(
    r"^NVML: Unable to retrieve NVLink information as all links are inActive$"
)


@dataclass(frozen=True)
class NvlinkLink:
    """One NVLink: its per-direction speed in GB/s (bytes, as nvidia-smi prints it), None when
    `<inactive>`. Key names say their unit: `_GBps` bytes, `_gbps` bits (docs/units.md)."""

    link: int
    speed_GBps: float | None  # the unit's own capitals: GB/s, not Gb/s
    active: bool

    @property
    def speed_gbps(self) -> float | None:
        """Deprecated name of `speed_GBps` (it held GB/s, not Gb/s); kept for old callers."""
        return self.speed_GBps


@dataclass(frozen=True)
class NvlinkGpu:
    """One GPU's links in link order; `all_inactive` when NVML reported none at all."""

    index: int
    name: str
    uuid: str
    links: tuple[NvlinkLink, ...]
    all_inactive: bool = False
    active_links: int = 0
    inactive_links: int = 0


@parser(
    "nvidia-smi-nvlink",
    "nvidia-smi nvlink -s: per-GPU NVLink speeds and inactive links",
    start=r"^GPU \d+: ",
)
def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """Parse `nvidia-smi nvlink -s` (all GPUs or one with `-i`)."""
    gpus: list[NvlinkGpu] = []
    current: dict[str, object] | None = None
    links: list[NvlinkLink] = []
    all_inactive = False

    def flush() -> None:
        if current is None:
            return
        active = sum(1 for link in links if link.active)
        gpus.append(
            NvlinkGpu(
                index=int(str(current["index"])),
                name=str(current["name"]),
                uuid=str(current["uuid"]),
                links=tuple(links),
                all_inactive=all_inactive,
                active_links=active,
                inactive_links=len(links) - active,
            )
        )

    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        gpu = _GPU_LINE.match(line)
        if gpu is not None:
            flush()
            if any(g.index == int(gpu["index"]) for g in gpus):
                raise ParseError(f"GPU {gpu['index']} printed twice", line_no=line_no, line=raw)
            current = {"index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"]}
            links = []
            all_inactive = False
            continue
        if current is None:
            raise ParseError(
                "expected 'GPU <n>: <name> (UUID: <uuid>)' before link lines",
                line_no=line_no,
                line=raw,
            )
        if _ALL_INACTIVE.match(line):
            if links:
                raise ParseError(
                    "'all links are inActive' after link lines", line_no=line_no, line=raw
                )
            all_inactive = True
            continue
        link = _LINK_LINE.match(line)
        if link is None or all_inactive:
            raise ParseError(
                "expected 'Link <n>: <speed> GB/s' or 'Link <n>: <inactive>'",
                line_no=line_no,
                line=raw,
            )
        number = int(link["link"])
        if number != len(links):
            raise ParseError(
                f"expected Link {len(links)} next, found Link {number}",
                line_no=line_no,
                line=raw,
            )
        speed = float(link["speed"]) if link["speed"] else None
        links.append(NvlinkLink(number, speed, active=speed is not None))
    flush()
    if not gpus:
        raise ParseError("expected 'GPU <n>: <name> (UUID: <uuid>)' lines; found none")
    return gpus
