"""nccl-tests output (`all_reduce_perf` & co.): the result table, the footer, ranks and failures.

A run that failed or died before its footer is data (`complete` false, `errors` filled), not a
parse error. Columns are read from the table's own header line, so old (`bytes N op ... res`),
current (`size count type redop root ... #wrong`) and extended headers all map by name.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from cluster_tool.errors import ParseError
from cluster_tool.parsers.base import noise_recorder, parser

__all__ = [
    "NcclTestsHeader",
    "NcclTestsRank",
    "NcclTestsRow",
    "NcclTestsRun",
    "NcclTestsSide",
    "busbw_factor",
    "parse_nccl_tests",
]


@dataclass(frozen=True)
class NcclTestsSide:
    """One half of a row: the out-of-place or the in-place measurement."""

    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # `#wrong` (mismatched elements); None where printed N/A or not counted
    error: float | None = None  # old nccl-tests print a max error (`error`/`res`) instead


@dataclass(frozen=True)
class NcclTestsRow:
    """One message size of the result table."""

    size: int  # bytes
    count: int  # elements
    type: str
    redop: str | None  # sum, prod, ...; "none" for gather/broadcast; None when not printed
    root: int | None  # -1 where no root applies; None when the column is not printed
    out_of_place: NcclTestsSide | None
    in_place: NcclTestsSide | None
    line_no: int


@dataclass(frozen=True)
class NcclTestsRank:
    """One `#  Rank  3 Group  0 Pid 29265 on HOST device  3 [0000:5d:00] NVIDIA H100 ...` line."""

    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str
    gpu: str


@dataclass(frozen=True)
class NcclTestsHeader:
    """The first `# nThread 1 nGpus 1 minBytes 8 ...` line; fields missing in older versions are
    None, and fields this parser has no name for (side_work, direction, ...) land in `extra`."""

    threads: int | None
    gpus_per_thread: int | None
    min_bytes: int | None
    max_bytes: int | None
    step: str | None
    warmup_iters: int | None
    iters: int | None
    agg_iters: int | None
    validation: int | None
    graph: int | None
    extra: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class NcclTestsRun:
    """Everything one nccl-tests run printed."""

    collective: str | None  # all_reduce, all_gather, ... (from the binary name or inferred)
    ranks: tuple[NcclTestsRank, ...]  # from the `# Using devices` list; empty when elided
    rows: tuple[NcclTestsRow, ...]
    avg_busbw: float | None  # `# Avg bus bandwidth : 139.56` (GB/s)
    complete: bool  # the footer (`# Avg bus bandwidth`) was printed
    errors: tuple[
        str, ...
    ]  # `Test NCCL failure ...`, `Test CUDA failure ...`, ` .. pid: Test failure`
    out_of_bounds: int | None  # `# Out of bounds values : 0 OK`
    header: NcclTestsHeader | None
    nccl_version: str | None  # `NCCL version 2.26.2+cuda12.8` (or `# NCCL Tests compiled with`)
    reduced_max_bytes: int | None  # `# Reducing maxBytes to N due to memory limitation`
    # len(ranks), or what busbw/algbw implies when the device list was elided; None if unknown.
    rank_count: int | None = None
    # nccl-tests >= 2.14: `# nccl-tests version 2.17.9 nccl-headers=22902 nccl-library=22902`;
    # the library's code also gives `nccl_version` (22902 -> 2.29.2) when NCCL printed none.
    tests_version: str | None = None
    nccl_headers_version: str | None = None

    @property
    def max_busbw(self) -> float | None:
        """The best out-of-place busbw of any row (the figure people quote)."""
        values = [r.out_of_place.busbw for r in self.rows if r.out_of_place is not None]
        return max(values) if values else None

    @property
    def wrong_total(self) -> int:
        """Mismatched elements over every row and both halves (N/A counts as 0)."""
        return sum(
            side.wrong or 0 for r in self.rows for side in (r.out_of_place, r.in_place) if side
        )

    def inferred_rank_count(self) -> int | None:
        """Ranks as the table implies them when the device list was not printed: busbw/algbw
        is 2(n-1)/n for all_reduce and (n-1)/n for all_gather, reduce_scatter and alltoall.
        Uses the largest row, where the rounding of the printed figures matters least."""
        if self.ranks:
            return len(self.ranks)
        kind = busbw_factor_kind(self.collective)
        if kind is None:
            return None
        for row in sorted(self.rows, key=lambda r: r.size, reverse=True):
            side = row.out_of_place or row.in_place
            if side is None or side.algbw <= 0 or side.busbw <= 0:
                continue
            ratio = side.busbw / side.algbw / kind  # (n-1)/n
            if ratio >= 1.0:
                return None
            return round(1.0 / (1.0 - ratio))
        return None


def busbw_factor_kind(collective: str | None) -> float | None:
    """The k in busbw = algbw * k * (n-1)/n for collectives whose factor depends on n."""
    if collective == "all_reduce":
        return 2.0
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return 1.0
    return None


def busbw_factor(collective: str, ranks: int) -> float:
    """busbw/algbw for a collective over `ranks` ranks (nccl-tests' PERFORMANCE.md)."""
    k = busbw_factor_kind(collective)
    return 1.0 if k is None else k * (ranks - 1) / ranks


_BINARY = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|scatter|gather|"
    r"hypercube)_perf(?:_mpi)?\b"
)
_COLLECTIVE_LINE = re.compile(r"^#\s*(?:Collective test starting|Running):?\s*(\w+?)(?:_perf)?\s*$")
_SETTINGS = re.compile(r"^#?\s*nThread\s")
# The GPU name is stripped in code: `\s*(.*?)\s*$` backtracks quadratically on a long blank run.
_RANK = re.compile(
    r"^#\s++Rank\s++(\d{1,20})(?:\s++Group\s++(\d{1,20}))?(?:\s++Pid\s++(\d{1,20}))?"
    r"\s++on\s++(\S++)\s++device\s++(\d{1,20})\s++\[([^\]]*+)\](.*)$"
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d{1,20})\b")
_REDUCING = re.compile(r"^#?\s*Reducing maxBytes to (\d{1,20})\b")
_NCCL_VERSION = re.compile(r"^(?:#\s*)?(?:NCCL version|NCCL Tests compiled with NCCL)\s+(\S+)")
# `host: Test NCCL failure common.cu:1204 '...'`, ` .. host pid 7: Test failure common.cu:915`,
# and the oldest `NCCL failure all_reduce.cu:95 '...'`: always a source file:line after.
_FAILURE = re.compile(r"\b(?:Test (?:NCCL |CUDA )?failure|NCCL failure|CUDA failure)\s+\S+:\d+")
_DATA_ROW = re.compile(r"^\s*\d+\s+\d+\s+\S+")
_TESTS_VERSION = re.compile(
    r"^#\s*nccl-tests version\s+(\S+)(?:\s+\([^)]*\))?"
    r"(?:\s+nccl-headers=(\d{1,9}))?(?:\s+nccl-library=(\d{1,9}))?"
)
# A line that starts with a message size and carries several more figures is a result row
# whatever else is on it: it is read or it is an error, never skipped as chatter.
_NEAR_ROW = re.compile(r"^\s*\d{1,20}\s")
_FIGURE = re.compile(r"^(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|N/A|-1)$")

_SIZE_NAMES = ("size", "bytes")
_COUNT_NAMES = ("count", "n", "elements")
_TYPE_NAMES = ("type",)
_REDOP_NAMES = ("redop", "op")
_ROOT_NAMES = ("root",)
_TIME_NAMES = ("time",)
_WRONG_NAMES = ("#wrong", "wrong")
_ERROR_NAMES = ("error", "res")


@dataclass(frozen=True)
class _Layout:
    """Where each field of a data row sits, from the column header line."""

    width: int
    size: int
    count: int
    type: int
    redop: int | None
    root: int | None
    # per side: (time, algbw, busbw, wrong-or-None, error-or-None)
    sides: tuple[tuple[int, int, int, int | None, int | None], ...]


def _layout(tokens: list[str], line_no: int, line: str) -> _Layout:
    names = [t.lower() for t in tokens]

    def find(candidates: tuple[str, ...], start: int = 0, stop: int | None = None) -> int | None:
        for i in range(start, len(names) if stop is None else stop):
            if names[i] in candidates:
                return i
        return None

    size, count, type_ = find(_SIZE_NAMES), find(_COUNT_NAMES), find(_TYPE_NAMES)
    if size is None or count is None or type_ is None:
        raise ParseError("column header lacks size, count or type", line_no=line_no, line=line)
    times = [i for i, n in enumerate(names) if n in _TIME_NAMES]
    if not times:
        raise ParseError("column header has no time column", line_no=line_no, line=line)
    sides = []
    for k, t in enumerate(times[:2]):
        end = times[k + 1] if k + 1 < len(times) else len(names)
        algbw, busbw = find(("algbw",), t, end), find(("busbw",), t, end)
        if algbw is None or busbw is None:
            raise ParseError("column header lacks algbw/busbw", line_no=line_no, line=line)
        sides.append((t, algbw, busbw, find(_WRONG_NAMES, t, end), find(_ERROR_NAMES, t, end)))
    return _Layout(
        width=len(names),
        size=size,
        count=count,
        type=type_,
        redop=find(_REDOP_NAMES, 0, times[0]),
        root=find(_ROOT_NAMES, 0, times[0]),
        sides=tuple(sides),
    )


def _number(text: str, line_no: int, line: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ParseError(f"{what} is not a number: {text!r}", line_no=line_no, line=line) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ParseError(f"{what} is not a finite number: {text!r}", line_no=line_no, line=line)
    return value


def _integer(text: str, line_no: int, line: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ParseError(
            f"{what} is not an integer: {text!r}", line_no=line_no, line=line
        ) from None


def _wrong_count(text: str, line_no: int, line: str) -> int:
    """nccl-tests prints `#wrong` with `%5g` (common.cu): from a million on it reads
    `1.04858e+06`, which is still a count of wrong elements, not a malformed row."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise ParseError(f"#wrong is not a count: {text!r}", line_no=line_no, line=line) from None
    if value < 0 or value != value or value == float("inf"):
        raise ParseError(f"#wrong is not a count: {text!r}", line_no=line_no, line=line)
    return round(value)


def _row(layout: _Layout, fields: list[str], line_no: int, line: str) -> NcclTestsRow:
    if len(fields) != layout.width:
        raise ParseError(
            f"expected {layout.width} columns as the header names, found {len(fields)}",
            line_no=line_no,
            line=line,
        )
    sides: list[NcclTestsSide] = []
    for t, a, b, w, e in layout.sides:
        wrong = None
        if w is not None and fields[w].upper() != "N/A":
            wrong = _wrong_count(fields[w], line_no, line)
        error = None
        if e is not None and fields[e].upper() != "N/A":
            error = _number(fields[e], line_no, line, "error")
        sides.append(
            NcclTestsSide(
                time_us=_number(fields[t], line_no, line, "time"),
                algbw=_number(fields[a], line_no, line, "algbw"),
                busbw=_number(fields[b], line_no, line, "busbw"),
                wrong=wrong,
                error=error,
            )
        )
    return NcclTestsRow(
        size=_integer(fields[layout.size], line_no, line, "size"),
        count=_integer(fields[layout.count], line_no, line, "count"),
        type=fields[layout.type],
        redop=fields[layout.redop] if layout.redop is not None else None,
        root=_integer(fields[layout.root], line_no, line, "root")
        if layout.root is not None
        else None,
        out_of_place=sides[0] if sides else None,
        in_place=sides[1] if len(sides) > 1 else None,
        line_no=line_no,
    )


_HEADER_INTS = {
    "nThread": "threads",
    "nGpus": "gpus_per_thread",
    "minBytes": "min_bytes",
    "maxBytes": "max_bytes",
    "warmup iters": "warmup_iters",
    "iters": "iters",
    "agg iters": "agg_iters",
    "validation": "validation",
    "graph": "graph",
}


# Two-word keys of the settings line; every other key is one word ("step:", "nThread").
_TWO_WORD_KEYS = frozenset({"warmup", "agg"})


def nccl_version_of_code(code: int) -> str:
    """NCCL_VERSION_CODE as a version: 22902 -> 2.29.2 (NCCL >= 2.9); 2804 -> 2.8.4 before."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _is_near_row(stripped: str) -> bool:
    if not _NEAR_ROW.match(stripped + " "):
        return False
    return sum(1 for token in stripped.split() if _FIGURE.match(token)) >= 4


def _settings(line: str, line_no: int) -> NcclTestsHeader:
    tokens = line.lstrip("#").split()
    values: dict[str, int | str | None] = dict.fromkeys(_HEADER_INTS.values())
    values["step"] = None
    extra: list[tuple[str, str]] = []
    i = 0
    while i + 1 < len(tokens):
        if tokens[i] in _TWO_WORD_KEYS and i + 2 < len(tokens):
            key, value, i = f"{tokens[i]} {tokens[i + 1].rstrip(':')}", tokens[i + 2], i + 3
        else:
            key, value, i = tokens[i].rstrip(":"), tokens[i + 1], i + 2
        if key in _HEADER_INTS:
            values[_HEADER_INTS[key]] = _integer(value, line_no, line, key)
        elif key == "step":
            values["step"] = value
        else:
            extra.append((key, value))
    return NcclTestsHeader(extra=tuple(extra), **values)  # type: ignore[arg-type]


# Bytes per element of nccl-tests' datatypes, to tell all_reduce (count = size / element)
# from reduce_scatter (count = size / element / ranks) where busbw cannot (tiny sizes).
_TYPE_BYTES = {
    "int8": 1, "uint8": 1, "char": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1,
    "half": 2, "bfloat16": 2, "float16": 2, "bf16": 2,
    "int32": 4, "uint32": 4, "int": 4, "float": 4, "float32": 4,
    "int64": 8, "uint64": 8, "double": 8, "float64": 8,
}  # fmt: skip


def _infer_collective(rows: list[NcclTestsRow], ranks: int) -> str | None:
    """The collective from what the table shows, when no line names the binary: reductions print
    a redop, rooted ones a root; all_reduce counts every byte, reduce_scatter one rank's share."""
    if not rows:
        return None
    row = max(rows, key=lambda r: r.size)
    reduces = row.redop not in (None, "none")
    rooted = row.root is not None and row.root >= 0
    if reduces and rooted:
        return "reduce"
    if rooted:
        return "broadcast"
    if not reduces:
        return None  # all_gather and alltoall print the same columns and factor
    element = _TYPE_BYTES.get(row.type.lower())
    if element and row.size:
        if row.count * element == row.size:
            return "all_reduce"
        if ranks and row.count * element * ranks == row.size:
            return "reduce_scatter"
    side = row.out_of_place or row.in_place
    if side is not None and side.algbw > 0:
        # busbw/algbw: 2(n-1)/n for all_reduce (> 1 once n > 2), (n-1)/n for reduce_scatter.
        return "all_reduce" if side.busbw / side.algbw > 1.0 else "reduce_scatter"
    return None


def _header_seen(
    header: NcclTestsHeader | None, line: str, line_no: int, errors: list[str]
) -> NcclTestsHeader:
    """The run's settings line; a second one means several runs share the output, most often
    srun/mpirun without MPI support starting one single-rank run per process."""
    if header is None:
        return _settings(line, line_no)
    errors.append(
        f"line {line_no}: a second nccl-tests header: several runs in one output "
        "(was the launcher started without MPI/PMIx support?)"
    )
    return header


@parser("nccl-tests", "nccl-tests (all_reduce_perf & co.): rows, busbw, footer, ranks, failures")
def parse_nccl_tests(text: str) -> NcclTestsRun:
    """One nccl-tests run; failure lines and a missing footer are reported, not raised."""
    layout: _Layout | None = None
    rows: list[NcclTestsRow] = []
    ranks: list[NcclTestsRank] = []
    errors: list[str] = []
    header: NcclTestsHeader | None = None
    collective: str | None = None
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    nccl_version: str | None = None
    reduced: int | None = None
    complete = False
    recognised = False
    cut_short: tuple[int, str, str] | None = None
    tests_version = headers_version = library_version = None
    note = noise_recorder()
    for line_no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if collective is None:
            b = _BINARY.search(line)
            if b is not None:
                collective = b.group(1)
        if stripped[0] == "#":
            body = stripped[1:].strip()
            m = _AVG.match(stripped)
            if m and cut_short is not None:
                raise ParseError(cut_short[2], line_no=cut_short[0], line=cut_short[1])
            if m:
                avg_busbw = _number(m.group(1), line_no, line, "Avg bus bandwidth")
                complete = recognised = True
                continue
            m = _OOB.match(stripped)
            if m:
                out_of_bounds, recognised = int(m.group(1)), True
                continue
            m = _RANK.match(stripped)
            if m:
                ranks.append(
                    NcclTestsRank(
                        rank=int(m.group(1)),
                        group=int(m.group(2)) if m.group(2) else None,
                        pid=int(m.group(3)) if m.group(3) else None,
                        host=m.group(4),
                        device=int(m.group(5)),
                        bus_id=m.group(6),
                        gpu=m.group(7).strip(),
                    )
                )
                recognised = True
                continue
            if _SETTINGS.match(stripped):
                header = _header_seen(header, stripped, line_no, errors)
                recognised = True
                continue
            m = _REDUCING.match(stripped)
            if m:
                reduced = int(m.group(1))
                continue
            m = _NCCL_VERSION.match(stripped)
            if m:
                nccl_version = nccl_version or m.group(1)
                continue
            m = _TESTS_VERSION.match(stripped)
            if m:
                tests_version, headers_version, library_version = m.groups()
                recognised = True
                continue
            m = _COLLECTIVE_LINE.match(stripped)
            if m and collective is None:
                collective = m.group(1)
                continue
            tokens = body.split()
            if tokens and tokens[0].lower() in _SIZE_NAMES and {"time", "busbw"} & set(tokens):
                layout = _layout(tokens, line_no, line)
                recognised = True
                continue
            # Other comment lines: the unit row, `Using devices`, section titles.
            if note is not None:
                note(line_no)
            continue
        if _SETTINGS.match(stripped):  # very old nccl-tests print the settings without '#'
            header = _header_seen(header, stripped, line_no, errors)
            recognised = True
            continue
        if _FAILURE.search(stripped):
            errors.append(stripped)
            recognised = True
            continue
        m = _NCCL_VERSION.match(stripped)
        if m:
            nccl_version = nccl_version or m.group(1)
            continue
        m = _REDUCING.match(stripped)
        if m:
            reduced = int(m.group(1))
            continue
        if layout is not None and _DATA_ROW.match(stripped):
            if cut_short is not None:
                raise ParseError(cut_short[2], line_no=cut_short[0], line=cut_short[1])
            fields = stripped.split()
            if len(fields) < layout.width:
                # Either the run died while printing this row, or the table is malformed:
                # only what follows can tell, so hold it.
                cut_short = (line_no, line, f"row has {len(fields)} of {layout.width} columns")
                continue
            rows.append(_row(layout, fields, line_no, line))
            continue
        if _is_near_row(stripped):
            where = "before the column header" if layout is None else "not in the table's layout"
            raise ParseError(
                f"a result row {where}: read, it would change the results; skipped, it would "
                "lose a row",
                line_no=line_no,
                line=line,
            )
        # Anything else is interleaved launcher/NCCL chatter (Open MPI help text, NCCL INFO/WARN,
        # srun messages): it belongs to the run's log, not to its results.
        if note is not None:
            note(line_no)
    if not recognised:
        raise ParseError("no nccl-tests header, table, footer or failure line found")
    if cut_short is not None:
        if complete:
            raise ParseError(cut_short[2], line_no=cut_short[0], line=cut_short[1])
        errors.append(f"output ends inside a row (line {cut_short[0]}): {cut_short[1].strip()}")
    if collective is None:
        collective = _infer_collective(rows, len(ranks))
    run = NcclTestsRun(
        collective=collective,
        ranks=tuple(ranks),
        rows=tuple(rows),
        avg_busbw=avg_busbw,
        complete=complete,
        errors=tuple(errors),
        out_of_bounds=out_of_bounds,
        header=header,
        nccl_version=nccl_version
        or (nccl_version_of_code(int(library_version)) if library_version else None),
        reduced_max_bytes=reduced,
        tests_version=tests_version,
        nccl_headers_version=nccl_version_of_code(int(headers_version))
        if headers_version
        else None,
    )
    return dataclasses.replace(run, rank_count=run.inferred_rank_count())
