"""Captures as operators make them, made into what the parsers read: colour codes and CRLF
gone, `host: ` (pdsh/clush) and `[1,0]<stdout>:` (Open MPI) prefixes split off, and the
lines before the tool's own first line set aside, every line keeping its number in the file.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
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
    "noise_recorder",
    "normalise",
    "read_sections",
]

# CSI (colours, cursor moves), OSC (terminal titles, hyperlinks) and the two-byte escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# pdsh and clush write "host: " before each line (a blank line becomes "host: ").
_HOST_PREFIX = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9._@-]*):(?: |$)")
# Open MPI's --tag-output: "[jobid,rank]<stdout>:" (Open MPI 5 adds a space).
_MPI_PREFIX = re.compile(r"^\[(?P<job>\d{1,20}),(?P<rank>\d{1,20})\]<(?:stdout|stderr|stddiag)>: ?")
# srun --label: the task id, right-aligned, then ": ".
_SRUN_PREFIX = re.compile(r"^ *+(?P<rank>\d{1,20}): ")
# Words a kernel or a tool puts first on a line that look like "host: ": never hosts.
_NOT_HOSTS = re.compile(
    r"^(?:NVRM|kernel|nvidia|nvidia-nvswitch\d*|ibpanic|ibwarn|iberror|ibstat|ibstatus"
    r"|iblinkinfo|ibnetdiscover|ibqueryerrors|perfquery|dcgmi|Error|ERROR|Warning|WARNING"
    r"|Info|INFO|Note|NOTE|CA|Switch|Router|Legend|bash|sh|zsh|sudo|srun|salloc|sbatch"
    r"|slurmstepd|mpirun|prterun|orterun|ssh|kubectl|error|warning)$"
)


# The line numbers a parser skipped as known noise, while `read_section` counts them.
_NOISE: ContextVar[list[int] | None] = ContextVar("parser_noise", default=None)


def noise_recorder() -> Callable[[int], None] | None:
    """Where a parser notes a line it skips as known noise (NCCL INFO chatter, kernel lines
    that are not Xids): a function taking the line number, or None when nobody counts.
    Blank lines are counted apart: a parser notes only lines with text on them."""
    found = _NOISE.get()
    return None if found is None else found.append


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
    """Lines before the tool's first line (a prompt, a banner): how many, and the first;
    `lines` counts the blank ones among them too."""

    count: int
    first_line_no: int
    first_line: str
    lines: int = 0


@dataclass(frozen=True)
class Section:
    """The lines of one host (or of the whole capture when it has no host prefixes), every
    artefact taken off. `numbered` holds (line number in the file, text); the fast path
    keeps them joined in `body` instead, numbered from `first` on, and numbers on demand."""

    host: str | None
    ranks: tuple[int, ...]
    numbered: tuple[tuple[int, str], ...] | None
    skipped: SkippedLines | None = None
    body: str | None = field(default=None, repr=False)
    first: int = 1

    @functools.cached_property
    def lines(self) -> tuple[tuple[int, str], ...]:
        if self.numbered is not None:
            return self.numbered
        return tuple(enumerate(self.body.split("\n"), start=self.first)) if self.body else ()

    @functools.cached_property
    def size(self) -> int:
        if self.numbered is not None:
            return len(self.numbered)
        return self.body.count("\n") + 1 if self.body else 0

    @functools.cached_property
    def consecutive(self) -> bool:
        """The lines follow each other in the file (one host, nothing between them)."""
        lines = self.numbered
        return not lines or lines[-1][0] - lines[0][0] == len(lines) - 1

    @property
    def first_no(self) -> int:
        return self.numbered[0][0] if self.numbered else self.first

    @property
    def text(self) -> str:
        """What the parser reads. When the lines follow each other, blank lines stand in for
        those set aside before them, so the parser's line numbers are the file's."""
        body = self.body if self.body is not None else "\n".join(li for _, li in self.lines)
        if self.consecutive and self.size:
            return "\n" * (self.first_no - 1) + body
        return body

    def index(self, line_no: int) -> int | None:
        """Where the parser's line `line_no` sits in `lines` (None: not one of them)."""
        at = line_no - self.first_no if self.consecutive else line_no - 1
        return at if 0 <= at < self.size else None

    def file_line(self, line_no: int) -> int:
        at = self.index(line_no)
        if at is None:
            return line_no
        return self.first_no + at if self.consecutive else self.lines[at][0]

    def head_lines(self) -> Iterator[tuple[int, str]]:
        """The lines from the first on, numbered, without splitting the whole body."""
        if self.numbered is not None or self.body is None:
            yield from self.lines
            return
        offset, no = 0, self.first
        while offset <= len(self.body):
            end = self.body.find("\n", offset)
            end = len(self.body) if end < 0 else end
            yield no, self.body[offset:end]
            offset, no = end + 1, no + 1

    def split_at(self, at: int) -> tuple[Section, Section]:
        """(the first `at` lines, the rest) as sections of the same host."""
        if self.numbered is not None or self.body is None:
            lines = self.lines
            return (
                Section(self.host, self.ranks, lines[:at]),
                Section(self.host, self.ranks, lines[at:]),
            )
        parts = self.body.split("\n", at)
        rest = parts.pop() if len(parts) > at else ""
        head = "\n".join(parts)
        return (
            Section(self.host, self.ranks, None, None, head, self.first),
            Section(self.host, self.ranks, None, None, rest, self.first + at),
        )


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
    many lines it was given, and left unread after an error. Of the lines read,
    `lines_noise` were known noise (blank lines, chatter the tool's output carries): counted
    when asked, as few callers want it and counting blank lines is a pass over the text."""

    host: str | None
    ranks: tuple[int, ...]
    records: Any
    errors: tuple[LineError, ...]
    skipped_lines: SkippedLines | None
    lines_read: int
    lines_unread: int
    count_noise: Callable[[], int] = field(default=lambda: 0, repr=False, compare=False)

    @functools.cached_property
    def lines_noise(self) -> int:
        return self.count_noise()

    @property
    def line_counts(self) -> dict[str, int]:
        """Every line of this host's part, once: consumed by the parser, skipped as known
        noise, not read (an error and what follows it), set aside before the tool's output."""
        return {
            "consumed": self.lines_read - self.lines_noise,
            "noise": self.lines_noise,
            "unread": self.lines_unread,
            "skipped": self.skipped_lines.lines if self.skipped_lines is not None else 0,
        }


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
    errors: list[LineError] = []
    skipped_before: list[tuple[int, str]] = []
    one = _one_stream(text)
    if one is not None:
        style, sections, skipped_before = one
    else:
        lines = _strip_artefacts(text)
        style = _prefix_style(lines)
        if style is None:
            sections = [Section(None, (), tuple(lines))]
        else:
            sections = _split(style, lines, errors, skipped_before)
    out = []
    for section in sections:
        at, skipped = _skip_leading(section, start)
        kept = section.split_at(at)[1] if at else section
        out.append(Section(kept.host, kept.ranks, kept.numbered, skipped, kept.body, kept.first))
    return Capture(
        prefix=None if style is None else ("pdsh" if style == "pdsh" else "mpi"),
        sections=tuple(out),
        skipped=_skipped(skipped_before),
        errors=tuple(errors),
    )


# Line breaks splitlines() knows besides \n: where they occur, the line-by-line path numbers
# lines as the parsers do. (Nine `in` scans beat one regex character class here.)
_OTHER_BREAKS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _one_stream(
    text: str,
) -> tuple[str | None, list[Section], list[tuple[int, str]]] | None:
    """The common captures, at string speed: no prefixes at all, or one host's (one rank's)
    prefix on every line after at most a few others. None: the line-by-line path decides."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if any(c in text for c in _OTHER_BREAKS):
        return None
    if text.endswith("\n"):
        text = text[:-1]  # splitlines() counts no empty line after the last break
    content = index = offset = 0
    while offset <= len(text) and content <= _LEAD:
        end = text.find("\n", offset)
        end = len(text) if end < 0 else end
        line = text[offset:end]
        if line.strip():
            content += 1
            for style, pattern in (
                ("mpi", _MPI_PREFIX),
                ("srun", _SRUN_PREFIX),
                ("pdsh", _HOST_PREFIX),
            ):
                match = pattern.match(line)
                if match is not None:
                    return _one_prefixed(style, match, text, offset, index, content - 1)
        index += 1
        offset = end + 1
    return None, [Section(None, (), None, body=text)], []


def _one_prefixed(
    style: str, match: re.Match[str], text: str, offset: int, index: int, lead: int
) -> tuple[str | None, list[Section], list[tuple[int, str]]] | None:
    prefix = match[0]
    host = None
    ranks: tuple[int, ...] = ()
    if style == "pdsh":
        host = match["host"]
        if "@" in host or host == "clush" or _NOT_HOSTS.match(host):
            return None
    else:
        ranks = (int(match["rank"]),)
    # The first line starts with the prefix; every later one must too. One replace takes
    # them off, and how much shorter the text got says how many lines had it.
    rest = text[offset + len(prefix) :]
    body = rest.replace("\n" + prefix, "\n")
    later = rest.count("\n")
    if lead > later + 1 or (len(rest) - len(body)) != later * len(prefix):
        return None  # several hosts or ranks, or a line without the prefix
    before = list(enumerate(text[:offset].split("\n")[:index], start=1))
    return style, [Section(host, ranks, None, body=body, first=index + 1)], before


def _skipped(lines: Iterable[tuple[int, str]]) -> SkippedLines | None:
    every = list(lines)
    content = [(no, line) for no, line in every if line.strip()]
    if not content:
        return None
    return SkippedLines(len(content), content[0][0], content[0][1], len(every))


def _skip_leading(
    section: Section, start: re.Pattern[str] | None
) -> tuple[int, SkippedLines | None]:
    """How many lines come before the tool's first line, and what they were."""
    if start is None:
        return 0, None
    before: list[tuple[int, str]] = []
    for no, line in section.head_lines():
        if start.search(line):
            return len(before), _skipped(before)
        before.append((no, line))
    return 0, None


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
    return SkippedLines(
        before.count + own.count,
        before.first_line_no,
        before.first_line,
        before.lines + own.lines,
    )


def _where(section: Section, error: ParseError) -> ParseError:
    """The parser's error with the line number it has in the file, not in the section."""
    if error.line_no is None or section.index(error.line_no) is None:
        return ParseError(error.message, line_no=None, line=error.line, source=error.source)
    line_no = section.file_line(error.line_no)
    return ParseError(error.message, line_no=line_no, line=error.line, source=error.source)


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


def _in_file(records: Any, section: Section) -> Any:
    # Consecutive lines are read at their own numbers (see Section.text): nothing to move.
    return records if section.consecutive else relocate(records, section.file_line)


def read_section(
    parse: Callable[[str], Any], section: Section, *, partial: bool
) -> tuple[Any, tuple[LineError, ...], int]:
    """Parse one section. With `partial`, an error past the tool's first line keeps what
    was read before it and names the line: (records, errors, lines left unread)."""
    try:
        return _in_file(parse(section.text), section), (), 0
    except ParseError as exc:
        partial_records = getattr(exc, "records", None)
        if partial and partial_records is not None:
            located = _where(section, exc)
            error = LineError(located.line_no, located.line, located.message)
            return _in_file(partial_records, section), (error,), 0
        located = _where(section, exc)
        at = section.index(exc.line_no) if exc.line_no is not None else None
        if not partial or at is None or at == 0:
            raise located from exc
        before = section.split_at(at)[0]
        try:
            records = parse(before.text)
        except ParseError:
            raise located from exc
        if not _has_records(records):
            raise located from exc
        records = _in_file(records, before)
        unread = section.size - before.size
        message = located.message
        if unread > 1:
            message = f"{message} (this line and the {unread - 1} after it are not read)"
        return records, (LineError(located.line_no, located.line, message),), unread


_BLANK = re.compile(r"^[^\S\n]*$", re.MULTILINE)


def _noise_count(section: Section, noted: Iterable[int], read: int) -> int:
    """Of the first `read` lines of the section: the blank ones and those the parser noted
    as noise (by its own line numbers; a partial read parses twice, so a set)."""
    noise = {at for at in map(section.index, noted) if at is not None and at < read}
    head = section if read == section.size else section.split_at(read)[0]
    if head.body is not None:
        blank = len(_BLANK.findall(head.body)) if head.body else 0
    else:
        blank = sum(1 for _, line in head.lines if not line.strip())
    return len(noise) + blank


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
        noted: list[int] = []
        counting = _NOISE.set(noted)
        try:
            records, errors, unread = read_section(parse, section, partial=True)
        except ParseError as exc:
            first_error = first_error or exc
            records, errors, unread = None, (LineError(exc.line_no, exc.line, exc.message),), 0
            unread = section.size
        finally:
            _NOISE.reset(counting)
        hosts.append(
            HostReading(
                host=section.host,
                ranks=section.ranks,
                records=records,
                errors=errors,
                skipped_lines=_joined(capture.skipped, section.skipped),
                lines_read=section.size - unread,
                lines_unread=unread,
                count_noise=functools.partial(_noise_count, section, noted, section.size - unread),
            )
        )
    if first_error is not None and all(h.records is None for h in hosts):
        raise first_error
    return Reading(kind=kind, prefix=capture.prefix, hosts=tuple(hosts), errors=capture.errors)
