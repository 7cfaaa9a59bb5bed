"""`nvidia-smi nvlink -e`: per GPU and NVLink, the error counters the driver keeps (replay,
recovery, CRC) since it loaded or since `nvidia-smi nvlink -re` reset them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, parser

__all__ = ["NvlinkErrorGpu", "NvlinkErrors", "parse_nvlink_errors"]

# Newer drivers print the GPU without its UUID (`GPU 0: NVIDIA GB300`).
_GPU_LINE = re.compile(r"^GPU (?P<index>\d{1,20}): (?P<name>.+?)(?: \(UUID: (?P<uuid>[^)]+)\))?$")
_COUNTER_LINE = re.compile(
    r"^Link (?P<link>\d{1,20}): (?P<name>[A-Za-z][A-Za-z -]*?): (?P<value>\S+)$"
)
_ALL_INACTIVE = re.compile(
    r"^NVML: Unable to retrieve NVLink information as all links are inActive$"
)


@dataclass(frozen=True)
class NvlinkErrors:
    """One NVLink's counters by the name nvidia-smi prints (`Replay Errors`, `Recovery
    Errors`, `CRC Errors`, ...); None where it printed N/A."""

    link: int
    counters: dict[str, int | None]

    def _sum(self, word: str) -> int:
        return sum(v or 0 for k, v in self.counters.items() if word in k.lower())

    @property
    def replay(self) -> int:
        return self._sum("replay")

    @property
    def recovery(self) -> int:
        return self._sum("recovery")

    @property
    def crc(self) -> int:
        return self._sum("crc")


@dataclass(frozen=True)
class NvlinkErrorGpu:
    """One GPU's links in the order printed; `all_inactive` when NVML reported none."""

    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkErrors, ...]
    all_inactive: bool = False


@parser(
    "nvidia-smi-nvlink-errors",
    "nvidia-smi nvlink -e: per-GPU, per-link NVLink replay, recovery and CRC error counters",
    start=r"^GPU \d+: ",
)
def parse_nvlink_errors(text: str) -> list[NvlinkErrorGpu]:
    """Parse `nvidia-smi nvlink -e` (all GPUs, or one with `-i`)."""
    gpus: list[NvlinkErrorGpu] = []
    head: tuple[int, str, str | None] | None = None
    links: dict[int, dict[str, int | None]] = {}
    all_inactive = False

    def flush() -> None:
        if head is not None:
            index, name, uuid = head
            gpus.append(
                NvlinkErrorGpu(
                    index=index,
                    name=name,
                    uuid=uuid,
                    links=tuple(NvlinkErrors(n, c) for n, c in links.items()),
                    all_inactive=all_inactive,
                )
            )

    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        gpu = _GPU_LINE.match(line)
        if gpu is not None:
            flush()
            index = int(gpu["index"])
            if any(g.index == index for g in gpus):
                raise ParseError(f"GPU {index} printed twice", line_no=line_no, line=raw)
            head, links, all_inactive = (index, gpu["name"], gpu["uuid"]), {}, False
            continue
        if head is None:
            raise ParseError(
                "expected 'GPU <n>: <name> (UUID: <uuid>)' before link lines",
                line_no=line_no,
                line=raw,
            )
        if _ALL_INACTIVE.match(line) and not links:
            all_inactive = True
            continue
        counter = _COUNTER_LINE.match(line)
        if counter is None or all_inactive:
            raise ParseError(
                "expected 'Link <n>: <Counter> Errors: <count>'", line_no=line_no, line=raw
            )
        link = int(counter["link"])
        if links and link not in links and link < max(links):
            raise ParseError(
                f"Link {link} after Link {max(links)}: links out of order",
                line_no=line_no,
                line=raw,
            )
        value = counter["value"]
        if value != "N/A" and not (value.isascii() and value.isdigit() and len(value) <= 20):
            raise ParseError(
                f"{counter['name']} is not a count: {value!r}", line_no=line_no, line=raw
            )
        links.setdefault(link, {})[counter["name"]] = None if value == "N/A" else int(value)
    flush()
    if not gpus:
        raise ParseError("expected 'GPU <n>: <name> (UUID: <uuid>)' lines; found none")
    return gpus
