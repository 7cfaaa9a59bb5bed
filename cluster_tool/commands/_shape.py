"""One shape for every command that reads a spec: the spec given positionally or as `--spec`,
whichever the command declares (`cluster-tool gate pod.yml`, `cluster-tool render --spec
pod.yml`). The command classes below move the other form into the declared one before click
parses the arguments, so each command keeps one parameter and its help."""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand, TyperGroup


def _valued_options(params: list[Any]) -> set[str]:
    """The option names that take a value (`--nodes X`), so their value is not taken for a
    positional spec."""
    names: set[str] = set()
    for param in params:
        if getattr(param, "param_type_name", "") == "option" and not getattr(param, "is_flag", 0):
            names.update(param.opts)
    return names


def spec_as_option(args: list[str], params: list[Any], subcommands: Any = ()) -> list[str]:
    """`args` with a positional spec (the first positional word that is not a subcommand)
    written `--spec SPEC`; unchanged when `--spec` is given or there is no such word."""
    if any(a == "--spec" or a.startswith("--spec=") for a in args):
        return args
    valued = _valued_options(params)
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return args
        if word.startswith("-"):
            i += 2 if word in valued else 1
            continue
        if word in subcommands:
            return args
        return [*args[:i], "--spec", word, *args[i + 1 :]]
    return args


def spec_as_argument(args: list[str]) -> list[str]:
    """`args` with `--spec SPEC` (or `--spec=SPEC`) written as the leading positional."""
    for i, word in enumerate(args):
        if word == "--":
            break
        if word.startswith("--spec="):
            return [word.split("=", 1)[1], *args[:i], *args[i + 1 :]]
        if word == "--spec" and i + 1 < len(args):
            return [args[i + 1], *args[:i], *args[i + 2 :]]
    return args


class SpecOptionCommand(TyperCommand):
    """A command whose spec is `--spec`; `COMMAND SPEC` works too."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spec_as_option(list(args), self.params))


class SpecOptionGroup(TyperGroup):
    """A group that runs itself (the gate) with `--spec`; `GROUP SPEC` works too, and a
    subcommand's name is never taken for a spec."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spec_as_option(list(args), self.params, self.commands))


class SpecArgumentCommand(TyperCommand):
    """A command whose spec is positional; `--spec SPEC` works too."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spec_as_argument(list(args)))
