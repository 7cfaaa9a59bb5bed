"""What every parser shares: the registry behind `cluster-tool parse KIND`, and JSON output."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster_tool.errors import ParseError

__all__ = ["KINDS", "ParseError", "ParserKind", "parser", "to_jsonable"]


@dataclass(frozen=True)
class ParserKind:
    """One tool output the toolkit reads: its name on the CLI and the function that parses it."""

    name: str
    help: str
    parse: Callable[[str], Any]


KINDS: dict[str, ParserKind] = {}


def parser(name: str, help: str) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """Register a text -> records function as `cluster-tool parse NAME`."""

    def wrap(fn: Callable[[str], Any]) -> Callable[[str], Any]:
        if name in KINDS:
            raise ValueError(f"parser kind {name!r} registered twice")
        KINDS[name] = ParserKind(name=name, help=help, parse=fn)
        return fn

    return wrap


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
