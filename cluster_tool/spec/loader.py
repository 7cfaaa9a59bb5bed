"""Load a spec file into a `Cluster`, reporting every problem as `FILE:LINE:COL: path: what`.

YAML is composed with node marks kept, so pydantic's error locations and the cross-field
problems can be pointed back at the line a person has to fix. A spec is bounded before it is
built: its size (`fileio.read_input_text`), what its aliases expand to, how deep it nests, how
many hosts its hostlists name and how wide its format fields pad (`bounds`).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from cluster_tool.bounds import MAX_HOSTS, check_format_widths, hostlist_size
from cluster_tool.errors import SpecError, SpecProblem
from cluster_tool.fileio import read_input_text
from cluster_tool.spec.checks import cross_check, dotted
from cluster_tool.spec.models import Cluster

Loc = tuple[str | int, ...]
Mark = tuple[int, int]  # 1-based line, column

# Values a spec may hold once its aliases are expanded: a 4-SU spec holds a few thousand; a
# 370-byte alias bomb holds billions.
MAX_YAML_VALUES = 200_000
# Nesting a spec may have; its deepest real path (ansible_vars) is well under this.
MAX_YAML_DEPTH = 64
# A range or a comma list: a 70,000-name comma list is as costly as `gpu[1-70000]`.
_HOSTLIST_TEXT = re.compile(r"[A-Za-z0-9\[\],._-]*+[\[,][A-Za-z0-9\[\],._-]*+")


class _Marks:
    """Where each path of the document is: the key's position and the value's position."""

    def __init__(self) -> None:
        self.key: dict[Loc, Mark] = {}
        self.value: dict[Loc, Mark] = {}
        self.duplicates: list[tuple[Loc, Mark]] = []

    def find(self, loc: Loc, *, prefer_key: bool = False) -> Mark:
        """The best position for `loc`: itself, else its nearest ancestor present."""
        for end in range(len(loc), -1, -1):
            sub = loc[:end]
            first, second = (self.key, self.value) if prefer_key else (self.value, self.key)
            if sub in first:
                return first[sub]
            if sub in second:
                return second[sub]
        return (1, 1)


def _mark(node: yaml.Node) -> Mark:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _Loader(yaml.SafeLoader):
    """SafeLoader that also records where every mapping key and value sits, and refuses to
    compose a document nested deeper than MAX_YAML_DEPTH (PyYAML composes recursively)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested too deeply (more than {MAX_YAML_DEPTH} levels)",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_MAX_SCALAR_DIGITS = 64
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"


def _walk(loader: _Loader, node: yaml.Node, loc: Loc, marks: _Marks) -> Any:
    marks.value[loc] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<` merge keys like SafeLoader does
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                )
            key = _construct(loader, key_node)
            if not isinstance(key, str | int | float | bool) or key is None:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                )
            child = (*loc, key if isinstance(key, str) else str(key))
            if key in out:
                marks.duplicates.append((child, _mark(key_node)))
            marks.key[child] = _mark(key_node)
            out[key] = _walk(loader, value_node, child, marks)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(loader, item, (*loc, i), marks) for i, item in enumerate(node.value)]
    return _construct(loader, node)


def _construct(loader: _Loader, node: yaml.Node) -> Any:
    # PyYAML's own int() of a scalar of 5,000 digits raises a bare ValueError (Python's limit
    # on int conversion): a located YAML error instead, as for any value PyYAML cannot read.
    if isinstance(node, yaml.ScalarNode) and len(node.value) > _MAX_SCALAR_DIGITS:
        tag = loader.resolve(yaml.ScalarNode, node.value, (True, False))
        if node.tag == tag and tag in (_INT_TAG, _FLOAT_TAG):
            raise yaml.constructor.ConstructorError(
                None, None, f"a number of {len(node.value)} characters", node.start_mark
            )
    try:
        return loader.construct_object(node, deep=True)
    except ValueError as exc:
        raise yaml.constructor.ConstructorError(None, None, str(exc), node.start_mark) from None


def parse_yaml(text: str, filename: str) -> tuple[Any, _Marks]:
    """YAML text to plain data plus marks; raises SpecError on a syntax error."""
    try:
        # The reader checks every character as it starts: a NUL or ESC is refused here.
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = (
            exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        )
        problem = f"YAML: character U+{char:04X} is not allowed in a spec"
        raise SpecError([SpecProblem(filename, line, column, "", problem)]) from None
    marks = _Marks()
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, filename)
        data = _walk(loader, node, (), marks) if node is not None else None
    except RecursionError:
        # PyYAML composes recursively: nesting a few hundred deep ends here, before our check.
        problem = f"YAML: nested too deeply (more than {MAX_YAML_DEPTH} levels)"
        raise SpecError([SpecProblem(filename, 1, 1, "", problem)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise SpecError([SpecProblem(filename, line, col, "", f"YAML: {what}")]) from exc
    except yaml.YAMLError as exc:
        raise SpecError([SpecProblem(filename, 1, 1, "", f"YAML: {exc}")]) from exc
    finally:
        loader.dispose()
    return data, marks


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, filename: str) -> None:
    """SpecError when the document, its aliases expanded, holds more than MAX_YAML_VALUES
    values, nests deeper than MAX_YAML_DEPTH, or an alias refers to a node that holds it.
    Counted on the composed nodes (an alias is the node it names, shared), so a bomb costs
    as little to refuse as it took to write."""

    def refuse(node: yaml.Node, what: str) -> SpecError:
        line, col = _mark(node)
        return SpecError([SpecProblem(filename, line, col, "", f"YAML: {what}")])

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[key] > MAX_YAML_VALUES:
                raise refuse(node, f"aliases expand to more than {MAX_YAML_VALUES} values")
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise refuse(node, "an alias refers to a node that holds it")
        if depth > MAX_YAML_DEPTH:
            raise refuse(node, f"nested too deeply (more than {MAX_YAML_DEPTH} levels)")
        open_nodes.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node))


def _bounded_strings(data: Any, marks: _Marks, filename: str) -> list[SpecProblem]:
    """Strings that would cost too much to use: hostlists naming more than MAX_HOSTS hosts (each
    or all together) and format fields padded wider than the bound; checked before the model
    expands anything."""
    problems: list[SpecProblem] = []
    hosts = 0
    stack: list[tuple[Loc, Any]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*loc, str(k)), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*loc, i), v) for i, v in enumerate(value))
        elif isinstance(value, str):
            message = None
            if _HOSTLIST_TEXT.fullmatch(value):
                size = hostlist_size(value)
                hosts += size
                if size > MAX_HOSTS:
                    message = f"hostlist expands to {size} hosts, over the limit {MAX_HOSTS}"
                elif hosts > MAX_HOSTS:
                    message = f"the spec's hostlists name more than {MAX_HOSTS} hosts"
            if message is None and "{" in value:
                try:
                    check_format_widths(value)
                except ValueError as exc:
                    message = str(exc)
            if message is not None:
                line, col = marks.find(loc)
                problems.append(SpecProblem(filename, line, col, dotted(loc), message))
    return problems


def load_spec(path: Path) -> Cluster:
    """Read and validate a spec file; raises SpecError listing every problem, located, and
    UsageError for a file that is missing, not a regular file, too large or not UTF-8."""
    return load_spec_text(read_input_text(path), str(path))


def load_spec_text(text: str, filename: str = "<spec>") -> Cluster:
    """Validate spec text; `filename` only labels the problems."""
    data, marks = parse_yaml(text, filename)
    problems = [
        SpecProblem(filename, line, col, dotted(loc), f"duplicate key {loc[-1]!r}")
        for loc, (line, col) in marks.duplicates
    ]
    if not isinstance(data, dict):
        raise SpecError(
            [*problems, SpecProblem(filename, 1, 1, "", "a spec is a YAML mapping (kind: Cluster)")]
        )
    bounded = _bounded_strings(data, marks, filename)
    if bounded:
        raise SpecError(_sorted(problems + bounded))
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as exc:
        problems += _pydantic_problems(exc, marks, filename)
        raise SpecError(_sorted(problems)) from None
    for loc, message in cross_check(cluster):
        line, col = marks.find(loc)
        problems.append(SpecProblem(filename, line, col, dotted(loc), message))
    if problems:
        raise SpecError(_sorted(problems))
    return cluster


def spec_from_dict(data: dict[str, Any], filename: str = "<spec>") -> Cluster:
    """Validate an in-memory spec (tests, generators); problems carry paths, not lines."""
    return load_spec_text(yaml.safe_dump(data, sort_keys=False), filename)


def _sorted(problems: list[SpecProblem]) -> list[SpecProblem]:
    unique = {(p.line, p.column, p.path, p.message): p for p in problems}
    return [unique[k] for k in sorted(unique)]


def _pydantic_problems(exc: ValidationError, marks: _Marks, filename: str) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        kind = err["type"]
        bad_key = bool(loc) and loc[-1] == "[key]"
        if bad_key:
            # pydantic reports a bad mapping key as <path>.<key>.[key]
            loc = loc[:-1]
            line, col = marks.find(loc, prefer_key=True)
            message = f"bad name {loc[-1]!r}"
            if kind == "string_pattern_mismatch":
                message += f": must match {err['ctx']['pattern']}"
        elif kind == "extra_forbidden":
            line, col = marks.find(loc, prefer_key=True)
            message = f"unknown key {loc[-1]!r}" if loc else "unknown key"
            known = _known_keys(loc[:-1])
            if known and loc:
                close = difflib.get_close_matches(str(loc[-1]), known, n=1)
                message += f"; did you mean {close[0]!r}?" if close else ""
        elif kind == "missing":
            line, col = marks.find(loc[:-1], prefer_key=True)
            message = f"missing required key {loc[-1]!r}" if loc else "missing"
        else:
            line, col = marks.find(loc)
            message = str(err["msg"])
            for prefix in ("Value error, ", "Assertion failed, "):
                message = message.removeprefix(prefix)
            if kind not in ("value_error", "literal_error", "string_pattern_mismatch"):
                given = err.get("input")
                if isinstance(given, str | int | float | bool):
                    message += f" (got {given!r})"
            elif kind == "string_pattern_mismatch":
                message = f"{err.get('input')!r} does not match {err['ctx']['pattern']}"
        out.append(SpecProblem(filename, line, col, dotted(loc), message))
    return out


def _clean_loc(loc: Iterable[Any]) -> Loc:
    # pydantic inserts validator tags (e.g. 'function-after[...]') into union locations.
    return tuple(p for p in loc if isinstance(p, int) or not str(p).startswith("function-"))


def _known_keys(loc: Loc) -> list[str]:
    """Field names (aliases) of the model found at `loc`, for 'did you mean' hints."""
    model: Any = Cluster
    for part in loc:
        model = _step(model, part)
        if model is None:
            return []
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


def _step(tp: Any, part: str | int) -> Any:
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if part in (name, field.alias):
                return _unwrap(field.annotation)
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and args:
        return _unwrap(args[0])
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    return None


def _unwrap(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is not type(None):
                return _unwrap(arg)
    return tp
