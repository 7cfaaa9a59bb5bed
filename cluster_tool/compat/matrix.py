"""The compatibility matrix (`matrix.yml`) as typed rules, and the one function that holds a
set of known versions against it.

The rules are data; this module only knows the four kinds of constraint and how versions
compare. Nothing here reads a spec or a node: callers hand in the versions they know.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MATRIX_FILE = Path(__file__).with_name("matrix.yml")

_NUMBERS = re.compile(r"\d+(?:\.\d+)*")
_COMPONENT = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
_SOURCE = Annotated[str, Field(pattern=r"^https://\S+$")]


class MatrixError(ValueError):
    """matrix.yml is not a valid matrix: a data error in the tool, not in the user's spec."""


def numbers(version: str) -> tuple[int, ...] | None:
    """The leading dotted numbers of a version (`6.8.0-45-generic` -> (6, 8, 0)), or None."""
    found = _NUMBERS.match(version.strip())
    if found is None:
        return None
    return tuple(int(part) for part in found.group(0).split("."))


def matches(value: str, pattern: str) -> bool:
    """True when `value` is `pattern` or lies under it: `12.4.1` under `12.4`, not `12.40`;
    words (`dmabuf`, `ConnectX-7`) compare whole, case aside; `*` is any version at all (the
    component is installed)."""
    if pattern.strip() == "*":
        return True
    want, have = numbers(pattern), numbers(value)
    if want is not None and have is not None and _NUMBERS.fullmatch(pattern.strip()):
        return have[: len(want)] == want
    return value.strip().lower() == pattern.strip().lower()


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    why: str = Field(min_length=1, description="What breaks, in one line (docs/compat.md).")
    source: _SOURCE
    see_also: list[_SOURCE] = Field(default_factory=list)
    checked: date
    when: dict[_COMPONENT, str] = Field(default_factory=dict)
    note: str | None = Field(
        None, description="What the source does not say (a boundary taken from elsewhere)."
    )

    def components(self) -> set[str]:
        """Every component the rule reads."""
        return set(self.when)

    def blamed(self) -> str:
        """The component a violation is reported against."""
        raise NotImplementedError


class EqualRule(_Rule):
    """Two components agree on their first `parts` numbers (all of them when unset)."""

    kind: Literal["equal"]
    components_: tuple[_COMPONENT, _COMPONENT] = Field(alias="components")
    parts: int | None = Field(None, ge=1)

    def components(self) -> set[str]:
        return {*self.when, *self.components_}

    def blamed(self) -> str:
        return self.components_[0]


class RangeRule(_Rule):
    """When `when` matches, `component` is at least `min` and below `below`."""

    kind: Literal["range"]
    component: _COMPONENT
    min: str | None = None
    below: str | None = None

    @model_validator(mode="after")
    def _bounds(self) -> RangeRule:
        if self.min is None and self.below is None:
            raise ValueError("a range needs `min`, `below` or both")
        for bound in (self.min, self.below):
            if bound is not None and not _NUMBERS.fullmatch(bound):
                raise ValueError(f"bound {bound!r} is not a dotted version")
        return self

    def components(self) -> set[str]:
        return {*self.when, self.component}

    def blamed(self) -> str:
        return self.component


class RequiresRule(_Rule):
    """When `when` matches, `component` is one of `one_of`."""

    kind: Literal["requires"]
    when: dict[_COMPONENT, str] = Field(min_length=1)
    component: _COMPONENT
    one_of: list[str] = Field(min_length=1)

    def components(self) -> set[str]:
        return {*self.when, self.component}

    def blamed(self) -> str:
        return self.component


class ExcludesRule(_Rule):
    """When `when` matches, `component` is none of `none_of`."""

    kind: Literal["excludes"]
    when: dict[_COMPONENT, str] = Field(min_length=1)
    component: _COMPONENT
    none_of: list[str] = Field(min_length=1)

    def components(self) -> set[str]:
        return {*self.when, self.component}

    def blamed(self) -> str:
        return self.component


Rule = Annotated[EqualRule | RangeRule | RequiresRule | ExcludesRule, Field(discriminator="kind")]


class Matrix(BaseModel):
    """The whole matrix: the components it speaks of and the rules between them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checked: date
    components: dict[_COMPONENT, str]
    rules: list[Rule]

    @model_validator(mode="after")
    def _consistent(self) -> Matrix:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id} is used twice")
            seen.add(rule.id)
            unknown = rule.components() - set(self.components)
            if unknown:
                raise ValueError(
                    f"rule {rule.id} names {', '.join(sorted(unknown))}, not in `components`"
                )
        return self


@dataclass(frozen=True)
class Violation:
    """One rule a set of versions breaks."""

    rule: EqualRule | RangeRule | RequiresRule | ExcludesRule
    component: str
    message: str


def parse_matrix(text: str) -> Matrix:
    """A matrix from YAML text; MatrixError naming what is wrong."""
    # libyaml's loader where PyYAML has it: the shipped matrix took ~60 ms in pure Python, a
    # quarter of `spec check`. Both build the same plain data from safe YAML.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return Matrix.model_validate(yaml.load(text, Loader=loader))
    except (yaml.YAMLError, ValidationError) as exc:
        raise MatrixError(f"compatibility matrix: {exc}") from None


@functools.cache
def load_matrix() -> Matrix:
    """The shipped matrix (read once)."""
    return parse_matrix(MATRIX_FILE.read_text(encoding="utf-8"))


def evaluate(matrix: Matrix, known: Mapping[str, str]) -> list[Violation]:
    """Every rule `known` (component -> version) breaks. A rule that names a component not in
    `known` is not evaluated: before install the kernel is unknown, after it the pins are."""
    out: list[Violation] = []
    for rule in matrix.rules:
        if not rule.components() <= set(known):
            continue
        if not all(matches(known[c], pattern) for c, pattern in rule.when.items()):
            continue
        problem = _broken(rule, known)
        if problem is not None:
            out.append(Violation(rule, rule.blamed(), f"{problem} [{rule.id}: {rule.source}]"))
    return out


def _when_text(rule: _Rule, known: Mapping[str, str]) -> str:
    return " and ".join(f"{c} {known[c]}" for c in rule.when)


def _broken(
    rule: EqualRule | RangeRule | RequiresRule | ExcludesRule, known: Mapping[str, str]
) -> str | None:
    """What is wrong, or None when `known` keeps the rule."""
    if isinstance(rule, EqualRule):
        first, second = rule.components_
        a, b = known[first], known[second]
        na, nb = numbers(a), numbers(b)
        if na is None or nb is None:
            same = a.strip() == b.strip()
        elif rule.parts is None:
            same = na == nb
        else:
            same = na[: rule.parts] == nb[: rule.parts]
        if same:
            return None
        scope = "" if rule.parts is None else f" in its first {_parts(rule.parts)}"
        return f"{first} {a} does not match {second} {b}{scope}"
    if isinstance(rule, RangeRule):
        value = known[rule.component]
        have = numbers(value)
        bounds = []
        if rule.min is not None:
            bounds.append(f">= {rule.min}")
        if rule.below is not None:
            bounds.append(f"< {rule.below}")
        needs = f"{rule.component} {' and '.join(bounds)}"
        subject = f"{_when_text(rule, known)} needs" if rule.when else "needs"
        if have is None:
            return f"{subject} {needs}; {value!r} is not a version to compare"
        low = numbers(rule.min) if rule.min is not None else None
        high = numbers(rule.below) if rule.below is not None else None
        if (low is not None and have < low) or (high is not None and have >= high):
            return f"{subject} {needs}, not {value}"
        return None
    if isinstance(rule, RequiresRule):
        value = known[rule.component]
        if any(matches(value, p) for p in rule.one_of):
            return None
        wanted = " or ".join(rule.one_of)
        return f"{_when_text(rule, known)} needs {rule.component} {wanted}, not {value}"
    value = known[rule.component]
    if not any(matches(value, p) for p in rule.none_of):
        return None
    return f"{_when_text(rule, known)} does not support {rule.component} {value}"


def _parts(count: int) -> str:
    return "number" if count == 1 else f"{count} numbers"
