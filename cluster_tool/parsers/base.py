"""What every parser shares: the registry behind `cluster-tool parse KIND`, the normalising
step in front of every parser, and JSON output."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import gc
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cluster_tool.errors import ParseError
from cluster_tool.parsers.normalise import (
    Reading,
    is_clean,
    noise_recorder,
    normalise,
    read_section,
    read_sections,
)

__all__ = [
    "KINDS",
    "ParseError",
    "ParserKind",
    "PartialParse",
    "collector_paused",
    "noise_recorder",
    "parser",
    "read",
    "to_jsonable",
]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a function builds a large acyclic structure
    (records of str, int and tuples): at 4,096 nodes its passes over the growing heap were
    0.44 s of a 2.9 s `fabric check`. Back on at the end if it was on (nested and concurrent
    uses leave it on once the one that found it on is done). Usable as a decorator."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class PartialParse(ParseError):
    """A ParseError that carries what the parser could still read (a topology matrix whose
    NIC legend is missing): strict callers see the error, `read` keeps the records."""

    def __init__(self, message: str, records: Any, **where: Any) -> None:
        super().__init__(message, **where)
        self.records = records


# Combines the records of several hosts into one value (the Xid parser: one list, host filled).
Merge = Callable[[Sequence[tuple[str | None, Any]]], Any]
Parse = Callable[[str], Any]


@dataclass(frozen=True)
class ParserKind:
    """One tool output the toolkit reads: its name on the CLI, the function that parses clean
    text, the tool's first line (what comes before it is not the tool's) and, for kinds whose
    records name their host, how several hosts' records combine."""

    name: str
    help: str
    parse: Callable[[str], Any]
    start: re.Pattern[str] | None = None
    merge: Merge | None = None

    def read(self, text: str) -> Reading:
        """Every host's records with the lines that could not be read (see `read`)."""
        return read_sections(self.name, self.parse, text, self.start)


KINDS: dict[str, ParserKind] = {}


def parser(
    name: str, help: str, *, start: str | None = None, merge: Merge | None = None
) -> Callable[[Parse], Parse]:
    """Register a text -> records function as `cluster-tool parse NAME`, behind the normalising
    step: colour codes, CRLF, pdsh/clush and Open MPI prefixes and lines before the one `start`
    matches do not reach it. Called directly it stays strict: any unreadable line raises."""
    pattern = re.compile(start) if start is not None else None

    def wrap(fn: Parse) -> Parse:
        if name in KINDS:
            raise ValueError(f"parser kind {name!r} registered twice")
        KINDS[name] = ParserKind(name=name, help=help, parse=fn, start=pattern, merge=merge)

        @functools.wraps(fn)
        def normalised(text: str, *args: Any, **kwargs: Any) -> Any:
            if is_clean(text, pattern):
                return fn(text, *args, **kwargs)

            def parse(clean: str) -> Any:
                return fn(clean, *args, **kwargs)

            capture = normalise(text, pattern)
            results = [(s.host, read_section(parse, s, partial=False)[0]) for s in capture.sections]
            if merge is not None and capture.prefix is not None:
                return merge(results)  # the records name their host: fill it in
            if len(results) == 1:
                return results[0][1]
            if merge is None:
                hosts = ", ".join(str(host) for host, _ in results)
                raise ParseError(
                    f"{len(results)} hosts in one capture ({hosts}): "
                    "read it with `cluster-tool parse`, which reads each host"
                )
            return merge(results)

        return normalised

    return wrap


def read(kind: str, text: str) -> Reading:
    """A capture as operators make it, read by parser `kind`: one record set per host, and
    for each the lines it could not read, rather than one ParseError for the whole file.
    Raises ParseError only when nothing in the text is the tool's output."""
    return KINDS[kind].read(text)


def to_jsonable(value: Any) -> Any:
    """Records (dataclasses, pydantic models, enums, tuples) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return to_jsonable(value.model_dump())
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [to_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    return value
