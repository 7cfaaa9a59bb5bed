"""What a node has mounted and how full its local filesystems are: `/proc/self/mounts` (proc(5):
six space-separated fields, spaces and other specials in a path written as octal `\\040`) and
POSIX `df -P -k` (`Filesystem 1024-blocks Used Available Capacity Mounted on`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, parser

__all__ = ["DfRow", "Mount", "StorageReading", "parse_df", "parse_mounts", "parse_storage"]

# The line the storage probe prints between its two outputs.
DF_MARKER = "--- df -P -k -l"

_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # The kernel escapes space, tab, newline and backslash in /proc/mounts (seq_file mangle).
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class Mount:
    """One mounted filesystem: what, where, its type and options."""

    source: str
    target: str
    fstype: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class DfRow:
    """One filesystem as `df -P -k` shows it, in KiB."""

    filesystem: str
    size_kib: int
    used_kib: int
    available_kib: int
    target: str

    @property
    def free_pct(self) -> float:
        """Free as a share of what users can fill (used + available), as df's Capacity
        complements it: root-reserved blocks are no one's checkpoint space."""
        usable = self.used_kib + self.available_kib
        return 100.0 * self.available_kib / usable if usable else 0.0


@dataclass(frozen=True)
class StorageReading:
    """The storage probe: every mount, and the local filesystems' space."""

    mounts: tuple[Mount, ...]
    df: tuple[DfRow, ...]

    def mounted_at(self, path: str) -> Mount | None:
        """What is mounted at `path` now: the last mount there (a later one hides the earlier)."""
        found = None
        for m in self.mounts:
            if m.target == path:
                found = m
        return found

    def space_at(self, path: str) -> DfRow | None:
        return next((row for row in self.df if row.target == path), None)


@parser("proc-mounts", "/proc/self/mounts: every mounted filesystem", start=r"^\S+ /\S* \S+ \S+")
def parse_mounts(text: str) -> list[Mount]:
    """/proc/self/mounts lines -> mounts, in mount order; ParseError naming a line that does
    not have the six fields."""
    out: list[Mount] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6 or not fields[1].startswith("/"):
            raise ParseError(
                "expected SOURCE TARGET FSTYPE OPTIONS DUMP PASS", line_no=no, line=line
            )
        source, target, fstype, options = (_unescape(f) for f in fields[:4])
        out.append(Mount(source, target, fstype, tuple(options.split(","))))
    return out


_DF_HEADER = re.compile(r"^Filesystem\s+1024-blocks\s+Used\s+Available\s+Capacity\s+Mounted on$")
# The mount point is the rest of the line (it may hold spaces; df does not escape them). KiB
# counts are bounded to 20 ASCII digits: a longer run is not a size, and int() of one is slow.
_DF_ROW = re.compile(
    r"^(?P<fs>\S+)\s+(?P<size>[0-9]{1,20})\s+(?P<used>[0-9]{1,20})\s+(?P<avail>[0-9]{1,20})\s+"
    r"(?P<cap>[0-9]{1,3}%|-)\s+(?P<target>/.*)$"
)


@parser(
    "df-posix", "df -P -k: each filesystem's size, used and available KiB", start=r"^Filesystem"
)
def parse_df(text: str) -> list[DfRow]:
    """`df -P -k` -> one row per filesystem; ParseError naming a line that is neither the
    header nor a row."""
    out: list[DfRow] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or _DF_HEADER.match(line.strip()):
            continue
        m = _DF_ROW.match(line.rstrip())
        if m is None:
            raise ParseError(
                "expected FILESYSTEM 1024-BLOCKS USED AVAILABLE CAPACITY MOUNTPOINT",
                line_no=no,
                line=line,
            )
        out.append(DfRow(m["fs"], int(m["size"]), int(m["used"]), int(m["avail"]), m["target"]))
    return out


def parse_storage(text: str) -> StorageReading:
    """The storage probe's output: /proc/self/mounts, the marker line, then `df -P -k -l`."""
    lines = text.split("\n")
    if DF_MARKER not in lines:
        raise ParseError(f"no {DF_MARKER!r} line: the probe's df did not run")
    cut = lines.index(DF_MARKER)
    mounts = parse_mounts("\n".join(lines[:cut]))
    try:
        rows = parse_df("\n".join(lines[cut + 1 :]))
    except ParseError as exc:
        at = None if exc.line_no is None else exc.line_no + cut + 1
        raise ParseError(exc.message, line_no=at, line=exc.line) from None
    return StorageReading(tuple(mounts), tuple(rows))
