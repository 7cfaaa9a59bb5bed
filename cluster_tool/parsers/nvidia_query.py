"""`nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`: one typed row per GPU
for any field list, numbers as numbers and `[N/A]` / `[Not Supported]` as None."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from cluster_tool.parsers.base import ParseError, parser

__all__ = [
    "GPU_CLOCK_FIELDS",
    "GpuClock",
    "QueryResult",
    "QueryRow",
    "QueryValue",
    "parse_gpu_clocks",
    "parse_query_csv",
]

QueryValue = int | float | str | None

# A header column: the field name as passed to --query-gpu, then its unit when it has one
# ("memory.total [MiB]"); nvidia-smi keeps the unit in the header even with nounits.
_HEADER_COLUMN = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_.]*)(?: \[(?P<unit>[^\]]+)\])?$")
_INT = re.compile(r"^[+-]?\d{1,20}$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
# Units nvidia-smi appends to values without nounits, when no header says which.
_KNOWN_UNITS = ("MiB", "KiB", "GiB", "MHz", "W", "%", "C", "mV", "KB/s", "us", "ms", "s")
_NOT_AVAILABLE = frozenset({"N/A", "[N/A]", "Not Supported", "[Not Supported]"})
# Identifiers that look numeric but are not quantities: a serial keeps its leading zero,
# driver 418.67 is a version, not a float.
_TEXT_FIELDS = frozenset(
    {
        "name",
        "gpu_name",
        "serial",
        "gpu_serial",
        "uuid",
        "gpu_uuid",
        "pci.bus_id",
        "gpu_bus_id",
        "vbios_version",
        "driver_version",
        "board_part_number",
        "gpu_part_number",
    }
)
NO_DEVICES = "No devices were found"
# What nvidia-smi prints instead of CSV when it cannot answer; never a value.
_NVSMI_ERROR = re.compile(
    r'^(Field ".*" is not a valid field to query\.|NVIDIA-SMI has failed.*'
    r"|Failed to initialize NVML.*|Unable to determine the device handle.*"
    r"|Invalid combination of input arguments.*|No devices were found)$"
)
# --query-gpu aliases and the canonical name nvidia-smi prints in the header for them.
_CANONICAL = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
}


@dataclass(frozen=True)
class QueryRow:
    """One GPU's values keyed by the field name (without unit)."""

    values: dict[str, QueryValue]
    line_no: int

    def __getitem__(self, name: str) -> QueryValue:
        return self.values[name]

    def get(self, name: str, default: QueryValue = None) -> QueryValue:
        return self.values.get(name, default)


@dataclass(frozen=True)
class QueryResult:
    """The field list, the unit of each field when the header gave one, and the rows."""

    fields: tuple[str, ...]
    units: dict[str, str | None]
    header: bool
    rows: tuple[QueryRow, ...]


def _split_header(name: str) -> tuple[str, str | None]:
    match = _HEADER_COLUMN.match(name.strip())
    if match is None:
        raise ValueError(name)
    return match["name"], match["unit"]


def _typed(field: str, raw: str, unit: str | None) -> QueryValue:
    value = raw.strip()
    if value in _NOT_AVAILABLE or (value.startswith("[") and value.endswith("]")):
        # Every bracketed value is nvidia-smi saying it could not read the field
        # ([N/A], [Not Supported], [Unknown Error], [Insufficient Permissions], ...).
        return None
    if field in _TEXT_FIELDS or field.startswith("inforom."):
        return value
    if unit and value.endswith(" " + unit):
        value = value[: -len(unit) - 1]
    elif unit is None:
        for known in _KNOWN_UNITS:
            head = value[: -len(known) - 1]
            if value.endswith(" " + known) and _FLOAT.match(head):
                value = head
                break
    if _INT.match(value):
        return int(value)
    if _FLOAT.match(value):
        return float(value)
    return value


@parser(
    "nvidia-smi-query",
    "nvidia-smi --query-gpu=... --format=csv (with header): one typed row per GPU",
)
def parse_query_csv(text: str, fields: Sequence[str] | str | None = None) -> QueryResult:
    """Parse `--query-gpu` CSV. Without `fields`, the first line must be the header;
    with `fields` (the list passed to --query-gpu), a header is optional and must match."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    expected: list[tuple[str, str | None]] | None = None
    if fields is not None:
        names = fields.split(",") if isinstance(fields, str) else list(fields)
        try:
            expected = [_split_header(name) for name in names]
        except ValueError as exc:
            raise ParseError(f"field list: {exc.args[0]!r} is not a --query-gpu field") from exc
        if not expected:
            raise ParseError("field list is empty")
    if len(lines) == 1 and lines[0][1].strip() == NO_DEVICES:
        columns = expected or []
        return QueryResult(tuple(n for n, _ in columns), {n: u for n, u in columns}, False, ())
    if not lines:
        raise ParseError("expected nvidia-smi --query-gpu CSV; the input is empty")
    for line_no, line in lines:
        if _NVSMI_ERROR.match(line.strip()):
            raise ParseError("nvidia-smi reported an error, not CSV", line_no=line_no, line=line)

    header_cells = [cell.strip() for cell in lines[0][1].split(",")]
    header: list[tuple[str, str | None]] | None = None
    try:
        header = [_split_header(cell) for cell in header_cells]
    except ValueError:
        header = None
    if expected is None:
        if header is None:
            raise ParseError(
                "expected a CSV header naming the --query-gpu fields "
                "(or pass the field list for --format=csv,noheader)",
                line_no=lines[0][0],
                line=lines[0][1],
            )
        columns, has_header = header, True
    elif header is not None and [n for n, _ in header] == [
        _CANONICAL.get(n, n) for n, _ in expected
    ]:
        # Keys stay the names the caller asked for; units come from the header.
        columns = [(n, hu or eu) for (_, hu), (n, eu) in zip(header, expected, strict=True)]
        has_header = True
    elif header is not None and any("." in n or u for n, u in header):
        raise ParseError(
            f"the header names {', '.join(n for n, _ in header)} but the field list is "
            f"{', '.join(n for n, _ in expected)}",
            line_no=lines[0][0],
            line=lines[0][1],
        )
    else:
        columns, has_header = expected, False

    if len({n for n, _ in columns}) != len(columns):
        raise ParseError("a field is named twice in the header", line_no=lines[0][0])
    rows: list[QueryRow] = []
    for line_no, line in lines[1:] if has_header else lines:
        cells = line.split(",")
        if len(cells) != len(columns):
            raise ParseError(
                f"expected {len(columns)} comma-separated values, found {len(cells)}",
                line_no=line_no,
                line=line,
            )
        rows.append(
            QueryRow(
                values={
                    name: _typed(name, cell, unit)
                    for (name, unit), cell in zip(columns, cells, strict=True)
                },
                line_no=line_no,
            )
        )
    return QueryResult(
        fields=tuple(n for n, _ in columns),
        units={n: u for n, u in columns},
        header=has_header,
        rows=tuple(rows),
    )


# The watcher's per-cycle GPU read: cheap enough for every node every cycle, and a throttled
# GPU's SM clock is what makes its node the slow one of its job.
GPU_CLOCK_FIELDS = ("index", "clocks.sm", "utilization.gpu")


class GpuClock(NamedTuple):
    """One GPU's SM clock (MHz) and utilisation (%) now; None where nvidia-smi said N/A."""

    gpu: int  # nvidia-smi's GPU index
    sm_mhz: float | None
    util_pct: float | None


def parse_gpu_clocks(text: str) -> list[GpuClock]:
    """`nvidia-smi --query-gpu=index,clocks.sm,utilization.gpu --format=csv,noheader,nounits`
    (a header is allowed) -> one GpuClock per GPU; ParseError naming a row without an index."""
    # @parser types its wrapper as text -> records; it hands the field list through.
    result = parse_query_csv(text, GPU_CLOCK_FIELDS)  # type: ignore[call-arg]
    out = []
    for row in result.rows:
        index, clock, util = (row.get(f) for f in GPU_CLOCK_FIELDS)
        if not isinstance(index, int):
            raise ParseError("expected a GPU index", line_no=row.line_no)
        out.append(
            GpuClock(
                index,
                float(clock) if isinstance(clock, int | float) else None,
                float(util) if isinstance(util, int | float) else None,
            )
        )
    return out
