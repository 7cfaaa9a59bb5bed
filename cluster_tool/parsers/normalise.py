"""Captures as operators make them, made into what the parsers read: colour codes and CRLF
gone, `host: ` (pdsh/clush) and `[1,0]<stdout>:` (Open MPI) prefixes split off, and the
lines before the tool's own first line set aside, every line keeping its number in the file.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cluster_tool.errors import ParseError

__all__ = [
    "Capture",
    "HostReading",
    "LineError",
    "Reading",
    "Section",
    "SkippedLines",
    "normalise",
    "read_sections",
]

# CSI (colours, cursor moves), OSC (terminal titles, hyperlinks) and the two-byte escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# pdsh and clush write "host: " before each line (a blank line becomes "host: ").
_HOST_PREFIX = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9._@-]*):(?: |$)")
# Open MPI's --tag-output: "[jobid,rank]<stdout>:" (Open MPI 5 adds a space).
_MPI_PREFIX = re.compile(r"^\[(?P<job>\d+),(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>: ?")
# srun --label: the task id, right-aligned, then ": ".
_SRUN_PREFIX = re.compile(r"^ *(?P<rank>\d+): ")
# Words a kernel or a tool puts first on a line that look like "host: ": never hosts.
_NOT_HOSTS = re.compile(
    r"^(?:NVRM|kernel|nvidia|nvidia-nvswitch\d*|ibpanic|ibwarn|iberror|ibstat|ibstatus"
    r"|iblinkinfo|ibnetdiscover|ibqueryerrors|perfquery|dcgmi|Error|ERROR|Warning|WARNING"
    r"|Info|INFO|Note|NOTE|CA|Switch|Router|Legend|bash|sh|zsh|sudo|srun|salloc|sbatch"
    r"|slurmstepd|mpirun|prterun|orterun|ssh|kubectl|error|warning)$"
)


@dataclass(frozen=True)
class LineError:
    """A line a parser could not read, by its number in the file as given."""

    line_no: int | None
    line: str | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line_no}: " if self.line_no is not None else ""
        shown = f": {self.line!r}" if self.line is not None else ""
        return f"{where}{self.message}{shown}"


@dataclass(frozen=True)
class SkippedLines:
    """Lines before the tool's first line (a prompt, a banner): how many, and the first."""

    count: int
    first_line_no: int
    first_line: str


@dataclass(frozen=True)
class Section:
    """The lines of one host (or of the whole capture when it has no host prefixes):
    `lines` are (line number in the file, text) with every artefact taken off."""

    host: str | None
    ranks: tuple[int, ...]
    lines: tuple[tuple[int, str], ...]
    skipped: SkippedLines | None = None

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


@dataclass(frozen=True)
class Capture:
    """A capture split into sections; `prefix` names the collector that tagged the lines
    ("pdsh" for `host: `, "mpi" for Open MPI or srun ranks), `errors` the collector's own
    lines (`pdsh@head: gpu003: ssh exited with exit code 255`)."""

    prefix: str | None
    sections: tuple[Section, ...]
    skipped: SkippedLines | None
    errors: tuple[LineError, ...]


@dataclass(frozen=True)
class HostReading:
    """What one parser read from one section: its records (None when nothing could be read),
    the lines it could not read, the lines set aside before the tool's first line, and how
    many lines it was given, and left unread after an error."""

    host: str | None
    ranks: tuple[int, ...]
    records: Any
    errors: tuple[LineError, ...]
    skipped_lines: SkippedLines | None
    lines_read: int
    lines_unread: int


@dataclass(frozen=True)
class Reading:
    """A capture read by one parser: one `HostReading` per host, in the order first seen."""

    kind: str
    prefix: str | None
    hosts: tuple[HostReading, ...]
    errors: tuple[LineError, ...] = field(default=())

    @property
    def all_errors(self) -> tuple[LineError, ...]:
        return self.errors + tuple(e for h in self.hosts for e in h.errors)


def _first_content_lines(text: str, count: int) -> list[str]:
    lines: list[str] = []
    start = 0
    while start < len(text) and len(lines) < count:
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        line = text[start:end]
        if line.strip():
            lines.append(line)
        start = end + 1
    return lines


# How many lines may come before a collector's first tagged line (a prompt, a banner) for
# the fast path to still see it.
_LEAD = 4


def is_clean(text: str, start: re.Pattern[str] | None) -> bool:
    """True when the text needs no normalising: the common case, decided without splitting it."""
    if "\x1b" in text or "\r" in text:
        return False
    first = _first_content_lines(text, _LEAD)
    if not first:
        return True
    for line in first:
        if _HOST_PREFIX.match(line) or _MPI_PREFIX.match(line) or _SRUN_PREFIX.match(line):
            return False
    return start is None or start.search(first[0]) is not None


def _strip_artefacts(text: str) -> list[tuple[int, str]]:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    # Numbered as the parsers number them: splitlines() takes CRLF as one break.
    return list(enumerate(text.splitlines(), start=1))


def _prefix_style(lines: list[tuple[int, str]]) -> str | None:
    """Which collector tagged every line from the first tagged one on, if any."""
    content = [line for _, line in lines if line.strip()]
    for style, pattern in (("mpi", _MPI_PREFIX), ("srun", _SRUN_PREFIX), ("pdsh", _HOST_PREFIX)):
        first = next((i for i, line in enumerate(content) if pattern.match(line)), None)
        if first is None:
            continue
        tagged = content[first:]
        # A collector tags the whole capture, give or take a prompt or banner before it;
        # one tagged-looking line at the end is the tool's (or the shell's) error.
        if first > _LEAD or len(tagged) < first:
            continue
        if not all(pattern.match(line) for line in tagged):
            continue
        if style == "pdsh":
            hosts = {m["host"] for m in map(_HOST_PREFIX.match, tagged) if m is not None}
            real = {h for h in hosts if "@" not in h and h != "clush"}
            if not real or any(_NOT_HOSTS.match(h) for h in real):
                continue
        return style
    return None


def normalise(text: str, start: re.Pattern[str] | None = None) -> Capture:
    """Split a capture into per-host sections with artefacts removed. `start` matches the
    tool's first line: lines before it are set aside and reported, not parsed."""
    lines = _strip_artefacts(text)
    style = _prefix_style(lines)
    errors: list[LineError] = []
    skipped_before: list[tuple[int, str]] = []
    if style is None:
        sections = [Section(None, (), tuple(lines))]
    else:
        sections = _split(style, lines, errors, skipped_before)
    out = []
    for section in sections:
        kept, skipped = _skip_leading(section.lines, start)
        out.append(Section(section.host, section.ranks, kept, skipped))
    return Capture(
        prefix=None if style is None else ("pdsh" if style == "pdsh" else "mpi"),
        sections=tuple(out),
        skipped=_skipped(skipped_before),
        errors=tuple(errors),
    )


def _skipped(lines: Iterable[tuple[int, str]]) -> SkippedLines | None:
    content = [(no, line) for no, line in lines if line.strip()]
    if not content:
        return None
    return SkippedLines(len(content), content[0][0], content[0][1])


def _skip_leading(
    lines: tuple[tuple[int, str], ...], start: re.Pattern[str] | None
) -> tuple[tuple[tuple[int, str], ...], SkippedLines | None]:
    if start is None:
        return lines, None
    for i, (_, line) in enumerate(lines):
        if start.search(line):
            return lines[i:], _skipped(lines[:i])
    return lines, None


def _split(
    style: str,
    lines: list[tuple[int, str]],
    errors: list[LineError],
    skipped_before: list[tuple[int, str]],
) -> list[Section]:
    if style == "mpi" or style == "srun":
        # One MPI job prints one output: ranks' lines stay in one stream, in printed order.
        pattern = _MPI_PREFIX if style == "mpi" else _SRUN_PREFIX
        kept: list[tuple[int, str]] = []
        ranks: set[int] = set()
        tagging = False
        for no, line in lines:
            match = pattern.match(line)
            if match is None:
                (kept if tagging else skipped_before).append((no, line))
                continue
            tagging = True
            ranks.add(int(match["rank"]))
            kept.append((no, line[match.end() :]))
        return [Section(None, tuple(sorted(ranks)), tuple(kept))]
    by_host: dict[str, list[tuple[int, str]]] = {}
    tagging = False
    for no, line in lines:
        match = _HOST_PREFIX.match(line)
        if match is None:
            if not tagging:
                skipped_before.append((no, line))
            continue
        tagging = True
        host = match["host"]
        if "@" in host or host == "clush":
            errors.append(LineError(no, line, f"{host.split('@')[0]} reports"))
            continue
        rest = line[match.end() :]
        by_host.setdefault(host, []).append((no, rest))
    return [Section(host, (), tuple(hl)) for host, hl in by_host.items()]


def _has_records(records: Any) -> bool:
    """Whether a partial read found anything: an empty list or a record of empty tuples
    is what a parser returns for text that is not its tool's."""
    if isinstance(records, list | tuple | dict):
        return bool(records)
    fields = getattr(records, "__dataclass_fields__", None)
    if fields is None:
        return True
    return any(
        isinstance(getattr(records, name), list | tuple | dict) and getattr(records, name)
        for name in fields
    )


def _joined(before: SkippedLines | None, own: SkippedLines | None) -> SkippedLines | None:
    """The lines set aside before a collector's first tagged line and before the tool's."""
    if before is None or own is None:
        return before or own
    return SkippedLines(before.count + own.count, before.first_line_no, before.first_line)


def _where(section: Section, error: ParseError) -> ParseError:
    """The parser's error with the line number it has in the file, not in the section."""
    if error.line_no is None or not 1 <= error.line_no <= len(section.lines):
        return ParseError(error.message, line_no=None, line=error.line, source=error.source)
    no, _ = section.lines[error.line_no - 1]
    return ParseError(error.message, line_no=no, line=error.line, source=error.source)


def relocate(records: Any, where: Callable[[int], int]) -> Any:
    """The records with every `line_no` moved by `where`: a record names the line it came
    from in the file as given, not in the text the parser saw."""
    if dataclasses.is_dataclass(records) and not isinstance(records, type):
        changes = {}
        for f in dataclasses.fields(records):
            if not f.init:
                continue
            value = getattr(records, f.name)
            moved = where(value) if f.name == "line_no" and isinstance(value, int) else None
            if moved is None:
                moved = relocate(value, where)
            if moved is not value:
                changes[f.name] = moved
        return dataclasses.replace(records, **changes) if changes else records
    if isinstance(records, list):
        return [relocate(v, where) for v in records]
    if isinstance(records, tuple):
        return tuple(relocate(v, where) for v in records)
    if isinstance(records, dict):
        return {k: relocate(v, where) for k, v in records.items()}
    return records


def _file_line(section: Section) -> Callable[[int], int]:
    numbers = [no for no, _ in section.lines]

    def where(line_no: int) -> int:
        return numbers[line_no - 1] if 1 <= line_no <= len(numbers) else line_no

    return where


def read_section(
    parse: Callable[[str], Any], section: Section, *, partial: bool
) -> tuple[Any, tuple[LineError, ...], int]:
    """Parse one section. With `partial`, an error past the tool's first line keeps what
    was read before it and names the line: (records, errors, lines left unread)."""
    try:
        return relocate(parse(section.text), _file_line(section)), (), 0
    except ParseError as exc:
        located = _where(section, exc)
        if not partial or exc.line_no is None or exc.line_no <= 1:
            raise located from exc
        before = Section(section.host, section.ranks, section.lines[: exc.line_no - 1], None)
        try:
            records = parse(before.text)
        except ParseError:
            raise located from exc
        if not _has_records(records):
            raise located from exc
        records = relocate(records, _file_line(before))
        unread = len(section.lines) - len(before.lines)
        message = located.message
        if unread > 1:
            message = f"{message} (this line and the {unread - 1} after it are not read)"
        return records, (LineError(located.line_no, located.line, message),), unread


def read_sections(
    kind: str,
    parse: Callable[[str], Any],
    text: str,
    start: re.Pattern[str] | None,
) -> Reading:
    """Read a capture: every host's records, with the errors and skipped lines of each.
    Raises ParseError only when no host's part could be read at all."""
    capture = normalise(text, start)
    hosts: list[HostReading] = []
    first_error: ParseError | None = None
    for section in capture.sections:
        try:
            records, errors, unread = read_section(parse, section, partial=True)
        except ParseError as exc:
            first_error = first_error or exc
            records, errors, unread = None, (LineError(exc.line_no, exc.line, exc.message),), 0
            unread = len(section.lines)
        hosts.append(
            HostReading(
                host=section.host,
                ranks=section.ranks,
                records=records,
                errors=errors,
                skipped_lines=_joined(capture.skipped, section.skipped),
                lines_read=len(section.lines) - unread,
                lines_unread=unread,
            )
        )
    if first_error is not None and all(h.records is None for h in hosts):
        raise first_error
    return Reading(kind=kind, prefix=capture.prefix, hosts=tuple(hosts), errors=capture.errors)
